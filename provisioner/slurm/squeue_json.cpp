#include "squeue_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace baton::slurm {

namespace {

// The length of the valid UTF-8 sequence at text[at], or 0 when none starts there (a NUL counts as
// invalid).
std::size_t cleanSequence(std::string_view text, std::size_t at) noexcept
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char c = byte(at);
    if (c >= 0x01 && c <= 0x7F)
        return 1;
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF; // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        length = 3;
        if (c == 0xE0)
            low = 0xA0; // no overlong form
        else if (c == 0xED)
            high = 0x9F; // no surrogate
    } else if (c >= 0xF0 && c <= 0xF4) {
        length = 4;
        if (c == 0xF0)
            low = 0x90; // no overlong form
        else if (c == 0xF4)
            high = 0x8F; // nothing above U+10FFFF
    } else {
        return 0;
    }
    if (at + length > text.size() || byte(at + 1) < low || byte(at + 1) > high)
        return 0;
    for (std::size_t i = 2; i < length; ++i)
        if (byte(at + i) < 0x80 || byte(at + i) > 0xBF)
            return 0;
    return length;
}

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

template<class T> T narrow(Scanner& s, std::optional<std::int64_t> v, std::string_view field)
{
    if (!v)
        return T {};
    if (*v < static_cast<std::int64_t>(std::numeric_limits<T>::min())
        || *v > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
        s.fail("field " + std::string(field) + " out of range");
    return static_cast<T>(*v);
}

void readState(Scanner& s, std::string& out)
{
    // Later releases give a list of states ("RUNNING", "COMPLETING"...); the first is the base state.
    if (s.peek() != '[') {
        s.readString(out);
        return;
    }
    out.clear();
    s.array([&] {
        std::string one;
        s.readString(one);
        if (out.empty())
            out = std::move(one);
    });
}

void readExitCode(Scanner& s, QueueJob& job)
{
    if (s.peek() == '{') {
        // 23.02 and later: {"status": [...], "return_code": N, "signal": {"id": N, "name": "TERM"}},
        // each number a {"set", "infinite", "number"} object (unset where it does not apply).
        std::optional<std::int64_t> code, signal;
        s.object([&](std::string_view key) {
            if (key == "return_code")
                code = s.readInteger();
            else if (key == "signal" && s.peek() == '{')
                s.object([&](std::string_view signalKey) {
                    if (signalKey == "id")
                        signal = s.readInteger();
                    else
                        s.skipValue();
                });
            else
                s.skipValue();
        });
        job.exitSignal = signal.value_or(0) > 0 && *signal < 128 ? static_cast<std::int32_t>(*signal) : 0;
        job.exitStatus = job.exitSignal == 0 && code ? static_cast<std::int32_t>(*code & 0xFF) : 0;
        return;
    }
    // 22.05 reports the raw wait status of the batch script.
    const auto raw = s.readInteger().value_or(0);
    const auto status = static_cast<std::uint32_t>(raw);
    if ((status & 0x7F) == 0) {
        job.exitStatus = static_cast<std::int32_t>((status >> 8) & 0xFF);
        job.exitSignal = 0;
    } else {
        job.exitStatus = 0;
        job.exitSignal = static_cast<std::int32_t>(status & 0x7F);
    }
}

// The members of a job that this reader keeps; all others are skipped.
enum class JobField : std::uint8_t {
    Other,
    Account,
    ArrayJobId,
    ArrayTaskId,
    ArrayTaskString,
    Batch,
    Comment,
    Workdir,
    EndTime,
    ExitCode,
    Features,
    GroupId,
    JobId,
    JobState,
    Name,
    NodeCount,
    Nodes,
    Priority,
    Partition,
    Qos,
    CpusPerTask,
    MemoryPerCpu,
    MemoryPerNode,
    Tasks,
    TasksPerNode,
    TresPerNode,
    SubmitTime,
    StartTime,
    StateReason,
    TimeLimit,
    UserId,
    UserName,
};

JobField jobFieldOf(std::string_view key)
{
    static constexpr std::pair<std::string_view, JobField> fields[] = {
        { "account", JobField::Account },
        { "array_job_id", JobField::ArrayJobId },
        { "array_task_id", JobField::ArrayTaskId },
        { "array_task_string", JobField::ArrayTaskString },
        { "batch_flag", JobField::Batch },
        { "comment", JobField::Comment },
        { "current_working_directory", JobField::Workdir },
        { "end_time", JobField::EndTime },
        { "cpus_per_task", JobField::CpusPerTask },
        { "exit_code", JobField::ExitCode },
        { "features", JobField::Features },
        { "group_id", JobField::GroupId },
        { "job_id", JobField::JobId },
        { "job_state", JobField::JobState },
        { "name", JobField::Name },
        { "node_count", JobField::NodeCount },
        { "nodes", JobField::Nodes },
        { "memory_per_cpu", JobField::MemoryPerCpu },
        { "memory_per_node", JobField::MemoryPerNode },
        { "priority", JobField::Priority },
        { "partition", JobField::Partition },
        { "qos", JobField::Qos },
        { "tasks", JobField::Tasks },
        { "tasks_per_node", JobField::TasksPerNode },
        { "tres_per_node", JobField::TresPerNode },
        { "submit_time", JobField::SubmitTime },
        { "start_time", JobField::StartTime },
        { "state_reason", JobField::StateReason },
        { "time_limit", JobField::TimeLimit },
        { "user_id", JobField::UserId },
        { "user_name", JobField::UserName },
    };
    for (const auto& [name, field] : fields)
        if (name == key)
            return field;
    return JobField::Other;
}

void readJobField(Scanner& s, QueueJob& job, JobField field, std::string_view key)
{
    auto integer
        = [&](auto& out) { out = narrow<std::remove_reference_t<decltype(out)>>(s, s.readInteger(), key); };
    switch (field) {
    case JobField::ArrayJobId:
        return integer(job.arrayJobId);
    case JobField::ArrayTaskId:
        return void(job.arrayTaskId = s.readInteger());
    case JobField::ArrayTaskString:
        return s.readString(job.arrayTaskString);
    case JobField::Batch:
        return void(job.batch = s.readBool());
    case JobField::Comment:
        return s.readString(job.comment);
    case JobField::Workdir:
        return s.readString(job.workdir);
    case JobField::EndTime:
        return integer(job.endTime);
    case JobField::ExitCode:
        return readExitCode(s, job);
    case JobField::GroupId:
        return integer(job.groupId);
    case JobField::JobId:
        return integer(job.jobId);
    case JobField::JobState:
        return readState(s, job.state);
    case JobField::Name:
        return s.readString(job.name);
    case JobField::NodeCount:
        return integer(job.nodeCount);
    case JobField::Nodes:
        return s.readString(job.nodes);
    case JobField::Priority:
        return integer(job.priority);
    case JobField::Partition:
        return s.readString(job.partition);
    case JobField::Account:
        return s.readString(job.account);
    case JobField::Qos:
        return s.readString(job.qos);
    case JobField::Features:
        return s.readString(job.features);
    case JobField::TresPerNode:
        return s.readString(job.tresPerNode);
    case JobField::Tasks:
        return void(job.tasks = s.readInteger());
    case JobField::TasksPerNode:
        return void(job.tasksPerNode = s.readInteger());
    case JobField::CpusPerTask:
        return void(job.cpusPerTask = s.readInteger());
    case JobField::MemoryPerNode:
        return void(job.memoryPerNodeMiB = s.readInteger());
    case JobField::MemoryPerCpu:
        return void(job.memoryPerCpuMiB = s.readInteger());
    case JobField::SubmitTime:
        return integer(job.submitTime);
    case JobField::StartTime:
        return integer(job.startTime);
    case JobField::StateReason:
        return s.readString(job.stateReason);
    case JobField::TimeLimit:
        return void(job.timeLimitMinutes = s.readInteger());
    case JobField::UserId:
        return integer(job.userId);
    case JobField::UserName:
        return s.readString(job.userName);
    case JobField::Other:
        return s.skipValue();
    }
}

// Slurm prints a job's members in one fixed order and layout: each reader remembers, for each member of
// the job before, the exact bytes from the end of the previous value to the start of this one (comma,
// newline, indentation, quoted name, colon) and compares the document with them in one step instead of
// reading these tokens. Bytes that differ are simply read token by token, and the member learnt anew;
// bytes that match are what the token reader would have consumed, so the result is the same.
class MemberOrder {
public:
    struct Member {
        std::string lead; // e.g. ",\n      \"job_id\": "; empty: never matches
        std::size_t nameAt = 0, nameSize = 0; // the name between the quotes, within lead
        JobField field = JobField::Other;
        std::string_view name() const { return std::string_view(lead).substr(nameAt, nameSize); }
    };
    const Member* expected(std::size_t index) const
    {
        return index < members_.size() ? &members_[index] : nullptr;
    }
    void learn(std::size_t index, std::string_view lead, std::string_view raw, JobField field)
    {
        Member member;
        if (lead.size() <= maxLead) {
            member.lead = lead;
            member.nameAt = static_cast<std::size_t>(raw.data() - lead.data());
            member.nameSize = raw.size();
        }
        member.field = field;
        if (index < members_.size())
            members_[index] = std::move(member);
        else if (index == members_.size() && index < maxMembers)
            members_.push_back(std::move(member));
    }

private:
    // Bounds on what a hostile document can make us keep.
    static constexpr std::size_t maxMembers = 512;
    static constexpr std::size_t maxLead = 256;
    std::vector<Member> members_;
};

QueueJob readJob(Scanner& s, MemberOrder& order)
{
    QueueJob job;
    bool haveId = false;
    if (s.peek() != '{')
        s.fail("a job is not an object");
    s.expect('{');
    if (!s.consume('}')) {
        std::string scratch;
        for (std::size_t index = 0;; ++index) {
            const std::size_t from = s.position();
            JobField field;
            std::string_view name;
            if (const auto* member = order.expected(index); member && s.consumeBytes(member->lead)) {
                field = member->field;
                name = member->name();
            } else {
                if (index > 0 && !s.consume(','))
                    break;
                std::string_view raw;
                name = s.key(scratch, raw);
                field = jobFieldOf(name);
                s.colon();
                order.learn(index, s.text(from, s.position()), raw, field);
            }
            haveId |= field == JobField::JobId;
            readJobField(s, job, field, name);
        }
        s.expect('}');
    }
    if (!haveId)
        s.fail("a job without job_id");
    return job;
}

// A busy cluster's queue is tens of megabytes: its jobs list is read by several threads, each from a
// guessed element boundary. A guess is only trusted once the reader before it, itself started at a true
// boundary, arrives exactly there; any doubt (or error) and the list is read again by one thread, which
// also gives the error messages. So the result is always the one-thread result.
constexpr std::size_t parallelFrom = 4 << 20; // bytes of document
constexpr unsigned maxReaders = 4;
constexpr unsigned piecesPerReader = 4;

// The next position at or after `from` that looks like the start of an element of the jobs list: a
// '{' preceded by "}," and spaces. Inside a string this can be wrong, which the check above catches.
std::size_t guessJobStart(std::string_view t, std::size_t from)
{
    for (std::size_t at = t.find("},", from); at != std::string_view::npos; at = t.find("},", at + 2)) {
        std::size_t next = at + 2;
        while (next < t.size() && static_cast<unsigned char>(t[next]) <= ' ')
            ++next;
        if (next < t.size() && t[next] == '{')
            return next;
    }
    return std::string_view::npos;
}

// Room for the jobs in `bytes` of a jobs list whose first job took `firstJob` bytes: growing a vector
// of 10,000 jobs moves each of them about twice. Jobs of Slurm take kilobytes, so a document whose first
// job is much smaller is no guide and grows as usual.
std::size_t expectedJobs(std::size_t bytes, std::size_t firstJob)
{
    constexpr std::size_t smallestGuide = 512;
    return bytes / std::max(firstJob, smallestGuide) * 5 / 4 + 1;
}

// Reads the jobs list whose '[' is at `open`; returns the position after its ']', or npos when the
// parallel read cannot vouch for its result (then `jobs` is left empty).
std::size_t readJobsInParallel(std::string_view t, std::size_t open, std::vector<QueueJob>& jobs)
{
    const unsigned readers = std::min(maxReaders, std::max(1u, std::thread::hardware_concurrency()));
    if (readers < 2 || t.size() < parallelFrom)
        return std::string_view::npos;
    Scanner first(t, open);
    first.expect('[');
    if (first.peek() != '{')
        return std::string_view::npos; // empty or odd: the plain reader says what is wrong
    // More pieces than readers, each taken by the next free reader: a reader that the machine holds up
    // leaves its remaining pieces to the others instead of making every reader wait for its half.
    const unsigned pieces = readers * piecesPerReader;
    std::vector<std::size_t> starts { first.position() };
    for (unsigned k = 1; k < pieces; ++k) {
        const std::size_t guess = guessJobStart(t, starts.front() + (t.size() - starts.front()) * k / pieces);
        if (guess == std::string_view::npos || guess <= starts.back())
            break;
        starts.push_back(guess);
    }
    if (starts.size() < 2)
        return std::string_view::npos;
    struct alignas(64) Part { // a cache line of its own: each is written by its reader
        std::vector<QueueJob> jobs;
        std::size_t end = std::string_view::npos; // after ']' for the last part, else the next start
        bool ok = false;
    };
    std::vector<Part> parts(starts.size());
    auto read = [&](std::size_t k) {
        try {
            Scanner s(t, starts[k]);
            MemberOrder order;
            const bool last = k + 1 == starts.size();
            const std::size_t end = last ? t.size() : starts[k + 1];
            while (true) {
                parts[k].jobs.push_back(readJob(s, order));
                if (parts[k].jobs.size() == 1)
                    parts[k].jobs.reserve(expectedJobs(end - starts[k], s.position() - starts[k]));
                if (!s.consume(',')) {
                    s.expect(']');
                    parts[k].end = s.position();
                    parts[k].ok = last; // only the last part may end the list
                    return;
                }
                s.peek();
                if (!last && s.position() >= starts[k + 1]) {
                    parts[k].ok = s.position() == starts[k + 1];
                    return;
                }
            }
        } catch (const SqueueParseError&) {
            parts[k].ok = false;
        }
    };
    std::atomic<std::size_t> nextPiece { 0 };
    const auto reader = [&] {
        for (std::size_t k; (k = nextPiece++) < starts.size();)
            read(k);
    };
    std::vector<std::thread> threads;
    for (unsigned k = 1; k < readers; ++k)
        threads.emplace_back(reader);
    reader();
    for (auto& thread : threads)
        thread.join();
    if (!std::all_of(parts.begin(), parts.end(), [](const Part& part) { return part.ok; }))
        return std::string_view::npos;
    std::size_t total = 0;
    for (const Part& part : parts)
        total += part.jobs.size();
    jobs.reserve(total);
    for (Part& part : parts)
        std::move(part.jobs.begin(), part.jobs.end(), std::back_inserter(jobs));
    return parts.back().end;
}

} // namespace

