#include "api_client.hpp"

#include "command.hpp"
#include "common/munge_credential.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace baton::ctl {

struct ApiClient::Impl {
    explicit Impl(const std::string& schemeHostPort)
        : client(schemeHostPort)
    { }
    httplib::Client client;
};

std::string serverUrl(const std::string& option)
{
    if (!option.empty())
        return option;
    if (const char* env = std::getenv("BATON_SERVER"); env && *env)
        return env;
    return std::string(defaultServer);
}

std::string encodeComponent(std::string_view text)
{
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const unsigned char c : text) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

int exitCodeForStatus(int status)
{
    switch (status) {
    case 404:
        return exitNotFound;
    case 401:
    case 403:
        return exitDenied;
    case 409:
        return exitConflict;
    default:
        return exitFailure;
    }
}

ApiClient::ApiClient(const std::string& baseUrl, std::chrono::seconds timeout)
    : baseUrl_(baseUrl)
{
    const auto schemeEnd = baseUrl.find("://");
    const std::string scheme = schemeEnd == std::string::npos ? "" : baseUrl.substr(0, schemeEnd);
    if (scheme != "http" && scheme != "https")
        throw UsageError("server URL '" + baseUrl + "' must start with http:// or https://");
    const auto pathStart = baseUrl.find('/', schemeEnd + 3);
    const std::string schemeHostPort = baseUrl.substr(0, pathStart);
    if (schemeHostPort.size() == schemeEnd + 3)
        throw UsageError("server URL '" + baseUrl + "' has no host");
    if (pathStart != std::string::npos) {
        prefix_ = baseUrl.substr(pathStart);
        while (!prefix_.empty() && prefix_.back() == '/')
            prefix_.pop_back();
    }
    impl_ = std::make_unique<Impl>(schemeHostPort);
    if (!impl_->client.is_valid())
        throw UsageError("server URL '" + baseUrl + "' is not usable");
    // The target is encoded here and signed as sent: the library must not encode it again.
    impl_->client.set_url_encode(false);
    impl_->client.set_connection_timeout(std::min<std::chrono::seconds>(timeout, std::chrono::seconds(10)));
    impl_->client.set_read_timeout(timeout);
    impl_->client.set_write_timeout(timeout);
}

ApiClient::~ApiClient() = default;

std::string ApiClient::get(const std::string& target)
{
    return send("GET", target, "");
}

std::string ApiClient::post(const std::string& target, const std::string& body)
{
    return send("POST", target, body);
}

std::string ApiClient::send(const std::string& method, const std::string& target, const std::string& body)
{
    const std::string path = prefix_ + target;
    std::string credential;
    try {
        credential = munge::encode(munge::requestPayload(method, path, body));
    } catch (const munge::MungeError& error) {
        throw CommandFailure(exitFailure,
            std::string("cannot sign the request with MUNGE (is munged running?): ") + error.what());
    }
    const httplib::Headers headers { { "Authorization",
                                         std::string(munge::authorizationScheme) + credential },
        { "Accept", "application/json" } };
    const auto result = method == "GET" ? impl_->client.Get(path, headers)
                                        : impl_->client.Post(path, headers, body, "application/json");
    if (!result)
        throw CommandFailure(exitFailure,
            "cannot reach batond at " + baseUrl_ + " (" + httplib::to_string(result.error())
                + "); is it running? Give its address with --server URL or $BATON_SERVER");
    const int status = result->status;
    if (status >= 200 && status < 300)
        return result->body;
    // batond's errors are {"error": "..."}; anything else (a proxy's page) is shown as it came.
    std::string message = result->body;
    const auto parsed = nlohmann::json::parse(result->body, nullptr, false);
    if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string())
        message = parsed["error"].get<std::string>();
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r'))
        message.pop_back();
    if (message.empty())
        message = "no reason given";
    throw CommandFailure(exitCodeForStatus(status),
        "batond refused: " + message + " (HTTP " + std::to_string(status) + " for " + method + " " + path
            + ")");
}

} // namespace baton::ctl
