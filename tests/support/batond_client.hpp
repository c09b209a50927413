// A batond under test and its clients: the process, a free port to start it on, HTTP requests with an
// optional Authorization header, and MUNGE credentials made as any user. Needs cpp-httplib,
// nlohmann/json, common/'s munge_credential (baton_common_dep) and BATOND_PATH defined.
#pragma once

#include "common/munge_credential.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <string>
#include <vector>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace baton::test {

// A port that is free now: bound once by the kernel's choice, then released.
inline int freePort()
{
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    close(fd);
    return ntohs(address.sin_port);
}

// A credential made by a child running as `uid`, so that munged vouches for that user.
inline std::string credentialAs(uid_t uid, const std::string& payload)
{
    int fds[2];
    if (pipe(fds) != 0) {
        ADD_FAILURE() << "pipe for munge encode as uid " << uid;
        return {};
    }
    const pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        if (uid != 0 && (setgid(uid) != 0 || setuid(uid) != 0))
            _exit(1);
        try {
            const std::string credential = baton::munge::encode(payload);
            if (write(fds[1], credential.data(), credential.size()) != static_cast<ssize_t>(credential.size()))
                _exit(2);
        } catch (...) {
            _exit(3);
        }
        _exit(0);
    }
    close(fds[1]);
    std::string credential;
    char buffer[4096];
    for (ssize_t got; (got = read(fds[0], buffer, sizeof buffer)) > 0;)
        credential.append(buffer, static_cast<std::size_t>(got));
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "munge encode as uid " << uid;
    return credential;
}

struct HttpReply {
    int status = 0; // 0: no answer (body says why)
    std::string body;
    nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// A GET, or a POST of a JSON body, to 127.0.0.1:port.
inline HttpReply send(int port, const std::string& method, const std::string& target, const std::string& body,
    std::optional<std::string> authorization, int readTimeoutSeconds = 30)
{
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(5);
    client.set_read_timeout(readTimeoutSeconds);
    httplib::Headers headers;
    if (authorization)
        headers.emplace("Authorization", *authorization);
    const auto result = method == "GET" ? client.Get(target.c_str(), headers)
                                        : client.Post(target.c_str(), headers, body, "application/json");
    if (!result)
        return HttpReply { 0, httplib::to_string(result.error()) };
    return HttpReply { result->status, result->body };
}

// One batond process; its output goes to a log file, appended across restarts. Safe to start, stop and
// ask from several threads.
class BatondProcess {
public:
    BatondProcess(std::vector<std::string> args, std::filesystem::path log, int port = 0)
        : args_(std::move(args))
        , log_(std::move(log))
        , port_(port)
    {
        start();
    }
    ~BatondProcess() { stop(SIGKILL); }
    BatondProcess(const BatondProcess&) = delete;
    BatondProcess& operator=(const BatondProcess&) = delete;

    void start()
    {
        const std::lock_guard lock(mutex_);
        if (pid_ > 0)
            return;
        pid_ = fork();
        if (pid_ == 0) {
            const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            std::vector<char*> argv;
            argv.push_back(const_cast<char*>(BATOND_PATH));
            for (auto& arg : args_)
                argv.push_back(arg.data());
            argv.push_back(nullptr);
            execv(BATOND_PATH, argv.data());
            _exit(127);
        }
    }
    void stop(int signal)
    {
        const std::lock_guard lock(mutex_);
        if (pid_ <= 0)
            return;
        kill(pid_, signal);
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = 0;
    }
    bool running() const
    {
        const std::lock_guard lock(mutex_);
        return pid_ > 0;
    }
    int port() const { return port_; }
    pid_t pid() const // 0 while it is not running
    {
        const std::lock_guard lock(mutex_);
        return pid_;
    }
    const std::filesystem::path& logPath() const { return log_; }
    std::string log() const
    {
        std::ifstream in(log_);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }

private:
    std::vector<std::string> args_;
    std::filesystem::path log_;
    int port_;
    mutable std::mutex mutex_;
    pid_t pid_ = 0;
};

} // namespace baton::test
