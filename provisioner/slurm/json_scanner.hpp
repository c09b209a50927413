// The JSON reader behind the squeue document (squeue_json.cpp): forward-only, strict where it reads and
// skipping everything else by matching brackets and strings, a block of bytes at a time. A header so
// that its small calls inline into the job readers, which call them millions of times per document.
#pragma once

#include "squeue_json.hpp"

#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace baton::slurm::detail {

// A forward-only JSON reader over the whole document: the parts this file reads are parsed strictly,
// everything else is skipped by matching brackets and strings. No recursion on input depth.
class Scanner {
public:
    explicit Scanner(std::string_view text, std::size_t position = 0)
        : t_(text)
        , pos_(position)
    { }

    std::size_t position() const { return pos_; }

    [[noreturn]] void fail(const std::string& what) const
    {
        throw SqueueParseError("squeue JSON: " + what + " (at byte " + std::to_string(pos_) + ")");
    }

    [[gnu::always_inline]] char peek()
    {
        if (pos_ < t_.size() && static_cast<unsigned char>(t_[pos_]) > ' ')
            return t_[pos_]; // the usual case: no space before the next token
        return peekAfterSpace();
    }

    bool consume(char c)
    {
        if (peek() != c)
            return false;
        ++pos_;
        return true;
    }

    void expect(char c)
    {
        if (!consume(c))
            fail(std::string("expected '") + c + "'");
    }

    void expectEnd()
    {
        skipSpace();
        if (pos_ != t_.size())
            fail("unexpected text after the document");
    }

    // Calls onKey(key) for each member; onKey must consume the value.
    template<class F> void object(F&& onKey)
    {
        expect('{');
        if (consume('}'))
            return;
        do {
            std::string scratch;
            std::string_view raw;
            const std::string_view name = key(scratch, raw);
            expect(':');
            onKey(name);
        } while (consume(','));
        expect('}');
    }

    // A member name, decoded, and `raw`, its text between the quotes as the document has it.
    std::string_view key(std::string& scratch, std::string_view& raw)
    {
        if (peek() != '"')
            fail("expected a member name");
        const std::size_t begin = pos_ + 1;
        const std::string_view decoded = stringView(scratch);
        raw = t_.substr(begin, pos_ - 1 - begin);
        return decoded;
    }

    // The ':' after a member name; squeue writes ": ".
    void colon()
    {
        if (pos_ + 2 <= t_.size() && t_[pos_] == ':' && t_[pos_ + 1] == ' ')
            pos_ += 2;
        else
            expect(':');
    }

    // Takes `bytes` if the document has exactly them at the current position.
    bool consumeBytes(std::string_view bytes)
    {
        if (bytes.empty() || bytes.size() > t_.size() - pos_
            || !sameBytes(t_.data() + pos_, bytes.data(), bytes.size()))
            return false;
        pos_ += bytes.size();
        return true;
    }

    std::string_view text(std::size_t from, std::size_t to) const { return t_.substr(from, to - from); }

    template<class F> void array(F&& onElement)
    {
        expect('[');
        if (consume(']'))
            return;
        do
            onElement();
        while (consume(','));
        expect(']');
    }

    bool isNull()
    {
        if (peek() != 'n')
            return false;
        literal("null");
        return true;
    }

    void readString(std::string& out)
    {
        if (isNull()) {
            out.clear();
            return;
        }
        if (peek() != '"')
            fail("expected a string");
        std::string scratch;
        const auto v = stringView(scratch);
        out.assign(v.data(), v.size());
        replaceUncleanUtf8(out);
    }

    bool readBool()
    {
        const char c = peek();
        if (c == 't') {
            literal("true");
            return true;
        }
        if (c == 'f') {
            literal("false");
            return false;
        }
        if (c == 'n') {
            literal("null");
            return false;
        }
        fail("expected true or false");
    }

