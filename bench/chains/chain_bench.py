#!/usr/bin/python3
"""Chain efficiency measured live: chains of a checkpointing training run on a private multi-node Slurm
(deploy/local/cluster.sh) whose queue is kept busy by a real trace replayed onto it, for baton (each
policy) side by side with the ways people chain jobs today, and beside the simulator's prediction for
the same workload. Prints a table and writes chains.csv, summary.csv and chains.svg (not a timed test).

Time: the trace is replayed SCALE times faster (120: one trace hour is 30 s; a 48 h job holds its nodes
24 min). Slurm's limits have 1-minute granularity, so the chains' jobs have a 2-minute limit (4 trace
hours) and the training needs COMPUTE seconds (300 s in the full run: at least three jobs). Background
jobs keep their trace limit, scaled and rounded up to whole minutes; they run `sleep` for their scaled
run time. The scheduler runs every second, backfill every 2 s (SchedulerParameters below, printed). The
queue is ordered as at a production site: slurmdbd (cluster.sh --accounting) and priority/multifactor by
age, which counts from when a job became eligible (a job held by a dependency gains none while held).

Size: NODES nodes (16); a job's size is scaled from the trace's cluster (ls6: 74 nodes; Lublin: 256
processors) to NODES, at least one node, and a fixed pseudo-random share of the jobs is kept so that the
background offers LOAD of the cluster in the window (the window: the upper quartile of the trace's
second half by offered load): 40 %, so that with the chains' up to 50 % (eight one-node chains at a time)
the queue is offered 90 %, busy but not growing without end.

Arms, each chain one node, whole (--exclusive), the same program (tests/spank_plugin/ckpt_chain_job:
50-ms iterations, baton's checkpointer, resumes from the last checkpoint; iteration counts prove it):
  baton-POLICY  `batonctl submit`, batond with that policy (reactive, avg, predict, checkpoint-aware;
                the learned ones with a predictor fitted by `sim compare` on the trace's 20 days before
                the window, scaled the same way, with the anchors' chains running throughout as other
                users' chains, since a site's history has its chains in it and the trace lacks ours)
  requeue       --requeue --signal=B:USR1@30: the script forwards the signal, the training writes its
                final checkpoint and the job runs `scontrol requeue` on itself (submitit, Lightning)
  singleton     K jobs at once with --dependency=singleton (K = the jobs the training needs, plus one);
                the one that finishes the training cancels the rest
  resubmit      the script runs `sbatch` on itself at its end
  released      (full run; an experiment for baton) each job submits its successor at its start, held
                by --dependency=afterany on it, and removes that dependency 20 s before its limit
  afterany      (experiment, --anchors) the same, never released: the successor starts at the end
Each chain names its own policy (`batonctl submit --policy`), so every arm has one chain in each phase
(a probe moment: four in the full run): every baton policy meets the same queue as every anchor.

Measured per arm, from the jobs' own output (start, restore, final checkpoint, end) and squeue: chain
efficiency (compute = iterations x the training's own pace, over the wall-clock from the first job's
start to the training's end, as the simulator's), interruption at each handover (next start - previous
end, negative: overlap), node-minutes held without training, jobs used, iterations lost; the
background's utilisation and mean wait (scaled back to trace time), and beside it the same background
replayed alone on a cluster of its own (not in --quick): what the chains cost the other users.
The simulator (the same order, by age from eligibility, with backfill, deciding on batond's tick under its
lead floor, by the rules stored with batond's model) predicts each baton chain at the live chain's own
probe: one chain from the moment the live one was submitted, on the replayed background and the other
chains' jobs as they ran (`sim-probe-POLICY.csv`; when each successor was submitted and started, live and
simulated, `sim-probe-POLICY-handovers.csv`); and, for the spread, with a chain from every minute of the
window on the background and the anchors' chains running throughout. Then the simulator replays the live
run's own schedule (every job that started, at its live submission, for as long as it held its nodes) and
its waits are compared with Slurm's, job by job (`sim fit`: `live-jobs.csv`, `residuals.csv`).

Needs root (the cluster, PostgreSQL, users); exits 77 where it cannot run or the traces are absent.
"""

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "deploy", "demo"))
sys.path.insert(0, HERE)
import arms  # noqa: E402
import demo  # noqa: E402  (PostgreSQL, the cluster and batond, started as the tests start them)
import chain_report as report  # noqa: E402
import workload  # noqa: E402

