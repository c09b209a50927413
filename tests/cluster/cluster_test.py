#!/usr/bin/python3
"""Chains on a multi-node Slurm (deploy/local/cluster.sh: each slurmd in a network namespace of its own),
with PostgreSQL, batond and the plugin as in the demo. One case per run:

  handover      a chain of 1-minute jobs on 3 nodes: successors start on another node than their
                predecessors, every handover loses no iteration, every restore verifies
  node-failure  the node of a running chain job loses power at a random moment (--seeds N runs N, one
                chain each): slurmctld marks the job NODE_FAIL, batond resubmits without spending the
                retry budget and the successor restores at once; the work lost is measured
  pending-node-failure
                on 2 nodes, the successor already submitted and pending (the other node held by another
                job), the predecessor's node loses power: batond writes the handover end marker once
                slurmctld says NODE_FAIL, and the successor, started once the other node is free, restores
                within a tick or two instead of waiting out its handover wait (120 s) for a final
                checkpoint a dead node never writes; the delay is measured
  handover-node-failure
                on 2 nodes, the successor already running and waiting for its handover checkpoint (the
                predecessor's training stopped, so that it cannot write one), the predecessor's node
                loses power: the successor restores within a tick or two of slurmctld's NODE_FAIL instead
                of waiting out its handover wait; the delay is measured
  requeue       a plain `sbatch --baton --requeue` job whose node fails is requeued by Slurm itself:
                batond submits no second job for it, exactly one job per seq
  ddp           a chain of `srun -N 2` PyTorch DDP jobs (gloo across the nodes, MASTER_ADDR from
                `scontrol show hostnames`): every rank restores the same step, the end is bit-identical
                to a straight two-rank run
  fsdp          the same with FSDP, 2 ranks on each of 2 nodes (PyTorch 2.4+; skipped before): the
                four-rank pieces hand over from job to job, the end is bit-identical to a straight
                four-rank run
  cleanup       cluster.sh stop leaves no namespace, link, process or file behind, also after a start
                that was killed
  accounting    cluster.sh --accounting: slurmdbd on MariaDB records the jobs, a job held by a
                dependency accrues age only from its predecessor's end, stop ends both daemons

Exits 77 where this machine cannot hold the cluster (not root, no network namespaces)."""

import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "deploy", "demo"))
import demo  # noqa: E402  (the services the demo starts, started the same way here)

CLUSTER = os.path.join(ROOT, "deploy", "local", "cluster.sh")
USER = demo.USER
ITERATION_S = 0.05  # ckpt_chain_job trains an iteration in 50 ms


Failure = demo.DemoError  # what demo.run raises for a command that failed, too
run = demo.run


def log(message):
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class Setup:
    """PostgreSQL, an N-node cluster with the plugin, batond; chains submitted as `nobody`."""

    def __init__(self, args, nodes, plugstack_extra=""):
        self.args = args
        self.state = demo.make_state("baton-cluster-test-")
        self.services = demo.Services(self.state, demo.Layout.build(args.build_dir))
        self.app, self.batonctl, self.pythonpath = demo.stage_app(self.state, self.services.layout)
        self.nodes_seen = {}  # job id -> node, as squeue said while it could
        self.manifests = {}  # chain -> {checkpoint name: manifest}
        self.services.start_postgres()
        self.services.start_slurm(nodes, plugstack_extra)
        self.services.start_batond(submit_lead_s=40)
        log(f"{nodes} nodes, batond at {self.services.url}, state in {self.state}")

    def close(self):
        demo.stop_services(self.services, self.args.keep_state, log)

    def work(self, name):
        return f"{self.state}/work/{name}"

    def script(self, name, body):
        path = f"{self.app}/{name}.sbatch"
        with open(path, "w") as f:
            f.write("#!/bin/bash\n" + body)
        os.chmod(path, 0o755)
        return path

    def submit(self, chain, body, sbatch_args):
        """batonctl submit: batond owns the chain from its first job."""
        script = self.script(chain, body)
        result = run(demo.as_user([self.batonctl, "submit", "--chain", chain, "--workdir", f"{self.state}/work",
                                   "--server", self.services.url, script, "--", *sbatch_args,
                                   f"--output={self.state}/work/{chain}-%j.out"]), check=False)
        if result.returncode != 0:
            raise Failure(f"batonctl submit failed:\n{result.stdout}")
        log(result.stdout.strip())

    def document(self, chain):
        result = demo.batonctl(self.batonctl, self.services.url, "show", f"{USER}/{chain}", "--json")
        if result.returncode != 0:
            return None
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            return None

    def poll(self, chain):
        """Remembers each job's node and every checkpoint manifest (the chain keeps only two)."""
        queue = run(["squeue", "-h", "-t", "all", "-o", "%i %N"], check=False).stdout
        for line in queue.splitlines():
            words = line.split()
            if len(words) == 2 and words[0].isdigit():
                self.nodes_seen[int(words[0])] = words[1]
        seen = self.manifests.setdefault(chain, {})
        for path in glob.glob(f"{self.state}/chains/{USER}/{chain}/ckpt-*/manifest.json"):
            name = os.path.basename(os.path.dirname(path))
            if name not in seen:
                try:
                    with open(path) as f:
                        seen[name] = json.load(f)
                except (OSError, json.JSONDecodeError):
                    pass

    def wait_finished(self, chain, timeout, on_poll=None):
        deadline = time.monotonic() + timeout
        doc = None
        while time.monotonic() < deadline:
            self.poll(chain)
            doc = self.document(chain) or doc
            if on_poll:
                on_poll(doc)
            state = (doc or {}).get("chain", {}).get("state")
            if state in ("finished", "failed", "cancelled", "quarantined"):
                break
            time.sleep(0.5)
        state = (doc or {}).get("chain", {}).get("state")
        if state != "finished":
            raise Failure(f"chain {chain} is {state} after {timeout} s:\n{json.dumps(doc, indent=1)}\n"
                          + demo.tail(f"{self.state}/batond.log", 40))
        # The last job may still be writing its output.
        for _ in range(60):
            self.poll(chain)
            doc = self.document(chain) or doc
            if all(j.get("end_unix") is not None or j.get("start_unix") is None for j in doc["jobs"]):
                break
            time.sleep(1)
        return doc

    def output(self, chain, job_id):
        return demo.report.read_text(f"{self.state}/work/{chain}-{job_id}.out")

    def one_job_per_key(self):
        """Every job batond submitted has its own key (chain, seq, token): none was submitted twice."""
        queue = run(["squeue", "-h", "-t", "all", "-o", "%i %k"]).stdout
        keys = {}
        for line in queue.splitlines():
            words = line.split()
            if len(words) == 2 and words[1].startswith("baton:"):
                keys.setdefault(words[1], []).append(words[0])
        twice = {k: v for k, v in keys.items() if len(v) > 1}
        if twice:
            raise Failure(f"submitted twice: {twice}")
        seqs = {}
        for key in keys:
            _, chain, seq = key.split(":")[:3]
            seqs.setdefault((chain, seq), []).append(key)
        again = {k: v for k, v in seqs.items() if len(v) > 1}
        if again:
            raise Failure(f"more than one job for one seq: {again}")

    def sql(self, query):
        return run(["psql", "-X", "-A", "-t", "-d", self.services.conninfo, "-c", query]).stdout.strip()


