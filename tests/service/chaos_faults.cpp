// The faults the chaos test injects, and the requests and files they are made of.
#include "chaos_fixture.hpp"

#include "baton/ckpt/checkpointer.hpp"

#include <dirent.h>

namespace baton::chaos::fixture {

std::optional<chaos::DbChain> ChaosTest::chainRow(const ChainSpec& spec) const
{
    const std::lock_guard lock(mutex_);
    for (const chaos::DbChain& chain : lastChains_)
        if (chain.name == spec.name && chain.ownerUid == static_cast<std::int64_t>(users_[spec.user].uid))
            return chain;
    return std::nullopt;
}

std::vector<chaos::SlurmJob> ChaosTest::chainJobs(const chaos::DbChain& chain, const std::string& state) const
{
    const std::lock_guard lock(mutex_);
    std::vector<chaos::SlurmJob> result;
    for (const auto& [chainId, jobs] : chaos::jobsByChain(lastChains_, lastJobs_, slurmJobs_))
        if (chainId == chain.id)
            for (const auto& job : jobs)
                if (job.job->state == state)
                    result.push_back(*job.job);
    std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.id > b.id; });
    return result;
}

const ChainSpec& ChaosTest::liveTarget(int index) const
{
    for (std::size_t k = 0; k < specs_.size(); ++k) {
        const ChainSpec& candidate = specs_[(static_cast<std::size_t>(index) + k) % specs_.size()];
        if (const auto chain = chainRow(candidate); chain && chaos::isLiveState(chain->state))
            return candidate;
    }
    return specs_[static_cast<std::size_t>(index) % specs_.size()];
}

std::string ChaosTest::key(const ChainSpec& spec) const
{
    return spec.name + "@" + std::to_string(users_[spec.user].uid);
}

void ChaosTest::setPauseExpected(const ChainSpec& spec, bool expected)
{
    const std::lock_guard lock(mutex_);
    pauseExpected_[key(spec)] = expected;
}

void ChaosTest::act(const ChainSpec& spec, const std::string& action, bool asOperator, bool cli)
{
    const User& owner = users_[spec.user];
    const std::string what = std::string(asOperator ? "operator" : owner.name) + " " + action + " "
        + owner.name + "/" + spec.name;
    bool accepted = false;
    if (cli || asOperator) {
        const auto result = ctl(asOperator ? "root" : owner.name, { action, owner.name + "/" + spec.name }, what);
        accepted = result.exitCode == 0;
        note(what + ": batonctl exit " + std::to_string(result.exitCode) + " "
            + result.output.substr(0, 160));
    } else {
        const auto reply = http(owner.uid, "POST", "/v1/chains/" + owner.name + "/" + spec.name + "/" + action,
            "", what);
        accepted = reply.status == 200;
        note(what + ": HTTP " + std::to_string(reply.status) + " " + reply.body.substr(0, 160));
    }
    if (!accepted)
        return;
    if (action == "pause")
        setPauseExpected(spec, true);
    else if (action == "resume" || action == "resubmit")
        setPauseExpected(spec, false);
}

std::string ChaosTest::actionOf(int variant, const ChainSpec& spec) const
{
    static const char* fixed[] = { "resubmit", "resubmit", "pause", "cancel" };
    if (variant % 8 >= 4)
        return fixed[variant % 4];
    const auto chain = chainRow(spec);
    if (!chain || chaos::isLiveState(chain->state))
        return "pause";
    return chain->state == "paused" ? "resume" : "resubmit";
}

