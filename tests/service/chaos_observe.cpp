// The chaos test's observer: slurmctld's, the database's, the chain directories' and batond's facts,
// and the invariants checked on them.
#include "chaos_fixture.hpp"

namespace baton::chaos::fixture {

bool ChaosTest::readSlurm()
{
    const auto queue = run({ "env", "SLURM_TIME_FORMAT=%s", "squeue", "-h", "-t", "all", "-o",
                               "%i|%U|%T|%V|%S|%e|%k" },
        30s);
    if (queue.exitCode != 0)
        return false;
    std::istringstream lines(queue.output);
    const std::lock_guard lock(mutex_);
    for (std::string line; std::getline(lines, line);) {
        std::vector<std::string> fields;
        std::size_t start = 0;
        for (int i = 0; i < 6; ++i) {
            const auto bar = line.find('|', start);
            if (bar == std::string::npos)
                break;
            fields.push_back(line.substr(start, bar - start));
            start = bar + 1;
        }
        if (fields.size() != 6)
            continue;
        fields.push_back(line.substr(start));
        chaos::SlurmJob job;
        job.id = number(fields[0]);
        if (job.id <= 0)
            continue;
        job.uid = number(fields[1]);
        job.state = fields[2];
        job.submit = number(fields[3]);
        job.start = number(fields[4]);
        job.end = number(fields[5]);
        job.comment = fields[6] == "(null)" ? "" : fields[6];
        // A pending job's start is slurmctld's estimate, not a start.
        if (job.state == "PENDING")
            job.start = 0, job.end = 0;
        if (job.state == "RUNNING")
            job.end = 0;
        slurmJobs_[job.id] = job;
    }
    return true;
}

ChaosTest::Snapshot ChaosTest::readDatabase() const
{
    Snapshot snapshot;
    try {
        baton::db::ConnectionOptions options;
        options.connectTimeout = std::chrono::seconds(5);
        baton::db::Connection connection(conninfo_, options);
        const auto chains = connection.execScript(
            "SELECT id, owner_uid, name, state, seq, coalesce(reason, ''), token FROM chains ORDER BY id");
        for (int row = 0; row < chains.rows(); ++row)
            snapshot.chains.push_back(chaos::DbChain { chains.int64(row, 0), chains.int64(row, 1),
                std::string(chains.text(row, 2)), std::string(chains.text(row, 3)),
                static_cast<int>(chains.int64(row, 4)), std::string(chains.text(row, 5)),
                std::string(chains.text(row, 6)) });
        const auto jobs = connection.execScript("SELECT chain_id, seq, slurm_job_id FROM jobs");
        for (int row = 0; row < jobs.rows(); ++row)
            snapshot.jobs.push_back(chaos::DbJob { jobs.int64(row, 0), static_cast<int>(jobs.int64(row, 1)),
                jobs.int64(row, 2) });
        const auto checkpoints = connection.execScript(
            "SELECT chain_id, max(iteration) FROM checkpoints WHERE iteration < "
            + std::to_string(plantedIterationFloor) + " GROUP BY chain_id");
        for (int row = 0; row < checkpoints.rows(); ++row)
            snapshot.dbIteration[checkpoints.int64(row, 0)] = checkpoints.int64(row, 1);
        snapshot.dbOk = true;
    } catch (const std::exception&) {
        snapshot.dbOk = false;
    }
    return snapshot;
}

fs::path ChaosTest::chainDir(const std::string& user, const std::string& name) const
{
    return base_->path() / "chains" / user / name;
}

std::string ChaosTest::userNameOf(std::int64_t uid) const
{
    for (const User& user : users_)
        if (static_cast<std::int64_t>(user.uid) == uid)
            return user.name;
    return std::to_string(uid);
}

std::int64_t ChaosTest::diskIteration(const fs::path& dir) const
{
    std::int64_t newest = -1;
    std::error_code error;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
        const std::string name = it->path().filename().string();
        if (name.rfind("ckpt-", 0) != 0 || !fs::exists(it->path() / "manifest.json", error))
            continue;
        const std::string digits = name.substr(5);
        if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
            continue;
        const auto iteration = std::stoll(digits);
        if (static_cast<std::uint64_t>(iteration) >= plantedIterationFloor)
            continue;
        newest = std::max<std::int64_t>(newest, iteration);
    }
    return newest;
}