def check_restores(setup, chain, doc, ranks=1):
    """Every job that ran after the first restored a verified checkpoint on each rank, the last one
    declared the training done; returns {job id: (restored iteration, time training went on)}."""
    restored = {}
    ran = [j for j in doc["jobs"] if j.get("start_unix") is not None and j["state"] != "CANCELLED"]
    for job in ran:
        text = setup.output(chain, job["job_id"])
        if "CORRUPT" in text:
            raise Failure(f"job {job['job_id']} restored a corrupt state:\n{text}")
        verified = re.findall(r"^restored iteration (\d+) verified$", text, re.MULTILINE)
        went_on = re.findall(r"^training from iteration (\d+) at ([0-9.]+)$", text, re.MULTILINE)
        if job["seq"] > 0 and len(verified) != ranks:
            raise Failure(f"job {job['job_id']} (seq {job['seq']}) did not restore on all {ranks} rank(s):\n{text}")
        if went_on:
            restored[job["job_id"]] = (int(verified[0]) if verified else None, float(went_on[0][1]))
    if "training done" not in setup.output(chain, ran[-1]["job_id"]):
        raise Failure(f"the last job {ran[-1]['job_id']} did not finish the training:\n"
                      + setup.output(chain, ran[-1]["job_id"]))
    return restored


def chain_job(setup, iterations):
    return f"exec {setup.args.chain_job} --total-iterations={iterations}\n"


# Each job holds a whole node, as GPU training jobs do: a successor that starts while its predecessor
# runs starts on another node.
JOB_ARGS = ["--time=1", "--ntasks=1", "--exclusive"]


# -- cases --

def case_handover(args):
    setup = Setup(args, nodes=3)
    try:
        chain = "across"
        # About 110 s of training: more than two 1-minute jobs can hold, even without a handover.
        setup.submit(chain, chain_job(setup, 2200), JOB_ARGS)
        doc = setup.wait_finished(chain, 280)
        restored = check_restores(setup, chain, doc)
        setup.one_job_per_key()
        ran = [j for j in doc["jobs"] if j.get("start_unix") is not None and j["state"] != "CANCELLED"]
        if len(ran) < 3:
            raise Failure(f"only {len(ran)} jobs ran:\n{json.dumps(doc, indent=1)}")
        moves, lost = 0, []
        for before, after in zip(ran, ran[1:]):
            node_before, node_after = setup.nodes_seen.get(before["job_id"]), setup.nodes_seen.get(after["job_id"])
            final = re.findall(r"^final checkpoint iteration (\d+) committed",
                               setup.output(chain, before["job_id"]), re.MULTILINE)
            resumed = restored.get(after["job_id"], (None, None))[0]
            if final and resumed is not None:
                lost.append(int(final[-1]) - resumed)
            moves += node_before != node_after
            log(f"job {before['job_id']} on {node_before} -> job {after['job_id']} on {node_after}: final "
                f"checkpoint {final[-1] if final else '-'}, resumed at {resumed}")
        if moves == 0:
            raise Failure(f"no successor started on another node than its predecessor: {setup.nodes_seen}")
        # Two levels (local_root): every checkpoint in the chain directory was drained from the node-local
        # directory of the node its job ran on; a successor on another node restored the chain's copy.
        undrained = [name for name, m in setup.manifests[chain].items() if not m.get("node")]
        if undrained:
            raise Failure(f"checkpoints in the chain directory without a node: not drained from two levels: {undrained}")
        for before, after in zip(ran, ran[1:]):
            if setup.nodes_seen.get(before["job_id"]) != setup.nodes_seen.get(after["job_id"]) and \
                    "restored from the node-local copy" in setup.output(chain, after["job_id"]):
                raise Failure(f"job {after['job_id']} restored a node-local copy on another node")
        if any(lost):
            raise Failure(f"iterations lost at the handovers: {lost}")
        handovers = [h for h in doc.get("handovers", []) if h.get("handover_s") is not None]
        waits = [float(w) for job in ran[1:]
                 for w in re.findall(r"^handover wait ([0-9.]+) s", setup.output(chain, job["job_id"]), re.MULTILINE)]
        log(f"PASS: {len(ran)} jobs, {moves} handover(s) to another node, iterations lost {lost}, batond's request to the "
            f"predecessor's end {[round(h['handover_s'], 1) for h in handovers]} s (squeue's whole seconds), "
            f"successors' wait for the final checkpoint {waits} s")
    finally:
        setup.close()