NODES, SCALE, LIMIT_MIN = 16, 120, 2
POLICIES = ["reactive", "avg", "predict", "checkpoint-aware"]
TRACES = ["ls6-a100.log", "lublin_256.swf"]
# The queue's order, as at a production site: an accounting database (slurmdbd; without one Slurm
# ignores the age weight) and priority/multifactor by age alone, recomputed every minute (Slurm's
# shortest period). Age counts from when a job became eligible: a job held by a dependency (singleton,
# a requeued job's wait) gains none until it is released. It saturates at PriorityMaxAge, 7 days scaled
# (84 min). Equal priorities go by job id, i.e. by submission.
MAX_AGE_S = 7 * 86400 // SCALE
SCHEDULER = ["SchedulerParameters=sched_interval=1,bf_interval=2,bf_resolution=60,bf_continue",
             "PriorityType=priority/multifactor", "PriorityWeightAge=100000",
             f"PriorityMaxAge={MAX_AGE_S // 60}", "PriorityCalcPeriod=1"]
# The simulator's same rule: age only (weights age/size/recorded 1000/0/0), from eligibility,
# saturating at MAX_AGE_S; its default backfill, EASY (a run with `--backfill conservative`, which plans
# every blocked job as Slurm's sched/backfill does, fitted this Slurm's schedule no better: README.md).
SIM_AGE = ["--max-age-days", f"{MAX_AGE_S / 86400:.8f}", "--held-age-from", "end"]
SIM_PRIORITY = ["--age-weight", "1000", "--size-weight", "0", "--priority-weight", "0", *SIM_AGE]
PROFILES = {
    # phases: probe moments, each with a chain of every arm; phase_s: the longest a phase waits for its
    # baton chains; tail_s: for every chain still running after the last
    "full": {"traces": TRACES, "policies": POLICIES, "anchors": arms.ANCHORS + ["released"], "compute_s": 300,
             "phases": 4, "phase_s": 480, "tail_s": 240, "warmup_s": 120, "train_days": 20},
    "quick": {"traces": TRACES[:1], "policies": ["checkpoint-aware"], "anchors": arms.ANCHORS, "compute_s": 200,
              "phases": 1, "phase_s": 330, "tail_s": 90, "warmup_s": 120, "train_days": 7},
}
# The queue's load: the background and the chains together offer TOTAL_LOAD of the nodes, busy and
# steady. A phase runs a chain of each of baton's four policies and of the full run's four anchors, one
# node each: up to 8 of the 16 nodes; the background offers the rest (40 %). The same share in the quick
# run (its window's start).
TOTAL_LOAD = 0.9
LOAD = TOTAL_LOAD - (len(PROFILES["full"]["policies"]) + len(PROFILES["full"]["anchors"])) / NODES
SUBMIT_LEAD_S = 20  # batond's floor (deploy/config: 60 s at real scale): 40 trace minutes here
TICK_S = 1  # batond's --tick-seconds (as demo starts it), and the simulator's
HANDOVER_S = 2  # the simulator's price of a handover: a 1 MiB final checkpoint and a restart
# The predictor's training rows: a successor's wait every 30 s of each training probe's predecessor (four
# per probe; one, at the predecessor's start, by sim compare's 3-hour default). Not fitted relative to the
# recent mean wait (`--wait-offset recent`): so fitted, the learned policies submitted every first
# successor at the lead floor here (bench/chains/README.md).
SAMPLE_EVERY_S = 30
# This queue waits longer than a chain job (a successor 2-5 minutes, the limit 2): batond and the simulator
# keep a second successor queued behind a waiting one (`--successors-in-flight 2`).
SUCCESSORS_IN_FLIGHT = 2
SIM_EPOCH = 1893542400  # 2030-01-02 00:00 UTC: the window's start in the simulator's job CSV
SIM_SPLIT = "2030-01-02"
OTHER_CHAIN_JOB_IDS = 10 ** 9  # the other chains' jobs in the simulator's CSV: ids no trace job has
STREAM_JOB_IDS = 2 * 10 ** 9  # and the other chains the predictor is trained with (with_other_chains)
HELD_BY_PREDECESSOR = ("requeue", "singleton", "afterany", "released")
USER = demo.USER


def log(message):
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def trace_dir():
    configured = os.environ.get("BATON_TRACE_DIR")
    return configured or os.path.join(os.path.dirname(ROOT), "shared", "traces")


def sim_common(csv_path, profile, interval_s):
    return ["--trace", csv_path, "--nodes", str(NODES), "--unit", "nodes", "--split", SIM_SPLIT,
            "--limit-hours", f"{LIMIT_MIN / 60:.6f}", "--interval-hours", f"{interval_s / 3600:.6f}",
            "--tick-seconds", str(TICK_S), "--submit-lead-seconds", str(SUBMIT_LEAD_S),
            "--shapes", "1", "--warmup-hours", "0", "--chain-days", f"{profile['compute_s'] / 86400:.8f}",
            "--handover-seconds", str(HANDOVER_S), "--tolerance-seconds", "10",
            "--successors-in-flight", str(SUCCESSORS_IN_FLIGHT), *SIM_PRIORITY]