void ChaosTest::plantManifest(const ChainSpec& spec, int variant)
{
    const User& owner = users_[spec.user];
    const fs::path dir = chainDir(owner.name, spec.name);
    if (!fs::exists(dir)) {
        note("hostile manifest: " + dir.string() + " does not exist yet; skipped");
        return;
    }
    // A copy of the newest real manifest with one number out of range, in a directory named above
    // every real checkpoint: the plugin reports it as the newest; the checkpointer skips it (its
    // iteration does not match the name, or its region files are missing).
    Json manifest;
    const std::int64_t newest = diskIteration(dir);
    if (newest >= 0) {
        std::ifstream in(dir / baton::contract::checkpointDirName(static_cast<std::uint64_t>(newest)) / "manifest.json");
        manifest = Json::parse(in, nullptr, false);
    }
    if (!manifest.is_object())
        manifest = Json { { "format_version", 1 }, { "iteration", 1 }, { "created_unix", 1.7e9 },
            { "total_bytes", 1 }, { "regions", Json::array() } };
    manifest["final"] = false; // never mistaken for a handover checkpoint or the end of training
    manifest["training_done"] = false;
    const int field = variant % 3;
    if (field == 0)
        manifest["iteration"] = std::numeric_limits<std::int64_t>::max();
    else if (field == 1)
        manifest["created_unix"] = 1e300;
    else
        manifest["total_bytes"] = -5;
    const std::uint64_t iteration = plantedIterationFloor + 999 - static_cast<std::uint64_t>(plantedCount_++);
    const fs::path planted = dir / baton::contract::checkpointDirName(iteration);
    fs::create_directories(planted);
    std::ofstream(planted / "manifest.json") << manifest.dump();
    for (const fs::path& p : { planted, planted / "manifest.json" })
        if (::chown(p.c_str(), owner.uid, owner.uid) != 0)
            note("chown " + p.string() + " failed");
    {
        const std::lock_guard lock(mutex_);
        hostileChains_.insert(key(spec));
    }
    note("hostile manifest in " + planted.string() + ": "
        + (field == 0 ? "iteration=INT64_MAX" : field == 1 ? "created_unix=1e300" : "total_bytes=-5"));
}

void ChaosTest::plantRegistry(const ChainSpec& spec)
{
    const User& owner = users_[spec.user];
    const fs::path dir = chainDir(owner.name, spec.name);
    if (!fs::exists(dir)) {
        note("hostile registry: " + dir.string() + " does not exist yet; skipped");
        return;
    }
    const fs::path registry = dir / ".baton-jobs";
    {
        std::ofstream out(registry, std::ios::app);
        for (int i = 0; i < 20000; ++i)
            out << "not-a-job-" << i << "\n";
    }
    // Then a 64 MiB hole without a newline: read whole, it is one huge line.
    if (::truncate(registry.c_str(), 64 << 20) != 0)
        note("truncate failed");
    if (::chown(registry.c_str(), owner.uid, owner.uid) != 0)
        note("chown failed");
    {
        const std::lock_guard lock(mutex_);
        hostileChains_.insert(key(spec));
    }
    note("hostile registry " + registry.string() + " (20000 garbage lines, 64 MiB)");
}

void ChaosTest::hostileSbatchArgs(const chaos::Fault& fault)
{
    // Options on the command line, and directives in the script that sbatch obeys as well: the deprecated
    // #SLURM magic word, a backslash sbatch drops.
    static const char* forbidden[] = { "--wait", "--test-only", "--uid=0", "--comment=baton:1:1", "--parsable",
        "--help", "#SLURM --wait", "#SBATCH --wa\\it", "#SLURM -W" };
    const std::string arg = forbidden[fault.variant % 9];
    const int user = fault.other % userCount;
    ChainSpec spec { "hostile-args-" + std::to_string(hostileArgsCount_++), user, 3000 };
    Json request = chainRequest(spec, arg.front() == '#' ? std::vector<std::string>() : std::vector<std::string> { arg });
    if (arg.front() == '#') {
        const std::string script = request["script"];
        request["script"] = "#!/bin/bash\n" + arg + "\n" + script.substr(script.find('\n') + 1);
    }
    const auto reply = http(users_[user].uid, "POST", "/v1/chains", request.dump(),
        users_[user].name + " submit chain with " + arg, true);
    note("chain created with " + arg + ": HTTP " + std::to_string(reply.status) + " " + reply.body.substr(0, 200));
    const std::lock_guard lock(mutex_);
    if (reply.status >= 200 && reply.status < 300)
        hostileChains_.insert(key(spec));
    else if (reply.status != 0)
        refusedCreations_.push_back(chaos::RefusedCreation { static_cast<std::int64_t>(users_[user].uid),
            spec.name, now(), "POST /v1/chains with " + arg });
}

