"""The background workload of the chain benchmark: a trace's jobs, read by the trace readers
(`batonctl trace import` into the benchmark's PostgreSQL), scaled in size to the cluster's nodes and in
time by a factor, thinned to a stated offered load, replayed onto Slurm by background users as `sleep`
jobs that hold their nodes; and a poller that records what squeue says of every job."""

import math
import os
import pwd
import re
import threading
import time

from demo import run  # deploy/demo, on the path that chain_bench.py sets

BACKGROUND_USERS = ["batonbg1", "batonbg2", "batonbg3"]
# The units a trace's cluster has: ls6's fitted node count (provisioner/sim/README.md), the Lublin
# model's 256 processors; any other trace: its largest job.
TRACE_UNITS = {"ls6-a100.log": 74, "lublin_256.swf": 256}
CANDIDATE_STEP_S = 6 * 3600  # window starts tried, in trace seconds


def ensure_users():
    """The background users, made as system users the way the tests make theirs, if absent."""
    for name in BACKGROUND_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=False)
            pwd.getpwnam(name)


def read_trace(batonctl, conninfo, path):
    """(job id, submit, run time, limit, units, recorded start or None) of every job that ran, through
    batonctl's readers."""
    name = os.path.basename(path)
    run([batonctl, "trace", "import", path, "--name", name, "--replace", "--database", conninfo], timeout=600)
    query = ("SELECT j.job_id, extract(epoch FROM j.submit_time)::bigint, j.run_time_s, "
             "coalesce(j.time_limit_s, j.requested_time_s, j.run_time_s), "
             "CASE WHEN t.format = 'swf' THEN coalesce(j.requested_procs, j.nodes) ELSE j.nodes END, "
             "coalesce(extract(epoch FROM j.start_time)::bigint, -1) "
             "FROM trace_jobs j JOIN traces t ON t.id = j.trace_id "
             f"WHERE t.name = '{name}' AND j.run_time_s > 0 ORDER BY j.submit_time, j.job_id")
    out = run(["psql", "-X", "-A", "-t", "-F", ",", "-d", conninfo, "-c", query], timeout=300).stdout
    jobs = []
    for line in out.splitlines():
        words = line.split(",")
        if len(words) == 6 and all(w.strip().lstrip("-").isdigit() for w in words):
            job_id, submit, runtime, limit, units, start = map(int, words)
            jobs.append((job_id, submit, runtime, max(limit, runtime), max(units, 1), start if start >= 0 else None))
    return name, jobs


def kept(job_id, fraction):
    """A fixed pseudo-random share of the jobs, the same in every run."""
    return ((job_id * 2654435761) % (1 << 32)) / float(1 << 32) < fraction