def sim_policy(batonctl, conninfo, csv_path, profile, policy, interval_s, log_path, handovers=None):
    """`sim run` of one policy with the predictor batond uses and the rules stored with it (as batond
    decides); {chain_efficiency, mean_interruption_s, chains, jobs}, or None. `handovers`: where the
    simulated chains' successors are written (`sim run --handovers`)."""
    argv = [batonctl, "sim", "run", *sim_common(csv_path, profile, interval_s), "--policy", policy,
            "--db-model", "bench", "--database", conninfo] + (["--handovers", handovers] if handovers else [])
    result = demo.run(argv, timeout=600, check=False)
    with open(log_path, "a") as f:
        f.write(" ".join(argv[1:]) + "\n" + result.stdout)
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(policy + " ")]
    if result.returncode != 0 or len(rows) < 2:
        return None
    return {"mean_interruption_s": 60 * float(rows[0][4]), "chains": rows[1][1],
            "chain_efficiency": float(rows[1][2]) / 100, "jobs": rows[1][4]}


def with_other_chains(rows, count):
    """The simulator's job rows and `count` other chains running from the first submission to the last
    job's end (workload.chain_streams)."""
    first, last = min(r[1] for r in rows), max(r[1] + r[2] for r in rows)
    return rows + workload.chain_streams(count, first, last, LIMIT_MIN * 60, STREAM_JOB_IDS)


def simulate(services, load, profile, other_chains, out):
    """The predictor batond's learned policies use: `sim compare` on the scaled jobs of the training
    period and the window with `other_chains` chains running throughout (the anchors' load, which the
    trace does not have and the live queue does), stored as `bench`. Then the simulator's view of the
    whole window: `sim run` of each policy on exactly the jobs the live run replays (the backlog, the
    window) and the same other chains, with a chain from every minute of it. Returns
    {policy: {chain_efficiency, mean_interruption_s, chains}}."""
    batonctl = services.layout.batonctl
    workload.write_job_csv(f"{out}/workload.csv", with_other_chains(load.sim_rows(SIM_EPOCH), other_chains))
    workload.write_job_csv(f"{out}/replayed.csv",
                           with_other_chains(load.sim_rows(SIM_EPOCH, replayed_only=True), other_chains))
    argv = [batonctl, "sim", "compare", *sim_common(f"{out}/workload.csv", profile, profile["phase_s"] / 4),
            "--sample-every-hours", f"{SAMPLE_EVERY_S / 3600:.8f}",
            "--db-save", "bench", "--database", services.conninfo, "--out", f"{out}/sim"]
    log("predictor: " + " ".join(argv[1:]))
    started = time.monotonic()
    result = demo.run(argv, timeout=1200, check=False)
    with open(f"{out}/sim.log", "w") as f:
        f.write(result.stdout)
    if result.returncode != 0:
        log(f"sim compare failed ({result.returncode}); the learned policies run as avg:\n{result.stdout[-2000:]}")
        return {}
    found = {}
    for policy in POLICIES:
        got = sim_policy(batonctl, services.conninfo, f"{out}/replayed.csv", profile, policy, 60, f"{out}/sim.log")
        if got:
            found[policy] = got
    log(f"simulator, whole window: {time.monotonic() - started:.0f} s; {found}")
    return found


