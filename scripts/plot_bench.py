#!/usr/bin/python3
"""Draws one PNG from a Google Benchmark JSON file written by lpattn_bench.

Usage: plot_bench.py BENCH.json OUT.png

BENCH.json comes from `lpattn_bench --benchmark_format=json` or `--benchmark_out=FILE`.
Left panel: peak_frac against N for exact_fwd and exact_bwd, one line per (pass, D, causal),
threads:2 solid and threads:1 dashed. Right panel: GFLOPS of exact_fwd and naive_fwd at
threads:2, with the measured 2-thread FMA peak (context peak_gflops_threads_2) as a horizontal
line. Repetitions of one name are averaged. Needs only matplotlib (Debian's python3-matplotlib).
"""
import json
import os
import re
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.lines import Line2D  # noqa: E402

NAME = re.compile(
    r"^(?P<kernel>\w+?)_(?P<pass>fwd|bwd)/N:(?P<n>\d+)/D:(?P<d>\d+)/H:(?P<h>\d+)"
    r"/causal:(?P<causal>[01])/threads:(?P<threads>\d+)(/real_time)?$")
THREAD_STYLE = {2: "-", 1: "--"}
# Below the axes, so that no data is hidden whatever the numbers.
LEGEND_BELOW = {"fontsize": 7, "ncol": 3, "loc": "upper center", "bbox_to_anchor": (0.5, -0.14)}


def load_runs(path):
    """{(kernel, pass, N, D, causal, threads): {"GFLOPS": x, "peak_frac": y}} and the context."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    sums = {}
    for bench in data.get("benchmarks", []):
        if bench.get("run_type", "iteration") != "iteration" or bench.get("error_occurred"):
            continue
        match = NAME.match(bench.get("run_name", bench["name"]))
        if not match or "GFLOPS" not in bench:
            continue
        key = (match["kernel"], match["pass"], int(match["n"]), int(match["d"]),
               int(match["causal"]), int(match["threads"]))
        total = sums.setdefault(key, [0.0, 0.0, 0])
        total[0] += bench["GFLOPS"]
        total[1] += bench.get("peak_frac", float("nan"))
        total[2] += 1
    runs = {key: {"GFLOPS": g / count, "peak_frac": p / count}
            for key, (g, p, count) in sums.items()}
    return runs, data.get("context", {})


def series(runs, kernel, pass_, d, causal, threads, counter):
    points = sorted((key[2], value[counter]) for key, value in runs.items()
                    if key[:2] == (kernel, pass_) and key[3:] == (d, causal, threads))
    return [n for n, _ in points], [y for _, y in points]


def log2_axis(ax, ns):
    ax.set_xscale("log", base=2)
    if ns:
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.minorticks_off()
    ax.set_xlabel("N (tokens; B = 1, Tq = Tk = N)")
    ax.grid(True, which="major", alpha=0.3)


def plot(runs, context, out_path):
    ns = sorted({key[2] for key in runs})
    dims = sorted({key[3] for key in runs})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 7))

    # Left: peak_frac of the exact kernels, forward and backward.
    handles, index = [], 0
    for pass_, marker in (("fwd", "o"), ("bwd", "s")):
        for d in dims:
            for causal in (0, 1):
                color = colors[index % len(colors)]
                drawn = False
                for threads, style in THREAD_STYLE.items():
                    x, y = series(runs, "exact", pass_, d, causal, threads, "peak_frac")
                    if x:
                        left.plot(x, y, style, color=color, marker=marker, markersize=4)
                        drawn = True
                if drawn:
                    handles.append(Line2D([], [], color=color, marker=marker, markersize=4,
                                          label=f"exact_{pass_} D={d} causal={causal}"))
                    index += 1
    handles += [Line2D([], [], color="black", linestyle=style, label=f"threads:{threads}")
                for threads, style in THREAD_STYLE.items()]
    log2_axis(left, ns)
    left.set_ylabel("peak_frac (GFLOPS / measured FMA peak, same threads)")
    left.set_ylim(bottom=0)
    left.set_title("exact kernels: fraction of FMA peak")
    left.legend(handles=handles, **LEGEND_BELOW)

    # Right: GFLOPS of the fused forward against the unfused baseline, 2 threads.
    index = 0
    for d in dims:
        for causal in (0, 1):
            color = colors[index % len(colors)]
            index += 1
            for kernel, style, marker in (("exact", "-", "o"), ("naive", ":", "x")):
                x, y = series(runs, kernel, "fwd", d, causal, 2, "GFLOPS")
                if x:
                    right.plot(x, y, style, color=color, marker=marker, markersize=4,
                               label=f"{kernel}_fwd D={d} causal={causal}")
    peak = context.get("peak_gflops_threads_2")
    if peak is not None:
        right.axhline(float(peak), color="black", linewidth=1,
                      label=f"FMA peak, 2 threads ({float(peak):.0f} GFLOPS)")
    log2_axis(right, ns)
    right.set_ylabel("GFLOPS (useful FLOPs / wall time)")
    right.set_ylim(bottom=0)
    right.set_title("forward, threads:2: fused exact vs unfused naive")
    if right.get_legend_handles_labels()[0]:
        right.legend(**LEGEND_BELOW)

    target = context.get("lpattn_target", "unknown")
    date = context.get("date", "unknown date")[:10]
    host = context.get("host_name")
    fig.suptitle(f"lpattn_bench, CPU target {target}, {date}"
                 + (f", {host}" if host else "")
                 + f" ({context.get('num_cpus', '?')} CPUs)")
    fig.tight_layout()

    # Atomic: a reader never sees a half-written PNG.
    directory = os.path.dirname(os.path.abspath(out_path))
    fd, tmp = tempfile.mkstemp(prefix=".plot_bench.", suffix=".png", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=110)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(f"usage: {argv[0]} BENCH.json OUT.png\n")
        return 2
    try:
        runs, context = load_runs(argv[1])
    except (OSError, ValueError, KeyError) as error:
        sys.stderr.write(f"{argv[0]}: cannot read {argv[1]}: {error}\n")
        return 1
    if not runs:
        sys.stderr.write(f"{argv[0]}: no attention benchmarks with GFLOPS in {argv[1]}\n")
        return 1
    plot(runs, context, argv[2])
    print(f"wrote {argv[2]} ({len(runs)} benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
