// slurmstepd: sets the BATON_* environment for the step's tasks and reports step start and the end of
// the step's tasks on this node. Everything that touches the chain directory runs with the job user's
// credentials; only the MUNGE credential that signs an event is made as root, so that batond can tell
// the plugin's events from anything the user could send.
//
// Where the reports run (Slurm 22.05, src/slurmd/slurmstepd/mgr.c): slurm_spank_user_init runs in
// slurmstepd after _drop_privileges() has set the effective uid, gid and groups to the job user's
// (real and saved uid stay 0); slurm_spank_task_exit and slurm_spank_exit run after
// _reclaim_privileges(), as root. step_start stays in user_init, the one callback that runs once per
// step and node before the tasks start and whose environment changes reach them
// (task_init_privileged runs once per task, in the task's own process), and the signing regains root
// on the plugin's thread only (signEventAsRoot), which the saved uid 0 allows in every callback.
#include "chain_files.hpp"
#include "common/baton_contract.hpp"
#include "contexts.hpp"
#include "credentials.hpp"
#include "event.hpp"
#include "options.hpp"
#include "paths.hpp"

extern "C" {
#include <slurm/slurm.h>

#include <cstdlib>
}

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace baton::spank {

namespace {

// What user_init learned, for the task-exit reports of the same step.
struct StepState {
    std::uint32_t jobId = 0;
    int requeueCount = 0;
    std::string step;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
    ChainLocation location;
    // Two-level storage: the chain's node-local directory (BATON_LOCAL_DIR; empty when refused) and the
    // administrator's part of local_root, where the trusted walk to it starts.
    std::string localDir;
    std::string localRoot;
    int chainSeq = 0; // the job's position in its chain (BATON_CHAIN_SEQ)
    std::optional<std::int64_t> deadline;
    std::optional<HttpUrl> url;
    std::string node;
    std::optional<std::uint32_t> tasks; // the step's task count
    std::optional<std::uint32_t> localTasks; // the step's tasks on this node
};

// The ends of this node's tasks, reported in one task_exit event when the last of them has ended (or
// at slurm_spank_exit, if some never did): slurmstepd calls task_exit once per task, one after the
// other, and a report each would hold up the step's end by a report_timeout per task.
struct TaskExits {
    std::uint32_t seen = 0;
    std::optional<std::uint32_t> task; // the reported one: the first that failed, else the last
    std::optional<int> waitStatus;
    bool failed = false;
    bool reported = false;

    void add(std::optional<std::uint32_t> id, std::optional<int> status)
    {
        ++seen;
        if (failed) {
            return;
        }
        task = id;
        waitStatus = status;
        failed = status && (WIFSIGNALED(*status) || (WIFEXITED(*status) && WEXITSTATUS(*status) != 0));
    }
};

TaskExits& taskExits()
{
    static TaskExits exits;
    return exits;
}

// One per slurmstepd: a batond found unreachable is not waited for again by the next report at once.
DeliveryBreaker& breaker()
{
    static DeliveryBreaker breaker;
    return breaker;
}

std::optional<StepState>& stepState()
{
    static std::optional<StepState> state;
    return state;
}

// Set when user_init refused the step; task_init then fails every task with this message. (Failing
// user_init itself makes Slurm 22.05 record the job as COMPLETED with exit code 0.)
std::optional<std::string>& refusal()
{
    static std::optional<std::string> message;
    return message;
}

std::string stepName(std::uint32_t stepId)
{
    switch (stepId) {
    case SLURM_BATCH_SCRIPT:
        return "batch";
    case SLURM_INTERACTIVE_STEP:
        return "interactive";
    default:
        return std::to_string(stepId);
    }
}

std::optional<std::string> jobEnv(spank_t sp, const char* name)
{
    char buffer[4096];
    const spank_err_t rc = spank_getenv(sp, name, buffer, sizeof buffer);
    if (rc != ESPANK_SUCCESS) {
        if (rc != ESPANK_ENV_NOEXIST) {
            spankOk(rc, "spank_getenv");
        }
        return std::nullopt;
    }
    return std::string(buffer);
}

bool setJobEnv(spank_t sp, const char* name, const std::string& value)
{
    return spankOk(spank_setenv(sp, name, value.c_str(), 1), "spank_setenv");
}

std::string formatNumber(double value)
{
    char text[64];
    std::snprintf(text, sizeof text, "%g", value);
    return text;
}

// SLURM_JOB_END_TIME of the job's environment, if set and well-formed.
std::optional<std::int64_t> endTimeFromEnv(spank_t sp)
{
    const auto fromEnv = jobEnv(sp, "SLURM_JOB_END_TIME");
    if (!fromEnv) {
        return std::nullopt;
    }
    try {
        return std::stoll(*fromEnv);
    } catch (const std::exception&) {
        logVerbose("ignoring malformed SLURM_JOB_END_TIME '" + *fromEnv + "'");
        return std::nullopt;
    }
}

// The job's end time. Slurm 23.02 and later give SLURM_JOB_END_TIME to the tasks; it may not be in the
// environment yet in user_init, and there a call to slurmctld from inside slurmstepd is fatal (24.11:
// "auth_g_create: pthread_rwlock_rdlock(): Resource deadlock avoided"), so task_init sets the deadline
// then. 22.05 has no such variable: the end time is asked from slurmctld (slurm_get_end_time is part
// of the library slurmstepd runs with).
std::optional<std::int64_t> jobEndTime(spank_t sp, [[maybe_unused]] std::uint32_t jobId)
{
    if (const auto end = endTimeFromEnv(sp)) {
        return end;
    }
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
    return std::nullopt;
#else
    time_t end = 0;
    if (slurm_get_end_time(jobId, &end) != 0) {
        const int error = errno;
        logError("cannot get the end time of job " + std::to_string(jobId)
            + " from slurmctld: " + slurm_strerror(error) + "; BATON_DEADLINE is not set");
        return std::nullopt;
    }
    // A job without a time limit has no deadline.
    if (end <= 0 || end >= static_cast<time_t>(INFINITE)) {
        return std::nullopt;
    }
    return static_cast<std::int64_t>(end);
#endif
}

// Slurm's name of this node, the same in every step of the job: a batch step's environment has no
// SLURMD_NODENAME yet when user_init runs, but the batch script always runs on the allocation's first
// node. The host name (which may differ from Slurm's node name) is the last resort.
std::string nodeName(spank_t sp)
{
    if (const auto name = jobEnv(sp, "SLURMD_NODENAME")) {
        return *name;
    }
    if (const auto nodes = jobEnv(sp, "SLURM_JOB_NODELIST")) {
        if (auto list = slurm_hostlist_create(nodes->c_str())) {
            char* first = slurm_hostlist_shift(list);
            std::string name = first != nullptr ? first : "";
            std::free(first);
            slurm_hostlist_destroy(list);
            if (!name.empty()) {
                return name;
            }
        }
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return host;
}

bool readIds(spank_t sp, StepState& state)
{
    gid_t* groups = nullptr;
    int groupCount = 0;
    if (!spankOk(spank_get_item(sp, S_JOB_UID, &state.uid), "spank_get_item(S_JOB_UID)")
        || !spankOk(spank_get_item(sp, S_JOB_GID, &state.gid), "spank_get_item(S_JOB_GID)")
        || !spankOk(spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &groups, &groupCount),
            "spank_get_item(S_JOB_SUPPLEMENTARY_GIDS)")) {
        return false;
    }
    state.groups.assign(groups, groups + (groups ? groupCount : 0));
    return true;
}

// SLURM_RESTART_COUNT: how often Slurm requeued the job (0 when unset).
int requeueCountOf(spank_t sp)
{
    const auto text = jobEnv(sp, "SLURM_RESTART_COUNT");
    if (!text) {
        return 0;
    }
    try {
        const int count = std::stoi(*text);
        if (count >= 0) {
            return count;
        }
    } catch (const std::exception&) { }
    logVerbose("ignoring malformed SLURM_RESTART_COUNT '" + *text + "'");
    return 0;
}

// Builds the event with the newest checkpoint and delivers it. Never fails the step: a report that can
// neither be posted nor spooled is logged. Reading the chain directory and spooling run as the job
// user; the credential is made in between as root (munged states the uid of the thread that asks), in
// user_init as in the task callbacks.
void report(const StepState& state, StepEvent event)
{
    try {
        const PluginConfig& config = pluginConfig();
        std::optional<ChainDir> dir;
        {
            ThreadCredentials asUser(state.uid, state.gid, state.groups);
            dir.emplace(openChainDir(state.location.dir, state.location.prefix, state.uid));
            std::vector<std::string> skipped;
            event.checkpoint = newestCheckpoint(dir->fd.get(), {}, &skipped);
            for (const auto& why : skipped) {
                logError("job " + std::to_string(state.jobId) + ": chain " + state.location.chain
                    + ": not reporting checkpoint " + why);
            }
            // The node-local level, for the operator's eye only: batond counts the chain's copies.
            if (!state.localDir.empty()) {
                try {
                    const ChainDir local = openChainDir(state.localDir, state.localRoot, state.uid);
                    std::vector<std::string> ignored;
                    event.localCheckpoint = newestCheckpoint(local.fd.get(), {}, &ignored);
                } catch (const std::exception& e) {
                    logVerbose("job " + std::to_string(state.jobId) + ": node-local directory not read: " + e.what());
                }
            }
        }
        event.jobId = state.jobId;
        event.requeueCount = state.requeueCount;
        event.step = state.step;
        event.chain = state.location.chain;
        event.chainDir = state.location.dir;
        event.node = state.node;
        event.tasks = state.tasks;
        event.chainSeq = state.chainSeq;
        event.deadlineUnix = state.deadline;
        event.timeUnix
            = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        // Signing and posting share one report_timeout.
        const auto start = std::chrono::steady_clock::now();
        const SignedEvent signedEvent
            = signEventAsRoot(eventJson(event), state.url, start + config.reportTimeout);
        if (!signedEvent.signError.empty()) {
            logError(event.kind + " report of job " + std::to_string(state.jobId)
                + " not signed, spooling it: " + signedEvent.signError);
        }
        const auto left = std::max(std::chrono::milliseconds(0),
            config.reportTimeout
                - std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start));
        ThreadCredentials asUser(state.uid, state.gid, state.groups);
        const auto delivered
            = deliverEvent(signedEvent, state.url, dir->fd.get(), left, config.reportTimeout, &breaker());
        if (delivered.how == Delivery::Spooled && !delivered.postError.empty()
            && signedEvent.signError.empty()) {
            logVerbose("batond unreachable (" + delivered.postError + "), " + event.kind + " event spooled");
        }
    } catch (const std::exception& e) {
        logError(event.kind + " report of job " + std::to_string(state.jobId) + ": " + e.what());
    }
}

} // namespace

