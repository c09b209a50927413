#!/usr/bin/python3
"""The demo's timeline (deploy/demo/report.py) keeps every job's label readable: inside its running bar
where it fits before the first final checkpoint, else in dark text beside the bars, inside the axes, and
never under a bar of another colour or a final-checkpoint line. Checked on the layout of a quick demo
(short jobs on a long axis, whose labels do not fit their bars) and of a long one (labels inside).

Exit status: 0 passed, 1 failed, 77 skipped (no matplotlib).
"""

import os
import sys

try:
    import matplotlib  # noqa: F401
except ImportError as missing:
    print(f"skipped: {missing}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "demo"))
import report  # noqa: E402

FINAL_RED = "#d62728"


def summary(job_seconds, queued_seconds, jobs=4):
    """A chain's summary as the demo writes it: each successor starts while its predecessor runs (a
    handover), final checkpoints at each job's end."""
    t0 = 1_700_000_000.0
    rows, checkpoints, transitions = [], [], []
    start = t0 + queued_seconds
    for seq in range(jobs):
        job_id = 100 + seq
        submit = start - queued_seconds
        end = start + job_seconds
        rows.append({"job_id": job_id, "seq": seq, "node": f"node{seq % 2 + 1}", "submit_unix": submit,
                     "start_unix": start, "end_unix": end, "resumed_step": seq * 4878,
                     "reached_step": (seq + 1) * 4878 - 1})
        checkpoints += [{"job_id": job_id, "created_unix": start + job_seconds * f, "final": False}
                        for f in (0.3, 0.6)]
        checkpoints.append({"job_id": job_id, "created_unix": end - 1, "final": True})
        if seq > 0:
            transitions.append({"from_job": job_id - 1, "to_job": job_id, "interruption_s": -3.0,
                                "handover_signalled_unix": start, "handover_completed_unix": start + 3,
                                "handover_s": 3.0})
        start = end - 3
    return {"first_submit_unix": t0, "jobs": rows, "last_end_unix": rows[-1]["end_unix"],
            "checkpoints": checkpoints, "transitions": transitions, "chain": "demo/mnist", "jobs_ran": jobs,
            "time_limit_min": 1, "steps": jobs * 4878, "weights_identical": True}


def overlaps(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def check_layout(name, s):
    from matplotlib.colors import to_hex
    fig, ax, labels = report.timeline_figure(s)
    renderer = fig.canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)
    bars = [p for p in ax.patches if hasattr(p, "get_width") and p.get_height() == 0.5]
    finals = [line for line in ax.lines if to_hex(line.get_color()) == FINAL_RED]
    problems = []
    for text, job in labels:
        box = text.get_window_extent(renderer)
        what = f"{name}: label '{text.get_text()}'"
        if box.x0 < axes_box.x0 or box.x1 > axes_box.x1:
            problems.append(f"{what} leaves the axes")
        for line in finals:
            xs, ys = line.get_xdata(), line.get_ydata()
            (x, y0), (_, y1) = ax.transData.transform((xs[0], ys[0])), ax.transData.transform((xs[1], ys[1]))
            if box.x0 <= x <= box.x1 and min(y0, y1) < box.y1 and box.y0 < max(y0, y1):
                problems.append(f"{what} is crossed by a final checkpoint")
        inside = to_hex(text.get_color()) == "#ffffff"
        for bar in bars:
            bar_box = bar.get_window_extent(renderer)
            if not overlaps(box, bar_box):
                continue
            own_running = abs(bar.get_x() - (job["start_unix"] - s["first_submit_unix"])) < 1e-6
            if not (inside and own_running):
                problems.append(f"{what} lies on a bar it is not written in")
            elif box.x1 > bar_box.x1:
                problems.append(f"{what} runs out of its bar")
    import matplotlib.pyplot as plt
    plt.close(fig)
    inside_count = sum(to_hex(t.get_color()) == "#ffffff" for t, _ in labels)
    print(f"{name}: {len(labels)} labels, {inside_count} inside their bars, {len(problems)} problems")
    return problems, inside_count


def main():
    problems = []
    quick, quick_inside = check_layout("quick demo (60 s jobs)", summary(60, 20, jobs=5))
    long, long_inside = check_layout("long demo (20 min jobs)", summary(1200, 30, jobs=3))
    problems += quick + long
    if long_inside != 3:
        problems.append(f"long demo: {long_inside} of 3 labels inside their bars, where all fit")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