void ChaosTest::readLogs()
{
    for (std::size_t i = 0; i < batonds_.size(); ++i) {
        std::ifstream in(batonds_[i]->logPath());
        in.seekg(static_cast<std::streamoff>(logOffsets_[i]));
        std::string line;
        while (std::getline(in, line)) {
            if (in.eof())
                break; // a line still being written: read it next time
            logOffsets_[i] += line.size() + 1;
            if (chaos::isTickFailureLine(line)) {
                const std::lock_guard lock(mutex_);
                tickFailures_.push_back(chaos::TickFailure { now(), i == 0 ? "first" : "second", line });
            }
        }
    }
}

void ChaosTest::readMetrics()
{
    for (std::size_t i = 0; i < batonds_.size(); ++i) {
        if (!batonds_[i]->running())
            continue;
        const HttpReply metrics = send(batonds_[i]->port(), "GET", "/metrics", "", std::nullopt, 5);
        if (metrics.status != 200)
            continue;
        std::istringstream lines(metrics.body);
        for (std::string line; std::getline(lines, line);) {
            std::string name = line.substr(0, line.find_first_of("{ "));
            if (name != "baton_tick_failures_total" && name != "baton_tick_errors_total")
                continue;
            const std::string series = line.substr(0, line.rfind(' '));
            const double value = std::strtod(line.substr(line.rfind(' ') + 1).c_str(), nullptr);
            const std::string key = std::to_string(i) + " " + series;
            const double last = metricValues_.contains(key) ? metricValues_[key] : 0;
            const double grown = value < last ? value : value - last; // a restarted instance counts anew
            metricValues_[key] = value;
            if (grown > 0) {
                const std::lock_guard lock(mutex_);
                tickFailures_.push_back(chaos::TickFailure { now(), i == 0 ? "first" : "second",
                    series + " grew" });
            }
        }
    }
}

void ChaosTest::addViolations(const std::vector<chaos::Violation>& found, double at)
{
    const std::lock_guard lock(mutex_);
    for (chaos::Violation violation : found) {
        const std::string key = violation.invariant + "|" + violation.subject;
        if (!seenViolations_.insert(key).second)
            continue;
        violation.atSeconds = at;
        std::cout << "chaos: VIOLATION t+" << static_cast<long long>(at) << "s " << violation.invariant << " ["
                  << violation.subject << "] " << violation.detail << std::endl;
        violations_.push_back(violation);
    }
}

void ChaosTest::count(const std::string& invariant, std::size_t evaluations)
{
    const std::lock_guard lock(mutex_);
    checks_[invariant] += evaluations;
}

// Chains that cancelled batond-made jobs must leave alone from when the chain was first seen
// cancelled; the bound stretches by the outages since then.
std::map<std::int64_t, std::int64_t> ChaosTest::cancelledSince(
    const Snapshot& snapshot, const std::vector<chaos::Outage>& outages, double at, std::int64_t epoch)
{
    for (const chaos::DbChain& chain : snapshot.chains) {
        if (chain.state == "cancelled")
            cancelledSince_.try_emplace(chain.id, epoch);
        else
            cancelledSince_.erase(chain.id);
    }
    std::map<std::int64_t, std::int64_t> since;
    for (const auto& [id, first] : cancelledSince_) {
        const double covered = chaos::outageSecondsWithin(
            outages, at - static_cast<double>(epoch - first), at, outageGraceSeconds);
        since[id] = first + static_cast<std::int64_t>(covered);
    }
    return since;
}