def run_with_node_failure(setup, chain, cluster_dir, after_start):
    """Runs the chain to its end, failing the node of its running job `after_start` s into that job (before
    its successor is due), and reviving it once the successor runs; the chain's document and the failure."""
    failure = {}

    def maybe_fail(doc):
        if failure or not doc:
            return
        running = [j for j in doc["jobs"] if j.get("start_unix") is not None and j.get("end_unix") is None]
        if len(running) != 1 or doc["chain"].get("state") != "running":
            return
        job = running[0]
        if any(j["seq"] > job["seq"] for j in doc["jobs"]):
            return  # its successor is submitted already
        node = setup.nodes_seen.get(job["job_id"])
        if not node or not node.startswith("node") or time.time() < job["start_unix"] + after_start:
            return
        run(["bash", CLUSTER, "fail", cluster_dir, node])
        failure.update(job=job["job_id"], seq=job["seq"], node=node, at=time.time())
        log(f"{chain}: {node} failed under job {job['job_id']}, {after_start:.1f} s after its start")

    def revive_after_successor_started(doc):
        # The node stays down until the failed job's successor runs (elsewhere: slurmctld gives
        # no job to a node that is down), then comes back for the chains after it.
        started = [j for j in doc["jobs"] if j["seq"] > failure["seq"] and j.get("start_unix")]
        if started:
            run(["bash", CLUSTER, "revive", cluster_dir, failure["node"]], timeout=120)
            failure["revived"] = True

    def on_poll(doc):
        maybe_fail(doc)
        if failure and "revived" not in failure and doc:
            revive_after_successor_started(doc)

    doc = setup.wait_finished(chain, 280, on_poll)
    if not failure:
        raise Failure(f"{chain}: no job ran long enough to fail its node")
    return doc, failure


def check_node_failure(setup, chain, doc, failure, after_start):
    """The failed job ended NODE_FAIL, its successor was submitted for it, started elsewhere without a
    handover wait, and lost no more training than one checkpoint interval; (training lost s, interval s,
    restart s)."""
    jobs = {j["job_id"]: j for j in doc["jobs"]}
    failed = jobs[failure["job"]]
    if failed["state"] != "NODE_FAIL":
        raise Failure(f"job {failure['job']} ended {failed['state']}, not NODE_FAIL")
    successor = next(j for j in doc["jobs"] if j["seq"] == failed["seq"] + 1)
    reason = setup.sql(f"SELECT s.reason FROM submissions s JOIN chains c ON c.id = s.chain_id "
                       f"WHERE c.name = '{chain}' AND s.seq = {successor['seq']}")
    if reason != "node_failure":
        raise Failure(f"the successor of the failed job was submitted for '{reason}', not node_failure")
    restored = check_restores(setup, chain, doc)
    text = setup.output(chain, successor["job_id"])
    if "handover wait" in text:
        raise Failure(f"job {successor['job_id']} waited for a final checkpoint of a dead job:\n{text}")
    # Work lost: the training since the failed job's last commit, and the restart.
    own = sorted((m for m in setup.manifests[chain].values() if m.get("job_id") == failure["job"]),
                 key=lambda m: m["created_unix"])
    commits = [m["created_unix"] for m in own if m["created_unix"] <= failure["at"]]
    last = commits[-1] if commits else failed["start_unix"]
    gaps = [b - a for a, b in zip([failed["start_unix"]] + commits, commits + [failure["at"]])]
    interval = max(gaps[:-1]) if len(gaps) > 1 else after_start
    lost_training = failure["at"] - last
    resumed_iteration, went_on = restored[successor["job_id"]]
    restart = went_on - failure["at"]
    node_after = setup.nodes_seen.get(successor["job_id"])
    log(f"{chain}: training lost {lost_training:.1f} s (checkpoint interval {interval:.1f} s), restart "
        f"{restart:.1f} s (node down, NODE_FAIL, resubmission, start on {node_after}, restore of "
        f"iteration {resumed_iteration})")
    if lost_training > interval + 1.0:
        raise Failure(f"{lost_training:.1f} s of training lost, more than the interval {interval:.1f} s")
    if node_after == failure["node"]:
        raise Failure(f"job {successor['job_id']} started on {node_after}, the node that was down")
    return lost_training, interval, restart