namespace {

// Prepares the step; throws with the reason when the step must be refused.
void prepareStep(spank_t sp)
{
    if (const auto& error = configError()) {
        throw std::runtime_error(*error);
    }
    StepState state;
    std::uint32_t stepId = 0;
    if (!spankOk(spank_get_item(sp, S_JOB_ID, &state.jobId), "spank_get_item(S_JOB_ID)")
        || !spankOk(spank_get_item(sp, S_JOB_STEPID, &stepId), "spank_get_item(S_JOB_STEPID)")
        || !readIds(sp, state)) {
        throw std::runtime_error("the job's ids are not available");
    }
    if (stepId == SLURM_EXTERN_CONT) {
        return;
    }
    state.step = stepName(stepId);
    state.node = nodeName(sp);
    if (std::uint32_t tasks = 0;
        spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &tasks) == ESPANK_SUCCESS && tasks > 0) {
        state.tasks = tasks;
    }
    if (std::uint32_t tasks = 0;
        spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &tasks) == ESPANK_SUCCESS && tasks > 0) {
        state.localTasks = tasks;
    }
    state.requeueCount = requeueCountOf(sp);
    const PluginConfig& config = pluginConfig();
    const UserInfo user = lookupUser(state.uid);
    state.location
        = resolveChainLocation(batonOptions(), config, user, jobEnv(sp, "SLURM_JOB_NAME").value_or(""));
    {
        ThreadCredentials asUser(state.uid, state.gid, state.groups);
        const ChainDir dir = openChainDir(state.location.dir, state.location.prefix, state.uid);
        // Registered either way: a job submitted without a seq (by hand) counts the jobs before it.
        const int started = registerJob(dir.fd.get(), std::to_string(state.jobId), config.reportTimeout);
        state.chainSeq = batonOptions().seq.value_or(started);
        if (dir.created) {
            logVerbose("created chain directory " + dir.path);
        }
    }
    if (!config.url.empty()) {
        state.url = parseHttpUrl(config.url);
    }
    if (!config.localRoot.empty()) {
        // Opened as the chain directory is, from the administrator's part of local_root: on a scratch
        // disk every user writes to, a directory on the way that another user made first would let them
        // replace this chain's checkpoints. Refused, the job checkpoints to the chain directory alone.
        state.localRoot = administratorPart(config.localRoot);
        const std::string localDir
            = normalizeAbsolutePath(expandUserPattern(config.localRoot, user, &state.node)) + "/" + state.location.chain;
        try {
            ThreadCredentials asUser(state.uid, state.gid, state.groups);
            openChainDir(localDir, state.localRoot, state.uid);
            state.localDir = localDir;
        } catch (const std::exception& e) {
            logError("job " + std::to_string(state.jobId) + ": node-local directory not used, checkpointing to "
                + "the chain directory only: " + e.what());
        }
    }
    state.deadline = jobEndTime(sp, state.jobId);
    const BatonOptions& options = batonOptions();
    const int handoverWait = options.handoverWaitSeconds.value_or(config.handoverWaitSeconds);
    const bool set = setJobEnv(sp, contract::kChainVar, state.location.chain)
        && setJobEnv(sp, contract::kChainDirVar, state.location.dir)
        && setJobEnv(sp, contract::kJobIdVar, std::to_string(state.jobId))
        && setJobEnv(sp, contract::kChainSeqVar, std::to_string(state.chainSeq))
        && setJobEnv(sp, contract::kLegacyRestartCountVar, std::to_string(state.chainSeq))
        && (!state.deadline || setJobEnv(sp, contract::kDeadlineVar, std::to_string(*state.deadline)))
        && setJobEnv(sp, contract::kDeadlineMarginVar,
            std::to_string(options.marginSeconds.value_or(config.marginSeconds)))
        && setJobEnv(sp, contract::kOverheadVar,
            formatNumber(options.overheadPercent.value_or(config.overheadPercent)))
        && setJobEnv(sp, contract::kKeepVar, std::to_string(config.keep))
        // Only a successor can have a predecessor still writing its final checkpoint.
        && (state.chainSeq == 0 || handoverWait == 0
            || setJobEnv(sp, contract::kHandoverWaitVar, std::to_string(handoverWait)))
        && (config.url.empty() || setJobEnv(sp, contract::kProvisionerUrlVar, config.url))
        && (state.localDir.empty()
            || (setJobEnv(sp, contract::kLocalDirVar, state.localDir)
                && setJobEnv(sp, contract::kLocalKeepVar, std::to_string(config.localKeep))
                && setJobEnv(sp, contract::kDrainRateVar, std::to_string(config.drainRateMBps))));
    if (!set) {
        throw std::runtime_error("cannot set the BATON_* environment");
    }
    stepState() = state;
    StepEvent event;
    event.kind = "step_start";
    report(state, event);
}