// Plain `sbatch --baton` chains are registered once their job runs.
void ChaosTest::checkPlainChains(const Snapshot& snapshot, const std::map<std::int64_t, chaos::SlurmJob>& slurm,
    std::int64_t epoch, std::vector<chaos::Violation>& found)
{
    for (const auto& [jobId, plain] : plainJobs_) {
        const auto job = slurm.find(jobId);
        if (job == slurm.end() || job->second.start <= 0 || epoch - job->second.start <= plainRegisterBoundSeconds)
            continue;
        const bool registered = std::any_of(snapshot.chains.begin(), snapshot.chains.end(),
            [&](const chaos::DbChain& c) { return c.name == plain.second && c.ownerUid == plain.first; });
        count("plain_chain_unregistered");
        if (!registered)
            found.push_back(chaos::Violation { "plain_chain_unregistered",
                userNameOf(plain.first) + "/" + plain.second,
                "job " + std::to_string(jobId) + " (" + job->second.state + ") started with sbatch --baton="
                    + plain.second + " " + std::to_string(epoch - job->second.start)
                    + " s ago; batond has no such chain" });
    }
}

// The invariants that need both the database and Slurm.
void ChaosTest::checkAgainstSlurm(const Snapshot& snapshot, const std::map<std::int64_t, chaos::SlurmJob>& slurm,
    const std::vector<chaos::Outage>& outages, double at, std::vector<chaos::Violation>& found)
{
    const auto add = [&](std::vector<chaos::Violation> more) {
        found.insert(found.end(), more.begin(), more.end());
    };
    const std::int64_t epoch = epochNow();
    add(chaos::checkOverlaps(snapshot.chains, snapshot.jobs, slurm, epoch, handoverBoundSeconds));
    count("two_trainings");
    add(chaos::checkDuplicateSeq(snapshot.chains, snapshot.jobs, slurm));
    count("duplicate_seq");
    add(chaos::checkForeignJobs(snapshot.chains, snapshot.jobs, slurm));
    count("foreign_job_adopted");
    const auto since = cancelledSince(snapshot, outages, at, epoch);
    add(chaos::checkCancelledChainsQuiet(snapshot.chains, snapshot.jobs, slurm, since, epoch, cancelBoundSeconds));
    count("cancelled_chain_job_runs");
    checkPlainChains(snapshot, slurm, epoch, found);
}

// Progress and pauses, chain by chain.
void ChaosTest::checkChains(const Snapshot& snapshot, const std::vector<chaos::Outage>& outages, double at,
    std::vector<chaos::Violation>& found)
{
    std::set<std::int64_t> hostile;
    std::map<std::int64_t, bool> pauseExpected;
    {
        const std::lock_guard lock(mutex_);
        for (const chaos::DbChain& chain : snapshot.chains) {
            const std::string key = chain.name + "@" + std::to_string(chain.ownerUid);
            if (hostileChains_.contains(key))
                hostile.insert(chain.id);
            pauseExpected[chain.id] = pauseExpected_[key];
        }
    }
    for (const chaos::DbChain& chain : snapshot.chains) {
        chaos::ProgressMarker marker;
        marker.seq = chain.seq;
        if (const auto it = snapshot.dbIteration.find(chain.id); it != snapshot.dbIteration.end())
            marker.iteration = it->second;
        marker.iteration = std::max(marker.iteration, diskIteration(chainDir(userNameOf(chain.ownerUid), chain.name)));
        count("no_progress");
        if (auto stalled = progress_.observe(chain, marker, at, progressBound_, outages, outageGraceSeconds)) {
            if (hostile.contains(chain.id))
                stalled->detail += " (the test fed this chain a hostile input; batond set no quarantine state)";
            found.push_back(*stalled);
        }
        count("unrequested_pause");
        if (auto paused = chaos::checkUnrequestedPause(chain, pauseExpected[chain.id], hostile.contains(chain.id), at)) {
            // Seen twice in a row: a pause the test asked for may reach the database before the
            // test has written down that it asked.
            if (pausedUnexpectedly_.contains(chain.id))
                found.push_back(*paused);
            pausedUnexpectedly_.insert(chain.id);
        } else {
            pausedUnexpectedly_.erase(chain.id);
        }
    }
}