void ChaosTest::forgedComment(const ChainSpec& spec, int other)
{
    const auto chain = chainRow(spec);
    if (!chain) {
        note("forged comment: chain " + spec.name + " not registered yet; skipped");
        return;
    }
    std::int64_t nextId = 0;
    {
        const std::lock_guard lock(mutex_);
        for (const auto& c : lastChains_)
            nextId = std::max(nextId, c.id + 1);
    }
    const User& attacker = users_[(spec.user + 1 + other % (userCount - 1)) % userCount];
    for (const std::string& key : { "baton:" + std::to_string(chain->id) + ":" + std::to_string(chain->seq + 1),
             "baton:" + std::to_string(nextId) + ":0" }) {
        const auto submitted = run({ "runuser", "-u", attacker.name, "--", "sbatch", "--parsable", "--time=2",
                                       "--output=/dev/null", "--chdir=/tmp", "--comment=" + key,
                                       "--wrap=sleep 110" },
            60s);
        note("forged --comment=" + key + " by " + attacker.name + ": job " + submitted.output.substr(0, 40));
    }
}

void ChaosTest::plainSbatchChain(const chaos::Fault& fault)
{
    const User& user = users_[fault.other % userCount];
    const std::string name = "plain-" + std::to_string(plainCount_++);
    const fs::path work = base_->path() / "work";
    const fs::path script = work / (name + ".sh");
    std::ofstream(script) << jobScript(2400);
    ::chmod(script.c_str(), 0755);
    const auto submitted = run({ "runuser", "-u", user.name, "--", "sbatch", "--parsable", "--baton=" + name,
                                   "--time=2", "--ntasks=1", "--output=" + (work / "plain-%j.out").string(),
                                   "--chdir=" + work.string(), script.string() },
        60s);
    note("plain sbatch --baton=" + name + " as " + user.name + ": " + submitted.output.substr(0, 100));
    const std::int64_t id = number(submitted.output.substr(0, submitted.output.find_first_of(";\n")));
    if (id > 0) {
        const std::lock_guard lock(mutex_);
        plainJobs_[id] = { user.uid, name };
    }
}

Batond* ChaosTest::leader()
{
    for (int attempt = 0; attempt < 20; ++attempt) {
        for (auto& instance : batonds_)
            if (instance->leading())
                return instance.get();
        std::this_thread::sleep_for(500ms);
    }
    return nullptr;
}

void ChaosTest::beginOutage(const std::string& what)
{
    const std::lock_guard lock(mutex_);
    outages_.push_back(chaos::Outage { now(), 1e18, what });
}

void ChaosTest::endOutage()
{
    const std::lock_guard lock(mutex_);
    outages_.back().end = now();
}

pid_t ChaosTest::slurmctldPid() const
{
    std::ifstream in(slurm_->dir() / "slurmctld.pid");
    pid_t pid = 0;
    in >> pid;
    return pid;
}

// The target chain's job in that state (running or queued), else the next chain's (in index order) that
// has one, cancelled by its owner.
void ChaosTest::userScancel(const chaos::Fault& fault)
{
    const bool current = fault.kind == chaos::FaultKind::UserScancelCurrent;
    for (std::size_t k = 0; k < specs_.size(); ++k) {
        ChainSpec& candidate = specs_[(static_cast<std::size_t>(fault.chain) + k) % specs_.size()];
        const auto chain = chainRow(candidate);
        const auto jobs
            = chain ? chainJobs(*chain, current ? "RUNNING" : "PENDING") : std::vector<chaos::SlurmJob> {};
        if (jobs.empty())
            continue;
        const User& user = users_[candidate.user];
        // The current job is the oldest running one (a successor in handover runs too).
        const chaos::SlurmJob& victim = current ? jobs.back() : jobs.front();
        if (current)
            setPauseExpected(candidate, true); // batond's documented answer to a cancelled running job
        const auto result
            = run({ "runuser", "-u", user.name, "--", "scancel", std::to_string(victim.id) }, 60s);
        note(user.name + " scancel " + (current ? "running" : "queued") + " job " + std::to_string(victim.id)
            + " of " + candidate.name + ": exit " + std::to_string(result.exitCode));
        if (!current && startedBeforeItsEnd(victim.id)) {
            // It started between the queue's snapshot and the scancel: a running job's cancel after all.
            setPauseExpected(candidate, true);
            note("job " + std::to_string(victim.id) + " had started before the scancel: a pause is its answer");
        }
        return;
    }
    note(std::string("scancel: no chain has a ") + (current ? "running" : "queued") + " job");
}

