#include "model_table.hpp"

namespace baton::db {

namespace {

constexpr Statement insertModel { "insert_model",
    "INSERT INTO models (name, version, kind, path, params, metrics) VALUES ($1, $2, $3, $4, $5, $6)"
    " RETURNING id" };
constexpr char modelColumns[] = "SELECT id, name, version, kind, path,"
                                " extract(epoch FROM trained_at)::bigint AS trained_unix, params, metrics FROM models";
constexpr auto modelByIdSql = joinSql(modelColumns, " WHERE id = $1");
constexpr auto latestModelSql = joinSql(modelColumns, " WHERE name = $1 ORDER BY version DESC LIMIT 1");
constexpr Statement selectModel { "select_model", modelByIdSql.data(), true };
constexpr Statement selectLatestModel { "select_latest_model", latestModelSql.data(), true };

std::optional<Model> firstModel(const Result& r)
{
    if (r.rows() == 0)
        return std::nullopt;
    return Model { r.int64(0, r.column("id")), std::string(r.text(0, r.column("name"))),
        static_cast<std::int32_t>(r.int64(0, r.column("version"))), std::string(r.text(0, r.column("kind"))),
        r.optText(0, r.column("path")), r.int64(0, r.column("trained_unix")), r.json(0, r.column("params")),
        r.json(0, r.column("metrics")) };
}

} // namespace

std::int64_t ModelTable::insert(const Model& m)
{
    const Result r = connection_.exec(insertModel, Params(m.name, m.version, m.kind, m.path, m.params, m.metrics));
    return r.int64(0, r.column("id"));
}

std::optional<Model> ModelTable::get(std::int64_t id)
{
    return firstModel(connection_.exec(selectModel, Params(id)));
}

std::optional<Model> ModelTable::latest(std::string_view name)
{
    return firstModel(connection_.exec(selectLatestModel, Params(name)));
}

} // namespace baton::db
