// Durable file I/O: O_DIRECT with a buffered fallback, fsync of files and directories, errno-carrying
// errors so that callers can tell a full disk from a permission problem.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "baton/ckpt/error.hpp"

namespace baton::ckpt::io {

inline constexpr std::size_t kDirectAlignment = 4096;

// An I/O failure with its errno (ENOSPC, EIO, EACCES, ...).
class IoError : public Error {
public:
    IoError(int code, const std::string& what);
    int code() const { return code_; }

private:
    int code_;
};

[[noreturn]] void throwErrno(const std::string& what);

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd)
        : fd_(fd)
    { }
    ~Fd();
    Fd(Fd&& other) noexcept
        : fd_(other.release())
    { }
    Fd& operator=(Fd&& other) noexcept;
    int get() const { return fd_; }
    int release();
    // close(2) can report a delayed write error: callers that wrote must check it.
    void close(const std::string& what);

private:
    int fd_ = -1;
};

// Page-aligned anonymous memory, pre-faulted so that the first copy into it does not pay page faults.
class AlignedBuffer {
public:
    AlignedBuffer() = default;
    explicit AlignedBuffer(std::size_t size);
    ~AlignedBuffer();
    AlignedBuffer(AlignedBuffer&& other) noexcept;
    AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
    std::byte* data() const { return data_; }
    std::size_t size() const { return size_; }

private:
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

// Permissions of what the library creates unless the caller chooses others (Options::fileMode): private.
inline constexpr unsigned kPrivateFileMode = 0600;

// The mode of a directory that holds files of `fileMode`: search permission wherever read is granted.
inline unsigned directoryMode(unsigned fileMode)
{
    return fileMode | ((fileMode & 0444) >> 2);
}

// Writes `size` bytes and makes them durable; a new file gets `mode` (less the umask). With directIo,
// `data` must be page-aligned and readable up to `size` rounded up to kDirectAlignment; falls back to
// buffered writes where O_DIRECT is refused.
void writeFileDurably(const std::filesystem::path& path, const std::byte* data, std::size_t size,
    bool directIo, unsigned mode = kPrivateFileMode);
void writeSmallFileDurably(
    const std::filesystem::path& path, std::string_view text, unsigned mode = kPrivateFileMode);
// Creates `dir` and any missing parents with `mode` (less the umask); existing ones are left as they are.
// Throws IoError, or Error when a component exists and is not a directory.
void createDirectories(const std::filesystem::path& dir, unsigned mode);
std::string readSmallFile(const std::filesystem::path& path, std::size_t limit = 64 << 20);
void fsyncDirectory(const std::filesystem::path& dir);
void renameDurably(const std::filesystem::path& from, const std::filesystem::path& to);

// A file written piece by piece (the drain's copies). Each piece reaches storage before write()
// returns and leaves the page cache: the writer's pace is the storage's, so that a rate bound applies to
// real I/O, and no gigabytes of dirty pages wait for one long fdatasync that nothing could interrupt.
class StreamWriter {
public:
    StreamWriter(const std::filesystem::path& path, unsigned mode);
    void write(const std::byte* data, std::size_t size);
    void finish(); // fdatasync (metadata, and anything sync_file_range could not push) and close

private:
    std::filesystem::path path_;
    Fd fd_;
    std::uint64_t written_ = 0;
};

// Sequential reader; read() with directIo needs page-aligned destinations and lengths.
class FileReader {
public:
    FileReader(const std::filesystem::path& path, bool directIo);
    std::uint64_t size() const { return size_; }
    bool direct() const { return direct_; }
    // Reads up to `length` bytes at the current position; returns how many (fewer only at end of file).
    std::size_t read(std::byte* destination, std::size_t length);
    // Reads up to `length` bytes at `offset` without moving the position; safe from several threads.
    std::size_t readAt(std::byte* destination, std::uint64_t offset, std::size_t length) const;

private:
    std::filesystem::path path_;
    Fd fd_;
    std::uint64_t size_ = 0;
    std::uint64_t position_ = 0;
    bool direct_ = false;
};

inline std::size_t roundUp(std::size_t value, std::size_t alignment)
{
    return (value + alignment - 1) / alignment * alignment;
}

} // namespace baton::ckpt::io
