#include "job_csv.hpp"

#include <charconv>
#include <fstream>
#include <stdexcept>
#include <string>

namespace baton::sim {

namespace {

template<typename T> T field(std::string_view text, const std::string& where)
{
    T value {};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size())
        throw std::runtime_error(where + ": not a number: '" + std::string(text) + "'");
    return value;
}

} // namespace

std::vector<Job> readJobCsv(const std::filesystem::path& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error("cannot open " + path.string());
    std::string line;
    if (!std::getline(in, line) || line.rfind("id,submit,run_time,limit,nodes", 0) != 0)
        throw std::runtime_error(path.string() + ": expected header id,submit,run_time,limit,nodes,...");
    std::vector<Job> jobs;
    for (std::size_t lineNo = 2; std::getline(in, line); ++lineNo) {
        if (line.empty())
            continue;
        const std::string where = path.string() + ":" + std::to_string(lineNo);
        std::vector<std::string_view> f;
        std::string_view rest = line;
        for (;;) {
            const auto comma = rest.find(',');
            f.push_back(rest.substr(0, comma));
            if (comma == std::string_view::npos)
                break;
            rest.remove_prefix(comma + 1);
        }
        if (f.size() < 5 || f.size() > 8)
            throw std::runtime_error(where + ": expected 5 to 8 fields, got " + std::to_string(f.size()));
        Job j;
        j.id = field<std::int64_t>(f[0], where);
        j.submit = field<std::int64_t>(f[1], where);
        j.runTime = field<std::int64_t>(f[2], where);
        j.limit = field<std::int64_t>(f[3], where);
        j.nodes = field<std::int32_t>(f[4], where);
        if (f.size() > 5 && !f[5].empty())
            j.recordedPriority = field<double>(f[5], where);
        if (f.size() > 6 && !f[6].empty())
            j.recordedStart = field<std::int64_t>(f[6], where);
        if (f.size() > 7 && !f[7].empty())
            j.afterId = field<std::int64_t>(f[7], where);
        if (j.runTime < 0 || j.limit <= 0 || j.nodes <= 0)
            throw std::runtime_error(where + ": run time, limit and nodes must be positive");
        jobs.push_back(j);
    }
    return jobs;
}

} // namespace baton::sim
