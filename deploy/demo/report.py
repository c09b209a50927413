"""The demo's analysis of a finished chain (from the files it left in the output folder), its text
report, the weights' hashes and the timeline picture."""

import hashlib
import json
import os
import re

OUTPUT_FILES = ["metrics.txt", "chain.json", "manifests.json", "summary.json", "report.txt", "timeline.svg",
                "timeline.png", "weights-chain.pt", "weights-reference.pt", "loss-chain.log",
                "loss-reference.log"]


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def weights_hash(path):
    """SHA-256 over the saved model and optimizer tensors (name, dtype, shape, bytes, in name order):
    equal hashes mean bit-identical weights and optimizer state."""
    import torch  # only here: the rest of the report does not need it

    state = torch.load(path, map_location="cpu")
    digest = hashlib.sha256()

    def add(prefix, value):
        if isinstance(value, torch.Tensor):
            tensor = value.detach().contiguous()
            digest.update(f"{prefix} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
            digest.update(tensor.numpy().tobytes())
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                add(f"{prefix}.{key}", value[key])
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(f"{prefix}[{i}]", item)
        else:
            digest.update(f"{prefix} {value!r}\n".encode())

    add("model", state["model"])
    add("optimizer", state["optimizer"])
    return state.get("step"), digest.hexdigest()


def analyse(output, reached, steps, time_limit_min, node_of=None):
    with open(f"{output}/chain.json") as f:
        doc = json.load(f)
    with open(f"{output}/manifests.json") as f:
        manifests = json.load(f)
    jobs = job_facts(output, doc, manifests, reached, node_of)
    transitions = transition_facts(doc, jobs)

    chain_step, chain_hash = (None, None)
    reference_step, reference_hash = (None, None)
    if os.path.exists(f"{output}/weights-chain.pt"):
        chain_step, chain_hash = weights_hash(f"{output}/weights-chain.pt")
    if os.path.exists(f"{output}/weights-reference.pt"):
        reference_step, reference_hash = weights_hash(f"{output}/weights-reference.pt")
    loss_identical = (os.path.exists(f"{output}/loss-chain.log")
                      and read_bytes(f"{output}/loss-chain.log") == read_bytes(f"{output}/loss-reference.log"))
    reference_accuracy = re.search(r"test accuracy ([0-9.]+)", read_text(f"{output}/jobs/reference.out"))
    overheads = [j["overhead_percent"] for j in jobs if j["overhead_percent"] is not None]
    return {
        "chain": doc["chain"].get("name", "digits"), "chain_state": doc["chain"].get("state"),
        "steps": steps, "time_limit_min": time_limit_min,
        "jobs_submitted": len(doc["jobs"]), "jobs_ran": len(jobs), "jobs": jobs, "transitions": transitions,
        "handovers_completed": sum(1 for h in doc.get("handovers", []) if h.get("completed_unix") is not None),
        "checkpoints_seen": len(manifests),
        "overhead_percent_mean": sum(overheads) / len(overheads) if overheads else None,
        "final_accuracy": jobs[-1]["accuracy"] if jobs else None,
        "reference_accuracy": float(reference_accuracy.group(1)) if reference_accuracy else None,
        "chain_weights_sha256": chain_hash, "chain_weights_step": chain_step,
        "reference_weights_sha256": reference_hash, "reference_weights_step": reference_step,
        "weights_identical": chain_hash is not None and chain_hash == reference_hash and chain_step == steps,
        "loss_log_identical": loss_identical,
        "first_submit_unix": min(j["submit_unix"] for j in doc["jobs"]) if doc["jobs"] else None,
        "last_end_unix": max((j["end_unix"] or 0) for j in jobs) if jobs else None,
        "checkpoints": [{k: m.get(k) for k in ("iteration", "created_unix", "job_id", "final", "training_done")}
                        for m in manifests],
    }


def job_facts(output, doc, manifests, reached, node_of):
    """Each job that ran: what its output, its manifests and batond's document say of it."""
    jobs = []
    for job in (j for j in doc["jobs"] if j.get("start_unix") is not None):
        text = read_text(f"{output}/jobs/job-{job['job_id']}.out")
        resumed = re.search(r"resumed from step (\d+)", text)
        ended = re.search(r"step (\d+) test accuracy ([0-9.]+)", text)
        waited = re.search(r"waited ([0-9.]+) s for the previous job's final checkpoint", text)
        # A final checkpoint can be pruned (keep=2) before the progress view sees its manifest; the
        # job's output still says that it committed.
        stopped = re.search(r"stopped at step (\d+): the final checkpoint of this job has committed", text)
        own = sorted((m for m in manifests if m.get("job_id") == job["job_id"]), key=lambda m: m["iteration"])
        tuning = own[-1].get("tuning", {}) if own else {}
        timings = [m.get("timings", {}) for m in own]
        jobs.append({
            "job_id": job["job_id"], "seq": job["seq"], "state": job["state"],
            "node": (node_of or {}).get(job["job_id"]),
            "submit_unix": job["submit_unix"], "start_unix": job["start_unix"], "end_unix": job["end_unix"],
            "resumed_step": int(resumed.group(1)) if resumed else 0,
            "reached_step": int(ended.group(1)) if ended else reached.get(job["job_id"]),
            "accuracy": float(ended.group(2)) if ended else None,
            "handover_wait_s": float(waited.group(1)) if waited else 0.0,
            "checkpoints_seen": len(own),
            "final_checkpoint": next((m["iteration"] for m in reversed(own) if m.get("final")),
                                     int(stopped.group(1)) if stopped else None),
            "overhead_percent": tuning.get("overhead_percent"),
            "interval": tuning.get("interval"),
            "snapshot_ms": mean([t.get("snapshot_seconds") for t in timings], 1000),
            "persist_ms": mean([t.get("persist_seconds") for t in timings], 1000),
        })
    return jobs


def transition_facts(doc, jobs):
    """Each move from a job to the next: the interruption, the handover and the iterations lost."""
    handovers = {h["predecessor_job_id"]: h for h in doc.get("handovers", [])}
    transitions = []
    for before, after in zip(jobs, jobs[1:]):
        handover = handovers.get(before["job_id"], {})
        lost = None
        if before["reached_step"] is not None:
            lost = max(0, before["reached_step"] - after["resumed_step"])
        transitions.append({
            "from_job": before["job_id"], "to_job": after["job_id"],
            "other_node": before["node"] is not None and after["node"] is not None and before["node"] != after["node"],
            "successor_submitted_before_end": after["submit_unix"] <= (before["end_unix"] or after["submit_unix"]),
            # Positive: a gap with no job running; negative: both ran together (an overlap).
            "interruption_s": after["start_unix"] - before["end_unix"] if before["end_unix"] else None,
            "handover": bool(handover),
            "handover_signalled_unix": handover.get("time_unix"),
            "handover_completed_unix": handover.get("completed_unix"),
            "handover_s": handover.get("handover_s"),
            "successor_waited_s": after["handover_wait_s"],
            "resumed_step": after["resumed_step"],
            "iterations_lost": lost,
        })
    return transitions


def mean(values, scale):
    values = [v for v in values if isinstance(v, (int, float))]
    return round(sum(values) / len(values) * scale, 2) if values else None


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def fmt(value, unit="", digits=1):
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def text(s):
    lines = []
    wall = (s["last_end_unix"] - s["first_submit_unix"]) if s["first_submit_unix"] and s["last_end_unix"] else None
    lines.append(f"=== baton demo: chain {s['chain']} {s['chain_state']} ===")
    lines.append(f"training: {s['steps']} steps in jobs limited to {s['time_limit_min']} min; "
                 f"{s['jobs_ran']} jobs ran ({s['jobs_submitted']} submitted), {fmt(wall, ' s', 0)} from first "
                 "submit to last end")
    lines.append("")
    lines.append("  job   seq  node      steps            seen   final ckpt  overhead  interval  snapshot  persist")
    for j in s["jobs"]:
        span = f"{j['resumed_step']}..{j['reached_step'] if j['reached_step'] is not None else '?'}"
        lines.append(f"  {j['job_id']:<5} {j['seq']:<4} {j.get('node') or '-':<9} {span:<16} {j['checkpoints_seen']:<6} "
                     f"{str(j['final_checkpoint'] if j['final_checkpoint'] is not None else '-'):<11} "
                     f"{fmt(j['overhead_percent'], ' %', 2):<9} {str(j['interval'] or '-'):<9} "
                     f"{fmt(j['snapshot_ms'], ' ms', 2):<9} {fmt(j['persist_ms'], ' ms', 2)}")
    lines.append("")
    lines.append("handovers:")
    for t in s["transitions"]:
        kind = ("overlap" if t["interruption_s"] is not None and t["interruption_s"] <= 0 else "gap")
        amount = abs(t["interruption_s"]) if t["interruption_s"] is not None else None
        how = (f"handover {fmt(t['handover_s'], ' s')} (batond's request to the predecessor's end)" if t["handover"]
               else "no handover (predecessor ended on its own)")
        where = " (to another node)" if t.get("other_node") else ""
        lines.append(f"  {t['from_job']} -> {t['to_job']}{where}: {kind} {fmt(amount, ' s', 0)}, successor submitted "
                     f"{'before' if t['successor_submitted_before_end'] else 'after'} the predecessor ended, "
                     f"{how}, successor waited {fmt(t['successor_waited_s'], ' s')} for the final checkpoint, "
                     f"resumed at step {t['resumed_step']}, iterations lost {t['iterations_lost']}")
    lines.append("")
    lines.append(f"checkpoint overhead (measured by the checkpointer's policy, last manifest of each job): "
                 f"mean {fmt(s['overhead_percent_mean'], ' %', 2)} of training time")
    lines.append(f"final test accuracy: {fmt(s['final_accuracy'], '', 4)} "
                 f"(uninterrupted reference: {fmt(s['reference_accuracy'], '', 4)})")
    lines.append(f"final weights sha256: chain     {s['chain_weights_sha256']} (step {s['chain_weights_step']})")
    lines.append(f"                      reference {s['reference_weights_sha256']} "
                 f"(step {s['reference_weights_step']})")
    lines.append("weights identical to the uninterrupted run: " + ("YES" if s["weights_identical"] else "NO")
                 + f"; loss log identical: {'yes' if s['loss_log_identical'] else 'no'}")
    return "\n".join(lines) + "\n"


def place_labels(fig, ax, labels):
    """Each job's label stays inside its running bar where it fits before the first final checkpoint;
    else it goes in dark text after the bar's end, or before its queued part where the axis ends
    first, so that no bar or checkpoint line cuts it."""
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    axis_left, axis_right = ax.get_window_extent(renderer).x0, ax.get_window_extent(renderer).x1
    pad = 4  # pixels between a label and what it is beside
    for text, submit, start, free_end, end in labels:
        width = text.get_window_extent(renderer).width
        if to_px((start, 0))[0] + pad + width <= to_px((free_end, 0))[0] - pad:
            continue
        text.set_color("#1f2d3d")
        after = to_px((end, 0))[0] + pad
        if after + width <= axis_right or to_px((submit, 0))[0] - pad - width < axis_left:
            text.set_position((ax.transData.inverted().transform((after, 0))[0], text.get_position()[1]))
            text.set_horizontalalignment("left")
        else:
            before = to_px((submit, 0))[0] - pad
            text.set_position((ax.transData.inverted().transform((before, 0))[0], text.get_position()[1]))
            text.set_horizontalalignment("right")


def timeline(output, s):
    """The timeline (timeline_figure) as SVG and PNG in the output folder."""
    import matplotlib.pyplot as plt
    fig, _, _ = timeline_figure(s)
    fig.savefig(f"{output}/timeline.svg")
    fig.savefig(f"{output}/timeline.png", dpi=110)
    plt.close(fig)


def timeline_figure(s):
    """Jobs as bars on a time axis (queued part light, running part solid), checkpoints as ticks on
    their job's bar (final ones red), handovers as arrows from batond's request to the predecessor's end,
    overlaps green and gaps red. Returns the figure, its axes and each job's label with its job."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "baton-demo"  # the same picture gives the same SVG
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D

    t0 = s["first_submit_unix"]
    jobs = s["jobs"]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.7 * max(len(jobs), 1)))
    rows = {j["job_id"]: i for i, j in enumerate(jobs)}
    labels = []
    for j in jobs:
        y = rows[j["job_id"]]
        end = j["end_unix"] or s["last_end_unix"]
        ax.barh(y, j["start_unix"] - j["submit_unix"], left=j["submit_unix"] - t0, height=0.5,
                color="#d0d7e1", edgecolor="#8a96a8")
        ax.barh(y, end - j["start_unix"], left=j["start_unix"] - t0, height=0.5, color="#4878a8")
        on = f"  on {j['node']}" if j.get("node") else ""
        # The label goes inside the running bar, before its first final checkpoint (a full-height line),
        # where it fits; placed once the axis is laid out (see below).
        finals = [c["created_unix"] for c in s["checkpoints"] if c["job_id"] == j["job_id"] and c.get("final")]
        free_end = min([end] + [f for f in finals if f >= j["start_unix"]])
        labels.append((ax.text(j["start_unix"] - t0 + 1, y - 0.08,
                               f"job {j['job_id']}{on}  steps {j['resumed_step']}-{j['reached_step']}",
                               va="center", color="white", fontsize=8, zorder=3),
                       j["submit_unix"] - t0, j["start_unix"] - t0, free_end - t0, end - t0))
    for c in s["checkpoints"]:
        if c["job_id"] not in rows:
            continue
        y = rows[c["job_id"]]
        final = c.get("final")
        # Ordinary checkpoints as short ticks in the bar's lower part, so that the bar stays visible.
        ax.plot([c["created_unix"] - t0] * 2, [y - 0.32, y + 0.32] if final else [y + 0.08, y + 0.25],
                color="#d62728" if final else "#f2c14e", linewidth=2.2 if final else 0.6)
    for t in s["transitions"]:
        a, b = rows[t["from_job"]], rows[t["to_job"]]
        pred = jobs[a]
        succ = jobs[b]
        if t["interruption_s"] is not None and t["interruption_s"] <= 0:
            ax.axvspan(succ["start_unix"] - t0, pred["end_unix"] - t0, ymin=0, ymax=1, color="#2ca02c", alpha=0.15)
        elif t["interruption_s"] is not None:
            ax.axvspan(pred["end_unix"] - t0, succ["start_unix"] - t0, color="#d62728", alpha=0.2)
        if t["handover_signalled_unix"] is not None:
            x0 = t["handover_signalled_unix"] - t0
            x1 = (t["handover_completed_unix"] or pred["end_unix"]) - t0
            ax.annotate("", xy=(x1, a + 0.45), xytext=(x0, a + 0.45),
                        arrowprops={"arrowstyle": "->", "color": "black", "lw": 1.2})
            ax.text(x0, a + 0.55, f"handover {fmt(t['handover_s'], ' s')}", fontsize=7)
    ax.set_yticks(range(len(jobs)))
    ax.set_yticklabels([f"seq {j['seq']}" for j in jobs])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the chain was submitted")
    ax.set_title(f"chain {s['chain']}: {s['jobs_ran']} jobs of {s['time_limit_min']} min, {s['steps']} steps, "
                 f"weights {'identical' if s['weights_identical'] else 'DIFFERENT'} to the uninterrupted run",
                 fontsize=10)
    ax.legend(handles=[Patch(color="#d0d7e1", label="queued"), Patch(color="#4878a8", label="running"),
                       Line2D([], [], color="#f2c14e", label="checkpoint"),
                       Line2D([], [], color="#d62728", lw=2.2, label="final checkpoint"),
                       Patch(color="#2ca02c", alpha=0.15, label="overlap"),
                       Patch(color="#d62728", alpha=0.2, label="gap"),
                       Line2D([], [], color="black", marker=">", label="handover (request to end)")],
              loc="upper center", bbox_to_anchor=(0.5, -0.3 if len(jobs) < 4 else -0.1), ncol=7, fontsize=7,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    place_labels(fig, ax, labels)
    return fig, ax, [(text, job) for (text, *_), job in zip(labels, jobs)]