    // An integer; null = unset. Also accepts a number with a fraction (truncated) and the
    // {"set", "infinite", "number"} objects of later Slurm releases (infinite = unset).
    std::optional<std::int64_t> readInteger()
    {
        const char c = peek();
        if (c == 'n') {
            literal("null");
            return std::nullopt;
        }
        if (c == '{') {
            std::optional<std::int64_t> number;
            bool set = true, infinite = false;
            object([&](std::string_view key) {
                if (key == "number")
                    number = readInteger();
                else if (key == "set")
                    set = readBool();
                else if (key == "infinite")
                    infinite = readBool();
                else
                    skipValue();
            });
            return set && !infinite ? number : std::nullopt;
        }
        if (c != '-' && (c < '0' || c > '9'))
            fail("expected a number");
        const char* begin = t_.data() + pos_;
        const char* end = t_.data() + t_.size();
        std::int64_t value = 0;
        auto [p, ec] = std::from_chars(begin, end, value);
        if (ec == std::errc() && (p == end || (*p != '.' && *p != 'e' && *p != 'E'))) {
            pos_ += static_cast<std::size_t>(p - begin);
            return value;
        }
        double d = 0;
        auto [pd, ecd] = std::from_chars(begin, end, d);
        if (ecd != std::errc() || !(d > -9.2e18 && d < 9.2e18))
            fail("number out of range");
        pos_ += static_cast<std::size_t>(pd - begin);
        return static_cast<std::int64_t>(d);
    }

    void skipValue()
    {
        const char c = peek();
        if (c == '"') {
            skipString();
            return;
        }
        if (c == '{' || c == '[') {
            skipContainer();
            return;
        }
        const std::size_t start = pos_;
        while (pos_ < t_.size() && scalar[static_cast<unsigned char>(t_[pos_])])
            ++pos_;
        if (pos_ == start)
            fail(std::string("unexpected character '") + c + "'");
    }

private:
    // The object or array at pos_, skipped by matching brackets and strings.
    [[gnu::noinline]] void skipContainer()
    {
        std::array<char, 256> open; // the brackets still open, to check that each closes with its own kind
        std::size_t depth = 0;
        const char* const data = t_.data();
        const std::size_t size = t_.size();
        while (true) {
            // Most of a skipped value is names, numbers and spaces: jump to the next character that
            // matters, a block at a time.
            scanBlocks(firstStructural);
            while (pos_ < size && !structural[static_cast<unsigned char>(data[pos_])])
                ++pos_;
            if (pos_ >= size)
                fail("unexpected end of the document");
            const char k = data[pos_];
            if (k == '"') {
                skipString();
                continue;
            }
            ++pos_;
            if (k == '{' || k == '[') {
                if (depth == open.size())
                    fail("nested too deeply");
                open[depth++] = k == '{' ? '}' : ']';
            } else {
                if (open[depth - 1] != k)
                    fail("mismatched bracket");
                if (--depth == 0)
                    return;
            }
        }
    }

    [[gnu::noinline]] char peekAfterSpace()
    {
        skipSpace();
        if (pos_ >= t_.size())
            fail("unexpected end of the document");
        return t_[pos_];
    }

    void skipSpace()
    {
        // Other control characters are no valid JSON anywhere outside strings: taking them for space
        // only makes the reader more lenient, never wrong about a valid document.
        // squeue indents its output: after a newline comes a run of spaces, measured a block at a time.
        while (pos_ < t_.size() && static_cast<unsigned char>(t_[pos_]) <= ' ') {
            ++pos_;
            scanBlocks(firstNotSpace);
        }
    }

    // memcmp for the dozen bytes of a member name, without the call: eight bytes at a time, the last
    // word overlapping the one before.
    static bool sameBytes(const char* a, const char* b, std::size_t n)
    {
        if (n < 8) {
            for (std::size_t i = 0; i < n; ++i)
                if (a[i] != b[i])
                    return false;
            return true;
        }
        for (std::size_t i = 0; i + 8 < n; i += 8)
            if (load8(a + i) != load8(b + i))
                return false;
        return load8(a + n - 8) == load8(b + n - 8);
    }