class Bench:
    def __init__(self, args, profile, trace_path, out):
        self.args, self.profile, self.out = args, profile, out
        self.trace_path = trace_path
        self.state = demo.make_state("baton-chain-bench-")
        self.services = demo.Services(self.state, demo.Layout.build(args.build_dir))
        self.work = f"{self.state}/work"
        self.chains = []
        self.alone = args.part == "alone"  # the background without chains
        self.anchors = args.anchors.split(",") if args.anchors else profile["anchors"]

    def start(self):
        self.services.start_postgres()
        name, jobs = workload.read_trace(self.services.layout.batonctl, self.services.conninfo, self.trace_path)
        log(f"{name}: {len(jobs)} jobs read")
        # The full run's window and share of the jobs, also in the quick run (which replays its start):
        # a shorter window offers another load, and keeps another share of the backlog.
        full = PROFILES["full"]
        replay_s = full["warmup_s"] + full["phases"] * full["phase_s"] + full["tail_s"]
        self.load = workload.Workload(name, jobs, NODES, SCALE, replay_s * SCALE, full["warmup_s"] * SCALE,
                                      self.profile["train_days"] * 86400, LOAD)
        log(self.load.describe())
        others = len(self.anchors) + len(self.profile["policies"]) - 1  # the chains beside a probe's
        self.sim = {} if self.alone else simulate(self.services, self.load, self.profile, others, self.out)
        workload.ensure_users()
        self.services.start_slurm(NODES, conf_lines=SCHEDULER, accounting=True)
        log(f"{NODES} nodes; slurm.conf adds: {'; '.join(SCHEDULER)}")
        if self.alone:
            return
        self.app, _, _ = demo.stage_app(self.state, self.services.layout)
        self.submitter = arms.Submitter(self.app, self.work, f"{self.state}/chains/anchors", self.args.chain_job,
                                        LIMIT_MIN, demo.as_user, self.services.layout.batonctl,
                                        lambda: self.services.url)
        os.makedirs(f"{self.state}/chains/anchors")
        shutil.chown(f"{self.state}/chains/anchors", USER)

    def start_batond(self):
        """One batond for every policy: each baton chain names its own (`batonctl submit --policy`); the
        learned ones decide with the model `simulate` stored (without one they decide as avg)."""
        demo.stop_process(self.services.batond)
        self.services.start_batond(SUBMIT_LEAD_S, policy="checkpoint-aware",
                                   extra_args=["--successors-in-flight", str(SUCCESSORS_IN_FLIGHT)]
                                   + (["--model", "bench"] if self.sim else []))

    def finished(self, chain):
        return any("training done" in open(p, errors="replace").read()
                   for p in report.glob.glob(f"{self.work}/{chain.name}-*.out"))

    def start_chains(self, phase):
        """A chain of every arm; returns baton's."""
        iterations = int(self.profile["compute_s"] / 0.05)
        per_job = LIMIT_MIN * 60 - arms.MARGIN_S - 15
        # The arms' first jobs are submitted in an order that turns with the phase, by a share of the arms
        # each time: on a full queue the first one submitted gets the first free node.
        order = [f"baton-{policy}" for policy in self.profile["policies"]] + self.anchors
        turn = phase * len(order) // self.profile["phases"]
        order = order[turn:] + order[:turn]
        started = []
        for arm in order:
            chain = arms.Chain(arm, f"{arm}-p{phase}", phase, iterations)
            self.submitter.submit(chain, time.time(), per_job)
            started.append(chain)
        self.chains += started
        log(f"phase {phase}: chains {', '.join(c.name for c in started)}")
        return [c for c in started if c.arm.startswith("baton-")]

    def wait(self, chains, budget_s):
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            if all(self.finished(c) for c in chains):
                return True
            time.sleep(2)
        return False

    def run(self):
        self.poller = workload.Poller(NODES)
        self.poller.start()
        self.origin = time.time()
        self.replay = workload.Replay(self.load, self.origin, log)
        self.replay.start()
        if self.alone:
            # Until the run with the chains has ended (its parent's SIGTERM), or the whole replay.
            log(f"replaying {len(self.load.replayed())} background jobs, no chains")
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait(self.load.span / SCALE)
            self.probes_until = time.time()
            self.stop_polling()
            return
        log(f"replaying {len(self.load.replayed())} background jobs; chains start after {self.profile['warmup_s']} s")
        self.start_batond()
        time.sleep(self.profile["warmup_s"])
        self.probes_from = time.time()
        for phase in range(self.profile["phases"]):
            baton_chains = self.start_chains(phase)
            if not self.wait(baton_chains, self.profile["phase_s"]):
                unfinished = [c.name for c in baton_chains if not self.finished(c)]
                log(f"phase {phase}: {', '.join(unfinished)} unfinished after {self.profile['phase_s']} s")
        # Every chain still running (the anchors, and baton's chains of a phase that ran out of time) gets
        # the tail to finish.
        self.wait(self.chains, self.profile["tail_s"])
        self.probes_until = time.time()
        self.stop_polling()

    def stop_polling(self):
        self.replay.stopping.set()
        self.poller.stopping.set()
        self.poller.join()
        self.poller.poll()

    def write_background(self, path):
        """Each started background job's wait, real seconds, for the comparison with and without chains."""
        waits = self.poller.background_waits(self.origin - 1, self.probes_until)  # squeue's whole seconds
        report.write_csv(path, [{"job": name, "wait_s": wait} for name, wait in sorted(waits.items())])

    def results(self):
        runs = {c.name: report.chain_runs(c, self.work, self.poller) for c in self.chains}
        self.runs = runs  # the simulator's queue takes them (other_chains_jobs)
        iteration_s = report.iteration_seconds([r for rs in runs.values() for r in rs])
        metrics = [report.chain_metrics(c, runs[c.name], iteration_s, self.poller) for c in self.chains]
        order = [f"baton-{p}" for p in self.profile["policies"]] + self.anchors
        summaries = [report.summarise(metrics, arm) for arm in order]
        total, background = self.poller.utilisation(self.probes_from, self.probes_until)
        waits = list(self.poller.background_waits(self.origin - 1, self.probes_until).values())
        pending = sum(1 for j in self.poller.jobs.values() if j["name"].startswith("bg-") and j["state"] == "PENDING")
        facts = {"trace": self.load.name, "iteration_s": iteration_s, "utilisation": total,
                 "background_utilisation": background, "background_jobs": len(self.replay.submitted),
                 "background_started": len(waits), "background_pending_at_end": pending,
                 "background_mean_wait_trace_h": (sum(waits) / len(waits) * SCALE / 3600) if waits else None,
                 "replay_failures": self.replay.failures}
        return metrics, summaries, facts

    def other_chains_jobs(self, probe, sim_time, recorded=False):
        """The jobs of every chain but `probe` as they ran, for the simulator: one 1-node job per run,
        submitted when it was (in the queue's order from then on), holding its node for as long as it
        ran. The arms whose next job waits in the queue for the run before it (requeue: the same job
        again; singleton and the held arms: submitted early, held by a dependency) wait for that run's
        end in the simulator too. `recorded`: with the start each run had (recorded_start). Returns
        (arm, row) pairs."""
        rows = []
        for chain in self.chains:
            if chain is probe:
                continue
            previous = None
            for run in self.runs[chain.name]:
                # A run without a known end held its node until the end of the run, at most its limit.
                end = min(run.end if run.end is not None else self.probes_until, run.start + LIMIT_MIN * 60)
                submitted = self.poller.job(run.job_id).get("submit") or run.start  # whole seconds
                # The first job's submission to the fraction of a second (the arms' first jobs are
                # submitted one after the other in the same second); a requeued job is that job again: its
                # submission (its id, for ties) is the chain's first, its age counts from the run before.
                if previous is None or chain.arm == "requeue":
                    submitted = chain.submitted_at
                row_id = OTHER_CHAIN_JOB_IDS + len(rows)
                after = previous if chain.arm in HELD_BY_PREDECESSOR else None
                rows.append((chain.arm, (row_id, int(sim_time(min(submitted, run.start))),
                                         max(1, round(end - run.start)), LIMIT_MIN * 60, 1, "",
                                         int(sim_time(run.start)) if recorded else "",
                                         "" if after is None else after)))
                previous = row_id
        return rows

    def background_as_submitted(self, epoch, sim_time):
        """The replayed background as the live run submitted it, for the simulator at a live probe: each
        job the replay submitted at its live submission, holding its nodes as long as it did (its
        trace's scaled run time if it had not ended); the jobs the run did not get to, from the trace."""
        live = {trace_id: (slurm_id, at) for slurm_id, (trace_id, at) in self.replay.submitted.items()}
        rows = []
        for job_id, submit, runtime, limit, n in self.load.sim_rows(epoch, replayed_only=True):
            if job_id in live:
                slurm_id, at = live[job_id]
                job = self.poller.job(slurm_id)
                submit = int(sim_time(at))
                if job.get("start") and job.get("end"):
                    runtime = max(1, round(job["end"] - job["start"]))
                    limit = max(limit, runtime)
            rows.append((job_id, submit, runtime, limit, n))
        return rows

    def live_schedule_rows(self):
        """Every job that started in the live run, as the simulator's job CSV rows with the start Slurm
        gave it (recorded_start): background jobs by their Slurm id, the chains' runs as in
        other_chains_jobs. Returns (arm, row) pairs, the arm None for background jobs."""
        rows = []
        for job_id, job in sorted(self.poller.jobs.items()):
            if job["name"].startswith("bg-") and job["submit"] and job["start"] and job["end"] and job["limit"]:
                held = max(1, round(job["end"] - job["start"]))
                rows.append((None, (job_id, int(job["submit"]), held, max(job["limit"], held), job["nodes"], "",
                                    int(job["start"]), "")))
        return rows + self.other_chains_jobs(None, lambda t: t, recorded=True)

    def fidelity(self):
        """The simulator against this run's own schedule: every job that started, submitted when it was
        and holding its node as long as it did, replayed by `sim fit` on the same 12 nodes in the same
        order; the waits it gives against the waits Slurm gave, job by job (TRACE/residuals.csv). Returns
        the best-fit row's figures, or {}."""
        path = f"{self.out}/live-jobs.csv"
        tagged = self.live_schedule_rows()
        workload.write_job_csv(path, [row for _, row in tagged])
        arm_of = {row[0]: arm for arm, row in tagged if arm}
        argv = [self.services.layout.batonctl, "sim", "fit", "--trace", path, "--nodes", str(NODES), "--unit",
                "nodes", "--weights", "1000/0/0", *SIM_AGE, "--warmup-hours", "0",
                "--residuals", f"{self.out}/residuals.csv"]
        result = demo.run(argv, timeout=300, check=False)
        with open(f"{self.out}/sim.log", "a") as f:
            f.write(" ".join(argv[1:]) + "\n" + result.stdout)
        rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] == [str(NODES)]]
        if result.returncode != 0 or not rows:
            return {}
        keys = ["nodes", "neverfit", "age", "size", "prio", "jobs", "median_abs_error_s", "p90_abs_error_s",
                "corr", "log_corr", "live_mean_wait_s", "sim_mean_wait_s"]
        found = dict(zip(keys, (float(v) for v in rows[-1])))
        # The chains' jobs by arm: mean wait from submission, live and simulated.
        by_arm = {}
        with open(f"{self.out}/residuals.csv") as f:
            for row in report.csv.DictReader(f):
                arm = arm_of.get(int(row["id"]))
                if arm:
                    by_arm.setdefault(arm, []).append((float(row["recorded_wait_s"]), float(row["simulated_wait_s"])))
        found["arms"] = {arm: (len(w), sum(a for a, _ in w) / len(w), sum(b for _, b in w) / len(w))
                         for arm, w in by_arm.items()}
        return found

    def simulate_probes(self):
        """The simulator at the live run's own probes: for each baton chain, `sim run` of its policy with
        one chain that starts when the live one was submitted, on the background as the live run
        submitted it and the other chains' jobs as they ran (read by results()). Returns {policy:
        {chain_efficiency, mean_interruption_s, chains, decisions}}, pooled over the policy's chains as
        the live table pools them (the same compute each: Σ compute / Σ elapsed), with each chain's
        successors live and simulated in `decisions`."""
        if not self.sim:  # no predictor was stored (sim compare failed): nothing to compare with
            return {}
        window_start = self.origin + self.load.warmup / SCALE  # real time of the window's first moment
        by_policy = {}
        for chain in self.chains:
            if not chain.arm.startswith("baton-"):
                continue
            policy = chain.arm[len("baton-"):]
            # Simulated time: the chain's submission at SIM_EPOCH, the split, so that its one probe is there.
            shift = chain.submitted_at - window_start
            path = f"{self.out}/sim-probe-{chain.name}.csv"

            def sim_time(t, chain=chain):
                # Whole seconds, rounded up: a job submitted in the same second as the chain but after it
                # (the other arms' first jobs at the phase's start) stays after it in the simulator.
                return math.ceil(SIM_EPOCH + t - chain.submitted_at)
            workload.write_job_csv(path, self.background_as_submitted(SIM_EPOCH - shift, sim_time)
                                   + [row for _, row in self.other_chains_jobs(chain, sim_time)])
            # One probe: the first moment is the split, the next one past the trace's end.
            handovers = f"{self.out}/sim-probe-{chain.name}-handovers.csv"
            got = sim_policy(self.services.layout.batonctl, self.services.conninfo, path, self.profile, policy,
                             1e7, f"{self.out}/sim.log", handovers)
            if got:
                got["decisions"] = (chain.name, self.live_decisions(chain), simulated_decisions(handovers))
                by_policy.setdefault(policy, []).append(got)
        found = {}
        for policy, chains in by_policy.items():
            efficiencies = [c["chain_efficiency"] for c in chains]
            found[policy] = {
                "chain_efficiency": len(efficiencies) / sum(1 / e for e in efficiencies) if all(efficiencies) else 0.0,
                "mean_interruption_s": sum(c["mean_interruption_s"] for c in chains) / len(chains),
                "chains": len(chains), "decisions": [c["decisions"] for c in chains]}
        log(f"simulator, at the live probes: {found}")
        return found

    def live_decisions(self, chain):
        """Each successor of a live chain: (seconds it was submitted before its predecessor's limit,
        seconds from the predecessor's end to its start)."""
        runs = self.runs[chain.name]
        found = []
        for before, after in zip(runs, runs[1:]):
            submitted = self.poller.job(after.job_id).get("submit")
            if submitted is not None and before.end is not None:
                found.append((before.start + LIMIT_MIN * 60 - submitted, after.start - before.end))
        return found

    def write_decisions(self, path):
        """batond's decision rows for baton's chains, with what each policy saw: where a live chain parts
        from the simulator's, these say whether the model, the recent wait or the lead floor decided."""
        fields = ["remaining_s", "recent_mean_wait_s", "predicted_wait_s", "last_successor_wait_s",
                  "queue_pending", "queue_ahead", "free_nodes", "ahead"]
        query = ("SELECT c.name AS chain, round(extract(epoch FROM d.decided_at)::numeric, 1) AS at, d.policy, "
                 "d.action, " + ", ".join(f"d.inputs->>'{k}' AS {k}" for k in fields) + ", d.outcome "
                 "FROM decisions d JOIN chains c ON c.id = d.chain_id ORDER BY c.name, d.decided_at, d.id")
        try:
            out = demo.run(["psql", "-X", "--csv", "-d", self.services.conninfo, "-c", query], timeout=120).stdout
        except Exception as error:  # a diagnostic: the results stand without it
            log(f"decisions not written: {error}")
            return
        with open(path, "w") as f:
            f.write(out)

    def close(self):
        demo.stop_services(self.services, self.args.keep_state, log)


