// Reads a file in fixed-size chunks, as lines or as single bytes, in constant memory. A file that starts
// with gzip's or bzip2's magic bytes is decompressed as it is read (large public traces are published
// compressed). A NUL byte anywhere in the text means the file is binary, not a trace: TraceError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace baton::trace {

class ByteSource {
public:
    explicit ByteSource(const std::filesystem::path& path);
    ~ByteSource();
    ByteSource(const ByteSource&) = delete;
    ByteSource& operator=(const ByteSource&) = delete;

    // The next line without its '\n' (and without a trailing '\r'); false at the end of the file.
    // The view stays valid until the next call. Throws TraceError for lines over maxLineBytes.
    bool nextLine(std::string_view& line);
    // True if the line last returned by nextLine() ended the file without a '\n'.
    bool lastLineUnterminated() const { return unterminated_; }
    std::uint64_t lineNumber() const { return lineNumber_; }

    // Byte interface for the JSON reader: -1 at the end of the file.
    int get()
    {
        if (pos_ == end_ && !fill())
            return -1;
        return static_cast<unsigned char>(buffer_[pos_++]);
    }
    // Steps back over the byte get() just returned (not after -1).
    void unget() { --pos_; }
    std::uint64_t offset() const { return consumed_ + pos_; }

    static constexpr std::size_t maxLineBytes = 1 << 20;

private:
    enum class Compression { None, Gzip, Bzip2 };
    bool fill();
    // Reads up to `size` bytes of text (decompressed); 0 at the end.
    std::size_t readSome(char* into, std::size_t size);
    void closeAll();

    std::filesystem::path path_;
    int fd_ = -1;
    Compression compression_ = Compression::None;
    void* gzip_ = nullptr; // gzFile
    std::FILE* file_ = nullptr; // under bzip2_
    void* bzip2_ = nullptr; // BZFILE
    bool bzip2End_ = false;
    std::vector<char> buffer_;
    std::size_t pos_ = 0;
    std::size_t end_ = 0;
    std::uint64_t consumed_ = 0; // bytes before buffer_[0]
    bool eof_ = false;
    std::string carry_; // a line that crosses a chunk boundary
    std::uint64_t lineNumber_ = 0;
    bool unterminated_ = false;
};

} // namespace baton::trace
