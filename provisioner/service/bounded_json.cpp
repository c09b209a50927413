#include "bounded_json.hpp"

#include "common/utf8.hpp"

#include <stdexcept>
#include <string_view>

namespace baton::service {

using Json = nlohmann::json;

Json parseBoundedJson(const std::string& body, int maxDepth)
{
    if (body.find('\0') != std::string::npos)
        throw std::invalid_argument("the body contains a NUL byte");
    if (!text::validUtf8(body))
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
