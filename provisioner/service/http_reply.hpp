// What batond's HTTP handlers answer: a JSON body, or a refusal with its status.
#pragma once

#include "http_server.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace baton::service {

// A refusal with its HTTP status, turned into {"error": ...} by the handler wrapper.
struct HttpError : std::runtime_error {
    HttpError(int status, const std::string& message)
        : std::runtime_error(message)
        , status(status)
    { }
    int status;
};

inline void reply(HttpResponse& response, int status, const nlohmann::json& body)
{
    response.status = status;
    response.setContent(body.dump() + "\n", "application/json");
}

} // namespace baton::service