class Workload:
    """The scaled background: `window` trace seconds from `start`, `warmup` trace seconds before it,
    `train` trace seconds before that for the predictor (simulator only)."""

    def __init__(self, name, jobs, nodes, scale, span_s, warmup_s, train_s, load):
        self.name, self.nodes, self.scale = name, nodes, scale
        units = TRACE_UNITS.get(name) or max(j[4] for j in jobs)
        self.units = units
        self.span, self.warmup, self.train = span_s, warmup_s, train_s
        sized = [(i, s, r, lim, min(nodes, max(1, round(u * nodes / units)))) for i, s, r, lim, u, _ in jobs
                 if u <= units]
        self.started = {j[0]: j[5] for j in jobs}
        self.start, offered = self.choose_window(sized)
        self.fraction = min(1.0, load / offered) if offered > 0 else 1.0
        self.offered = offered
        first = self.start - warmup_s - train_s
        self.jobs = [j for j in sized if first - 2 * 86400 <= j[1] < self.start + span_s and kept(j[0], self.fraction)]

    def choose_window(self, sized):
        """The window of the trace's second half whose offered load (scaled node-seconds over its span)
        is the upper quartile's: a busy queue, not the trace's single worst flood. Its warm-up has jobs
        (the Lublin model's nights have none)."""
        first, last = sized[0][1], sized[-1][1]
        earliest = max(first + self.train + self.warmup, first + (last - first) // 2)
        scored = []
        t = earliest
        while t + self.span <= last:
            work = sum(n * min(r, t + self.span - s) for _, s, r, _, n in sized if t <= s < t + self.span)
            if any(t - self.warmup <= s < t for _, s, _, _, _ in sized):
                scored.append((work / (self.nodes * self.span), t))
            t += CANDIDATE_STEP_S
        if not scored:
            raise RuntimeError(f"{self.name}: too short for a window of {self.span / 3600:.0f} trace hours")
        scored.sort()
        load, start = scored[(3 * len(scored)) // 4]
        return start, load

    def real(self, trace_time, origin):
        """Real time of a trace moment, the replay's start (trace: start - warmup) being `origin`."""
        return origin + (trace_time - (self.start - self.warmup)) / self.scale

    def replayed(self):
        """The backlog at the replay's start, submitted then, and the jobs submitted after it."""
        return self.backlog() + [j for j in self.jobs if j[1] >= self.start - self.warmup]

    def backlog(self):
        """The kept jobs of the two trace days before the replay's start that were still pending or
        running then: with their recorded start (ls6), those not yet started and those running, with
        what was left of their run; without one (Lublin), those whose run would not have ended even
        had they started at once. All are submitted at the replay's start, in their trace order."""
        origin = self.start - self.warmup
        jobs = []
        for job_id, submit, runtime, limit, n in self.jobs:
            if not origin - 2 * 86400 <= submit < origin:
                continue
            start = self.started.get(job_id)
            if start is not None and start < origin:
                left = start + runtime - origin
                if left > 0:
                    jobs.append((job_id, origin, left, limit - (origin - start), n))
            elif start is not None or submit + runtime > origin:
                jobs.append((job_id, origin, runtime if start is not None else submit + runtime - origin, limit, n))
        return jobs

    def sim_rows(self, epoch, replayed_only=False):
        """The simulator's job rows (id, submit, run time, limit, nodes) in real (scaled) seconds, the
        window starting at `epoch`: with the training period, or only the jobs the live run replays."""
        rows = []
        for job_id, submit, runtime, limit, n in (self.replayed() if replayed_only else self.jobs):
            at = epoch + (submit - self.start) / self.scale
            rt = max(1, round(runtime / self.scale))
            lim = 60 * max(1, math.ceil(limit / self.scale / 60))
            rows.append((job_id, int(at), rt, max(lim, rt), n))
        return rows

    def describe(self):
        return (f"{self.name}: window {time.strftime('%Y-%m-%d %H:%M', time.gmtime(self.start))} UTC + "
                f"{self.span / 3600:.0f} trace h (warm-up {self.warmup / 3600:.1f} h before), offered "
                f"load {100 * self.offered:.0f} % of {self.nodes} nodes (sizes x {self.nodes}/{self.units}), "
                f"{100 * self.fraction:.0f} % of its jobs kept: {len(self.replayed())} jobs replayed "
                f"({len(self.backlog())} of them the backlog at its start), "
                f"{len(self.jobs)} with the training period")


def chain_streams(count, first, last, limit_s, first_id):
    """`count` chains of other users running throughout [first, last), as the simulator's job rows:
    1-node jobs of the chains' limit one after another, each held by a dependency on the one before, so
    that it becomes eligible (and starts ageing) at that job's end, as a resubmitted or requeued job does.
    The queue a site's history records has its chains in it; the trace's does not have the benchmark's."""
    rows, job_id = [], first_id
    for _ in range(count):
        previous, t = "", first
        while t < last:
            rows.append((job_id, first, limit_s, limit_s, 1, "", "", previous))
            previous, job_id, t = job_id, job_id + 1, t + limit_s
    return rows


def write_job_csv(path, rows):
    """The simulator's job CSV (id, submit, run time, limit, nodes[, priority, recorded start, after])."""
    with open(path, "w") as f:
        f.write("id,submit,run_time,limit,nodes,priority,recorded_start,after\n")
        for row in rows:
            f.write(",".join(str(v) for v in row) + "\n")


class Replay(threading.Thread):
    """Submits the window's jobs at their scaled submit times, as the background users."""

    def __init__(self, workload, origin, log):
        super().__init__(daemon=True)
        self.workload, self.origin, self.log = workload, origin, log
        self.submitted = {}  # Slurm job id -> (trace job id, real submit)
        self.stopping = threading.Event()
        self.failures = 0

    def run(self):
        for job_id, submit, runtime, limit, n in self.workload.replayed():
            due = self.workload.real(submit, self.origin)
            if self.stopping.wait(max(0.0, due - time.time())):
                return
            rt = max(1, round(runtime / self.workload.scale))
            minutes = max(1, math.ceil(limit / self.workload.scale / 60))
            user = BACKGROUND_USERS[job_id % len(BACKGROUND_USERS)]
            result = run(["/usr/sbin/runuser", "-u", user, "--", "sbatch", "--parsable", f"--job-name=bg-{job_id}",
                          f"--nodes={n}", "--exclusive", f"--time={minutes}", "--output=/dev/null",
                          "--chdir=/tmp", f"--wrap=exec sleep {rt}"], check=False, timeout=30)
            if result.returncode == 0:
                self.submitted[int(result.stdout.strip().split(";")[0])] = (job_id, time.time())
            else:
                self.failures += 1
                if self.failures <= 3:
                    self.log(f"background sbatch failed: {result.stdout.strip()}")


def parse_time(text):
    if not text or text in ("N/A", "Unknown", "None"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_limit(text):
    """squeue's time limit ([D-]H:MM:SS or M:SS) in seconds; None for UNLIMITED or anything else."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


class Poller(threading.Thread):
    """squeue every `period` s: each job's last row (state, submit, start, end, nodes, name, user) and the
    share of the nodes that running jobs hold."""

    def __init__(self, nodes, period=2.0):
        super().__init__(daemon=True)
        self.nodes, self.period = nodes, period
        self.jobs = {}
        self.busy = []  # (time, share of nodes held by running jobs, by background jobs)
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def poll(self):
        out = run(["squeue", "-h", "-t", "all", "-o", "%i|%j|%u|%T|%V|%S|%e|%D|%l"], check=False, timeout=20).stdout
        held = held_bg = 0
        now = time.time()
        with self.lock:
            for line in out.splitlines():
                words = line.split("|")
                if len(words) != 9 or not words[0].isdigit():
                    continue
                job = {"name": words[1], "user": words[2], "state": words[3], "submit": parse_time(words[4]),
                       "start": parse_time(words[5]), "end": parse_time(words[6]), "nodes": int(words[7] or 0),
                       "limit": parse_limit(words[8])}
                if job["state"] == "PENDING":
                    job["start"] = job["end"] = None
                self.jobs[int(words[0])] = job
                if job["state"] in ("RUNNING", "COMPLETING"):
                    held += job["nodes"]
                    held_bg += job["nodes"] if job["name"].startswith("bg-") else 0
            self.busy.append((now, held / self.nodes, held_bg / self.nodes))

    def run(self):
        while not self.stopping.is_set():
            self.poll()
            self.stopping.wait(self.period)

    def job(self, job_id):
        with self.lock:
            return dict(self.jobs.get(job_id, {}))

    def utilisation(self, since, until):
        rows = [(b, g) for t, b, g in self.busy if since <= t <= until]
        if not rows:
            return 0.0, 0.0
        return sum(b for b, _ in rows) / len(rows), sum(g for _, g in rows) / len(rows)

    def background_waits(self, since, until):
        """Waits of the background jobs submitted in [since, until] that started, in real seconds, by job
        name (bg-TRACE_JOB_ID: the same in every replay of the window)."""
        with self.lock:
            return {j["name"]: j["start"] - j["submit"] for j in self.jobs.values()
                    if j["name"].startswith("bg-") and j["submit"] and j["start"] and since <= j["submit"] <= until}