    // Eight bytes at p as one word, the first in its lowest byte; and the word of eight copies of c.
    static std::uint64_t load8(const char* p)
    {
        std::uint64_t word;
        std::memcpy(&word, p, sizeof word);
        if constexpr (std::endian::native == std::endian::big)
            word = __builtin_bswap64(word);
        return word;
    }
    static constexpr std::uint64_t broadcast(unsigned char c) { return 0x0101010101010101ULL * c; }

    // The scans below look at a block of bytes at a time for the first byte of a kind, and return its
    // index in the block, or blockBytes when there is none: sixteen bytes with SSE2 (every x86-64), else
    // eight in a word, whose borrows can mark bytes after the first true one, never before it.
#if defined(__SSE2__)
    static constexpr std::size_t blockBytes = 16;
    static __m128i loadBlock(const char* p)
    {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    }
    static __m128i equal(__m128i v, char c)
    {
        return _mm_cmpeq_epi8(v, _mm_set1_epi8(c));
    }
    static std::size_t firstMarked(__m128i marks)
    {
        const auto bits = static_cast<unsigned>(_mm_movemask_epi8(marks));
        return bits ? static_cast<std::size_t>(std::countr_zero(bits)) : blockBytes;
    }
    // '"' or '\\'.
    static std::size_t firstQuoteOrEscape(const char* p)
    {
        const __m128i v = loadBlock(p);
        return firstMarked(_mm_or_si128(equal(v, '"'), equal(v, '\\')));
    }
    // '"', '\\' or a control character (unsigned v <= 0x1F: max(v, 0x1F) == 0x1F).
    static std::size_t firstSpecial(const char* p)
    {
        const __m128i v = loadBlock(p);
        const __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F));
        return firstMarked(_mm_or_si128(_mm_or_si128(equal(v, '"'), equal(v, '\\')), control));
    }
    // '"', '{', '}', '[' or ']': setting bit 0x20 turns '[' and ']' into '{' and '}' and no other byte
    // into either.
    static std::size_t firstStructural(const char* p)
    {
        const __m128i v = loadBlock(p);
        const __m128i folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
        return firstMarked(_mm_or_si128(equal(v, '"'), _mm_or_si128(equal(folded, '{'), equal(folded, '}'))));
    }
    static std::size_t firstNotSpace(const char* p)
    {
        return firstMarked(_mm_xor_si128(equal(loadBlock(p), ' '), _mm_set1_epi8(-1)));
    }
#else
    static constexpr std::size_t blockBytes = 8;
    static std::uint64_t zeroAt(std::uint64_t v)
    {
        return (v - broadcast(1)) & ~v & broadcast(0x80);
    }
    static std::size_t firstMarked(std::uint64_t marks)
    {
        return marks ? static_cast<std::size_t>(std::countr_zero(marks) / 8) : blockBytes;
    }
    static std::size_t firstQuoteOrEscape(const char* p)
    {
        const std::uint64_t word = load8(p);
        return firstMarked(zeroAt(word ^ broadcast('"')) | zeroAt(word ^ broadcast('\\')));
    }
    static std::size_t firstSpecial(const char* p)
    {
        const std::uint64_t word = load8(p);
        return firstMarked(zeroAt(word ^ broadcast('"')) | zeroAt(word ^ broadcast('\\'))
            | ((word - broadcast(0x20)) & ~word & broadcast(0x80)));
    }
    static std::size_t firstStructural(const char* p)
    {
        const std::uint64_t word = load8(p), folded = word | broadcast(0x20);
        return firstMarked(zeroAt(word ^ broadcast('"')) | zeroAt(folded ^ broadcast('{'))
            | zeroAt(folded ^ broadcast('}')));
    }
    static std::size_t firstNotSpace(const char* p)
    {
        const std::uint64_t other = load8(p) ^ broadcast(' ');
        return other ? static_cast<std::size_t>(std::countr_zero(other) / 8) : blockBytes;
    }