// slurmctld's word, read now: the job ran before it ended (a job cancelled while queued gets its end as
// its start).
bool ChaosTest::startedBeforeItsEnd(std::int64_t jobId)
{
    if (!readSlurm())
        return false;
    const std::lock_guard lock(mutex_);
    const auto job = slurmJobs_.find(jobId);
    return job != slurmJobs_.end() && job->second.start > 0
        && (job->second.end == 0 || job->second.start < job->second.end);
}

// The owner and an operator act on one chain at once.
void ChaosTest::racingActions(const chaos::Fault& fault, const ChainSpec& spec)
{
    const User& owner = users_[spec.user];
    const std::string a = actionOf(fault.variant, spec);
    const std::string b = actionOf(fault.variant / 8 + 3, spec);
    note("race: " + owner.name + " " + a + " against operator " + b + " on " + spec.name);
    std::thread first([&] { act(spec, a, false, (fault.variant / 2) % 2 == 1); });
    std::thread second([&] { act(spec, b, true, true); });
    first.join();
    second.join();
    // Which one won is the database's to say: a pause may be expected whenever one asked for it.
    if (a == "pause" || b == "pause")
        setPauseExpected(spec, true);
}

void ChaosTest::resubmitEndedName(const ChainSpec& spec)
{
    const User& owner = users_[spec.user];
    const auto reply = http(owner.uid, "POST", "/v1/chains", chainRequest(spec).dump(),
        owner.name + " submit again " + spec.name);
    note(owner.name + " submits " + spec.name + " again: HTTP " + std::to_string(reply.status) + " "
        + reply.body.substr(0, 160));
    if (reply.status == 201)
        setPauseExpected(spec, false);
}

void ChaosTest::sleepThrough(const chaos::Fault& fault)
{
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(fault.durationSeconds * 1000)));
}

void ChaosTest::killBatond(const chaos::Fault& fault)
{
    Batond* victim = leader();
    if (!victim) {
        note("no batond is leading");
        victim = batonds_[0].get();
    }
    victim->stop(SIGKILL);
    // Until the restarted instance or the standby leads again (the check adds its grace).
    addDisturbance(fault.durationSeconds, -1, "batond killed");
    note("SIGKILL batond on port " + std::to_string(victim->port()) + ", back in "
        + std::to_string(fault.durationSeconds) + " s");
    sleepThrough(fault);
    victim->start();
}

void ChaosTest::restartPostgres(const chaos::Fault& fault)
{
    const std::string pg = (baton::test::sourceRoot() / "deploy/local/pg.sh").string();
    beginOutage("postgres");
    const auto stopped = run({ "bash", pg, "stop", pg_->dir().string() }, 90s);
    note("PostgreSQL stopped (exit " + std::to_string(stopped.exitCode) + ") for "
        + std::to_string(fault.durationSeconds) + " s");
    sleepThrough(fault);
    const auto started = run({ "bash", pg, "start", pg_->dir().string() }, 90s);
    endOutage();
    note("PostgreSQL started: exit " + std::to_string(started.exitCode));
}