def case_node_failure(args):
    rng = random.Random(args.seed)
    setup = Setup(args, nodes=3)
    cluster_dir = f"{setup.state}/slurm"
    results = []
    try:
        for run_index in range(args.seeds):
            chain = f"failing{run_index}"
            # About 100 s of training: the failure comes 5-15 s into a job, before its successor is due
            # (a node that fails while the successor already waits for the handover checkpoint costs the
            # successor its handover wait as well: not this case).
            setup.submit(chain, chain_job(setup, 2000), JOB_ARGS)
            after_start = rng.uniform(5, 15)
            doc, failure = run_with_node_failure(setup, chain, cluster_dir, after_start)
            results.append(check_node_failure(setup, chain, doc, failure, after_start))
        setup.one_job_per_key()
        retries = setup.sql("SELECT max(retries) FROM chains")
        if retries not in ("0", ""):
            raise Failure(f"a node failure spent the retry budget: retries {retries}")
        log("PASS: per failure (training lost s, interval s, restart s): "
            + ", ".join(f"({a:.1f}, {b:.1f}, {c:.1f})" for a, b, c in results))
    finally:
        setup.close()


# What a successor may wait for a dead predecessor's final checkpoint, from its start: the end marker is
# written in batond's tick after slurmctld's NODE_FAIL (a tick is 1 s here), read at the next 0.2 s poll.
DEAD_PREDECESSOR_WAIT_BOUND_S = 5.0


def case_pending_node_failure(args):
    setup = Setup(args, nodes=2)
    cluster_dir = f"{setup.state}/slurm"
    try:
        chain = "pending"
        setup.submit(chain, chain_job(setup, 2000), JOB_ARGS)
        event = {}

        def on_poll(doc):
            if not doc:
                return
            jobs = {j["seq"]: j for j in doc["jobs"]}
            first, second = jobs.get(0), jobs.get(1)
            if "blocker" not in event:
                node = setup.nodes_seen.get(first["job_id"]) if first and first.get("start_unix") else None
                if node and node.startswith("node"):
                    # The other node, held by another job of the user's: the successor will have to queue.
                    other = "node2" if node == "node1" else "node1"
                    blocker = run(demo.as_user(["sbatch", "--parsable", "--exclusive", f"--nodelist={other}",
                                                "--time=5", f"--chdir={setup.state}/work", "--wrap=sleep 280"]))
                    event.update(blocker=int(blocker.stdout.strip().split(";")[0]), node=node, other=other)
                    log(f"job {first['job_id']} runs on {node}; job {event['blocker']} holds {other}")
                return
            if "failed_at" not in event:
                if second and second.get("start_unix") is None and second.get("job_id"):
                    time.sleep(2)  # queued behind the blocker
                    run(["bash", CLUSTER, "fail", cluster_dir, event["node"]])
                    event.update(failed_at=time.time(), successor=second["job_id"], failed_job=first["job_id"])
                    log(f"{event['node']} failed under job {first['job_id']}; job {second['job_id']} is pending")
                return
            if "node_fail_at" not in event:
                state = run(["squeue", "-h", "-t", "all", "-j", str(event["failed_job"]), "-o", "%T"],
                            check=False).stdout.strip()
                if state == "NODE_FAIL":
                    # As soon as slurmctld says so, the other node frees up: the successor starts while
                    # batond may not have ticked yet.
                    event["node_fail_at"] = time.time()
                    run(demo.as_user(["scancel", str(event["blocker"])]))
                    log(f"slurmctld: job {event['failed_job']} NODE_FAIL; job {event['blocker']} cancelled")
                return
            if "revived" not in event and second and second.get("start_unix"):
                run(["bash", CLUSTER, "revive", cluster_dir, event["node"]], timeout=120)
                event["revived"] = True

        doc = setup.wait_finished(chain, 300, on_poll)
        if "node_fail_at" not in event:
            raise Failure(f"the scenario did not happen: {event}")
        restored = check_restores(setup, chain, doc)
        text = setup.output(chain, event["successor"])
        waits = [float(w) for w in re.findall(r"^handover wait ([0-9.]+) s", text, re.MULTILINE)]
        if not waits:
            raise Failure(f"job {event['successor']} did not wait for a handover checkpoint at all:\n{text}")
        if "ended NODE_FAIL without a final checkpoint" not in text:
            raise Failure(f"job {event['successor']} was not told that its predecessor died:\n{text}")
        if waits[0] > DEAD_PREDECESSOR_WAIT_BOUND_S:
            raise Failure(f"job {event['successor']} waited {waits[0]} s for a dead job's final checkpoint")
        jobs = {j["job_id"]: j for j in doc["jobs"]}
        started = jobs[event["successor"]]["start_unix"]
        went_on = restored[event["successor"]][1]
        setup.one_job_per_key()
        log(f"PASS: job {event['successor']} started {started - event['node_fail_at']:.1f} s after slurmctld's "
            f"NODE_FAIL ({event['node_fail_at'] - event['failed_at']:.1f} s after the power loss), waited "
            f"{waits[0]:.1f} s for the dead job's final checkpoint, trained again {went_on - started:.1f} s "
            f"after its start (bound {DEAD_PREDECESSOR_WAIT_BOUND_S} s; handover_wait is 120 s)")
    finally:
        setup.close()


