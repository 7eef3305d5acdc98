#!/usr/bin/python3
"""Draws the figures of an lpattn run or sweep directory from its data files.

Usage: plot_run.py RUN_OR_SWEEP_DIR

A run directory (it has metrics.csv): figures/loss.png, train and validation loss against step.
A sweep directory (it has sweep.json): figures/loss_curves.png, validation loss against step, one
colour per arm and one thin line per seed; and figures/gap.png, the mean gap to the reference arm
(bars, 95% paired t interval as error bars) with the per-seed gaps as points, from report.json (written by
`lpattn sweep` / `lpattn report`). PNGs are written to a temporary name and renamed. Needs only
matplotlib (Debian's python3-matplotlib).
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
    """{"step": [...], "train_loss": [...], "val_loss": [...]} from a run's metrics.csv."""
    columns = {"step": [], "train_loss": [], "val_loss": []}
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
