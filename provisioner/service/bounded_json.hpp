// JSON from outside (request bodies, spooled event lines) parsed within the service's bounds.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace baton::service {

// Parses a JSON body with the service's bounds: no NUL (raw or escaped), valid UTF-8, at most `maxDepth`
// levels. Throws std::invalid_argument with a message for the 400 response.
nlohmann::json parseBoundedJson(const std::string& body, int maxDepth);

} // namespace baton::service
