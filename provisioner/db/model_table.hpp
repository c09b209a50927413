// The `models` table: trained predictors by name and version.
#pragma once

#include "table_store.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace baton::db {

struct Model {
    std::int64_t id = 0;
    std::string name;
    std::int32_t version = 1;
    std::string kind;
    std::optional<std::string> path;
    std::int64_t trainedAt = 0; // epoch seconds
    nlohmann::json params = nlohmann::json::object();
    nlohmann::json metrics = nlohmann::json::object();
};

class ModelTable : public TableStore {
public:
    using TableStore::TableStore;
    // Returns the id the row got.
    std::int64_t insert(const Model& model);
    std::optional<Model> get(std::int64_t id);
    // The highest version of a model name.
    std::optional<Model> latest(std::string_view name);
};

} // namespace baton::db