def simulated_decisions(path):
    """The same as Bench.live_decisions for the simulator's one chain, from `sim run --handovers`."""
    try:
        with open(path) as f:
            return [(int(r["predecessor_limit_end"]) - int(r["submitted"]), int(r["started"]) - int(r["predecessor_end"]))
                    for r in report.csv.DictReader(f)]
    except (OSError, KeyError, ValueError):
        return []


def decisions_line(sim):
    """When baton's successors were submitted and how long after their predecessor's end they started,
    live and simulated at the same probe, chain by chain: where the two chains part."""
    def text(pairs):
        return ", ".join(f"{lead:.0f} s before the limit, started {gap:+.0f} s" for lead, gap in pairs) or "none"
    parts = [f"{name}: live {text(live)}; simulated {text(simulated)}"
             for got in sim.values() for name, live, simulated in got.get("decisions", [])]
    return "baton's successors (submitted before the predecessor's limit, start after its end): " + \
        (" | ".join(parts) if parts else "-")


def show(trace, summaries, facts, fidelity, sim, sim_window, out):
    lines = [f"## {trace}",
             f"background: {facts['background_jobs']} jobs replayed ({facts['replay_failures']} sbatch failures); "
             f"during the probes the nodes were {100 * facts['utilisation']:.0f} % held "
             f"({100 * facts['background_utilisation']:.0f} % by background jobs); background mean wait "
             + (f"{facts['background_mean_wait_trace_h']:.2f} trace h" if facts["background_mean_wait_trace_h"]
                is not None else "-")
             + f" over {facts['background_started']} started jobs, {facts['background_pending_at_end']} still pending "
             f"at the end; training pace {1000 * facts['iteration_s']:.1f} ms/iteration", "",
             fidelity_line(fidelity), "", decisions_line(sim), "", report.table(summaries, sim, sim_window)]
    text = "\n".join(lines)
    with open(f"{out}/table.md", "w") as f:
        f.write(text + "\n")
    print(text, flush=True)