def stop_training_of(job_id):
    """SIGSTOPs the training processes of a job (ckpt_chain_job with SLURM_JOB_ID=job_id): a training
    that cannot answer its TERM, as one hung in I/O would not. Returns how many were stopped."""
    stopped = 0
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{proc}/comm") as f:
                if f.read().strip() != "ckpt_chain_job":
                    continue
            with open(f"{proc}/environ", "rb") as f:
                if f"SLURM_JOB_ID={job_id}".encode() not in f.read().split(b"\0"):
                    continue
            os.kill(int(proc.rsplit("/", 1)[1]), signal.SIGSTOP)
            stopped += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return stopped


def case_handover_node_failure(args):
    setup = Setup(args, nodes=2)
    cluster_dir = f"{setup.state}/slurm"
    try:
        chain = "waiting"
        setup.submit(chain, chain_job(setup, 2000), JOB_ARGS)
        event = {}

        def on_poll(doc):
            if not doc:
                return
            jobs = {j["seq"]: j for j in doc["jobs"]}
            first, second = jobs.get(0), jobs.get(1)
            if "blocker" not in event:
                node = setup.nodes_seen.get(first["job_id"]) if first and first.get("start_unix") else None
                if node and node.startswith("node"):
                    # The other node held until the predecessor's training is stopped: then the successor
                    # starts there and waits for a final checkpoint that will never come.
                    other = "node2" if node == "node1" else "node1"
                    blocker = run(demo.as_user(["sbatch", "--parsable", "--exclusive", f"--nodelist={other}",
                                                "--time=5", f"--chdir={setup.state}/work", "--wrap=sleep 280"]))
                    event.update(blocker=int(blocker.stdout.strip().split(";")[0]), node=node, other=other)
                    log(f"job {first['job_id']} runs on {node}; job {event['blocker']} holds {other}")
                return
            if "stopped" not in event:
                if second and second.get("job_id") and second.get("start_unix") is None:
                    event["stopped"] = stop_training_of(first["job_id"])
                    if not event["stopped"]:
                        raise Failure(f"no training process of job {first['job_id']} to stop")
                    run(demo.as_user(["scancel", str(event["blocker"])]))
                    event.update(successor=second["job_id"], failed_job=first["job_id"])
                    log(f"job {first['job_id']}'s training stopped; job {event['blocker']} cancelled, "
                        f"job {second['job_id']} can start on {event['other']}")
                return
            if "failed_at" not in event:
                if second.get("start_unix"):
                    time.sleep(3)  # the successor is in its handover wait now
                    run(["bash", CLUSTER, "fail", cluster_dir, event["node"]])
                    event["failed_at"] = time.time()
                    log(f"{event['node']} failed under job {event['failed_job']}; job {event['successor']} "
                        "waits for its handover checkpoint")
                return
            if "node_fail_at" not in event:
                state = run(["squeue", "-h", "-t", "all", "-j", str(event["failed_job"]), "-o", "%T"],
                            check=False).stdout.strip()
                if state == "NODE_FAIL":
                    event["node_fail_at"] = time.time()
                    log(f"slurmctld: job {event['failed_job']} NODE_FAIL")
                return
            if "revived" not in event:
                run(["bash", CLUSTER, "revive", cluster_dir, event["node"]], timeout=120)
                event["revived"] = True

        doc = setup.wait_finished(chain, 300, on_poll)
        if "node_fail_at" not in event:
            raise Failure(f"the scenario did not happen: {event}")
        restored = check_restores(setup, chain, doc)
        text = setup.output(chain, event["successor"])
        waits = [float(w) for w in re.findall(r"^handover wait ([0-9.]+) s", text, re.MULTILINE)]
        if not waits:
            raise Failure(f"job {event['successor']} did not wait for a handover checkpoint at all:\n{text}")
        if "ended NODE_FAIL without a final checkpoint" not in text:
            raise Failure(f"job {event['successor']} was not told that its predecessor died:\n{text}")
        jobs = {j["job_id"]: j for j in doc["jobs"]}
        started = jobs[event["successor"]]["start_unix"]
        # From slurmctld's NODE_FAIL (as this test saw it, up to a poll late) to the end of the wait.
        after_node_fail = started + waits[0] - event["node_fail_at"]
        if after_node_fail > DEAD_PREDECESSOR_WAIT_BOUND_S:
            raise Failure(f"job {event['successor']} went on waiting {after_node_fail:.1f} s after its "
                          f"predecessor's NODE_FAIL (bound {DEAD_PREDECESSOR_WAIT_BOUND_S} s)")
        went_on = restored[event["successor"]][1]
        setup.one_job_per_key()
        log(f"PASS: job {event['successor']} waited {waits[0]:.1f} s for its handover checkpoint, "
            f"{after_node_fail:.1f} s of it after slurmctld's NODE_FAIL "
            f"({event['node_fail_at'] - event['failed_at']:.1f} s after the power loss), trained again "
            f"{went_on - started:.1f} s after its start (bound {DEAD_PREDECESSOR_WAIT_BOUND_S} s; "
            "handover_wait is 120 s)")
    finally:
        setup.close()


