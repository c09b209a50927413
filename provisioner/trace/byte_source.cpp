#include "byte_source.hpp"

#include "trace_reader.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace baton::trace {

namespace {
constexpr std::size_t chunkBytes = 256 * 1024;
}

ByteSource::ByteSource(const std::filesystem::path& path)
    : path_(path)
    , buffer_(chunkBytes)
{
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
        throw TraceError("cannot open " + path.string() + ": " + std::strerror(errno));
    if (std::filesystem::is_directory(path)) {
        ::close(fd_);
        throw TraceError(path.string() + " is a directory, not a trace file");
    }
}

ByteSource::~ByteSource()
{
    if (fd_ >= 0)
        ::close(fd_);
}

bool ByteSource::fill()
{
    if (eof_)
        return false;
    consumed_ += end_;
    pos_ = end_ = 0;
    for (;;) {
        ssize_t n = ::read(fd_, buffer_.data(), buffer_.size());
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw TraceError("cannot read " + path_.string() + ": " + std::strerror(errno));
        if (n == 0) {
            eof_ = true;
            return false;
        }
        end_ = static_cast<std::size_t>(n);
        break;
    }
    if (const void* nul = std::memchr(buffer_.data(), '\0', end_)) {
        auto at = consumed_ + static_cast<std::uint64_t>(static_cast<const char*>(nul) - buffer_.data());
        throw TraceError(path_.string() + " holds binary data (a NUL byte at offset " + std::to_string(at)
            + "); it is not a text trace");
    }
    return true;
}

bool ByteSource::nextLine(std::string_view& line)
{
    carry_.clear();
    bool inCarry = false;
    for (;;) {
        if (pos_ == end_ && !fill()) {
            if (!inCarry)
                return false;
            unterminated_ = true;
            break;
        }
        const char* begin = buffer_.data() + pos_;
        const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
        std::size_t take = newline ? static_cast<std::size_t>(newline - begin) : end_ - pos_;
        if (carry_.size() + take > maxLineBytes)
            throw TraceError(path_.string() + ": line " + std::to_string(lineNumber_ + 1)
                + " is longer than 1 MiB; not a trace");
        if (newline && !inCarry) {
            line = std::string_view(begin, take);
            pos_ += take + 1;
            unterminated_ = false;
            ++lineNumber_;
            if (!line.empty() && line.back() == '\r')
                line.remove_suffix(1);
            return true;
        }
        carry_.append(begin, take);
        inCarry = true;
        pos_ += take;
        if (newline) {
            ++pos_;
            unterminated_ = false;
            break;
        }
    }
    ++lineNumber_;
    line = carry_;
    if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
    return true;
}

} // namespace baton::trace
