#include "squeue_json.hpp"

#include <algorithm>
#include <string>

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

} // namespace baton::slurm
