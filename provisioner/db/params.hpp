// Bound parameters of a statement, in text format. Values are never spliced into SQL text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::db {

class Params {
public:
    Params() = default;
    template<typename... Values> explicit Params(const Values&... values)
    {
        values_.reserve(sizeof...(values));
        (add(values), ...);
    }

    void add(std::nullopt_t) { values_.emplace_back(std::nullopt); }
    void add(std::string_view text) { values_.emplace_back(std::string(text)); }
    void add(const std::string& text) { values_.emplace_back(text); }
    void add(const char* text) { values_.emplace_back(std::string(text)); }
    void add(bool value) { values_.emplace_back(value ? "true" : "false"); }
    void add(const nlohmann::json& value) { values_.emplace_back(value.dump()); }
    template<typename Number>
    requires std::is_arithmetic_v<Number>
    void add(Number value)
    {
        if constexpr (std::is_floating_point_v<Number>) {
            char buffer[64];
            std::snprintf(buffer, sizeof buffer, "%.17g", static_cast<double>(value));
            values_.emplace_back(buffer);
        } else {
            values_.emplace_back(std::to_string(value));
        }
    }
    template<typename T> void add(const std::optional<T>& value)
    {
        if (value)
            add(*value);
        else
            add(std::nullopt);
    }

    const std::vector<std::optional<std::string>>& values() const { return values_; }

private:
    std::vector<std::optional<std::string>> values_;
};

} // namespace baton::db
