#!/usr/bin/python3
"""Compares two Google Benchmark JSON files, such as two machines' runs or a before and after.

Usage: compare_bench.py [--filter REGEX] [--normalize NAME] [--markdown] A.json B.json

A.json and B.json come from `lpattn_bench --benchmark_out=FILE --benchmark_out_format=json`
(what `make bench` writes to build/bench.json) or any other Google Benchmark binary. For every
benchmark name present in both files it prints one row: the time in A, the time in B, B/A, and
the GFLOPS and peak_frac counters of each file where the benchmark reports them.

Which run stands for a name: the `median` aggregate when the file holds repetitions; otherwise
the single run; and if a file holds several plain runs of one name and no median (two runs
appended to one file), the median of their times, computed here. Times are wall-clock
(`real_time`, what every lpattn benchmark measures), converted between time units as needed. A
trailing "/real_time" is dropped from names, so files written with and without lpattn_bench's
plain names still match.

--normalize NAME divides every time of a file by the time of benchmark NAME in the same file
before B/A is taken: times become multiples of, say, peak_fma/threads:2 or
exact_fwd/N:1024/D:64/H:8/causal:1/threads:2 measured in the same run, and B/A then compares
those in-run ratios across machines or builds (docs/performance.md §2 and §3: the ratios
measured in one run are the figures that count). NAME must be in both files.

--filter REGEX keeps the names it matches (Python `re.search`, so anchor with ^ and $ for a
whole name). --markdown prints a Markdown table instead of aligned text. Rows follow file A's
registration order (family_index, which random interleaving does not shuffle). Names present
in only one file, and the benchmarks that failed (error_occurred) with their messages, are
listed after the table. The last line gives the geometric mean of B/A over the rows (the
--normalize benchmark's own row, 1 by construction, left out).

Exit status: 0 on success; 2, with a message on stderr, when a file is missing or is not a
Google Benchmark JSON file, when REGEX does not compile, or when NAME is absent from either
file (or failed there). Standard library only.
"""
import argparse
import json
import math
import re
import sys

PROG = "compare_bench.py"
REAL_TIME_SUFFIX = "/real_time"
# Seconds per Google Benchmark time unit.
UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
COUNTERS = ("GFLOPS", "peak_frac")
COUNTER_FORMAT = {"GFLOPS": "{:.1f}", "peak_frac": "{:.3f}"}
# Context fields worth a line per file: where and how each file was measured.
CONTEXT_FIELDS = ("date", "host_name", "num_cpus", "mhz_per_cpu", "lpattn_target",
                  "peak_fma_target", "peak_gflops_threads_1", "peak_gflops_threads_2")


class UsageError(Exception):
    """A problem with the inputs: reported on stderr with exit status 2."""


class Result:
    """The run that stands for one benchmark name in one file."""

    def __init__(self, name, seconds=None, unit="ms", counters=None, error=None, source=""):
        self.name = name
        self.seconds = seconds      # wall time per iteration, in seconds; None on error
        self.unit = unit            # the file's time unit, for display
        self.counters = counters or {}
        self.error = error          # the error message of a failed benchmark, else None
        self.source = source        # "median", "single run" or "median of n runs"


def plain_name(name):
    return name[:-len(REAL_TIME_SUFFIX)] if name.endswith(REAL_TIME_SUFFIX) else name


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return 0.5 * (ordered[middle - 1] + ordered[middle])


def entry_seconds(path, entry):
    unit = entry.get("time_unit", "ns")
    if unit not in UNIT_SECONDS:
        raise UsageError(f"{path}: benchmark {entry.get('name')!r} has an unknown time_unit "
                         f"{unit!r}")
    try:
        return float(entry["real_time"]) * UNIT_SECONDS[unit]
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: benchmark {entry.get('name')!r} has no numeric real_time")


def entry_counters(entry):
    counters = {}
    for counter in COUNTERS:
        value = entry.get(counter)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            counters[counter] = float(value)
    return counters


def load(path):
    """Returns (context, {name: Result}, [names in file order]) for one JSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file")
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a JSON file")
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror or e}")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file")
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, "
                         f"column {e.colno})")
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise UsageError(f"{path}: not a Google Benchmark JSON file (no \"benchmarks\" list; "
                         "write one with --benchmark_out=FILE --benchmark_out_format=json)")
    context = data.get("context") if isinstance(data.get("context"), dict) else {}

    order, rank = [], {}
    medians, runs, errors = {}, {}, {}
    for entry in data["benchmarks"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise UsageError(f"{path}: a \"benchmarks\" entry without a name")
        name = plain_name(entry.get("run_name") or entry["name"])
        if name not in order:
            order.append(name)
            # Registration order where the file records it (random interleaving shuffles the
            # file's order), else the file's order.
            rank[name] = (entry.get("family_index", math.inf),
                          entry.get("per_family_instance_index", math.inf), len(order))
        if entry.get("error_occurred"):
            errors[name] = str(entry.get("error_message", "error"))
            continue
        if entry.get("run_type", "iteration") == "aggregate":
            if entry.get("aggregate_name") == "median":
                medians[name] = entry
            continue  # mean, stddev, cv and user-defined aggregates are not used
        runs.setdefault(name, []).append(entry)

    results = {}
    for name in order:
        if name in medians:
            entry = medians[name]
            results[name] = Result(name, entry_seconds(path, entry), entry.get("time_unit", "ns"),
                                   entry_counters(entry), source="median")
        elif name in runs and len(runs[name]) == 1:
            entry = runs[name][0]
            results[name] = Result(name, entry_seconds(path, entry), entry.get("time_unit", "ns"),
                                   entry_counters(entry), source="single run")
        elif name in runs:
            entries = runs[name]
            counters = {}
            for counter in COUNTERS:
                values = [c[counter] for c in map(entry_counters, entries) if counter in c]
                if values:
                    counters[counter] = median(values)
            results[name] = Result(name, median(entry_seconds(path, e) for e in entries),
                                   entries[0].get("time_unit", "ns"), counters,
                                   source=f"median of {len(entries)} runs")
        else:
            results[name] = Result(name, error=errors.get(name, "no run"))
    return context, results, sorted(order, key=lambda name: rank[name])


def format_significant(value, digits=4):
    """value with `digits` significant digits in fixed notation: 12.00, 0.5000, 1234."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