def fidelity_line(found):
    if not found:
        return "simulator against this run's schedule: not computed (see sim.log)"
    arms_text = "; ".join(f"{arm} {n} jobs {live:.0f} s live, {sim:.0f} s simulated"
                          for arm, (n, live, sim) in found["arms"].items())
    return (f"simulator against this run's schedule (every started job at its live submission and run time, "
            f"the same order and nodes; `residuals.csv`): {found['jobs']:.0f} jobs, median |wait error| "
            f"{found['median_abs_error_s']:.0f} s, p90 {found['p90_abs_error_s']:.0f} s, correlation of log waits "
            f"{found['log_corr']:.2f}; mean wait {found['live_mean_wait_s']:.0f} s live, "
            f"{found['sim_mean_wait_s']:.0f} s simulated. The chains' jobs: {arms_text}")


def run_trace(args, profile, trace_path, out):
    os.makedirs(out, exist_ok=True)
    bench = Bench(args, profile, trace_path, out)
    started = time.monotonic()
    try:
        bench.start()
        bench.run()
        bench.write_background(f"{out}/background-alone.csv" if args.part == "alone" else f"{out}/background.csv")
        if args.part == "alone":
            return True
        metrics, summaries, facts = bench.results()
        bench.write_decisions(f"{out}/decisions.csv")
        probes = bench.simulate_probes()
        fidelity = bench.fidelity()
    finally:
        bench.close()
    report.write_csv(f"{out}/chains.csv", metrics)
    report.write_csv(f"{out}/summary.csv", [dict(s, trace=facts["trace"], **{
        "sim_efficiency": probes.get(s["arm"][6:], {}).get("chain_efficiency"),
        "sim_window_efficiency": bench.sim.get(s["arm"][6:], {}).get("chain_efficiency")}) for s in summaries])
    report.write_csv(f"{out}/facts.csv", [dict(facts, **{f"sim_fit_{k}": v for k, v in fidelity.items() if k != "arms"})])
    show(facts["trace"], summaries, facts, fidelity, probes, bench.sim, out)
    log(f"{facts['trace']}: {time.monotonic() - started:.0f} s")
    broken = report.broken_arms(metrics)
    for arm in broken:
        print(f"FAIL: {facts['trace']}: arm {arm} did not run (no job of its chains submitted or started)",
              flush=True)
    return not broken


