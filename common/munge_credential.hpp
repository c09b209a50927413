// MUNGE credentials for baton's HTTP requests: the identity of whoever talks to batond comes from the
// cluster's MUNGE service, never from a request body. A request is signed by encoding
// requestPayload(method, path, body) as a credential's payload and sending the credential in the
// `Authorization: MUNGE <credential>` header; batond decodes it (munged tells the uid and gid and
// refuses replays and expired credentials) and accepts the request only if the payload matches the
// request it came with, so that a credential cannot be moved to another request.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace baton::munge {

inline constexpr std::string_view authorizationScheme = "MUNGE ";

class MungeError : public std::runtime_error {
public:
    enum class Kind { Unavailable, Invalid, Expired, Replayed, Other };
    MungeError(Kind kind, const std::string& message)
        : std::runtime_error(message)
        , kind_(kind)
    { }
    Kind kind() const { return kind_; }

private:
    Kind kind_;
};

// What a signed request's credential says: the uid and gid of the process that made it, and its payload.
struct Identity {
    uid_t uid = 0;
    gid_t gid = 0;
    std::string payload;
};

// The text a request's credential carries: method, path (with the query) and body, so that the
// credential is bound to this one request.
std::string requestPayload(std::string_view method, std::string_view target, std::string_view body);

// Encodes `payload` as a credential of the calling process (its real uid and gid). `socket` is munged's
// socket, empty for the default. Throws MungeError.
std::string encode(std::string_view payload, const std::string& socket = {});

// Decodes and checks a credential; throws MungeError (Replayed, Expired, Invalid, Unavailable, ...).
Identity decode(std::string_view credential, const std::string& socket = {});

// The credential's bytes as munged reads them, whatever its spelling: the base64 between "MUNGE:" and the
// last ':', decoded with every character outside the alphabet skipped (blanks, line breaks), up to the
// first '=' and without the unused low bits of its last character. munged accepts a credential with
// blanks inserted or text after its last ':' as the same one; a record of used credentials must too,
// so it keys on these bytes (which hold the credential's salt and MAC), not on the text sent.
std::string credentialBytes(std::string_view credential);

} // namespace baton::munge
