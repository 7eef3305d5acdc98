#!/usr/bin/python3
"""Draws the figures of an lpattn run or sweep directory from its data files.

Usage: plot_run.py RUN_OR_SWEEP_DIR

A run directory (it has metrics.csv): figures/loss.png, train and validation loss against step.
A sweep directory (it has sweep.json): figures/loss_curves.png, validation loss against step, one
colour per arm and one thin line per seed; figures/gap.png, the mean gap to the reference arm
(bars, 95% paired t interval as error bars) with the per-seed gaps as points, from report.json
(written by `lpattn sweep` / `lpattn report`); and figures/gap_curves.png, each arm's validation
loss minus the reference arm's at every evaluation against tokens seen, one thin line per seed and
the mean over seeds (how a gap opens or closes over training, e.g. a loss that turns up late).
PNGs are written to a temporary name and renamed. Needs only matplotlib (Debian's
python3-matplotlib).
"""
import csv
import json
import os
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def read_metrics(path):
    """{"step": [...], "tokens": [...], "train_loss": [...], "val_loss": [...]} from a run's
    metrics.csv."""
    columns = {"step": [], "tokens": [], "train_loss": [], "val_loss": []}
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            try:
                values = {key: float(row[key]) for key in columns}
            except (KeyError, TypeError, ValueError):
                continue
            for key, value in values.items():
                columns[key].append(value)
    return columns