def picture(out, traces):
    groups = []
    for trace in traces:
        path = f"{out}/{trace}/summary.csv"
        if not os.path.exists(path):
            continue
        with open(path) as f:
            rows = list(report.csv.DictReader(f))
        groups.append((trace, [(r["arm"].replace("baton-", ""), float(r["efficiency"]) if r.get("efficiency") else None,
                                float(r["sim_efficiency"]) if r.get("sim_efficiency") else None) for r in rows]))
    report.svg(f"{out}/chains.svg", groups)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--chain-job", required=True, help="tests/spank_plugin/ckpt_chain_job of the build")
    parser.add_argument("--quick", action="store_true", help="one trace, checkpoint-aware and the anchors")
    parser.add_argument("--trace", action="append", help="trace file name(s) in BATON_TRACE_DIR")
    parser.add_argument("--out", default="chain-bench", help="results folder")
    parser.add_argument("--anchors", help="the other arms, comma-separated, instead of the profile's: "
                        f"{', '.join(arms.ANCHORS + arms.HELD)}")
    parser.add_argument("--keep-state", action="store_true")
    parser.add_argument("--part", choices=["chains", "alone"],
                        help="one trace's run for the parent that started it: with the chains, or its background "
                        "alone until SIGTERM")
    args = parser.parse_args()
    unknown = set((args.anchors or "").split(",")) - set(arms.ANCHORS + arms.HELD) - {""}
    if unknown:
        parser.error(f"--anchors: no arm {', '.join(sorted(unknown))}")
    args.build_dir, args.chain_job, args.out = map(os.path.abspath, (args.build_dir, args.chain_job, args.out))
    profile = dict(PROFILES["quick" if args.quick else "full"])
    traces = args.trace or profile["traces"]
    missing = [t for t in traces if not os.path.exists(os.path.join(trace_dir(), t))]
    if missing:
        print(f"chain_bench: SKIP: {', '.join(missing)} not in {trace_dir()} (set BATON_TRACE_DIR)", flush=True)
        return 77
    if os.geteuid() != 0 or not demo.namespaces_work():
        print("chain_bench: SKIP: needs root and network namespaces", flush=True)
        return 77
    if args.part:
        return 0 if run_trace(args, profile, os.path.join(trace_dir(), traces[0]), f"{args.out}/{traces[0]}") else 1
    # The parts' clusters share this machine's munged: deploy/local's scripts start one where none answers,
    # and the part that started it would stop it at its end, under the parts still running. Started here,
    # it outlives them all.
    started_munge = not demo.munge_answers()
    if started_munge:
        demo.run(["bash", "-c", 'die() { echo "$*" >&2; exit 1; }; . "$1"; ensure_munge', "ensure_munge",
                  f"{ROOT}/deploy/local/slurm-common.sh"], timeout=60)
    try:
        return run_parts(args, profile, traces)
    finally:
        if started_munge:
            demo.stop_munged()


