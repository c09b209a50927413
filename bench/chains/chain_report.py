"""What the chain benchmark computes from the jobs' output and squeue, and how it shows it: the table,
the CSV files and the SVG picture."""

import csv
import glob
import math
import os
import re
import statistics

import arms


def chain_runs(chain, work, poller):
    """Every run of every job of the chain, by start; a run's end is the job's own last line, else the
    job's end as squeue said (a run killed at its limit, or baton's jobs, which exec the training)."""
    runs = []
    for path in glob.glob(f"{work}/{chain.name}-*.out"):
        m = re.search(r"-(\d+)\.out$", path)
        if not m:
            continue
        job_id = int(m.group(1))
        job_runs = arms.read_runs(path, job_id)
        if job_runs and job_runs[-1].end is None:
            job = poller.job(job_id)
            last = job_runs[-1]
            last.end = job.get("end") if job.get("state") not in ("RUNNING", "PENDING", None) else None
            if last.end is None and last.final:
                last.end = last.final[1]
        runs += job_runs
    runs.sort(key=lambda r: r.start)
    return runs


def iteration_seconds(all_runs):
    """The training's own pace on this machine: iterations over seconds, pooled over the runs that ended
    with a final checkpoint."""
    iterations = seconds = 0.0
    for r in all_runs:
        if r.trained_from and r.final and r.final[1] > r.trained_from[1]:
            iterations += r.final[0] - r.trained_from[0] + 1
            seconds += r.final[1] - r.trained_from[1]
    return seconds / iterations if iterations else 0.05


def chain_metrics(chain, runs, iteration_s, poller):
    done = next((r for r in runs if r.final and r.final[2]), None)
    m = {"arm": chain.arm, "chain": chain.name, "phase": chain.phase, "finished": done is not None,
         "jobs_submitted": sum(1 for j in poller.jobs.values() if j["name"] == chain.name), "runs": len(runs)}
    if not runs or done is None:
        return m
    used = runs[:runs.index(done) + 1]
    first, end = used[0].start, done.final[1]
    m["elapsed_s"] = end - first
    m["compute_s"] = chain.iterations * iteration_s
    m["efficiency"] = m["compute_s"] / m["elapsed_s"]
    m["wait_first_s"] = first - chain.submitted_at
    m["interruptions_s"] = [b.start - a.end for a, b in zip(used, used[1:]) if a.end is not None]
    held = training = trained = 0.0
    for r in runs:
        stop = r.end if r.end is not None else (r.final[1] if r.final else r.start)
        held += max(0.0, stop - r.start)
        if r in used and r.trained_from:
            span_end = r.final[1] if r.final else stop
            training += max(0.0, span_end - r.trained_from[1])
            trained += (r.final[0] - r.trained_from[0] + 1) if r.final else \
                max(0.0, span_end - r.trained_from[1]) / iteration_s
    m["held_idle_s"] = max(0.0, held - training)
    m["lost_iterations"] = max(0, round(trained - chain.iterations))
    return m


def broken_arms(metrics):
    """The arms that did not run at all: none of their chains got a job submitted, or none of those
    jobs started. An unfinished chain is a result; an arm that never ran is a broken benchmark."""
    arms = dict.fromkeys(m["arm"] for m in metrics)
    return [arm for arm in arms
            if not any(m["jobs_submitted"] and m["runs"] for m in metrics if m["arm"] == arm)]


def summarise(metrics, arm):
    rows = [m for m in metrics if m["arm"] == arm]
    done = [m for m in rows if m["finished"]]
    s = {"arm": arm, "chains": len(rows), "finished": len(done)}
    if not done:
        return s
    gaps = [g for m in done for g in m["interruptions_s"]]
    s["efficiency"] = sum(m["compute_s"] for m in done) / sum(m["elapsed_s"] for m in done)
    s["worst"] = min(m["efficiency"] for m in done)
    s["handovers"] = len(gaps)
    if gaps:
        s["interruption_mean"] = statistics.mean(gaps)
        s["interruption_min"], s["interruption_median"], s["interruption_max"] = \
            min(gaps), statistics.median(gaps), max(gaps)
    s["held_idle_min"] = statistics.mean(m["held_idle_s"] for m in done) / 60
    s["jobs"] = statistics.mean(m["runs"] for m in done)
    s["submitted"] = statistics.mean(m["jobs_submitted"] for m in done)
    s["lost"] = statistics.mean(m["lost_iterations"] for m in done)
    s["wait_first"] = statistics.mean(m["wait_first_s"] for m in done)
    return s


def fmt(value, spec, unit=""):
    return format(value, spec) + unit if value is not None else "-"


TABLE_HEADER = ("arm", "chains", "efficiency", "worst", "interruption s: mean (min/med/max)",
                "idle node-min", "jobs (submitted)", "it. lost", "sim eff.", "sim interruption s",
                "sim eff., window")


