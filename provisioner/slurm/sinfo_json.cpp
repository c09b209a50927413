#include "squeue_json.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace baton::slurm {

int parseSinfoUsableNodes(std::string_view text)
{
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw SqueueParseError(std::string("sinfo JSON: ") + e.what());
    }
    // 22.05 lists the nodes; 23.02 and later list groups of nodes in one partition and state ("sinfo").
    const bool nodeList = doc.is_object() && doc.contains("nodes") && doc["nodes"].is_array();
    const bool groupList = doc.is_object() && doc.contains("sinfo") && doc["sinfo"].is_array();
    if (!nodeList && !groupList)
        throw SqueueParseError("sinfo JSON: the document has no nodes list");
    // sinfo --json exits 0 with an error list (and no nodes) when slurmctld cannot be reached.
    if (const auto errors = doc.find("errors");
        errors != doc.end() && errors->is_array() && !errors->empty()) {
        const auto& first = errors->front();
        throw SqueueParseError("sinfo reported: "
            + (first.is_object() && first.contains("error") && first["error"].is_string()
                    ? first["error"].get<std::string>()
                    : first.is_object() && first.contains("description") && first["description"].is_string()
                    ? first["description"].get<std::string>()
                    : std::string("an error")));
    }
    auto statesOf = [](const nlohmann::json& object) {
        std::vector<std::string> states;
        auto add = [&](const nlohmann::json& value) {
            if (!value.is_string())
                return;
            std::string s = value.get<std::string>();
            for (auto& c : s)
                c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            states.push_back(std::move(s));
        };
        for (const char* key : { "state", "state_flags" })
            if (auto it = object.find(key); it != object.end()) {
                if (it->is_array())
                    for (const auto& s : *it)
                        add(s);
                else
                    add(*it);
            }
        return states;
    };
    auto usable = [](const std::vector<std::string>& states) {
        return std::none_of(states.begin(), states.end(), [](const std::string& s) {
            return s == "DOWN" || s == "DRAIN" || s == "DRAINED" || s == "DRAINING" || s == "FAIL"
                || s == "FAILING" || s == "FUTURE" || s == "NOT_RESPONDING" || s == "UNKNOWN";
        });
    };
    if (nodeList) {
        int count = 0;
        for (const auto& node : doc["nodes"]) {
            if (!node.is_object())
                throw SqueueParseError("sinfo JSON: a node is not an object");
            count += usable(statesOf(node)) ? 1 : 0;
        }
        return count;
    }
    // A node in several partitions is in several groups: count names once.
    std::set<std::string> names;
    for (const auto& group : doc["sinfo"]) {
        if (!group.is_object())
            throw SqueueParseError("sinfo JSON: a node group is not an object");
        const auto node = group.find("node");
        const auto nodes = group.find("nodes");
        if (node == group.end() || !node->is_object() || nodes == group.end() || !nodes->is_object()
            || !nodes->contains("nodes") || !(*nodes)["nodes"].is_array())
            throw SqueueParseError("sinfo JSON: a node group without its state or node names");
        if (!usable(statesOf(*node)))
            continue;
        for (const auto& name : (*nodes)["nodes"])
            if (name.is_string())
                names.insert(name.get<std::string>());
    }
    return static_cast<int>(names.size());
}

} // namespace baton::slurm