void ChaosTest::stopSlurmctld(const chaos::Fault& fault)
{
    beginOutage("slurmctld");
    const pid_t pid = slurmctldPid();
    if (pid > 0)
        kill(pid, SIGTERM);
    for (int i = 0; i < 100 && pid > 0 && kill(pid, 0) == 0; ++i)
        std::this_thread::sleep_for(100ms);
    note("slurmctld stopped for " + std::to_string(fault.durationSeconds) + " s");
    sleepThrough(fault);
    const auto started = run({ "bash", (baton::test::sourceRoot() / "deploy/local/slurm.sh").string(),
                                 "start", slurm_->dir().string(), plugstack_ },
        120s);
    endOutage();
    note("slurmctld started: exit " + std::to_string(started.exitCode));
}

void ChaosTest::freezeSlurmctld(const chaos::Fault& fault)
{
    beginOutage("slurmctld frozen");
    const pid_t pid = slurmctldPid();
    if (pid > 0)
        kill(pid, SIGSTOP);
    note("slurmctld frozen for " + std::to_string(fault.durationSeconds) + " s");
    sleepThrough(fault);
    if (pid > 0)
        kill(pid, SIGCONT);
    endOutage();
    note("slurmctld thawed");
}

void ChaosTest::addDisturbance(double seconds, std::int64_t uid, const std::string& what)
{
    const auto start = static_cast<double>(epochNow());
    const std::lock_guard lock(mutex_);
    disturbances_.push_back(chaos::Disturbance { start, start + seconds, uid, what });
}

void ChaosTest::prepareOthersLocalDirs()
{
    const User& attacker = users_.back();
    const auto makeOwn = [&](const fs::path& dir) {
        fs::create_directories(dir);
        // Writable by everyone: the victim's jobs could have used it, had the plugin offered it.
        if (::chmod(dir.c_str(), 0777) != 0 || ::chown(dir.c_str(), attacker.uid, attacker.uid) != 0)
            throw std::runtime_error("cannot prepare " + dir.string());
    };
    makeOwn(localRoot() / users_[0].name);
    makeOwn(localRoot() / (attacker.name + "-decoy"));
    const fs::path link = localRoot() / users_[1].name;
    fs::create_symlink(localRoot() / (attacker.name + "-decoy"), link);
    if (::lchown(link.c_str(), attacker.uid, attacker.uid) != 0)
        throw std::runtime_error("cannot chown " + link.string());
    preparedByAnother_ = { users_[0].uid, users_[1].uid };
    note(attacker.name + " made " + users_[0].name + "'s node-local directory, and " + users_[1].name
        + "'s a link to his own");
}

void ChaosTest::foreignLocalCheckpoint(const chaos::Fault& fault)
{
    const User& attacker = users_.back();
    const int victim = fault.other % 2;
    const ChainSpec* target = nullptr;
    for (std::size_t k = 0; k < specs_.size() && !target; ++k) {
        const ChainSpec& spec = specs_[(static_cast<std::size_t>(fault.chain) + k) % specs_.size()];
        if (spec.user == victim)
            target = &spec;
    }
    if (!target)
        return;
    const fs::path dir = (victim == 0 ? localRoot() / users_[0].name : localRoot() / (attacker.name + "-decoy"))
        / target->name;
    const std::uint64_t iteration = foreignIterationFloor + static_cast<std::uint64_t>(foreignCount_++);
    // What the attacker's own program would write with the library: the chain job's one region, each
    // word what that iteration of the chain job holds, so that a restore of it would even verify.
    baton::ckpt::Options options;
    options.chainDir = dir;
    options.keep = 100;
    options.fileMode = 0644;
    options.directIo = false;
    options.jobId = 1;
    options.chainSeq = 0;
    options.log = [](std::string_view) {};
    std::vector<std::uint64_t> weights(1 << 17);
    for (std::size_t i = 0; i < weights.size(); ++i)
        weights[i] = iteration * 1000003u + i;
    bool committed = false;
    {
        baton::ckpt::Checkpointer writer(options);
        writer.registerRegion("weights", weights.data(), weights.size() * sizeof weights[0]);
        committed = writer.checkpointNow(iteration);
    }
    std::error_code error;
    for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error))
        if (::lchown(it->path().c_str(), attacker.uid, attacker.uid) != 0)
            note("chown " + it->path().string() + " failed");
    if (::chown(dir.c_str(), attacker.uid, attacker.uid) != 0)
        note("chown " + dir.string() + " failed");
    note(attacker.name + " planted a valid checkpoint at iteration " + std::to_string(iteration) + " in "
        + dir.string() + " for " + users_[victim].name + "/" + target->name + (committed ? "" : " (NOT committed)"));
}