void ChaosTest::readJobOutputs(const std::map<std::int64_t, chaos::SlurmJob>& slurm)
{
    const fs::path work = base_->path() / "work";
    for (const auto& [id, job] : slurm) {
        if (job.start <= 0)
            continue;
        // A job that ended long enough ago (its final lines flushed) is not read again.
        if (outputs_.contains(id) && job.end > 0 && epochNow() - job.end > 10)
            continue;
        std::ifstream in(work / ("job-" + std::to_string(id) + ".out"));
        if (!in)
            continue;
        std::string text((std::istreambuf_iterator<char>(in)), {});
        outputs_[id] = chaos::parseJobOutput(text);
    }
}

// What the jobs say: no restore of bytes another user wrote; no handover TERM late behind another
// owner's calls.
void ChaosTest::checkJobs(const Snapshot& snapshot, const std::map<std::int64_t, chaos::SlurmJob>& slurm,
    std::vector<chaos::Violation>& found)
{
    readJobOutputs(slurm);
    const auto add = [&](std::vector<chaos::Violation> more) {
        found.insert(found.end(), more.begin(), more.end());
    };
    add(chaos::checkRestores(outputs_, slurm, preparedByAnother_, foreignIterationFloor));
    count("foreign_bytes_restored", outputs_.size());
    std::vector<chaos::Disturbance> disturbances;
    {
        const std::lock_guard lock(mutex_);
        disturbances = disturbances_;
        const double offset = static_cast<double>(epochNow()) - now();
        for (const chaos::Outage& outage : outages_)
            disturbances.push_back(chaos::Disturbance { outage.start + offset, outage.end + offset, -1, outage.what });
    }
    std::map<std::int64_t, chaos::JudgedHandover> judged;
    add(chaos::checkHandoverTerms(snapshot.chains, snapshot.jobs, slurm, outputs_, disturbances, epochNow(),
        handoverTermBoundSeconds, outageGraceSeconds, &judged));
    count("handover_term_late", judged.size());
    const std::lock_guard lock(mutex_);
    judgedHandovers_.merge(judged); // the first judgement of each stays: a chain that ends is judged no more
}

void ChaosTest::observeAndCheck()
{
    const std::lock_guard round(observeMutex_);
    const double at = now();
    readLogs();
    readMetrics();
    const bool slurmOk = readSlurm();
    const Snapshot snapshot = readDatabase();
    std::vector<chaos::Outage> outages;
    std::map<std::int64_t, chaos::SlurmJob> slurm;
    std::vector<chaos::TickFailure> failures;
    std::vector<chaos::Reply> replies;
    {
        const std::lock_guard lock(mutex_);
        outages = outages_;
        slurm = slurmJobs_;
        failures = tickFailures_;
        replies = replies_;
    }
    std::vector<chaos::Violation> found;
    const auto add = [&](std::vector<chaos::Violation> more) {
        found.insert(found.end(), more.begin(), more.end());
    };
    add(chaos::checkTickFailures(failures, outages, outageGraceSeconds));
    count("tick_failed");
    add(chaos::checkReplies(replies, outages, outageGraceSeconds));
    count("unclear_refusal", replies.size());
    if (snapshot.dbOk && slurmOk) {
        checkAgainstSlurm(snapshot, slurm, outages, at, found);
        checkJobs(snapshot, slurm, found);
    }
    if (snapshot.dbOk) {
        std::vector<chaos::RefusedCreation> refused;
        {
            const std::lock_guard lock(mutex_);
            refused = refusedCreations_;
        }
        add(chaos::checkRefusedCreations(snapshot.chains, refused));
        count("refused_input_changed_state");
        checkChains(snapshot, outages, at, found);
        const std::lock_guard lock(mutex_);
        lastChains_ = snapshot.chains;
        lastJobs_ = snapshot.jobs;
    }
    addViolations(found, at);
}

void ChaosTest::startObserver()
{
    observer_ = std::thread([this] {
        while (!stopObserver_) {
            try {
                observeAndCheck();
            } catch (const std::exception& error) {
                note(std::string("observer: ") + error.what());
            }
            for (int i = 0; i < 12 && !stopObserver_; ++i)
                std::this_thread::sleep_for(250ms);
        }
    });
}

void ChaosTest::stopObserverThread()
{
    stopObserver_ = true;
    if (observer_.joinable())
        observer_.join();
}

} // namespace baton::chaos::fixture
