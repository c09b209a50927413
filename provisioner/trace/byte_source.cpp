#include "byte_source.hpp"

#include "trace_reader.hpp"

#include <bzlib.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

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
    unsigned char magic[3] = {};
    ssize_t got;
    do
        got = ::pread(fd_, magic, sizeof magic, 0);
    while (got < 0 && errno == EINTR);
    if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        compression_ = Compression::Gzip;
        // zlib owns the descriptor from here and closes it with gzclose().
        gzip_ = gzdopen(fd_, "rb");
        if (!gzip_) {
            ::close(fd_);
            throw TraceError("cannot open " + path.string() + " as gzip");
        }
        fd_ = -1;
        gzbuffer(static_cast<gzFile>(gzip_), chunkBytes);
    } else if (got == 3 && magic[0] == 'B' && magic[1] == 'Z' && magic[2] == 'h') {
        compression_ = Compression::Bzip2;
        file_ = ::fdopen(fd_, "rb");
        if (!file_) {
            ::close(fd_);
            throw TraceError("cannot open " + path.string() + ": " + std::strerror(errno));
        }
        fd_ = -1;
        int error = BZ_OK;
        bzip2_ = BZ2_bzReadOpen(&error, file_, 0, 0, nullptr, 0);
        if (error != BZ_OK) {
            closeAll();
            throw TraceError("cannot open " + path.string() + " as bzip2");
        }
    }
}

ByteSource::~ByteSource()
{
    closeAll();
}

void ByteSource::closeAll()
{
    if (gzip_)
        gzclose(static_cast<gzFile>(gzip_));
    gzip_ = nullptr;
    if (bzip2_) {
        int error = BZ_OK;
        BZ2_bzReadClose(&error, bzip2_);
    }
    bzip2_ = nullptr;
    if (file_)
        std::fclose(file_);
    file_ = nullptr;
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
}

std::size_t ByteSource::readSome(char* into, std::size_t size)
{
    switch (compression_) {
    case Compression::None:
        for (;;) {
            ssize_t n = ::read(fd_, into, size);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                throw TraceError("cannot read " + path_.string() + ": " + std::strerror(errno));
            return static_cast<std::size_t>(n);
        }
    case Compression::Gzip: {
        const int n = gzread(static_cast<gzFile>(gzip_), into, static_cast<unsigned>(size));
        if (n < 0) {
            int code = Z_OK;
            const char* message = gzerror(static_cast<gzFile>(gzip_), &code);
            throw TraceError("cannot read " + path_.string() + " (gzip): " + (message ? message : "error"));
        }
        // A file cut off inside the compressed stream reads as an early end without an error from
        // gzread; gzclose_r would report it only at the end, so it is checked here.
        if (n == 0) {
            int code = Z_OK;
            gzerror(static_cast<gzFile>(gzip_), &code);
            if (code != Z_OK && code != Z_STREAM_END)
                throw TraceError(path_.string() + " is a damaged or truncated gzip file");
        }
        return static_cast<std::size_t>(n);
    }
    case Compression::Bzip2: {
        if (bzip2End_)
            return 0;
        int error = BZ_OK;
        const int n = BZ2_bzRead(&error, bzip2_, into, static_cast<int>(size));
        if (error == BZ_STREAM_END) {
            // Parallel compressors (pbzip2, lbzip2) write several streams one after another: go on
            // with the next one, from the bytes the finished stream read past its end.
            void* unused = nullptr;
            int unusedCount = 0;
            BZ2_bzReadGetUnused(&error, bzip2_, &unused, &unusedCount);
            const std::string rest(static_cast<const char*>(unused), static_cast<std::size_t>(unusedCount));
            BZ2_bzReadClose(&error, bzip2_);
            bzip2_ = nullptr;
            int next = EOF;
            if (rest.empty() && (next = std::fgetc(file_)) == EOF) {
                bzip2End_ = true;
            } else {
                if (rest.empty())
                    std::ungetc(next, file_);
                bzip2_ = BZ2_bzReadOpen(&error, file_, 0, 0, const_cast<char*>(rest.data()), unusedCount);
                if (error != BZ_OK)
                    throw TraceError(path_.string() + " is a damaged bzip2 file (bzip2 error "
                        + std::to_string(error) + ")");
            }
        } else if (error != BZ_OK) {
            throw TraceError(path_.string() + " is a damaged or truncated bzip2 file (bzip2 error "
                + std::to_string(error) + ")");
        }
        if (n == 0 && !bzip2End_)
            return readSome(into, size); // a stream boundary gave no bytes: read on
        return static_cast<std::size_t>(n);
    }
    }
    return 0;
}

bool ByteSource::fill()
{
    if (eof_)
        return false;
    consumed_ += end_;
    pos_ = end_ = 0;
    const std::size_t n = readSome(buffer_.data(), buffer_.size());
    if (n == 0) {
        eof_ = true;
        return false;
    }
    end_ = n;
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