bool isCleanUtf8(std::string_view text) noexcept
{
    for (std::size_t at = 0; at < text.size();) {
        const std::size_t length = cleanSequence(text, at);
        if (length == 0)
            return false;
        at += length;
    }
    return true;
}

void replaceUncleanUtf8(std::string& text)
{
    // Most strings are plain ASCII without a NUL: nothing to copy.
    if (std::all_of(text.begin(), text.end(), [](unsigned char c) { return c != 0 && c < 0x80; })
        || isCleanUtf8(text))
        return;
    std::string clean;
    clean.reserve(text.size() + 8);
    for (std::size_t at = 0; at < text.size();) {
        const std::size_t length = cleanSequence(text, at);
        if (length == 0) {
            clean += "\xEF\xBF\xBD"; // U+FFFD REPLACEMENT CHARACTER
            ++at;
            continue;
        }
        clean.append(text, at, length);
        at += length;
    }
    text = std::move(clean);
}

QueueSnapshot parseSqueueJson(std::string_view text, std::int64_t takenAt)
{
    QueueSnapshot snapshot;
    snapshot.takenAt = takenAt;
    Scanner s(text);
    bool haveJobs = false;
    if (s.peek() != '{')
        s.fail("the document is not an object");
    s.object([&](std::string_view key) {
        if (key == "jobs") {
            if (s.isNull())
                return;
            haveJobs = true;
            const std::size_t open = (s.peek(), s.position());
            if (const std::size_t end = readJobsInParallel(text, open, snapshot.jobs);
                end != std::string_view::npos) {
                s = Scanner(text, end);
                return;
            }
            MemberOrder order;
            s.array([&] {
                snapshot.jobs.push_back(readJob(s, order));
                if (snapshot.jobs.size() == 1)
                    snapshot.jobs.reserve(expectedJobs(text.size() - open, s.position() - open));
            });
        } else if (key == "meta" && s.peek() == '{') {
            s.object([&](std::string_view metaKey) {
                // "Slurm" in 22.05, "slurm" from 23.02 on.
                if ((metaKey != "Slurm" && metaKey != "slurm") || s.peek() != '{')
                    return s.skipValue();
                s.object([&](std::string_view slurmKey) {
                    if (slurmKey == "release" && s.peek() == '"')
                        return s.readString(snapshot.slurmRelease);
                    s.skipValue();
                });
            });
        } else if (key == "errors" && s.peek() == '[') {
            s.array([&] {
                if (s.peek() != '{')
                    return s.skipValue();
                std::string message;
                s.object([&](std::string_view errorKey) {
                    if ((errorKey == "error" || errorKey == "description") && s.peek() == '"'
                        && message.empty())
                        return s.readString(message);
                    s.skipValue();
                });
                snapshot.errors.push_back(message.empty() ? "unspecified error" : message);
            });
        } else {
            s.skipValue();
        }
    });
    s.expectEnd();
    if (!haveJobs)
        throw SqueueParseError("squeue JSON: the document has no jobs list");
    return snapshot;
}