def save(fig, path):
    """Writes the figure to path atomically: a temporary file in the same folder, renamed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        plt.close(fig)
    print(f"wrote {path}")


def plot_run(run_dir):
    metrics = read_metrics(os.path.join(run_dir, "metrics.csv"))
    if not metrics["step"]:
        print(f"plot_run: {run_dir}/metrics.csv has no rows; nothing to draw")
        return
    title = os.path.basename(os.path.normpath(run_dir))
    try:
        with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        title = f"{config['preset']}, arm {config['arm']}, seed {config['seed']}"
    except (OSError, ValueError, KeyError):
        pass
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(metrics["step"], metrics["train_loss"], marker=".",
            label="train (mean since last eval)")
    ax.plot(metrics["step"], metrics["val_loss"], marker=".", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per byte)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, os.path.join(run_dir, "figures", "loss.png"))


def val_loss_by_step(sweep_dir, run):
    """{step: (tokens, val_loss)} of one run of a sweep, empty where it has no metrics yet."""
    path = os.path.join(sweep_dir, run["dir"], "metrics.csv")
    if not os.path.exists(path):
        return {}
    metrics = read_metrics(path)
    return {int(step): (tokens, loss) for step, tokens, loss in
            zip(metrics["step"], metrics["tokens"], metrics["val_loss"])}


def gap_series(sweep_dir, report):
    """Each non-reference arm's validation gap to the reference arm over training, paired by seed:
    [(arm, {seed: (tokens, gaps)}, (tokens, mean gaps))], gaps at the evaluation steps both runs of
    a seed reached, the mean at the steps every paired seed reached. [] without a reference."""
    reference = report.get("reference")
    by_arm = {a["arm"]: a for a in report["arms"]}
    if reference not in by_arm:
        return []
    reference_runs = {run["seed"]: val_loss_by_step(sweep_dir, run)
                      for run in by_arm[reference]["runs"]}
    series = []
    for arm in report["arms"]:
        if arm["arm"] == reference:
            continue
        per_seed, tokens_at = {}, {}
        for run in arm["runs"]:
            ours, theirs = val_loss_by_step(sweep_dir, run), reference_runs.get(run["seed"], {})
            steps = sorted(set(ours) & set(theirs))
            if steps:
                per_seed[run["seed"]] = {step: ours[step][1] - theirs[step][1] for step in steps}
                tokens_at.update({step: ours[step][0] for step in steps})
        if not per_seed:
            continue
        shared = sorted(set.intersection(*(set(gaps) for gaps in per_seed.values())))
        mean = ([tokens_at[step] for step in shared],
                [sum(gaps[step] for gaps in per_seed.values()) / len(per_seed) for step in shared])
        series.append((arm["arm"],
                       {seed: ([tokens_at[step] for step in sorted(gaps)],
                               [gaps[step] for step in sorted(gaps)])
                        for seed, gaps in per_seed.items()},
                       mean))
    return series


def plot_gap_curves(sweep_dir, report, title):
    """figures/gap_curves.png from gap_series: thin lines per seed, a thick line for their mean,
    against tokens seen."""
    series = gap_series(sweep_dir, report)
    if not series:
        print("plot_run: no arm has evaluations paired with a reference arm; "
              "gap_curves.png skipped")
        return
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, (arm, per_seed, (tokens, mean)) in enumerate(series):
        color = colors[index % len(colors)]
        for seed_tokens, gaps in per_seed.values():
            ax.plot([t / 1e6 for t in seed_tokens], gaps, color=color, linewidth=0.6, alpha=0.45)
        ax.plot([t / 1e6 for t in tokens], mean, color=color, linewidth=1.8,
                label=f"{arm} (mean of {len(per_seed)} seeds)")
    reference = report["reference"]
    ax.axhline(0.0, color="gray", linewidth=0.8)
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel(f"val loss - {reference} (nats, paired by seed)")
    ax.set_title(f"gap to {reference} over training ({title})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, os.path.join(sweep_dir, "figures", "gap_curves.png"))


def plot_sweep(sweep_dir):
    with open(os.path.join(sweep_dir, "sweep.json"), encoding="utf-8") as f:
        sweep = json.load(f)
    report_path = os.path.join(sweep_dir, "report.json")
    report = None
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
    config = sweep.get("config", {})
    title = f"{config.get('preset', '?')}, {config.get('steps', '?')} steps"

    # Run directories come from report.json (the C++ side names them); without it, nothing to draw.
    if report is None:
        print(f"plot_run: {report_path} is missing (run `lpattn report {sweep_dir}`); "
              "figures skipped")
        return
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for index, arm in enumerate(report["arms"]):
        color = colors[index % len(colors)]
        labelled = False
        for run in arm["runs"]:
            path = os.path.join(sweep_dir, run["dir"], "metrics.csv")
            if not os.path.exists(path):
                continue
            metrics = read_metrics(path)
            if not metrics["step"]:
                continue
            ax.plot(metrics["step"], metrics["val_loss"], color=color, linewidth=0.8, alpha=0.85,
                    label=None if labelled else arm["arm"])
            labelled = True
            drawn += 1
    if drawn:
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats per byte)")
        ax.set_title(f"validation loss, one line per seed ({title})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, os.path.join(sweep_dir, "figures", "loss_curves.png"))
    else:
        plt.close(fig)
        print("plot_run: no run has metrics yet; loss_curves.png skipped")

    plot_gap_curves(sweep_dir, report, title)

    reference = report.get("reference")
    if reference is None:
        print("plot_run: the sweep has no reference arm; gap.png skipped")
        return
    arms = [a for a in report["arms"]
            if a["arm"] != reference and a["gap_to_reference"]
            and a["gap_to_reference"]["mean"] is not None]
    if not arms:
        print(f"plot_run: no arm has a paired gap to {reference} yet; gap.png skipped")
        return
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(arms) + 2), 4.5))
    xs = list(range(len(arms)))
    gaps_of = [a["gap_to_reference"] for a in arms]
    means = [g["mean"] for g in gaps_of]
    # Error bars: the 95% paired t interval (none with one seed).
    below = [g["mean"] - g["t95"][0] if g.get("t95") else 0.0 for g in gaps_of]
    above = [g["t95"][1] - g["mean"] if g.get("t95") else 0.0 for g in gaps_of]
    ax.bar(xs, means, yerr=[below, above], capsize=4, color=colors[0], alpha=0.6,
           label="mean, 95% paired t interval")
    for x, gap in zip(xs, gaps_of):
        per_seed = [g["gap"] for g in gap["per_seed"]]
        ax.scatter([x] * len(per_seed), per_seed, color="black", s=12, zorder=3,
                   label="per seed" if x == 0 else None)
    ax.axhline(0.0, color="gray", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels([a["arm"] for a in arms], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"final val loss - {reference} (nats, paired by seed)")
    ax.set_title(f"gap to {reference} ({title})")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, os.path.join(sweep_dir, "figures", "gap.png"))


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    directory = argv[1]
    if os.path.exists(os.path.join(directory, "sweep.json")):
        plot_sweep(directory)
    elif os.path.exists(os.path.join(directory, "metrics.csv")):
        plot_run(directory)
    else:
        print(f"plot_run: {directory} holds neither sweep.json nor metrics.csv", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