#endif

    // Moves pos_ to the first byte at or after it for which find (one of the scans above) marks one,
    // or to the last whole block's end.
    template<class Find> void scanBlocks(Find find)
    {
        while (pos_ + blockBytes <= t_.size()) {
            const std::size_t at = find(t_.data() + pos_);
            pos_ += at;
            if (at < blockBytes)
                return;
        }
    }

    void literal(std::string_view word)
    {
        if (t_.substr(pos_, word.size()) != word)
            fail("bad literal");
        pos_ += word.size();
    }

    void skipString()
    {
        ++pos_; // the opening quote
        while (true) {
            scanBlocks(firstQuoteOrEscape);
            while (pos_ < t_.size() && t_[pos_] != '"' && t_[pos_] != '\\')
                ++pos_;
            if (pos_ >= t_.size())
                fail("unterminated string");
            if (t_[pos_++] == '"')
                return;
            ++pos_; // the escaped character, which never ends the string
        }
    }

    // Characters of numbers and of true, false, null.
    static constexpr auto scalar = [] {
        std::array<bool, 256> table {};
        for (unsigned char c : std::string_view("+-.0123456789eEtruefalsn"))
            table[c] = true;
        return table;
    }();

    // Characters that open or close a container or a string: what skipping a container looks for.
    static constexpr auto structural = [] {
        std::array<bool, 256> table {};
        for (unsigned char c : std::string_view("\"{}[]"))
            table[c] = true;
        return table;
    }();

    static void appendUtf8(std::string& out, std::uint32_t cp)
    {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    std::uint32_t hex4()
    {
        if (pos_ + 4 > t_.size())
            fail("truncated \\u escape");
        std::uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = t_[pos_++];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= static_cast<std::uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= static_cast<std::uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= static_cast<std::uint32_t>(c - 'A' + 10);
            else
                fail("bad \\u escape");
        }
        return v;
    }

    // The string at pos_ (which is '"'): a view into the document when it has no escapes, else
    // decoded into scratch.
    std::string_view stringView(std::string& scratch)
    {
        const std::size_t begin = ++pos_;
        // The common case, short and without escapes, in one pass: most strings here are member
        // names of a dozen characters, where a library call costs more than the loop.
        scanBlocks(firstSpecial); // up to the first byte that ends the plain part
        for (; pos_ < t_.size(); ++pos_) {
            const auto c = static_cast<unsigned char>(t_[pos_]);
            if (c == '"')
                return t_.substr(begin, pos_++ - begin);
            if (c == '\\' || c < 0x20)
                break;
        }
        while (pos_ < t_.size()) {
            const char c = t_[pos_];
            if (c == '\\')
                break;
            if (static_cast<unsigned char>(c) < 0x20)
                fail("control character in a string");
            ++pos_;
        }
        scratch.assign(t_.substr(begin, pos_ - begin));
        while (pos_ < t_.size()) {
            const char c = t_[pos_++];
            if (c == '"')
                return scratch;
            if (static_cast<unsigned char>(c) < 0x20)
                fail("control character in a string");
            if (c != '\\') {
                scratch += c;
                continue;
            }
            if (pos_ >= t_.size())
                break;
            switch (t_[pos_++]) {
            case '"':
                scratch += '"';
                break;
            case '\\':
                scratch += '\\';
                break;
            case '/':
                scratch += '/';
                break;
            case 'b':
                scratch += '\b';
                break;
            case 'f':
                scratch += '\f';
                break;
            case 'n':
                scratch += '\n';
                break;
            case 'r':
                scratch += '\r';
                break;
            case 't':
                scratch += '\t';
                break;
            case 'u': {
                std::uint32_t cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00 && t_.substr(pos_, 2) == "\\u") {
                    pos_ += 2;
                    const std::uint32_t low = hex4();
                    if (low < 0xDC00 || low >= 0xE000)
                        fail("bad surrogate pair");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                } else if (cp >= 0xD800 && cp < 0xE000) {
                    cp = 0xFFFD; // a lone surrogate
                }
                appendUtf8(scratch, cp);
                break;
            }
            default:
                fail("bad escape in a string");
            }
        }
        fail("unterminated string");
    }

    std::string_view t_;
    std::size_t pos_ = 0;
};

} // namespace baton::slurm::detail
