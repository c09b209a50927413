#include "io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace baton::ckpt::io {

namespace {

constexpr std::size_t kWriteChunk = 64 << 20;

Fd openOrThrow(const std::filesystem::path& path, int flags, mode_t mode = kPrivateFileMode)
{
    int fd;
    do {
        fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        throwErrno("cannot open " + path.string());
    return Fd(fd);
}

void writeAll(int fd, const std::byte* data, std::size_t size, const std::filesystem::path& path)
{
    std::size_t done = 0;
    while (done < size) {
        std::size_t chunk = std::min(kWriteChunk, size - done);
        ssize_t n = ::write(fd, data + done, chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throwErrno("cannot write " + path.string());
        if (n == 0)
            throw IoError(EIO, "cannot write " + path.string() + ": no progress");
        done += static_cast<std::size_t>(n);
    }
}

// Calls `read` (a read or pread) again when a signal interrupts it: the bytes read, 0 at the end of the file.
template<typename Read> std::size_t readRetrying(const std::filesystem::path& path, Read&& read)
{
    for (;;) {
        ssize_t n = read();
        if (n >= 0)
            return static_cast<std::size_t>(n);
        if (errno != EINTR)
            throwErrno("cannot read " + path.string());
    }
}

void syncData(int fd, const std::filesystem::path& path)
{
    if (::fdatasync(fd) != 0)
        throwErrno("cannot sync " + path.string());
}

} // namespace

IoError::IoError(int code, const std::string& what)
    : Error(what + ": " + std::strerror(code))
    , code_(code)
{ }

void throwErrno(const std::string& what)
{
    throw IoError(errno, what);
}

Fd::~Fd()
{
    if (fd_ >= 0)
        ::close(fd_);
}

Fd& Fd::operator=(Fd&& other) noexcept
{
    if (this != &other) {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = other.release();
    }
    return *this;
}

int Fd::release()
{
    return std::exchange(fd_, -1);
}

void Fd::close(const std::string& what)
{
    int fd = release();
    if (fd >= 0 && ::close(fd) != 0 && errno != EINTR)
        throwErrno("cannot close " + what);
}

AlignedBuffer::AlignedBuffer(std::size_t size)
    : size_(size)
{
    if (size == 0)
        return;
    void* p
        = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        throwErrno("cannot allocate a staging buffer of " + std::to_string(size) + " bytes");
    data_ = static_cast<std::byte*>(p);
}

AlignedBuffer::~AlignedBuffer()
{
    if (data_ != nullptr)
        ::munmap(data_, size_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr))
    , size_(std::exchange(other.size_, 0))
{ }

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept
{
    if (this != &other) {
        if (data_ != nullptr)
            ::munmap(data_, size_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void writeFileDurably(
    const std::filesystem::path& path, const std::byte* data, std::size_t size, bool directIo, unsigned mode)
{
    constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC;
    Fd fd;
    bool direct = false;
    if (directIo && size >= kDirectAlignment) {
        int raw = ::open(path.c_str(), kFlags | O_DIRECT | O_CLOEXEC, static_cast<mode_t>(mode));
        if (raw >= 0) {
            fd = Fd(raw);
            direct = true;
        } else if (errno != EINVAL) { // EINVAL: the file system does not do O_DIRECT
            throwErrno("cannot open " + path.string());
        }
    }
    if (!direct)
        fd = openOrThrow(path, kFlags, static_cast<mode_t>(mode));

    if (direct) {
        // Whole aligned blocks go straight to the device; the file is then cut to its real size.
        std::size_t padded = roundUp(size, kDirectAlignment);
        writeAll(fd.get(), data, padded, path);
        if (padded != size && ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
            throwErrno("cannot truncate " + path.string());
    } else {
        writeAll(fd.get(), data, size, path);
    }
    syncData(fd.get(), path);
    fd.close(path.string());
}

StreamWriter::StreamWriter(const std::filesystem::path& path, unsigned mode)
    : path_(path)
    , fd_(openOrThrow(path, O_WRONLY | O_CREAT | O_TRUNC, static_cast<mode_t>(mode)))
{ }

void StreamWriter::write(const std::byte* data, std::size_t size)
{
    writeAll(fd_.get(), data, size, path_);
    const auto offset = static_cast<off64_t>(written_);
    written_ += size;
    // Where the file system cannot (ENOSYS, EINVAL), finish()'s fdatasync does the whole job.
    if (::sync_file_range(fd_.get(), offset, static_cast<off64_t>(size),
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
            != 0
        && errno != ENOSYS && errno != EINVAL && errno != ESPIPE)
        throwErrno("cannot write " + path_.string());
    (void)::posix_fadvise(fd_.get(), offset, static_cast<off_t>(size), POSIX_FADV_DONTNEED); // advice only
}

void StreamWriter::finish()
{
    syncData(fd_.get(), path_);
    fd_.close(path_.string());
}

void writeSmallFileDurably(const std::filesystem::path& path, std::string_view text, unsigned mode)
{
    Fd fd = openOrThrow(path, O_WRONLY | O_CREAT | O_TRUNC, static_cast<mode_t>(mode));
    writeAll(fd.get(), reinterpret_cast<const std::byte*>(text.data()), text.size(), path);
    if (::fsync(fd.get()) != 0)
        throwErrno("cannot sync " + path.string());
    fd.close(path.string());
}

std::string readSmallFile(const std::filesystem::path& path, std::size_t limit)
{
    Fd fd = openOrThrow(path, O_RDONLY);
    std::string text;
    char buffer[65536];
    for (;;) {
        std::size_t n = readRetrying(path, [&] { return ::read(fd.get(), buffer, sizeof buffer); });
        if (n == 0)
            break;
        text.append(buffer, n);
        if (text.size() > limit)
            throw Error(path.string() + " is larger than " + std::to_string(limit) + " bytes");
    }
    return text;
}

void createDirectories(const std::filesystem::path& dir, unsigned mode)
{
    // Outermost missing component first; a concurrent creator (another job of the chain) is fine.
    std::filesystem::path built;
    for (const auto& part : dir.lexically_normal()) {
        built /= part;
        if (part == built.root_path() || part.empty())
            continue;
        if (::mkdir(built.c_str(), static_cast<mode_t>(mode)) == 0)
            continue;
        if (errno != EEXIST)
            throwErrno("cannot create directory " + built.string());
        struct stat st { };
        if (::stat(built.c_str(), &st) != 0)
            throwErrno("cannot create directory " + built.string());
        if (!S_ISDIR(st.st_mode))
            throw Error(built.string() + " exists and is not a directory");
    }
}

void fsyncDirectory(const std::filesystem::path& dir)
{
    Fd fd = openOrThrow(dir, O_RDONLY | O_DIRECTORY);
    if (::fsync(fd.get()) != 0)
        throwErrno("cannot sync directory " + dir.string());
}

void renameDurably(const std::filesystem::path& from, const std::filesystem::path& to)
{
    if (::rename(from.c_str(), to.c_str()) != 0)
        throwErrno("cannot rename " + from.string() + " to " + to.string());
    fsyncDirectory(to.parent_path());
}

FileReader::FileReader(const std::filesystem::path& path, bool directIo)
    : path_(path)
{
    if (directIo) {
        int raw = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (raw >= 0) {
            fd_ = Fd(raw);
            direct_ = true;
        } else if (errno != EINVAL) {
            throwErrno("cannot open " + path.string());
        }
    }
    if (!direct_)
        fd_ = openOrThrow(path, O_RDONLY);
    struct stat st { };
    if (::fstat(fd_.get(), &st) != 0)
        throwErrno("cannot stat " + path.string());
    size_ = static_cast<std::uint64_t>(st.st_size);
    if (!direct_)
        ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
}

std::size_t FileReader::read(std::byte* destination, std::size_t length)
{
    std::size_t done = readAt(destination, position_, length);
    position_ += done;
    return done;
}

std::size_t FileReader::readAt(std::byte* destination, std::uint64_t offset, std::size_t length) const
{
    std::size_t done = 0;
    while (done < length) {
        std::size_t n = readRetrying(path_, [&] {
            return ::pread(fd_.get(), destination + done, length - done, static_cast<off_t>(offset + done));
        });
        if (n == 0)
            break;
        done += n;
        if (direct_ && done % kDirectAlignment != 0)
            break; // a short, unaligned read only happens at the end of the file
    }
    return done;
}

} // namespace baton::ckpt::io