def run_parts(args, profile, traces):
    """Every trace's part, side by side; 0 when all of them ran."""
    started = time.monotonic()
    log(f"profile {'quick' if args.quick else 'full'}: {profile}; {NODES} nodes, scale {SCALE}, limit "
        f"{LIMIT_MIN} min, background load {LOAD:.0%}; results in {args.out}")
    os.makedirs(args.out, exist_ok=True)
    for trace in traces:  # a part that fails must leave no earlier run's figures to be read as its own
        shutil.rmtree(f"{args.out}/{trace}", ignore_errors=True)
    workload.ensure_users()  # before the children, which would race to make them
    # Each trace's background also replays alone, on a cluster of its own at the same time, for what the
    # chains cost the other users (not in the quick run, whose 10 minutes it would not fit).
    alone = [] if args.quick else [(trace, child(args, trace, "alone")) for trace in traces]
    if len(traces) == 1:
        ok = run_trace(args, profile, os.path.join(trace_dir(), traces[0]), f"{args.out}/{traces[0]}")
        failed = [] if ok else traces
    else:
        # The traces run side by side, each in a process of its own (its own SLURM_CONF) with its own
        # cluster, PostgreSQL and batond.
        chains = [(trace, child(args, trace, "chains")) for trace in traces]
        failed = [trace for trace, process in chains if process.wait() != 0]
    for trace, process in alone:
        process.terminate()  # the run with the chains has ended: the comparison stops here
        if process.wait() != 0:
            failed.append(f"{trace} (alone)")
    for trace in traces:
        table = f"{args.out}/{trace}/table.md"
        if os.path.exists(table) and not args.quick:
            with open(table, "a") as f:
                f.write(report.background_cost(f"{args.out}/{trace}", SCALE) + "\n")
        print(open(table).read() if os.path.exists(table) else f"## {trace}: no result", flush=True)
    picture(args.out, traces)
    log(f"done in {time.monotonic() - started:.0f} s; {args.out}/chains.svg")
    for trace in failed:
        print(f"FAIL: {trace}: see its log in {args.out}", flush=True)
    return 1 if failed else 0


def child(args, trace, kind):
    """This script for one trace in a process of its own; its log goes to OUT/TRACE-KIND.log."""
    argv = [sys.executable, os.path.abspath(__file__), "--build-dir", args.build_dir, "--chain-job",
            args.chain_job, "--trace", trace, "--out", args.out, "--part", kind] + (["--anchors", args.anchors] if args.anchors else []) + (["--quick"] if args.quick else []) \
        + (["--keep-state"] if args.keep_state else [])
    with open(f"{args.out}/{trace}-{kind}.log", "w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    log(f"{trace}: {kind}, log in {args.out}/{trace}-{kind}.log")
    return process


if __name__ == "__main__":
    sys.exit(main())
