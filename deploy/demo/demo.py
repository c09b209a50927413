#!/usr/bin/python3
"""The one-command demo: a PyTorch training run as a chain of short Slurm jobs kept moving by batond.

Starts a private PostgreSQL, a private Slurm with spank_baton.so and munge (by default two nodes, each in
a network namespace of its own, so that successors land on another node than their predecessors; one
node on loopback where namespaces cannot be made), and batond (all in a fresh state directory, the way
the e2e tests run them); submits examples/train_digits.sbatch as a chain with `batonctl submit` as an
unprivileged user; shows one line per chain job while it runs; trains the same run once straight
through without checkpoints as the reference; then prints a report and leaves the metrics, the chain
document, the job outputs and a timeline picture in the output folder. Everything it started is stopped when it ends, also on Ctrl-C or SIGTERM.

Run through deploy/demo.sh, which builds the tree first. With --installed it runs the installed
programs instead (the packages, or `meson install`): batond, batonctl and spank_baton.so of the prefix
that has batond on PATH, and the Python package baton that /usr/bin/python3 imports.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (the analysis and the timeline, importable by the test)
from progress import Progress  # noqa: E402
import training  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER = "nobody"  # the jobs' owner, as in the e2e tests: any non-root user works
CHAIN = "digits"

# Each profile is a training time on this machine; its steps follow from the pace measured first (see
# pace.py). The quick run (CI) outlasts the first job's checkpoint (100 s into a 2-minute job) by half,
# so that it runs in at least two jobs even where the measured pace overstates the pace under load.
PROFILES = {
    "full": {"training_s": 360, "time_limit_min": 2, "submit_lead_s": 40, "timeout_s": 1800},
    "quick": {"training_s": 150, "time_limit_min": 2, "submit_lead_s": 40, "timeout_s": 540},
}
MIN_STEPS = 1000
MARGIN_S = 10  # the final checkpoint is committed this long before a job's time limit


class DemoError(Exception):
    pass


class Interrupted(Exception):
    pass


def log(message):
    print(f"demo: {message}", flush=True)


def run(argv, timeout=120, check=True, **kwargs):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                            text=True, **kwargs)
    if check and result.returncode != 0:
        raise DemoError(f"{' '.join(argv)} exited with {result.returncode}:\n{result.stdout}")
    return result


def make_state(prefix, shared=("chains", "work")):
    """A temporary state directory that the jobs' owners can read, with folders (`shared`) that any of
    them may write, sticky as /tmp is."""
    state = tempfile.mkdtemp(prefix=prefix)
    os.chmod(state, 0o755)
    for name in shared:
        os.makedirs(f"{state}/{name}")
        os.chmod(f"{state}/{name}", 0o1777)
    return state


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except OSError as error:
        return 0, str(error)


class Layout:
    """Where the demo takes baton from: a build directory (the default) or the installed files."""

    def __init__(self, batond, batonctl, plugin, staged=None, schema=None):
        self.batond = batond  # run as root by the demo
        self.batonctl = batonctl  # run as root, and by the job owner (a copy when staged)
        self.plugin = plugin
        # A build directory, which the job owner may not be able to read (a clone under /root): the
        # folder that holds the package baton and libbaton-ckpt, copied for the jobs. None: installed.
        self.staged = staged
        self.schema = schema  # installed migrations, compared with those batonctl applies

    @staticmethod
    def build(build):
        return Layout(f"{build}/provisioner/service/batond", f"{build}/provisioner/batonctl/batonctl",
                      f"{build}/spank_plugin/spank_baton.so", staged=f"{build}/checkpointer")

    @staticmethod
    def installed():
        """batond on PATH (sbin included) gives the prefix; batonctl and the plugin come from the same
        prefix, the Python package from /usr/bin/python3's own path (no PYTHONPATH)."""
        path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
        batond = shutil.which("batond", path=path)
        if batond is None:
            raise DemoError("--installed: no batond on PATH or in /usr/local/sbin, /usr/sbin")
        batond = os.path.realpath(batond)
        prefix = os.path.dirname(os.path.dirname(batond))
        batonctl = f"{prefix}/bin/batonctl"
        # libdir/slurm: lib/<multiarch>/slurm (Debian), lib/slurm or lib64/slurm elsewhere.
        plugins = sorted(set(glob.glob(f"{prefix}/lib/*/slurm/spank_baton.so")
                             + glob.glob(f"{prefix}/lib*/slurm/spank_baton.so")))
        missing = [name for name, found in (("batonctl", os.path.exists(batonctl)),
                                            ("spank_baton.so", plugins)) if not found]
        if missing:
            raise DemoError(f"--installed: {' and '.join(missing)} not under {prefix} (where batond is)")
        # From / so that no baton folder of the current directory is imported instead.
        found = subprocess.run(
            ["/usr/bin/python3", "-c", "import baton._native, baton.torch; print(baton.__file__)"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/", timeout=120)
        if found.returncode != 0:
            raise DemoError(f"--installed: /usr/bin/python3 cannot import baton and baton.torch:\n"
                            f"{found.stdout}")
        schema = f"{prefix}/share/baton/schema"
        if not glob.glob(f"{schema}/[0-9]*_*.sql"):
            raise DemoError(f"--installed: no migrations in {schema}")
        log(f"installed files: {batond}, {batonctl}, {plugins[0]}, Python package "
            f"{os.path.dirname(found.stdout.strip().splitlines()[-1])}, schema {schema}")
        return Layout(batond, batonctl, plugins[0], schema=schema)


def check_schema(batonctl, conninfo, schema):
    """batonctl applies the migrations built into it; the installed schema folder must hold the same
    ones: `batonctl db status` lists what was applied as `VERSION  NAME  applied ...`."""
    status = run([batonctl, "db", "status", "--database", conninfo]).stdout
    applied = re.findall(r"^\s+(\d+)\s+(\S+)\s+applied", status, re.MULTILINE)
    applied = sorted((int(version), name) for version, name in applied)
    names = (re.fullmatch(r"(\d{4})_(\w+)\.sql", os.path.basename(f)) for f in glob.glob(f"{schema}/*.sql"))
    files = sorted((int(m.group(1)), m.group(2)) for m in names if m)
    if applied != files:
        raise DemoError(f"the migrations batonctl applied ({applied}) are not those in {schema} ({files})")
    log(f"schema: the {len(files)} migrations applied are those in {schema}")


class Services:
    """What the demo starts, recorded in STATE/started so that a later run can stop leftovers of a
    run that was killed with SIGKILL."""

    def __init__(self, state, layout):
        self.state = state
        self.layout = layout
        self.batond = None
        self.reference = None
        self.port = None
        self.conninfo = None
        self.slurm_conf = None
        self.listen_address = "127.0.0.1"
        self.nodes = 1
        self.started_munge = False

    # -- start --

    def start_postgres(self):
        text = run(["bash", f"{ROOT}/deploy/local/pg.sh", "start", f"{self.state}/pg"], timeout=120).stdout
        self.conninfo = text.strip().splitlines()[-1]
        run([self.layout.batonctl, "db", "migrate", "--database", self.conninfo])
        if self.layout.schema:
            check_schema(self.layout.batonctl, self.conninfo, self.layout.schema)

    def start_slurm(self, nodes=1, plugstack_extra="", conf_lines=(), accounting=False):
        """One node on loopback (slurm.sh), or `nodes` nodes in network namespaces (cluster.sh), where
        the plugin reaches batond at this machine's address on the cluster's network; conf_lines are
        added to the multi-node cluster's slurm.conf, and `accounting` gives it slurmdbd."""
        # The scripts start munged when none answers; then it is stopped again at the end.
        self.started_munge = not munge_answers()
        self.port = free_port()
        host = "controller" if nodes > 1 else "127.0.0.1"
        # The plugin settings of the e2e test: short report timeout, a 10-s margin, handover wait.
        plugstack = (f"required {self.layout.plugin} chain_root={self.state}/chains/%u "
                     f"url=http://{host}:{self.port} report_timeout=2 margin={MARGIN_S} "
                     f"handover_wait=60 keep=2 {plugstack_extra}").strip()
        if nodes > 1:
            # Two-level storage, as on a cluster with scratch disks: each node's checkpoints commit in
            # its own directory (cluster.sh's DIR/local/NODE) and drain to the chain directory.
            plugstack += f" local_root={self.state}/slurm/local/%n/%u"
            argv = ["bash", f"{ROOT}/deploy/local/cluster.sh", "start", f"{self.state}/slurm", "--nodes",
                    str(nodes), *(["--accounting"] if accounting else []),
                    *(a for line in conf_lines for a in ("--conf", line)), plugstack]
        else:
            argv = ["bash", f"{ROOT}/deploy/local/slurm.sh", "start", f"{self.state}/slurm", plugstack]
        lines = run(argv, timeout=180).stdout.strip().splitlines()
        settings = dict(line.split("=", 1) for line in lines if re.fullmatch(r"[A-Z_]+=\S+", line))
        self.slurm_conf = settings["SLURM_CONF"]
        self.listen_address = settings.get("CONTROLLER", "127.0.0.1")
        self.nodes = nodes
        os.environ["SLURM_CONF"] = self.slurm_conf
        os.chmod(f"{self.state}/slurm", 0o755)  # the job owner's sbatch reads slurm.conf

    def start_batond(self, submit_lead_s, policy="avg", extra_args=()):
        args = [self.layout.batond, "--database", self.conninfo,
                "--listen-address", self.listen_address, "--listen-port", str(self.port), "--tick-seconds", "1",
                "--policy", policy, "--submit-lead-seconds", str(submit_lead_s), "--instance-name", "demo",
                "--submit-grace-seconds", "16", "--handover-timeout-seconds", "60",
                "--slurm-timeout-seconds", "10", *extra_args]
        with open(f"{self.state}/batond.log", "ab") as out:
            # Its own session: Ctrl-C on the terminal reaches the demo, which stops batond in order.
            self.batond = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with open(f"{self.state}/batond.pid", "w") as f:
            f.write(str(self.batond.pid))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.batond.poll() is not None:
                raise DemoError(f"batond exited with {self.batond.returncode}; see {self.state}/batond.log:\n"
                                + tail(f"{self.state}/batond.log"))
            if http_get(f"{self.url}/readyz")[0] == 200:
                return
            time.sleep(0.5)
        raise DemoError("batond is not ready after 60 s: " + " ".join(map(str, http_get(f"{self.url}/readyz"))))

    @property
    def url(self):
        return f"http://{self.listen_address}:{self.port}"

    # -- stop --

    def stop(self):
        for process in (self.reference, self.batond):
            stop_process(process)
        stop_leftovers(self.state)
        if self.started_munge:
            stop_munged()


def munge_answers():
    try:
        credential = subprocess.run(["munge", "-n"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    timeout=10)
        return credential.returncode == 0 and subprocess.run(
            ["unmunge"], input=credential.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def stop_munged():
    try:
        pid = int(open("/run/munge/munged.pid").read())
        if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "munged":
            os.kill(pid, signal.SIGTERM)
    except (ValueError, OSError):
        pass


def stop_process(process):
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def stop_services(services, keep_state, say=log):
    """Stops what `services` started; removes its state directory unless it is to be kept."""
    services.stop()
    if keep_state:
        say(f"state left in {services.state}")
    else:
        shutil.rmtree(services.state, ignore_errors=True)


def stop_leftovers(state):
    """Stops whatever a run with this state directory started: batond (by its pid file, only if that
    process is still batond), Slurm, PostgreSQL. Each script touches only its own directory."""
    pidfile = f"{state}/batond.pid"
    if os.path.exists(pidfile):
        try:
            pid = int(open(pidfile).read())
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "batond":
                os.kill(pid, signal.SIGTERM)
                for _ in range(100):
                    if not os.path.exists(f"/proc/{pid}"):
                        break
                    time.sleep(0.1)
        except (ValueError, OSError):
            pass
    if os.path.exists(f"{state}/slurm/cluster.env"):
        run(["bash", f"{ROOT}/deploy/local/cluster.sh", "stop", f"{state}/slurm"], timeout=120, check=False)
    elif os.path.exists(f"{state}/slurm/slurm.conf"):
        run(["bash", f"{ROOT}/deploy/local/slurm.sh", "stop", f"{state}/slurm"], timeout=120, check=False)
    if os.path.exists(f"{state}/pg"):
        run(["bash", f"{ROOT}/deploy/local/pg.sh", "stop", f"{state}/pg"], timeout=120, check=False)


def tail(path, lines=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def stage_app(state, layout):
    """Copies what the jobs run into the state directory: the job owner may not be able to read the
    source tree or the build directory (a clone under /root). The binding finds libbaton-ckpt through
    its relative run path, so the layout of the build directory is kept. Installed files are used in
    place. Returns the folder and the job owner's batonctl and PYTHONPATH (None: the installed baton)."""
    app = f"{state}/app"
    os.makedirs(app)
    for name in ("train_digits.py", "train_digits.sbatch"):
        shutil.copy(f"{ROOT}/examples/{name}", f"{app}/{name}")
    batonctl, pythonpath = layout.batonctl, None
    if layout.staged:
        os.makedirs(f"{app}/checkpointer/python/baton")
        for path in glob.glob(f"{layout.staged}/python/baton/*"):
            if os.path.isfile(path):
                shutil.copy(path, f"{app}/checkpointer/python/baton/")
        shutil.copy(f"{layout.staged}/libbaton-ckpt.so.0", f"{app}/checkpointer/")
        shutil.copy(layout.batonctl, f"{app}/batonctl")
        batonctl, pythonpath = f"{app}/batonctl", f"{app}/checkpointer/python"
    for dirpath, dirnames, filenames in os.walk(app):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o755)
    return app, batonctl, pythonpath


def namespaces_work():
    """Whether this machine can hold a multi-node cluster (deploy/local/cluster.sh): root, iproute2,
    and the namespaces cluster.sh gives each node, made as it makes them (network, mount with its /
    a slave of this machine's, host name), so that where they would fail the demo uses one node."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--net", "--mount", "--uts", "--propagation", "slave", "true"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0


def as_user(argv):
    return ["/usr/sbin/runuser", "-u", USER, "--", *argv]


def batonctl(program, url, *args, timeout=30):
    return run(as_user([program, *args, "--server", url]), timeout=timeout, check=False)


def prepare_output(output):
    os.makedirs(output, exist_ok=True)
    for name in report.OUTPUT_FILES + ["jobs"]:
        path = os.path.join(output, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def demo(args, services, state):
    profile = dict(PROFILES["quick" if args.quick else "full"])
    app, user_batonctl, pythonpath = stage_app(state, services.layout)
    nodes = args.nodes
    log(f"starting PostgreSQL, Slurm (slurmctld, {nodes} node{'s' if nodes > 1 else ''}, munge, "
        "spank_baton.so) and batond")
    services.start_postgres()
    services.start_slurm(nodes)
    services.start_batond(profile["submit_lead_s"])
    log(f"batond ready at {services.url}; state in {state}")
    profile["steps"] = args.steps or training_steps(state, app, pythonpath, profile["training_s"])
    start_reference(services, state, app, pythonpath, profile["steps"])
    submit_chain(services, state, app, user_batonctl, pythonpath, profile, nodes)
    progress = Progress(f"{USER}/{CHAIN}", f"{state}/chains/{USER}/{CHAIN}", f"{state}/work",
                        lambda: batonctl(user_batonctl, services.url, "show", f"{USER}/{CHAIN}", "--json"),
                        profile["steps"], sys.stdout.isatty())
    wait_for_chain(progress, profile["timeout_s"])
    log("waiting for the reference run")
    if services.reference.wait(timeout=profile["timeout_s"]) != 0:
        raise DemoError("the reference run failed:\n" + tail(f"{state}/reference/out.txt"))
    collect_output(args.output, services, state, progress)
    summary = report.analyse(args.output, progress.reached, profile["steps"], profile["time_limit_min"],
                             progress.node_of)
    with open(f"{args.output}/summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    report.timeline(args.output, summary)
    text = report.text(summary)
    with open(f"{args.output}/report.txt", "w") as f:
        f.write(text)
    print()
    print(text, end="", flush=True)
    if not summary["weights_identical"]:
        raise DemoError("the chain's final weights differ from the uninterrupted run's")


def training_steps(state, app, pythonpath, training_s):
    """The steps that train for about `training_s` at this machine's pace."""
    log("measuring the training's pace on this machine")
    loss_log = f"{state}/reference/pace-loss.log"
    try:
        steps_per_s = training.measure_pace(as_user(training.command(app, 10**9, loss_log)),
                                            training.user_env(f"{state}/reference", pythonpath), loss_log,
                                            f"{state}/reference/pace-out.txt")
    except training.PaceError as error:
        raise DemoError(f"measuring the pace: {error}")
    steps = max(MIN_STEPS, int(round(steps_per_s * training_s, -2)))
    log(f"{steps_per_s:.0f} steps/s: {steps} steps train for about {training_s} s")
    return steps


def start_reference(services, state, app, pythonpath, steps):
    """The reference: the same training straight through, no Slurm, no checkpoints."""
    with open(f"{state}/reference/out.txt", "wb") as out:
        services.reference = subprocess.Popen(
            as_user(training.command(app, steps, f"{state}/reference/loss.log",
                                     "--final-state", f"{state}/reference/final.pt")),
            stdout=out, stderr=subprocess.STDOUT, env=training.user_env(f"{state}/reference", pythonpath),
            start_new_session=True)


def submit_chain(services, state, app, user_batonctl, pythonpath, profile, nodes):
    """The chain's first job, with `batonctl submit` as the job's owner."""
    steps = profile["steps"]
    export = ["ALL", f"STEPS={steps}", f"BATCH_SIZE={training.BATCH_SIZE}", "PYTHON=/usr/bin/python3",
              f"TRAIN_SCRIPT={app}/train_digits.py", "PYTHONDONTWRITEBYTECODE=1", f"HOME={state}/work",
              f"FINAL_STATE={state}/work/final.pt"]
    if pythonpath:
        export.append(f"PYTHONPATH={pythonpath}")
    export = ",".join(export)
    limit = profile["time_limit_min"]
    # On several nodes each job holds its node, as GPU training jobs do: a successor that starts while
    # its predecessor runs starts on another node.
    exclusive = ["--exclusive"] if nodes > 1 else []
    submitted = run(as_user([user_batonctl, "submit", "--chain", CHAIN, "--workdir", f"{state}/work",
                             "--server", services.url, f"{app}/train_digits.sbatch", "--", *exclusive,
                             f"--time={limit}", f"--signal=B:USR1@{MARGIN_S + 10}",
                             f"--output={state}/work/job-%j.out", f"--export={export}"]), check=False)
    if submitted.returncode != 0:
        raise DemoError(f"batonctl submit failed:\n{submitted.stdout}")
    log(submitted.stdout.strip())
    log(f"training {steps} steps in jobs of {limit} min; the reference trains the same steps outside Slurm")


def wait_for_chain(progress, timeout_s):
    """Shows the chain's progress until it ends; only a finished chain passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress.poll()
        progress.show()
        chain_state = (progress.doc or {}).get("chain", {}).get("state")
        if chain_state in ("finished", "failed", "cancelled"):
            break
        if time.monotonic() > deadline:
            raise DemoError(f"the chain did not finish within {timeout_s} s (state {chain_state})")
        time.sleep(1)
    # The last job may still be writing its output and final weights: wait until none runs.
    for _ in range(60):
        progress.poll()
        if all(j.get("end_unix") is not None or j.get("start_unix") is None for j in progress.jobs()):
            break
        time.sleep(1)
    progress.show()
    if chain_state != "finished":
        raise DemoError(f"the chain ended {chain_state}:\n{json.dumps(progress.doc, indent=1)}")


def collect_output(output, services, state, progress):
    """batond's metrics, the chain's document and manifests, the jobs' output, weights and losses."""
    status, metrics = http_get(f"{services.url}/metrics")
    if status != 200:
        raise DemoError(f"GET /metrics answered {status}")
    with open(f"{output}/metrics.txt", "w") as f:
        f.write(metrics)
    with open(f"{output}/chain.json", "w") as f:
        json.dump(progress.doc, f, indent=1)
    with open(f"{output}/manifests.json", "w") as f:
        # The contract's fields without the per-region lists (checksums, offsets): small enough to read.
        fields = ("iteration", "epoch", "created_unix", "total_bytes", "job_id", "seq", "final",
                  "training_done", "timings", "tuning")
        json.dump([{k: m.get(k) for k in fields}
                   for m in sorted(progress.manifests.values(), key=lambda m: m["iteration"])], f, indent=1)
    os.makedirs(f"{output}/jobs")
    for path in glob.glob(f"{state}/work/job-*.out"):
        shutil.copy(path, f"{output}/jobs/")
    shutil.copy(f"{state}/reference/out.txt", f"{output}/jobs/reference.out")
    for source, name in ((f"{state}/work/final.pt", "weights-chain.pt"),
                         (f"{state}/reference/final.pt", "weights-reference.pt"),
                         (f"{progress.chain_dir}/loss.log", "loss-chain.log"),
                         (f"{state}/reference/loss.log", "loss-reference.log")):
        if os.path.exists(source):
            shutil.copy(source, f"{output}/{name}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--build-dir", help="run the programs of this build directory")
    where.add_argument("--installed", action="store_true",
                       help="run the installed programs and Python package (the packages, or meson install)")
    parser.add_argument("--output", required=True, help="folder for metrics, chain document, timeline")
    parser.add_argument("--quick", action="store_true", help="a shorter training (CI)")
    parser.add_argument("--steps", type=int, 
                        help="training steps (default: 6 minutes of training at the pace measured first, quick 2.5)")
    parser.add_argument("--nodes", type=int,
                        help="Slurm nodes, each in a network namespace of its own (default: 2 where namespaces "
                             "can be made, else 1 on loopback)")
    parser.add_argument("--keep-state", action="store_true", help="leave the state directory for inspection")
    return parser.parse_args()


def layout_of(args):
    """The programs the demo runs, or why it cannot (DemoError)."""
    if args.installed:
        return Layout.installed()
    args.build_dir = os.path.abspath(args.build_dir)
    for needed in ("provisioner/service/batond", "provisioner/batonctl/batonctl",
                   "spank_plugin/spank_baton.so", "checkpointer/libbaton-ckpt.so.0"):
        if not os.path.exists(f"{args.build_dir}/{needed}"):
            raise DemoError(f"{args.build_dir}/{needed} missing: build first (deploy/demo.sh does)")
    if not glob.glob(f"{args.build_dir}/checkpointer/python/baton/_native*.so"):
        raise DemoError("the Python binding was not built (needs pybind11 and torch)")
    return Layout.build(args.build_dir)


def main():
    args = parse_args()
    if os.geteuid() != 0:
        print("demo: must run as root (Slurm's daemons, munge, and jobs as another user)", file=sys.stderr)
        return 2
    if args.nodes is None:
        args.nodes = 2 if namespaces_work() else 1
    elif not 1 <= args.nodes <= 8:
        print("demo: --nodes takes 1 to 8", file=sys.stderr)
        return 2
    shown_output = args.output
    args.output = os.path.abspath(args.output)
    try:
        layout = layout_of(args)
    except (DemoError, subprocess.TimeoutExpired) as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2

    prepare_output(args.output)
    # A run killed with SIGKILL leaves its state directory named here: stop what it started.
    marker = f"{args.output}/.state-dir"
    if os.path.exists(marker):
        old = open(marker).read().strip()
        if old.startswith(tempfile.gettempdir() + "/baton-demo-") and os.path.isdir(old):
            log(f"stopping what an earlier run left in {old}")
            stop_leftovers(old)
            shutil.rmtree(old, ignore_errors=True)
        os.remove(marker)

    def interrupt(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    signal.signal(signal.SIGINT, interrupt)

    state = make_state("baton-demo-", ("chains", "work", "reference"))
    with open(marker, "w") as f:
        f.write(state + "\n")
    services = Services(state, layout)
    code = 0
    try:
        demo(args, services, state)
    except Interrupted as why:
        print(f"\ndemo: interrupted ({why}); stopping everything", file=sys.stderr, flush=True)
        code = 130
    except (DemoError, subprocess.TimeoutExpired) as error:
        print(f"\ndemo: FAILED: {error}", file=sys.stderr, flush=True)
        print(f"--- batond log (last lines)\n{tail(state + '/batond.log')}", file=sys.stderr)
        code = 1
    finally:
        # No second Ctrl-C in the middle of stopping: it would leave daemons behind.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        stop_services(services, args.keep_state)
        if not args.keep_state:
            os.remove(marker)
    if code == 0:
        log(f"done; output in {shown_output}")
    return code


if __name__ == "__main__":
    sys.exit(main())