def case_requeue(args):
    setup = Setup(args, nodes=3)
    cluster_dir = f"{setup.state}/slurm"
    try:
        chain = "requeued"
        # A plain sbatch: batond takes the chain over from the plugin's first report, and submits its
        # successors with the same script (the options in #SBATCH lines go with it).
        directives = "".join(f"#SBATCH {option}\n" for option in
                             ["--requeue", *JOB_ARGS, f"--output={setup.state}/work/{chain}-%j.out"])
        script = setup.script(chain, directives + chain_job(setup, 1600))
        first = run(demo.as_user(["sbatch", "--parsable", f"--baton={chain}", f"--chdir={setup.state}/work",
                                  script])).stdout.strip()
        first = int(first.split(";")[0])
        log(f"submitted job {first} with --requeue")
        failure = {}

        def on_poll(doc):
            if not failure:
                node = setup.nodes_seen.get(first)
                started = run(["squeue", "-h", "-j", str(first), "-o", "%T"], check=False).stdout.strip()
                if started == "RUNNING" and node and node.startswith("node"):
                    time.sleep(8)  # some training to lose
                    run(["bash", CLUSTER, "fail", cluster_dir, node])
                    failure.update(node=node, at=time.time())
                    log(f"{node} failed under job {first}")
            elif "revived" not in failure:
                state = run(["sinfo", "-h", "-n", failure["node"], "-o", "%t"], check=False).stdout.strip()
                if state.startswith("down"):
                    run(["bash", CLUSTER, "revive", cluster_dir, failure["node"]], timeout=120)
                    failure["revived"] = True

        doc = setup.wait_finished(chain, 290, on_poll)
        restarts = run(["scontrol", "show", "job", str(first)], check=False).stdout
        count = re.search(r"Restarts=(\d+)", restarts)
        if not count or int(count.group(1)) < 1:
            raise Failure(f"Slurm did not requeue job {first}:\n{restarts}")
        seqs = [j["seq"] for j in doc["jobs"] if j["state"] != "CANCELLED" or j.get("start_unix")]
        if len(seqs) != len(set(seqs)):
            raise Failure(f"more than one job for a seq: {json.dumps(doc['jobs'], indent=1)}")
        setup.one_job_per_key()
        check_restores(setup, chain, doc)
        log(f"PASS: job {first} requeued by Slurm ({count.group(1)} restart(s)), {len(doc['jobs'])} jobs, "
            f"one per seq: {[(j['job_id'], j['seq'], j['state']) for j in doc['jobs']]}")
    finally:
        setup.close()


def shared_results(setup, name):
    """A directory every job's ranks (the chain's user) write their reports into."""
    results = setup.work(name)
    os.makedirs(results)
    os.chmod(results, 0o1777)
    return results


def two_node_jobs(setup, doc):
    """The chain's jobs that ran, and their nodes; fails unless at least two ran, each on two nodes."""
    ran = [j for j in doc["jobs"] if j.get("start_unix") is not None and j["state"] != "CANCELLED"]
    nodes = {setup.nodes_seen.get(j["job_id"]) for j in ran}
    if len(ran) < 2 or any(n is None or "," not in n and "[" not in n for n in nodes):
        raise Failure(f"the chain did not run as 2-node jobs: {len(ran)} jobs on {nodes}")
    return ran, nodes


DDP_BODY = """set -euo pipefail
# One rank per node; rank 0's node is the rendezvous, on a port of this job's (a predecessor and its
# successor share nodes during the handover).
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$((20000 + SLURM_JOB_ID % 10000))
srun bash -c 'exec "$PYTHON" "$DDP_TEST" --worker --rank "$SLURM_PROCID" --ranks "$SLURM_NTASKS" \\
    --master-addr "$0" --port "$1" --chain-dir "$BATON_CHAIN_DIR" --results "$RESULTS" \\
    --steps "$STEPS" --interval 0 --seed 1 --example "$EXAMPLE" --slow 0.05' "$master" "$port"
"""


def case_ddp(args):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import ddp_test
    import torch

    setup = Setup(args, nodes=2)
    try:
        chain = "ddp"
        results = shared_results(setup, "ddp-results")
        test_copy = f"{setup.app}/ddp_test.py"
        shutil.copy(ddp_test.__file__, test_copy)
        shutil.copy(os.path.join(os.path.dirname(ddp_test.__file__), "ddp_ranks.py"), setup.app)  # its ranks
        example = f"{setup.app}/train_digits.py"
        steps = 1400  # about 70 s at 50 ms a step, so that the 1-minute jobs hand over at least once
        export = ",".join(["ALL", f"PYTHON={sys.executable}", f"DDP_TEST={test_copy}",
                           f"RESULTS={results}", f"STEPS={steps}", f"EXAMPLE={example}", "OMP_NUM_THREADS=1",
                           "PYTHONDONTWRITEBYTECODE=1", "USE_LIBUV=0", f"PYTHONPATH={setup.pythonpath}",
                           f"HOME={setup.state}/work"])
        setup.submit(chain, DDP_BODY, ["--time=1", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1",
                                       f"--export={export}"])
        doc = setup.wait_finished(chain, 290)
        ran, nodes = two_node_jobs(setup, doc)
        restored = [json.load(open(f"{results}/restored-{rank}")) for rank in range(2)]
        if restored[0]["iteration"] != restored[1]["iteration"]:
            raise Failure(f"the ranks of the last job restored different steps: {restored}")
        # Two levels with two ranks on two nodes: each rank kept its shards in its node's directory, and
        # every checkpoint in the chain came through the ranks' collective drain.
        shards = glob.glob(f"{setup.state}/slurm/local/node*/{USER}/{chain}/rank-*/ckpt-*/data-r*.bin")
        if not shards:
            raise Failure("no rank kept a node-local shard: the job did not use two levels")
        undrained = [name for name, m in setup.manifests[chain].items()
                     if m.get("world_size") != 2 or not m.get("node")]
        if undrained or not setup.manifests[chain]:
            raise Failure(f"checkpoints in the chain not drained from two ranks' node-local shards: {undrained}")
        finals = [torch.load(f"{results}/final-{rank}.pt") for rank in range(2)]
        differs = ddp_test.compare_with_straight_run(example, steps, setup.work(""), finals)
        if differs:
            raise Failure(differs)
        setup.one_job_per_key()
        log(f"PASS: {len(ran)} two-node jobs on {sorted(nodes)}; both ranks of the last job restored step "
            f"{restored[0]['iteration']}; {steps} steps bit-identical to a straight two-rank run")
    finally:
        setup.close()


