"""The demo's live view of its chain, once a second: batond's document of it, the checkpoint manifests, the
loss log and the jobs' output, shown as one line per job (redrawn in place on a terminal)."""

import glob
import json
import os
import re
import subprocess
import sys
import time

import report


class Progress:
    """Collects the chain's state once a second: batond's document, the checkpoint manifests, the loss
    log and the job outputs, and shows one line per job."""

    def __init__(self, label, chain_dir, work, show_chain, steps, tty):
        """label: owner/name; chain_dir: the chain's directory; work: where the jobs write their output;
        show_chain(): `batonctl show --json` of the chain, as a completed process."""
        self.label, self.chain_dir, self.work, self.show_chain = label, chain_dir, work, show_chain
        self.steps, self.tty = steps, tty
        self.doc = None
        self.manifests = {}  # name -> manifest (all seen, although the chain keeps only 2)
        self.reached = {}  # job id -> highest step it was seen training
        self.printed_lines = 0
        self.last_plain = {}
        self.node_of = {}  # job id -> the node(s) it ran on, as squeue tells

    def poll_nodes(self):
        result = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %N"], capture_output=True, text=True,
                                timeout=30)
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) == 2 and words[0].isdigit():
                self.node_of[int(words[0])] = words[1]

    def poll(self):
        self.poll_nodes()
        result = self.show_chain()
        if result.returncode == 0:
            try:
                self.doc = json.loads(result.stdout)
            except json.JSONDecodeError:
                pass
        for path in glob.glob(f"{self.chain_dir}/ckpt-*/manifest.json"):
            name = os.path.basename(os.path.dirname(path))
            if name in self.manifests:
                continue
            try:
                with open(path) as f:
                    self.manifests[name] = json.load(f)
            except (OSError, json.JSONDecodeError):
                pass  # being replaced or pruned right now: the next poll sees the next one
        step = self.current_step()
        training = self.training_job()
        if step is not None and training is not None:
            self.reached[training] = max(self.reached.get(training, 0), step)

    def current_step(self):
        try:
            with open(f"{self.chain_dir}/loss.log", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200))
                lines = f.read().splitlines()
            return int(lines[-1].split()[0]) if lines else 0
        except (OSError, ValueError, IndexError):
            return None

    def jobs(self):
        return (self.doc or {}).get("jobs", [])

    def output(self, job_id):
        return report.read_text(f"{self.work}/job-{job_id}.out")

    def training_job(self):
        """The newest started job that has restored (or is the first) and has not ended."""
        candidate = None
        for job in self.jobs():
            if job.get("start_unix") is None or job.get("end_unix") is not None:
                continue
            text = self.output(job["job_id"])
            if "test accuracy" in text:
                continue
            if job["seq"] == 0 or "resumed from step" in text:
                candidate = job["job_id"]
        return candidate

    def lines(self):
        now = time.time()
        chain = (self.doc or {}).get("chain", {})
        step = self.current_step() or 0
        lines = [f"chain {self.label}: {chain.get('state', 'submitting')}, step {step}/{self.steps} "
                 + bar(step / self.steps, 30 if self.tty else 0)]
        training = self.training_job()
        previous_end = None
        for job in self.jobs():
            job_id = job["job_id"]
            ckpts = [m for m in self.manifests.values() if m.get("job_id") == job_id]
            last = max(ckpts, key=lambda m: m["iteration"]) if ckpts else None
            text = self.output(job_id)
            resumed = re.search(r"resumed from step (\d+)", text)
            finished = re.search(r"step (\d+) test accuracy", text)
            state = job.get("state", "?")
            if job_id == training:
                doing = f"training, step {step}"
            elif finished:
                doing = f"ended at step {finished.group(1)}"
            elif job.get("start_unix") is not None and job.get("end_unix") is None:
                doing = "waiting for the handover checkpoint" if not resumed else f"resumed at {resumed.group(1)}"
            elif job.get("start_unix") is None:
                doing = "queued"
            else:
                doing = f"reached step {self.reached.get(job_id, '?')}"
            ckpt = "-"
            if last:
                ckpt = f"{last['iteration']}{' final' if last.get('final') else ''} " \
                       f"({now - last['created_unix']:.0f} s ago)"
            relation = ""
            start = job.get("start_unix")
            if start is not None and job["seq"] > 0:
                if previous_end is None:
                    relation = f"overlap {now - start:.0f} s (so far)"
                else:
                    gap = start - previous_end
                    relation = f"gap {gap:.0f} s" if gap > 0 else f"overlap {-gap:.0f} s"
            previous_end = job.get("end_unix")
            node = self.node_of.get(job_id, "-")
            lines.append(f"  job {job_id:>4} seq {job['seq']:>2} {state:<10} {node:<8} {doing:<38} "
                         f"ckpt {ckpt:<28} {relation}")
        return lines

    def show(self):
        lines = self.lines()
        if self.tty:
            # Lines cut to the terminal's width: a wrapped line would throw off the cursor movement.
            width = shutil.get_terminal_size().columns - 1
            out = "".join("\x1b[1A\x1b[2K" for _ in range(self.printed_lines))
            out += "".join(line[:width] + "\n" for line in lines)
            sys.stdout.write(out)
            sys.stdout.flush()
            self.printed_lines = len(lines)
            return
        # Plain lines: a line when it changed, at most every 15 s unless its state changed.
        now = time.monotonic()
        for line in lines:
            words = line.split()
            key = " ".join(words[:2])
            state_key = words[2] if line.startswith("chain") else " ".join(words[4:7])
            # A checkpoint's age changes every second: it alone does not make a new line.
            line_key = re.sub(r"\(\d+ s ago\)", "", line)
            previous = self.last_plain.get(key)
            if previous and previous[1] == line_key:
                continue
            if previous and previous[2] == state_key and now - previous[0] < 15:
                continue
            self.last_plain[key] = (now, line_key, state_key)
            print(time.strftime("%H:%M:%S ") + line.strip(), flush=True)


def bar(fraction, width):
    fraction = min(max(fraction, 0.0), 1.0)
    if width == 0:
        return f"{fraction * 100:.0f}%"
    full = int(fraction * width)
    return "[" + "#" * full + "." * (width - full) + f"] {fraction * 100:3.0f}%"


# -- the run --
