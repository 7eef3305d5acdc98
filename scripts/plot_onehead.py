#!/usr/bin/python3
"""Draws the figure of one `lpattn onehead` experiment from its CSV files and summary.json.

Usage: plot_onehead.py EXPERIMENT_DIR EXPERIMENT

Writes EXPERIMENT_DIR/EXPERIMENT.png (a temporary name, renamed). Needs only matplotlib
(Debian's python3-matplotlib).
"""
import csv
import json
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

# The atomic PNG write (temporary name, renamed) of the run figures; installed beside this script.
from plot_run import save  # noqa: E402


def read(path):
    """The rows of a CSV file as dicts; numeric cells as floats."""
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            out = {}
            for key, value in row.items():
                try:
                    out[key] = float(value)
                except (TypeError, ValueError):
                    out[key] = value
            rows.append(out)
    return rows


def column(rows, key):
    return [r[key] for r in rows]


def by(rows, key):
    groups = defaultdict(list)
    for r in rows:
        groups[r[key]].append(r)
    return groups


def mean_over_alpha(rows, group_key="N"):
    """{N: mean of mean_abs_error over the thresholds}."""
    sums = defaultdict(list)
    for r in rows:
        sums[r[group_key]].append(r["mean_abs_error"])
    return sorted((n, sum(v) / len(v)) for n, v in sums.items())


def positive(xs, ys):
    pairs = [(x, y) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def stationary(d, s):
    rows = read(os.path.join(d, "field.csv"))
    fig, ax = plt.subplots(figsize=(5.5, 5))
    a, b = column(rows, "a"), column(rows, "b")
    ax.tricontourf(a, b, column(rows, "risk"), levels=20, cmap="viridis")
    ax.quiver(a, b, [-g for g in column(rows, "grad_a")], [-g for g in column(rows, "grad_b")],
              color="white", scale_units="xy", angles="xy")
    ax.plot([0], [0], "r*", markersize=12, label=f"|grad R(0,0)| = {s['zero_grad_norm']:.1e}")
    ax.set_xlabel("a")
    ax.set_ylabel("b (= mu)")
    ax.set_title("population risk and -grad R around zero")
    ax.legend(loc="upper left")
    return fig


def population(d, s):
    rows = [r for r in read(os.path.join(d, "trajectory.csv")) if r["t"] > 0]
    t = column(rows, "t")
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0][0]
    ax.semilogx(t, column(rows, "ratio"), label="a / b")
    ax.semilogx(t, column(rows, "c"), label="c = a - b - log b")
    ax.axvline(s.get("t_capture", 0), color="gray", ls=":", label="ratio peak (capture)")
    ax.set_xlabel("t")
    ax.set_title("calibration, then the tube")
    ax.legend()
    ax = axes[0][1]
    ax.plot(t, column(rows, "mu4"), "o-", ms=3, label="mu^4")
    if "mu4_slope" in s:
        t0 = s["fit_from_t"]
        fit_t = [x for x in t if x >= t0]
        ax.plot(fit_t, [s["mu4_slope"] * x + s["mu4_intercept"] for x in fit_t], "k--", lw=0.8,
                label=f"affine fit, slope {s['mu4_slope']:.3g}")
        ax.set_title(f"mu^4 against t (R^2 = {s['mu4_r2']:.4f} after t = {t0:.3g})")
    ax.set_xlabel("t")
    ax.legend()
    ax = axes[1][0]
    ax.semilogx(t, column(rows, "mu3_dmu_dt"), label="mu^3 dmu/dt")
    ax.semilogx(t, column(rows, "mu_sup"), label="mu sup_interior |F - alpha|")
    ax.set_xlabel("t")
    ax.set_title("both level off")
    ax.legend()
    ax = axes[1][1]
    ax.loglog(*positive(t, column(rows, "b")), label=f"mu (gamma = {s.get('gamma', float('nan')):.3f})")
    ax.loglog(*positive(t, column(rows, "error")), label=f"RMS error (t^{s.get('error_exponent', float('nan')):.3f})")
    ax.loglog(*positive(t, column(rows, "sup_interior")), label="sup interior |F - alpha|")
    ax.set_xlabel("t")
    ax.set_title("growth and error")
    ax.legend()
    fig.suptitle(f"population gradient descent ({s.get('transform', '')})")
    return fig