FSDP_BODY = """set -euo pipefail
master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$((20000 + SLURM_JOB_ID % 10000))
srun bash -c 'exec "$PYTHON" "$RANKS" --mode fsdp --rank "$SLURM_PROCID" --ranks "$SLURM_NTASKS" \\
    --master-addr "$0" --port "$1" --chain-dir "$BATON_CHAIN_DIR" --results "$RESULTS" \\
    --steps "$STEPS" --interval 0 --slow 0.05' "$master" "$port"
"""


def case_fsdp(args):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    import torch
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4):
        print(f"cluster_test: SKIP: FSDP on the CPU needs PyTorch 2.4 or newer, this is {torch.__version__}")
        sys.exit(77)
    import sharded_test

    setup = Setup(args, nodes=2)
    try:
        chain = "fsdp"
        results = shared_results(setup, "fsdp-results")
        ranks = f"{setup.app}/sharded_ranks.py"
        shutil.copy(os.path.join(os.path.dirname(sharded_test.__file__), "sharded_ranks.py"), ranks)
        steps = 1000  # at 50 ms a step, longer than a 1-minute job: the chain hands over at least once
        export = ",".join(["ALL", f"PYTHON={sys.executable}", f"RANKS={ranks}", f"RESULTS={results}",
                           f"STEPS={steps}", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", "USE_LIBUV=0",
                           f"PYTHONPATH={setup.pythonpath}", f"HOME={setup.state}/work"])
        setup.submit(chain, FSDP_BODY, ["--time=1", "--nodes=2", "--ntasks-per-node=2", "--overcommit",
                                        f"--export={export}"])
        doc = setup.wait_finished(chain, 420)
        ran, nodes = two_node_jobs(setup, doc)
        restored = {json.load(open(f"{results}/restored-{rank}.json"))["iteration"] for rank in range(4)}
        if len(restored) != 1 or restored == {0}:
            raise Failure(f"the ranks of the last job restored {restored}, not one step of the chain")
        versions = {m.get("format_version") for m in setup.manifests[chain].values()}
        if versions != {3}:
            raise Failure(f"the chain's checkpoints are not four-rank tensor pieces: format versions {versions}")
        # The same training straight through, four ranks on this machine.
        reference = setup.work("fsdp-reference")
        straight = sharded_test.Launch("fsdp", 4, f"{reference}/chain", f"{reference}/results", steps=steps)
        straight.expect_success("the straight four-rank run")
        expected = sharded_test.load_state(f"{reference}/results", f"end-{steps}")
        sharded_test.same_state(expected, sharded_test.load_state(results, f"end-{steps}"),
                                "the chain's end against the straight four-rank run")
        setup.one_job_per_key()
        log(f"PASS: {len(ran)} two-node FSDP jobs on {sorted(nodes)}; the 4 ranks of the last job restored step "
            f"{restored.pop()}; {steps} steps bit-identical to a straight four-rank run")
    except sharded_test.Failure as failure:
        raise Failure(str(failure)) from None
    finally:
        setup.close()


def leftovers(cluster_id, state_dir):
    found = []
    namespaces = run(["ip", "netns", "list"], check=False).stdout
    found += [line for line in namespaces.splitlines() if f"baton-{cluster_id}-" in line]
    links = run(["ip", "-o", "link"], check=False).stdout
    found += [line.split(":")[1].strip() for line in links.splitlines() if f"bt{cluster_id}" in line]
    found += glob.glob(f"/run/netns/baton-{cluster_id}-*")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state_dir in cmdline and "cluster_test" not in cmdline:
            found.append(f"process {pid}: {cmdline}")
    return found


