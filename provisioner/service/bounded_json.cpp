#include "bounded_json.hpp"

#include <cstdint>
#include <stdexcept>
#include <string_view>

namespace baton::service {

namespace {

using Json = nlohmann::json;

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool validUtf8(std::string_view text)
{
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = 0;
        std::uint32_t point = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            length = 2;
            point = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            length = 3;
            point = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            length = 4;
            point = c & 0x07;
        } else {
            return false;
        }
        if (i + length > text.size())
            return false;
        for (std::size_t k = 1; k < length; ++k) {
            const auto next = static_cast<unsigned char>(text[i + k]);
            if ((next & 0xC0) != 0x80)
                return false;
            point = (point << 6) | (next & 0x3F);
        }
        static constexpr std::uint32_t smallest[] = { 0, 0, 0x80, 0x800, 0x10000 };
        if (point < smallest[length] || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF))
            return false;
        i += length;
    }
    return true;
}

} // namespace

Json parseBoundedJson(const std::string& body, int maxDepth)
{
    if (body.find('\0') != std::string::npos)
        throw std::invalid_argument("the body contains a NUL byte");
    if (!validUtf8(body))
        throw std::invalid_argument("the body is not valid UTF-8");
    if (body.find("\\u0000") != std::string::npos)
        throw std::invalid_argument("the body contains an escaped NUL character");
    // The callback stops the parse as soon as it nests too deep, before a deep value is ever built.
    const nlohmann::json::parser_callback_t bounded = [maxDepth](
                                                          int depth, Json::parse_event_t event, Json&) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start)
            && depth >= maxDepth)
            throw std::invalid_argument("the body nests deeper than " + std::to_string(maxDepth) + " levels");
        return true;
    };
    try {
        return Json::parse(body, bounded); // rejects invalid UTF-8 in strings
    } catch (const Json::exception& error) {
        throw std::invalid_argument(std::string("the body is not valid JSON: ") + error.what());
    }
}

} // namespace baton::service