void reportTaskExits(const StepState& state)
{
    TaskExits& exits = taskExits();
    exits.reported = true;
    StepEvent event;
    event.kind = "task_exit";
    event.task = exits.task;
    event.waitStatus = exits.waitStatus;
    event.tasksExited = exits.seen;
    report(state, event);
}

} // namespace

int remoteUserInit(spank_t sp)
{
    if (!batonOptions().enabled) {
        return 0;
    }
    // Never fail here: a failed user_init of a batch step makes Slurm 22.05 drain the node and record
    // the job as COMPLETED. The refusal fails every task in task_init instead.
    try {
        prepareStep(sp);
    } catch (const std::exception& e) {
        std::uint32_t jobId = 0;
        spankOk(spank_get_item(sp, S_JOB_ID, &jobId), "spank_get_item(S_JOB_ID)");
        refusal() = "job " + std::to_string(jobId) + " refused: " + e.what();
        logError(*refusal());
    }
    return 0;
}

int remoteTaskInit(spank_t sp)
{
    if (!refusal()) {
        // The deadline that user_init could not see yet (Slurm 23.02+: SLURM_JOB_END_TIME is the
        // task's). A job without a time limit has none.
        if (stepState() && !stepState()->deadline) {
            if (const auto end = endTimeFromEnv(sp); end && *end > 0 && *end < static_cast<std::int64_t>(INFINITE)) {
                setJobEnv(sp, contract::kDeadlineVar, std::to_string(*end));
            }
        }
        return 0;
    }
    // In the task's process, before exec: stderr is the task's, so the user sees why it failed.
    const std::string line = "baton: " + *refusal() + "\n";
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, line.data(), line.size());
    return -1;
}

int remoteTaskExit(spank_t sp)
{
    const auto& state = stepState();
    if (!state) {
        return 0;
    }
    std::optional<std::uint32_t> task;
    std::optional<int> status;
    if (std::uint32_t id = 0;
        spankOk(spank_get_item(sp, S_TASK_GLOBAL_ID, &id), "spank_get_item(S_TASK_GLOBAL_ID)")) {
        task = id;
    }
    if (int wait = 0;
        spankOk(spank_get_item(sp, S_TASK_EXIT_STATUS, &wait), "spank_get_item(S_TASK_EXIT_STATUS)")) {
        status = wait;
    }
    TaskExits& exits = taskExits();
    exits.add(task, status);
    // Without a local task count each end is reported (the same key: batond keeps the first).
    if (state->localTasks && exits.seen < *state->localTasks) {
        return 0;
    }
    reportTaskExits(*state);
    return 0;
}

int remoteExit(spank_t)
{
    // Tasks that never started, or a step torn down early: the step's end is still reported once.
    if (stepState() && !taskExits().reported) {
        reportTaskExits(*stepState());
    }
    return 0;
}

} // namespace baton::spank