def case_cleanup(args):
    base = tempfile.mkdtemp(prefix="baton-cluster-cleanup-")
    try:
        # A cluster started, used, stopped.
        one = f"{base}/one"
        run(["bash", CLUSTER, "start", one, "--nodes", "2"], timeout=180)
        cluster_id = re.search(r"cluster_id=(\w+)", open(f"{one}/cluster.env").read()).group(1)
        env = dict(os.environ, SLURM_CONF=f"{one}/slurm.conf")
        run(["sbatch", "--parsable", "-N", "2", "-o", f"{one}/job.out", "--wrap", "srun sleep 300"], env=env)
        time.sleep(2)
        run(["bash", CLUSTER, "stop", one], timeout=120)
        left = leftovers(cluster_id, one)
        if left:
            raise Failure(f"left behind after stop: {left}")
        # A start killed half-way (namespaces made, daemons starting), then stopped.
        two = f"{base}/two"
        starting = subprocess.Popen(["bash", CLUSTER, "start", two, "--nodes", "3"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(100):
            if glob.glob("/run/netns/baton-*") and os.path.exists(f"{two}/cluster.env"):
                break
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(starting.pid, signal.SIGKILL)
        starting.wait()
        cluster_id = re.search(r"cluster_id=(\w+)", open(f"{two}/cluster.env").read()).group(1)
        run(["bash", CLUSTER, "stop", two], timeout=120)
        left = leftovers(cluster_id, two)
        if left:
            raise Failure(f"left behind after a killed start and stop: {left}")
        log("PASS: nothing left after stop, nor after a killed start and stop")
    finally:
        for d in glob.glob(f"{base}/*"):
            if os.path.exists(f"{d}/cluster.env"):
                run(["bash", CLUSTER, "stop", d], timeout=120, check=False)
        shutil.rmtree(base, ignore_errors=True)


def case_accounting(args):
    """cluster.sh --accounting: slurmdbd on MariaDB records the jobs (sacct), a job held by a dependency
    accrues age only from when it became eligible (what the chain benchmark's priority rests on), and
    stop leaves neither database process behind."""
    base = tempfile.mkdtemp(prefix="baton-cluster-accounting-")
    os.chmod(base, 0o755)  # MariaDB runs as its own user, under it
    state = f"{base}/slurm"
    try:
        run(["bash", CLUSTER, "start", state, "--nodes", "1", "--accounting",
             "--conf", "PriorityType=priority/multifactor", "--conf", "PriorityWeightAge=1000"], timeout=180)
        cluster_id = re.search(r"cluster_id=(\w+)", open(f"{state}/cluster.env").read()).group(1)
        env = dict(os.environ, SLURM_CONF=f"{state}/slurm.conf")

        def sbatch(*extra):
            return run(["sbatch", "--parsable", "-N", "1", "--exclusive", "-t", "2", "-o", "/dev/null", *extra],
                       env=env).stdout.strip()

        first = sbatch("--wrap", "sleep 4")
        held = sbatch("--dependency=afterany:" + first, "--wrap", "true")
        plain = sbatch("--wrap", "true")
        for _ in range(200):
            if run(["squeue", "-h", "-j", f"{held},{plain}", "-o", "%i"], env=env, check=False).stdout.strip() == "":
                break
            time.sleep(0.2)
        else:
            raise Failure("the jobs did not finish within 40 s")

        def fields(job):
            out = run(["scontrol", "show", "job", job], env=env).stdout
            return dict(re.findall(r"(SubmitTime|AccrueTime|EndTime)=(\S+)", out))

        first_end, held_times, plain_times = fields(first)["EndTime"], fields(held), fields(plain)
        if plain_times["AccrueTime"] != plain_times["SubmitTime"]:
            raise Failure(f"a job free to run accrues from its submission: {plain_times}")
        if held_times["AccrueTime"] < first_end or held_times["AccrueTime"] == held_times["SubmitTime"]:
            raise Failure(f"job {held} accrued before its dependency {first} ended at {first_end}: {held_times}")
        log(f"PASS: the held job accrued from {held_times['AccrueTime']} (its predecessor ended {first_end}, "
            f"it was submitted {held_times['SubmitTime']})")
        for _ in range(100):
            recorded = run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", f"{first},{held},{plain}"],
                           env=env, check=False).stdout.split()
            if len(recorded) == 3 and all(line.endswith("|COMPLETED") for line in recorded):
                break
            time.sleep(0.2)
        else:
            raise Failure(f"sacct does not show the three jobs completed: {recorded}")
        log("PASS: slurmdbd recorded the three jobs")
        daemons = [f"{state}/slurmdbd.pid", f"{state}/mysql/pid"]
        pids = [int(open(path).read()) for path in daemons]
        run(["bash", CLUSTER, "stop", state], timeout=120)
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
        left = leftovers(cluster_id, state) + [f"process {pid}" for pid in alive]
        if left:
            raise Failure(f"left behind after stop: {left}")
        log("PASS: slurmdbd and MariaDB stopped with the cluster")
    finally:
        if os.path.exists(f"{state}/cluster.env"):
            run(["bash", CLUSTER, "stop", state], timeout=120, check=False)
        if not args.keep_state:
            shutil.rmtree(base, ignore_errors=True)


CASES = {"handover": case_handover, "node-failure": case_node_failure,
         "pending-node-failure": case_pending_node_failure,
         "handover-node-failure": case_handover_node_failure, "requeue": case_requeue,
         "ddp": case_ddp, "fsdp": case_fsdp, "cleanup": case_cleanup, "accounting": case_accounting}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--chain-job", help="tests/spank_plugin/ckpt_chain_job of the build")
    parser.add_argument("--seeds", type=int, default=1, help="node-failure: failures, one chain each")
    parser.add_argument("--seed", type=int, default=None, help="node-failure: the random moments' seed")
    parser.add_argument("--keep-state", action="store_true")
    args = parser.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    if args.chain_job:
        args.chain_job = os.path.abspath(args.chain_job)
    if os.geteuid() != 0 or not demo.namespaces_work():
        print("cluster_test: SKIP: needs root and network namespaces", flush=True)
        return 77
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    log(f"case {args.case}, seed {args.seed}")
    try:
        CASES[args.case](args)
    except Failure as failure:
        print(f"FAIL: {failure}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
