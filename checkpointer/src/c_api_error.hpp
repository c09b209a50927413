// What the C interfaces share: exceptions stop at the C boundary and become -1 (or NULL) plus a
// message that the interface's last_error function returns.
#pragma once

#include <exception>
#include <string>
#include <type_traits>
#include <utility>

namespace baton::ckpt::capi {

class LastError {
public:
    // Runs `body` and returns its result, 0 if it has none; an exception becomes -1 and its message.
    template<typename Body> int guarded(Body&& body)
    {
        try {
            if constexpr (std::is_void_v<std::invoke_result_t<Body&>>) {
                body();
                return 0;
            } else {
                return body();
            }
        } catch (const std::exception& error) {
            message_ = error.what();
        } catch (...) {
            message_ = "unknown error";
        }
        return -1;
    }

    // Runs `make` and returns the handle it allocates; an exception becomes NULL and its message.
    template<typename Make> auto created(Make&& make)
    {
        decltype(make()) handle = nullptr;
        guarded([&] { handle = make(); });
        return handle;
    }

    // False, with the message "null argument", when `pointer` is NULL.
    bool present(const void* pointer)
    {
        if (pointer == nullptr)
            message_ = "null argument";
        return pointer != nullptr;
    }

    void set(std::string message) { message_ = std::move(message); }
    void clear() { message_.clear(); }
    const char* c_str() const { return message_.c_str(); }

private:
    std::string message_;
};

} // namespace baton::ckpt::capi
