#include "munge_credential.hpp"

#include <cstdlib>
#include <memory>
#include <munge.h>

namespace baton::munge {

namespace {

struct ContextDeleter {
    void operator()(munge_ctx_t context) const { munge_ctx_destroy(context); }
};
using Context = std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, ContextDeleter>;

Context makeContext(const std::string& socket)
{
    Context context(munge_ctx_create());
    if (!context) {
        throw MungeError(MungeError::Kind::Other, "munge: cannot create a context (out of memory)");
    }
    if (!socket.empty() && munge_ctx_set(context.get(), MUNGE_OPT_SOCKET, socket.c_str()) != EMUNGE_SUCCESS) {
        throw MungeError(MungeError::Kind::Other, "munge: cannot use socket " + socket);
    }
    return context;
}

MungeError::Kind kindOf(munge_err_t rc)
{
    switch (rc) {
    case EMUNGE_SOCKET:
    case EMUNGE_TIMEOUT:
        return MungeError::Kind::Unavailable;
    case EMUNGE_CRED_EXPIRED:
    case EMUNGE_CRED_REWOUND:
        return MungeError::Kind::Expired;
    case EMUNGE_CRED_REPLAYED:
        return MungeError::Kind::Replayed;
    case EMUNGE_BAD_CRED:
    case EMUNGE_BAD_VERSION:
    case EMUNGE_BAD_CIPHER:
    case EMUNGE_BAD_MAC:
    case EMUNGE_BAD_ZIP:
    case EMUNGE_BAD_REALM:
    case EMUNGE_CRED_INVALID:
    case EMUNGE_CRED_UNAUTHORIZED:
    case EMUNGE_BAD_ARG:
    case EMUNGE_BAD_LENGTH:
        return MungeError::Kind::Invalid;
    default:
        return MungeError::Kind::Other;
    }
}

} // namespace

std::string requestPayload(std::string_view method, std::string_view target, std::string_view body)
{
    std::string payload;
    payload.reserve(method.size() + target.size() + body.size() + 2);
    payload.append(method).append(" ").append(target).append("\n").append(body);
    return payload;
}

std::string encode(std::string_view payload, const std::string& socket)
{
    const Context context = makeContext(socket);
    char* credential = nullptr;
    const munge_err_t rc
        = munge_encode(&credential, context.get(), payload.data(), static_cast<int>(payload.size()));
    if (rc != EMUNGE_SUCCESS) {
        throw MungeError(kindOf(rc), std::string("munge encode: ") + munge_ctx_strerror(context.get()));
    }
    std::string text(credential);
    std::free(credential);
    return text;
}

Identity decode(std::string_view credential, const std::string& socket)
{
    const Context context = makeContext(socket);
    const std::string text(credential); // munge_decode needs a NUL-terminated string
    void* payload = nullptr;
    int length = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    const munge_err_t rc = munge_decode(text.c_str(), context.get(), &payload, &length, &uid, &gid);
    std::unique_ptr<void, decltype(&std::free)> owned(payload, &std::free);
    if (rc != EMUNGE_SUCCESS) {
        throw MungeError(kindOf(rc), std::string("munge decode: ") + munge_ctx_strerror(context.get()));
    }
    Identity identity { uid, gid, {} };
    if (payload && length > 0) {
        identity.payload.assign(static_cast<const char*>(payload), static_cast<std::size_t>(length));
    }
    return identity;
}

std::string credentialBytes(std::string_view credential)
{
    constexpr std::string_view prefix = "MUNGE:";
    if (const auto at = credential.find(prefix); at != std::string_view::npos)
        credential.remove_prefix(at + prefix.size());
    if (const auto end = credential.rfind(':'); end != std::string_view::npos)
        credential = credential.substr(0, end);
    std::string bytes;
    unsigned bits = 0;
    int count = 0;
    for (const char c : credential) {
        int value = -1;
        if (c >= 'A' && c <= 'Z')
            value = c - 'A';
        else if (c >= 'a' && c <= 'z')
            value = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            value = c - '0' + 52;
        else if (c == '+')
            value = 62;
        else if (c == '/')
            value = 63;
        else if (c == '=')
            break;
        if (value < 0)
            continue;
        bits = (bits << 6) | static_cast<unsigned>(value);
        count += 6;
        if (count >= 8) {
            count -= 8;
            bytes.push_back(static_cast<char>((bits >> count) & 0xff));
        }
    }
    return bytes;
}

} // namespace baton::munge