def format_time(result, reference_seconds, unit):
    if result.error is not None:
        return "error"
    if reference_seconds is not None:
        return format_significant(result.seconds / reference_seconds) + "x"
    return f"{format_significant(result.seconds / UNIT_SECONDS[unit])} {unit}"


def format_counter(result, counter):
    value = result.counters.get(counter)
    return "" if value is None or result.error is not None else COUNTER_FORMAT[counter].format(value)


def reference_seconds(label, path, results, name):
    if name not in results:
        raise UsageError(f"--normalize {name!r}: no such benchmark in {label} ({path})")
    result = results[name]
    if result.error is not None or not result.seconds:
        raise UsageError(f"--normalize {name!r}: the benchmark failed in {label} ({path}): "
                         f"{result.error or 'zero time'}")
    return result.seconds


def context_line(label, path, context):
    fields = [f"{key}={context[key]}" for key in CONTEXT_FIELDS if key in context]
    return f"{label}: {path}" + (f" ({', '.join(fields)})" if fields else "")


def render_text(header, rows):
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    lines = []
    for index, row in enumerate([header] + rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width)
                                             for cell, width in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def render_markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return lines


def compare(args, out):
    try:
        pattern = re.compile(args.filter) if args.filter is not None else None
    except re.error as e:
        raise UsageError(f"--filter {args.filter!r} is not a valid regular expression: {e}")
    context_a, results_a, order_a = load(args.a)
    context_b, results_b, order_b = load(args.b)
    ref_a = ref_b = None
    if args.normalize is not None:
        ref_a = reference_seconds("A", args.a, results_a, args.normalize)
        ref_b = reference_seconds("B", args.b, results_b, args.normalize)

    def wanted(name):
        return pattern is None or pattern.search(name) is not None

    common = [name for name in order_a if name in results_b and wanted(name)]
    only_a = [name for name in order_a if name not in results_b and wanted(name)]
    only_b = [name for name in order_b if name not in results_a and wanted(name)]
    counters = [c for c in COUNTERS
                if any(c in results_a[n].counters or c in results_b[n].counters for n in common)]

    header = ["benchmark", "time A", "time B", "B/A"]
    for counter in counters:
        header += [f"{counter} A", f"{counter} B"]
    rows, ratios = [], []
    for name in common:
        a, b = results_a[name], results_b[name]
        ratio = ""
        if a.error is None and b.error is None and a.seconds > 0:
            value = (b.seconds / (ref_b or 1.0)) / (a.seconds / (ref_a or 1.0))
            if name != args.normalize:  # the reference's own row is 1 by construction
                ratios.append(value)
            ratio = f"{value:.3f}"
        unit = a.unit if a.error is None else b.unit
        row = [name, format_time(a, ref_a, unit), format_time(b, ref_b, unit), ratio]
        for counter in counters:
            row += [format_counter(a, counter), format_counter(b, counter)]
        rows.append(row)

    bullet = "- " if args.markdown else ""
    print(bullet + context_line("A", args.a, context_a), file=out)
    print(bullet + context_line("B", args.b, context_b), file=out)
    if args.normalize is not None:
        print(f"{bullet}times are multiples of {args.normalize} in the same file "
              f"(A: {format_significant(ref_a * 1e3)} ms, B: {format_significant(ref_b * 1e3)} ms)",
              file=out)
    print(file=out)
    if rows:
        for line in (render_markdown if args.markdown else render_text)(header, rows):
            print(line, file=out)
    else:
        print("no benchmark is in both files" + (" and matches --filter" if pattern else ""),
              file=out)
    item = "- " if args.markdown else "  "
    for label, names in (("A", only_a), ("B", only_b)):
        if names:
            print(file=out)
            print(f"only in {label} ({len(names)}):", file=out)
            for name in names:
                print(f"{item}{name}", file=out)
    for label, results in (("A", results_a), ("B", results_b)):
        failed = [name for name in common if results[name].error is not None]
        if failed:
            print(file=out)
            print(f"failed in {label} ({len(failed)}):", file=out)
            for name in failed:
                print(f"{item}{name}: {results[name].error}", file=out)
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if all(
            r > 0 for r in ratios) else float("nan")
        print(file=out)
        print(f"geometric mean of B/A over {len(ratios)} benchmarks: {geomean:.3f}", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG, description="Compare two Google Benchmark JSON files (B against A).")
    parser.add_argument("a", metavar="A.json", help="the baseline file")
    parser.add_argument("b", metavar="B.json", help="the file compared with it")
    parser.add_argument("--filter", metavar="REGEX", help="keep names matching REGEX (re.search)")
    parser.add_argument("--normalize", metavar="NAME",
                        help="divide each file's times by benchmark NAME's time in that file")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    try:
        compare(args, sys.stdout)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