def table(summaries, sim, sim_window):
    """sim: the simulator at the live chain's own probe; sim_window: with a chain from every minute."""
    lines = [" | ".join(TABLE_HEADER), " | ".join("---" for _ in TABLE_HEADER)]
    for s in summaries:
        policy = s["arm"][len("baton-"):] if s["arm"].startswith("baton-") else None
        simulated = sim.get(policy, {}).get("chain_efficiency") if policy else None
        sim_gap = sim.get(policy, {}).get("mean_interruption_s") if policy else None
        window = sim_window.get(policy, {}).get("chain_efficiency") if policy else None
        gaps = "-"
        if "interruption_mean" in s:
            gaps = (f"{s['interruption_mean']:.1f} ({s['interruption_min']:.1f}/{s['interruption_median']:.1f}/"
                    f"{s['interruption_max']:.1f})")
        lines.append(" | ".join([
            s["arm"], f"{s['finished']}/{s['chains']}",
            fmt(100 * s["efficiency"] if "efficiency" in s else None, ".1f", " %"),
            fmt(100 * s["worst"] if "worst" in s else None, ".1f", " %"), gaps,
            fmt(s.get("held_idle_min"), ".2f"), f"{fmt(s.get('jobs'), '.1f')} ({fmt(s.get('submitted'), '.1f')})",
            fmt(s.get("lost"), ".0f"), fmt(100 * float(simulated) if simulated else None, ".1f", " %"),
            fmt(sim_gap, ".1f"), fmt(100 * float(window) if window else None, ".1f", " %")]))
    return "\n".join(lines)


def write_csv(path, rows):
    keys = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (";".join(f"{x:.1f}" for x in v) if isinstance(v, list) else v)
                             for k, v in row.items()})


def background_cost(out, scale):
    """What the chains cost the other users: the waits of the background jobs that started both in the
    run with the chains and in the replay of the same jobs alone (background.csv, background-alone.csv)."""
    waits = []
    for name in ("background.csv", "background-alone.csv"):
        try:
            with open(os.path.join(out, name)) as f:
                waits.append({row["job"]: float(row["wait_s"]) for row in csv.DictReader(f)})
        except (OSError, KeyError, ValueError) as error:
            return f"background without the chains: no comparison ({name}: {error})"
    both = sorted(set(waits[0]) & set(waits[1]))
    if not both:
        return "background without the chains: no job started in both runs"
    with_chains, alone = (statistics.mean(w[job] for job in both) * scale / 3600 for w in waits)
    return (f"background mean wait over the {len(both)} jobs that started in both runs: {with_chains:.2f} trace h "
            f"with the chains, {alone:.2f} without ({with_chains - alone:+.2f} h; {len(waits[0])} and "
            f"{len(waits[1])} started)")


def svg(path, groups):
    """Chain efficiency per arm, live (filled) and simulated (outlined), one panel per trace:
    groups = [(trace, [(arm, live or None, sim or None)])]."""
    bar, gap, height, top = 18, 10, 220, 30
    step = 2 * bar + gap + 60  # one arm's bars and the space after them
    width = max(760, 60 + step * max((len(rows) for _, rows in groups), default=0))
    panel_h = height + 70
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{panel_h * len(groups) + 20}" '
           'font-family="sans-serif" font-size="11">']
    # The axis starts at the lowest ten below every value shown (at most 50 %): the arms differ by a few
    # points on a quiet queue and by tens on a full one.
    values = [v for _, rows in groups for _, live, sim in rows for v in (live, sim) if v is not None]
    low = min([0.5] + [math.floor(10 * v) / 10 for v in values])
    ticks = range(round(100 * low), 101, 10)
    for g, (trace, rows) in enumerate(groups):
        y0 = g * panel_h + top
        out.append(f'<text x="10" y="{y0 - 12}" font-size="13">{trace}: chain efficiency, live (filled) and '
                   'simulated (outlined)</text>')
        for pct in ticks:
            y = y0 + height - (pct / 100 - low) / (1 - low) * height
            out.append(f'<line x1="50" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                       f'<text x="45" y="{y + 4:.1f}" text-anchor="end">{pct} %</text>')
        x = 60
        for arm, live, simulated in rows:
            outlined = 'fill="none" stroke="#c0504d" stroke-width="2"'
            for value, style in ((live, 'fill="#3b6ea8"'), (simulated, outlined)):
                if value is not None:
                    h = max(0.0, (value - low) / (1 - low)) * height
                    out.append(f'<rect x="{x}" y="{y0 + height - h:.1f}" width="{bar}" height="{h:.1f}" {style}/>')
                x += bar
            out.append(f'<text x="{x - bar}" y="{y0 + height + 14}" text-anchor="middle">{arm}</text>')
            if live is not None:
                out.append(f'<text x="{x - 1.5 * bar}" y="{y0 + height + 28}" text-anchor="middle">'
                           f'{100 * live:.1f}</text>')
            x += gap + 60
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
