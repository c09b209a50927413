#!/usr/bin/python3
"""The one-command demo, shortened (deploy/demo.sh --quick): PostgreSQL, Slurm with the plugin, munge,
batond and a chain of PyTorch jobs, end to end.

Passes when the chain finished after at least two jobs; a successor was submitted before its
predecessor ended or a handover completed; the final weights, hashed here again from the files the
demo left, equal those of the uninterrupted reference run bit for bit; and the output folder holds
Prometheus text that promtool accepts, the chain document, and non-empty SVG and PNG timelines.

Exit status: 0 passed, 1 failed, 77 skipped (not root, or Slurm, torch or scikit-learn missing).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
    import sklearn  # noqa: F401
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)


def fail(message):
    print(f"FAILED: {message}", flush=True)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print(f"ok: {message}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo", required=True, help="deploy/demo.sh")
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        print("skipped: needs root and Slurm", file=sys.stderr)
        return 77

    output = tempfile.mkdtemp(prefix="baton-demo-test-")
    try:
        env = dict(os.environ, BATON_BUILD_DIR=os.path.abspath(args.build_dir))
        result = subprocess.run(["bash", args.demo, "--quick", "--no-build", "--output", output], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=560)
        print(result.stdout, flush=True)
        check(result.returncode == 0, f"demo.sh --quick exited with {result.returncode}")

        with open(os.path.join(output, "chain.json")) as f:
            doc = json.load(f)
        check(doc["chain"]["state"] == "finished", f"the chain finished (state {doc['chain']['state']})")
        ran = [j for j in doc["jobs"] if j.get("start_unix") is not None]
        check(len(ran) >= 2, f"at least two jobs ran ({len(ran)})")
        early = any(b["submit_unix"] < a["end_unix"] for a, b in zip(ran, ran[1:]))
        handovers = [h for h in doc["handovers"] if h.get("completed_unix") is not None]
        check(early or handovers, f"a successor was submitted before its predecessor ended or a handover "
              f"completed ({len(handovers)} handovers)")
        check(any(c.get("training_done") for c in doc["checkpoints"]), "a checkpoint says training_done")

        # The hashes again, from the saved files, independently of the demo's own report.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(args.demo)), "demo"))
        import report
        chain_step, chain_hash = report.weights_hash(os.path.join(output, "weights-chain.pt"))
        reference_step, reference_hash = report.weights_hash(os.path.join(output, "weights-reference.pt"))
        check(chain_step == reference_step and chain_step > 0, f"both runs ended at step {chain_step}")
        check(chain_hash == reference_hash, f"final weights bit-identical ({chain_hash[:16]}...)")
        with open(os.path.join(output, "summary.json")) as f:
            summary = json.load(f)
        check(summary["weights_identical"] and summary["chain_weights_sha256"] == chain_hash,
              "the demo's report says so too")
        resumed = [(a["final_checkpoint"], b["resumed_step"]) for a, b in zip(summary["jobs"], summary["jobs"][1:])]
        check(all(final is not None and final == step for final, step in resumed),
              f"each successor resumed from its predecessor's final checkpoint (final, resumed: {resumed})")

        metrics = os.path.join(output, "metrics.txt")
        with open(metrics) as f:
            text = f.read()
        promtool = subprocess.run(["promtool", "check", "metrics"], input=text, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        check(promtool.returncode == 0, f"promtool accepts metrics.txt {promtool.stdout.strip()}")
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        check(samples.get('baton_chains{state="finished"}') == 1.0, "metrics count one finished chain")
        check(any(k.startswith("baton_submissions_total") and v >= 1 for k, v in samples.items()),
              "metrics count submissions")

        with open(os.path.join(output, "timeline.png"), "rb") as f:
            png = f.read()
        check(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10000, f"timeline.png ({len(png)} bytes)")
        with open(os.path.join(output, "timeline.svg")) as f:
            svg = f.read()
        check("<svg" in svg and len(svg) > 10000, f"timeline.svg ({len(svg)} bytes)")
    finally:
        shutil.rmtree(output, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