def quadrature(d, s):
    rows = read(os.path.join(d, "trajectories.csv"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for order, group in sorted(by(rows, "order").items()):
        group = [r for r in group if r["t"] > 0]
        label = "auto (10 b)" if order == 0 else f"order {int(order)}"
        axes[0].semilogx(column(group, "t"), column(group, "ratio"), label=label)
        axes[1].loglog(column(group, "t"), column(group, "risk"), label=label)
    axes[0].set_title("ratio a / b against t")
    axes[1].set_title("risk against t")
    for ax in axes:
        ax.set_xlabel("t")
        ax.legend(fontsize=8)
    return fig


def transfer_figure(d, s, prefix="", title="transfer"):
    cells = read(os.path.join(d, prefix + "errors.csv"))
    tracking = read(os.path.join(d, prefix + "tracking.csv"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for (m, n), group in sorted(by([dict(r, mn=(r["m"], r["n"])) for r in cells], "mn").items()):
        ns, err = zip(*mean_over_alpha(group))
        line, = axes[0].loglog(*positive(ns, err), "o-", ms=3, label=f"m={int(m)}, n={int(n)}")
        if "A" in s:
            fit = [s["A"] * min(m, n) ** s["slope_mn"] + s["B"] * N ** s["slope_N"] for N in ns]
            axes[0].loglog(ns, fit, "--", color=line.get_color(), lw=0.8)
    axes[0].set_xlabel("fresh context length N")
    axes[0].set_ylabel("mean |F - alpha| (alpha = 0.25, 0.5, 0.75)")
    if "slope_N" in s:
        axes[0].set_title(f"frozen error; fit A (m^n)^{s['slope_mn']:.2f} + B N^{s['slope_N']:.2f}")
    axes[0].legend(fontsize=8)
    for (m, n), group in sorted(by([dict(r, mn=(r["m"], r["n"])) for r in tracking], "mn").items()):
        line, = axes[1].semilogx([max(x, 1) for x in column(group, "step")], column(group, "mu"),
                                 "o-", ms=3, label=f"finite m={int(m)}, n={int(n)}")
        axes[1].semilogx([max(x, 1) for x in column(group, "step")], column(group, "population_mu"),
                         "--", color=line.get_color(), lw=0.8)
    axes[1].set_yscale("log")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("mu (dashed: population run from the same start)")
    axes[1].set_title("finite pretraining tracks the population")
    axes[1].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def transfer(d, s):
    return transfer_figure(d, s, "", f"frozen transfer ({s.get('transform', '')})")


def grid(d, s):
    rows = read(os.path.join(d, "grid.csv"))
    ms = sorted(set(column(rows, "m")))
    ns = sorted(set(column(rows, "n")))
    table = {(r["m"], r["n"]): r["error"] for r in rows}
    fig, ax = plt.subplots(figsize=(6, 5))
    image = ax.imshow([[table[(m, n)] for n in ns] for m in ms], origin="lower", cmap="magma")
    ax.set_xticks(range(len(ns)), [str(int(n)) for n in ns])
    ax.set_yticks(range(len(ms)), [str(int(m)) for m in ms])
    ax.set_xlabel("n (examples per task)")
    ax.set_ylabel("m (tasks)")
    for i, m in enumerate(ms):
        for j, n in enumerate(ns):
            ax.text(j, i, f"{table[(m, n)]:.4f}", ha="center", va="center", color="cyan", fontsize=8)
    fig.colorbar(image, label=f"mean |F - alpha| at N = {s.get('N')}")
    ax.set_title(f"(m, n) grid from a common radius b0 = {s.get('radius')}")
    return fig


def stepsize(d, s):
    rows = read(os.path.join(d, "stepsize.csv"))
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for eta, group in sorted(by(rows, "step_size").items()):
        ax.plot(column(group, "t"), column(group, "mu4"), "o-", ms=2, label=f"step {eta:g}")
    ax.set_xlabel("t = step size x steps")
    ax.set_ylabel("mu^4")
    ax.set_title(f"same mu^4 per unit t (spread {s.get('mu4_per_t_spread', float('nan')):.2g})")
    ax.legend()
    return fig


def init(d, s):
    rows = read(os.path.join(d, "init.csv"))
    paths = read(os.path.join(d, "paths.csv"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    axes[0].loglog(column(rows, "radius"), column(rows, "grad_norm"), "o-",
                   label=f"|grad R| ~ r^{s.get('grad_norm_exponent', float('nan')):.3f}")
    axes[0].set_xlabel("initial radius r")
    axes[0].legend()
    axes[0].set_title("the gradient vanishes linearly at zero")
    for r, group in sorted(by(paths, "radius").items()):
        group = [g for g in group if g["t"] > 0]
        axes[1].semilogx(column(group, "t"), column(group, "risk"), label=f"r = {r:g}")
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("population risk")
    axes[1].set_title("nearby starts escape slowly")
    axes[1].legend(fontsize=8)
    return fig


def design(d, s):
    rows = read(os.path.join(d, "design.csv"))
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for arm, group in by(rows, "arm").items():
        ns, err = zip(*mean_over_alpha(group))
        ax.loglog(ns, err, "o-", ms=3, label=arm)
    ax.set_xlabel("fresh context length N")
    ax.set_ylabel("mean |F - alpha|")
    ax.set_title("feature designs and pretraining label corruption")
    ax.legend()
    return fig


def noise_like(d, s, name, title):
    rows = read(os.path.join(d, name))
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, group in by(rows, "noise").items():
        ns, err = zip(*mean_over_alpha(group))
        ax.loglog(ns, err, "o-", ms=3, label=label)
    ns = sorted(set(column(rows, "N")))
    first = mean_over_alpha(rows)[0][1]
    ax.loglog(ns, [first * ns[0] / n for n in ns], "k:", lw=0.8, label="1/N")
    ax.set_xlabel("context length N (mu = N / 8)")
    ax.set_ylabel("mean |F - alpha|")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def matched(d, s):
    return noise_like(d, s, "matched.csv", f"matched radius: slope {s.get('slope_N_upper_half', float('nan')):.3f}")


def noise(d, s):
    return noise_like(d, s, "noise.csv", "label noise (matched radius)")


def boundary(d, s):
    rows = read(os.path.join(d, "boundary.csv"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    alpha = column(rows, "alpha")
    axes[0].plot(alpha, [abs(v) for v in column(rows, "population")], label="population, one-sided")
    axes[0].plot(alpha, [abs(v) for v in column(rows, "population_reflected")], label="population, reflected")
    axes[0].plot(alpha, column(rows, "finite"), label=f"N = {s.get('N')}, one-sided")
    axes[0].plot(alpha, column(rows, "finite_reflected"), label=f"N = {s.get('N')}, reflected")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("alpha")
    axes[0].set_ylabel("|F - alpha|")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"b = {s.get('b'):g}")
    gap = [1 - a for a in alpha]
    axes[1].loglog(gap, column(rows, "finite"), "o-", ms=3, label="one-sided")
    axes[1].loglog(gap, column(rows, "finite_reflected"), "o-", ms=3, label="reflected")
    axes[1].invert_xaxis()
    axes[1].set_xlabel("1 - alpha (zoom near 1)")
    axes[1].set_ylabel(f"mean |F - alpha|, N = {s.get('N')}")
    axes[1].legend()
    return fig


def kernels(d, s):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for k, run in enumerate(s.get("kernels", [])):
        name = run["kernel"]
        pop = [r for r in read(os.path.join(d, f"population_{k}.csv")) if r["t"] > 0]
        axes[0].loglog(*positive(column(pop, "t"), column(pop, "error")), label=name, lw=1)
        cells = read(os.path.join(d, f"transfer_{k}_errors.csv"))
        largest = max(min(r["m"], r["n"]) for r in cells)
        ns, err = zip(*mean_over_alpha([r for r in cells if min(r["m"], r["n"]) == largest]))
        axes[1].loglog(*positive(ns, err), "o-", ms=3, label=name, lw=1)
    axes[0].set_xlabel("t")
    axes[0].set_ylabel("population RMS error")
    axes[0].set_title("population descent under each row transform")
    axes[1].set_xlabel("fresh context length N")
    axes[1].set_ylabel("mean |F - alpha| (largest corpus)")
    axes[1].set_title("frozen transfer under each row transform")
    axes[1].legend(fontsize=7, loc="lower left")
    return fig


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    d, experiment = sys.argv[1], sys.argv[2]
    drawers = {f.__name__: f for f in (stationary, population, quadrature, transfer, grid,
                                       stepsize, init, design, matched, noise, boundary, kernels)}
    if experiment not in drawers:
        print(f"plot_onehead: no figure for '{experiment}'")
        sys.exit(2)
    with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    save(drawers[experiment](d, summary), os.path.join(d, experiment + ".png"))


if __name__ == "__main__":
    main()