std::vector<pid_t> ChaosTest::batondChildrenOf(uid_t uid) const
{
    std::set<pid_t> parents;
    for (const auto& instance : batonds_)
        if (const pid_t pid = instance->pid(); pid > 0)
            parents.insert(pid);
    std::vector<pid_t> children;
    std::error_code error;
    for (fs::directory_iterator it("/proc", error), end; !error && it != end; it.increment(error)) {
        const std::string name = it->path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream status(it->path() / "status");
        pid_t parent = 0;
        long realUid = -1;
        for (std::string line; std::getline(status, line);) {
            if (line.rfind("PPid:", 0) == 0)
                parent = static_cast<pid_t>(std::atol(line.c_str() + 5));
            else if (line.rfind("Uid:", 0) == 0)
                realUid = std::atol(line.c_str() + 4);
        }
        if (parents.contains(parent) && realUid == static_cast<long>(uid))
            children.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return children;
}

void ChaosTest::stopOwnersCalls(const chaos::Fault& fault)
{
    const User owner = users_[static_cast<std::size_t>(fault.other) % users_.size()];
    const double until = now() + fault.durationSeconds;
    note("stopping batond's next calls as " + owner.name + " for up to " + std::to_string(static_cast<int>(fault.durationSeconds)) + " s");
    background_.emplace_back([this, owner, until] {
        std::set<pid_t> stopped;
        while (now() < until && !stopObserver_) {
            {
                const std::lock_guard lock(mutex_);
                if (stoppedCalls_[owner.uid] >= maxStoppedCallsPerOwner)
                    return;
            }
            for (const pid_t pid : batondChildrenOf(owner.uid)) {
                if (!stopped.insert(pid).second || ::kill(pid, SIGSTOP) != 0)
                    continue;
                {
                    const std::lock_guard lock(mutex_);
                    ++stoppedCalls_[owner.uid];
                }
                // Until batond kills it at its Slurm timeout, and the owner's next tick has run.
                addDisturbance(static_cast<double>(slurmTimeoutSeconds) + 5, owner.uid, "stopped call of " + owner.name);
                note("SIGSTOP batond's child " + std::to_string(pid) + " running as " + owner.name);
            }
            std::this_thread::sleep_for(20ms);
        }
    });
}

std::optional<std::int64_t> ChaosTest::runningJobOf(const ChainSpec& spec) const
{
    const auto chain = chainRow(spec);
    const auto running = chain ? chainJobs(*chain, "RUNNING") : std::vector<chaos::SlurmJob> {};
    if (running.empty())
        return std::nullopt;
    return running.front().id;
}

void ChaosTest::spoolFlood(const chaos::Fault& fault)
{
    const ChainSpec& spec = liveTarget(fault.chain);
    const User& owner = users_[spec.user];
    const fs::path dir = chainDir(owner.name, spec.name);
    if (!fs::exists(dir)) {
        note("spool flood: " + dir.string() + " does not exist yet; skipped");
        return;
    }
    const std::int64_t jobId = runningJobOf(spec).value_or(1);
    const fs::path spool = dir / ".baton-spool";
    fs::create_directories(spool);
    {
        std::ofstream out(spool / "events.jsonl", std::ios::app);
        for (int i = 0; i < 20000; ++i) {
            const std::uint64_t iteration = plantedIterationFloor + 500 + static_cast<std::uint64_t>(i % 400);
            out << Json { { "job_id", jobId },
                       { "checkpoint", { { "name", baton::contract::checkpointDirName(iteration) },
                                           { "iteration", iteration }, { "created_unix", 1.7e9 + i },
                                           { "total_bytes", 10 }, { "padding", std::string(900, 'x') } } } }
                       .dump()
                << "\n";
        }
    }
    for (const fs::path& p : { spool, spool / "events.jsonl" })
        if (::chown(p.c_str(), owner.uid, owner.uid) != 0)
            note("chown " + p.string() + " failed");
    note("spool flood: 20000 hints of 1 kB for job " + std::to_string(jobId) + " in " + spool.string());
}

void ChaosTest::eventFlood(const chaos::Fault& fault)
{
    const ChainSpec& spec = liveTarget(fault.chain);
    const auto running = runningJobOf(spec);
    if (!running) {
        note("event flood: " + spec.name + " has no running job; skipped");
        return;
    }
    const std::int64_t jobId = *running;
    int accepted = 0;
    int other = 0;
    const int port = apiPort();
    for (int i = 0; i < 1500; ++i) {
        const std::string body = Json { { "version", 2 }, { "kind", "step_start" }, { "chain", spec.name },
            { "job_id", jobId }, { "idempotency_key", std::to_string(jobId) + ".flood." + std::to_string(i) } }
                                     .dump();
        const HttpReply reply = send(port, "POST", "/v1/events", body,
            "MUNGE " + baton::munge::encode(baton::munge::requestPayload("POST", "/v1/events", body)), 10);
        (reply.status == 202 ? accepted : other) += 1;
    }
    note("event flood: 1500 step_start events for job " + std::to_string(jobId) + " of " + spec.name + ": "
        + std::to_string(accepted) + " accepted, " + std::to_string(other) + " not");
}

void ChaosTest::inject(const chaos::Fault& fault)
{
    ChainSpec& spec = specs_[static_cast<std::size_t>(fault.chain) % specs_.size()];
    switch (fault.kind) {
    case chaos::FaultKind::UserScancelCurrent:
    case chaos::FaultKind::UserScancelQueued:
        userScancel(fault);
        return;
    case chaos::FaultKind::OwnerAction:
        act(spec, actionOf(fault.variant, spec), false, (fault.variant / 8) % 2 == 1);
        return;
    case chaos::FaultKind::OperatorAction:
        act(spec, actionOf(fault.variant, spec), true, true);
        return;
    case chaos::FaultKind::RacingActions:
        racingActions(fault, spec);
        return;
    case chaos::FaultKind::ResubmitEndedName:
        resubmitEndedName(spec);
        return;
    case chaos::FaultKind::HostileManifest:
        plantManifest(liveTarget(fault.chain), fault.variant);
        return;
    case chaos::FaultKind::HostileRegistry:
        plantRegistry(liveTarget(fault.chain));
        return;
    case chaos::FaultKind::HostileSbatchArgs:
        hostileSbatchArgs(fault);
        return;
    case chaos::FaultKind::ForgedComment:
        forgedComment(spec, fault.other);
        return;
    case chaos::FaultKind::PlainSbatchChain:
        plainSbatchChain(fault);
        return;
    case chaos::FaultKind::BatondKill:
    case chaos::FaultKind::LeaderFailover:
        killBatond(fault);
        return;
    case chaos::FaultKind::PostgresRestart:
        restartPostgres(fault);
        return;
    case chaos::FaultKind::SlurmctldStop:
        stopSlurmctld(fault);
        return;
    case chaos::FaultKind::SlurmctldFreeze:
        freezeSlurmctld(fault);
        return;
    case chaos::FaultKind::ForeignLocalDir:
        foreignLocalCheckpoint(fault);
        return;
    case chaos::FaultKind::StoppedChild:
        stopOwnersCalls(fault);
        return;
    case chaos::FaultKind::SpoolFlood:
        spoolFlood(fault);
        return;
    case chaos::FaultKind::EventFlood:
        eventFlood(fault);
        return;
    }
}

} // namespace baton::chaos::fixture