int parseSinfoUsableNodes(std::string_view text)
{
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw SqueueParseError(std::string("sinfo JSON: ") + e.what());
    }
    // 22.05 lists the nodes; 23.02 and later list groups of nodes in one partition and state ("sinfo").
    const bool nodeList = doc.is_object() && doc.contains("nodes") && doc["nodes"].is_array();
    const bool groupList = doc.is_object() && doc.contains("sinfo") && doc["sinfo"].is_array();
    if (!nodeList && !groupList)
        throw SqueueParseError("sinfo JSON: the document has no nodes list");
    // sinfo --json exits 0 with an error list (and no nodes) when slurmctld cannot be reached.
    if (const auto errors = doc.find("errors");
        errors != doc.end() && errors->is_array() && !errors->empty()) {
        const auto& first = errors->front();
        throw SqueueParseError("sinfo reported: "
            + (first.is_object() && first.contains("error") && first["error"].is_string()
                    ? first["error"].get<std::string>()
                    : first.is_object() && first.contains("description") && first["description"].is_string()
                    ? first["description"].get<std::string>()
                    : std::string("an error")));
    }
    auto statesOf = [](const nlohmann::json& object) {
        std::vector<std::string> states;
        auto add = [&](const nlohmann::json& value) {
            if (!value.is_string())
                return;
            std::string s = value.get<std::string>();
            for (auto& c : s)
                c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            states.push_back(std::move(s));
        };
        for (const char* key : { "state", "state_flags" })
            if (auto it = object.find(key); it != object.end()) {
                if (it->is_array())
                    for (const auto& s : *it)
                        add(s);
                else
                    add(*it);
            }
        return states;
    };
    auto usable = [](const std::vector<std::string>& states) {
        return std::none_of(states.begin(), states.end(), [](const std::string& s) {
            return s == "DOWN" || s == "DRAIN" || s == "DRAINED" || s == "DRAINING" || s == "FAIL"
                || s == "FAILING" || s == "FUTURE" || s == "NOT_RESPONDING" || s == "UNKNOWN";
        });
    };
    if (nodeList) {
        int count = 0;
        for (const auto& node : doc["nodes"]) {
            if (!node.is_object())
                throw SqueueParseError("sinfo JSON: a node is not an object");
            count += usable(statesOf(node)) ? 1 : 0;
        }
        return count;
    }
    // A node in several partitions is in several groups: count names once.
    std::set<std::string> names;
    for (const auto& group : doc["sinfo"]) {
        if (!group.is_object())
            throw SqueueParseError("sinfo JSON: a node group is not an object");
        const auto node = group.find("node");
        const auto nodes = group.find("nodes");
        if (node == group.end() || !node->is_object() || nodes == group.end() || !nodes->is_object()
            || !nodes->contains("nodes") || !(*nodes)["nodes"].is_array())
            throw SqueueParseError("sinfo JSON: a node group without its state or node names");
        if (!usable(statesOf(*node)))
            continue;
        for (const auto& name : (*nodes)["nodes"])
            if (name.is_string())
                names.insert(name.get<std::string>());
    }
    return static_cast<int>(names.size());
}

} // namespace baton::slurm
