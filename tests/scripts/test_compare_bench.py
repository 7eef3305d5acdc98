#!/usr/bin/python3
"""Tests of scripts/compare_bench.py over the fixtures in tests/scripts/fixtures/.

Run from anywhere: python3 tests/scripts/test_compare_bench.py (exits non-zero on failure).
Standard library only.

Fixtures (written as lpattn_bench writes its JSON, with made-up but consistent numbers):
  bench_single.json       one run per benchmark (no repetitions): an AVX2 machine
  bench_repetitions.json  3 repetitions each with mean/median/stddev/cv aggregates, the median
                          chosen to differ from the mean; one benchmark failed (error_occurred);
                          naive_fwd in microseconds where A has milliseconds
Each holds one benchmark the other lacks.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "compare_bench.py")
SINGLE = os.path.join(HERE, "fixtures", "bench_single.json")
REPEATED = os.path.join(HERE, "fixtures", "bench_repetitions.json")

FWD = "exact_fwd/N:1024/D:64/H:8/causal:1/threads:2"
BWD = "exact_bwd/N:1024/D:64/H:8/causal:1/threads:2"
NAIVE = "naive_fwd/N:1024/D:64/H:8/causal:0/threads:2"
GATE = "gate:norm_fwd/N:4096/D:64/H:8/causal:0/threads:2"
FAILED = "exact_fwd/N:4096/D:128/H:8/causal:1/threads:1"
PEAK = "peak_fma/threads:2"
ONLY_A = "kint:K=32:cal=minmax:round=lerp:ste=exact_fwd/N:1024/D:64/H:8/causal:1/threads:2"
ONLY_B = "exact+qk=int8+pv=bf16+prepared_kv_fwd/N:1024/D:64/H:8/causal:1/threads:2"


def run(*args):
    """(exit status, stdout, stderr) of compare_bench.py with args."""
    process = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                             timeout=60)
    return process.returncode, process.stdout, process.stderr


def markdown_rows(stdout):
    """{benchmark: {column: cell}} from the Markdown table in stdout."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells))
    return rows


class CompareBenchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def compare_markdown(self, *extra):
        status, out, err = run(SINGLE, REPEATED, "--markdown", *extra)
        self.assertEqual(status, 0, err)
        return out, markdown_rows(out)

    def test_fixtures_are_google_benchmark_json(self):
        for path in (SINGLE, REPEATED):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            self.assertIn("context", data)
            self.assertTrue(data["benchmarks"])

    def test_ratios_use_the_median_and_convert_units(self):
        out, rows = self.compare_markdown()
        # A: a single run of 12 ms; B: repetitions 5.9, 6.7, 6.0 ms, median 6.0 (mean 6.2).
        self.assertEqual(rows[FWD]["time A"], "12.00 ms")
        self.assertEqual(rows[FWD]["time B"], "6.000 ms")
        self.assertAlmostEqual(float(rows[FWD]["B/A"]), 0.5, places=3)
        # B: 25, 20, 21 ms: median 21 (mean 22) against A's 40.
        self.assertAlmostEqual(float(rows[BWD]["B/A"]), 0.525, places=3)
        # B's naive_fwd is in microseconds (48000 us), A's in milliseconds (96 ms).
        self.assertEqual(rows[NAIVE]["time B"], "48.00 ms")
        self.assertAlmostEqual(float(rows[NAIVE]["B/A"]), 0.5, places=3)
        self.assertEqual(rows[GATE]["time A"], "900.0 us")
        self.assertAlmostEqual(float(rows[GATE]["B/A"]), 0.5, places=3)
        self.assertAlmostEqual(float(rows[PEAK]["B/A"]), 0.5, places=3)
        self.assertIn("geometric mean of B/A over 5 benchmarks", out)

    def test_counters_are_the_chosen_runs(self):
        _, rows = self.compare_markdown()
        for column in ("GFLOPS A", "GFLOPS B", "peak_frac A", "peak_frac B"):
            self.assertIn(column, rows[FWD])
        self.assertEqual(rows[FWD]["GFLOPS A"], "89.6")    # 1.0748e9 FLOPs in 12 ms
        self.assertEqual(rows[FWD]["GFLOPS B"], "179.1")   # in the median's 6.0 ms
        self.assertEqual(rows[PEAK]["GFLOPS B"], "468.0")  # the median aggregate's counter
        self.assertEqual(rows[PEAK]["peak_frac A"], "0.989")

    def test_failed_benchmarks_and_names_in_one_file(self):
        out, rows = self.compare_markdown()
        self.assertEqual(rows[FAILED]["time B"], "error")
        self.assertEqual(rows[FAILED]["B/A"], "")
        self.assertIn(f"{FAILED}: std::bad_alloc", out)
        self.assertNotIn(ONLY_A, rows)
        self.assertNotIn(ONLY_B, rows)
        tail = out[out.index("only in A (1):"):]
        self.assertIn(ONLY_A, tail)
        self.assertIn("only in B (1):", tail)
        self.assertIn(ONLY_B, tail[tail.index("only in B"):])

    def test_rows_follow_registration_order(self):
        _, rows = self.compare_markdown()
        self.assertEqual(list(rows), [FWD, BWD, FAILED, NAIVE, GATE, PEAK])

    def test_normalize_compares_in_run_ratios(self):
        out, rows = self.compare_markdown("--normalize", PEAK)
        # exact_fwd / peak_fma: 12 / 11 in A and 6.0 / 5.5 in B: the same ratio.
        self.assertEqual(rows[FWD]["time A"], "1.091x")
        self.assertEqual(rows[FWD]["time B"], "1.091x")
        self.assertAlmostEqual(float(rows[FWD]["B/A"]), 1.0, places=3)
        # exact_bwd: (21 / 5.5) / (40 / 11) = 1.05.
        self.assertAlmostEqual(float(rows[BWD]["B/A"]), 1.05, places=3)
        self.assertAlmostEqual(float(rows[PEAK]["B/A"]), 1.0, places=3)
        self.assertIn(f"times are multiples of {PEAK}", out)
        # The reference's own row is left out of the geometric mean.
        self.assertIn("geometric mean of B/A over 4 benchmarks", out)

    def test_filter(self):
        status, out, err = run(SINGLE, REPEATED, "--markdown", "--filter", r"^exact_(fwd|bwd)/N:1024")
        self.assertEqual(status, 0, err)
        self.assertEqual(list(markdown_rows(out)), [FWD, BWD])
        self.assertNotIn("only in", out)  # the one-file names do not match either
        status, out, _ = run(SINGLE, REPEATED, "--filter", "kint")
        self.assertEqual(status, 0)
        self.assertIn("no benchmark is in both files and matches --filter", out)
        self.assertIn(ONLY_A, out)

    def test_plain_text_table(self):
        status, out, err = run(SINGLE, REPEATED)
        self.assertEqual(status, 0, err)
        self.assertNotIn("| ", out)
        header = next(line for line in out.splitlines() if line.startswith("benchmark"))
        self.assertEqual(header.split(), ["benchmark", "time", "A", "time", "B", "B/A", "GFLOPS",
                                          "A", "GFLOPS", "B", "peak_frac", "A", "peak_frac", "B"])
        row = next(line for line in out.splitlines() if line.startswith(FWD + " "))
        self.assertEqual(row.split()[1:6], ["12.00", "ms", "6.000", "ms", "0.500"])
        self.assertIn("A: " + SINGLE, out)
        self.assertIn("lpattn_target=AVX3", out)

    def test_same_file_gives_ones(self):
        status, out, err = run(REPEATED, REPEATED, "--markdown")
        self.assertEqual(status, 0, err)
        for name, row in markdown_rows(out).items():
            if name != FAILED:
                self.assertEqual(row["B/A"], "1.000", name)

    def test_real_time_suffix_and_plain_runs_without_median(self):
        # Google Benchmark's own names end with /real_time; two plain runs of one name (files
        # appended together) stand for their median, here the mean of 10 and 14.
        data = {"context": {}, "benchmarks": [
            {"name": FWD + "/real_time", "run_type": "iteration", "iterations": 5,
             "real_time": 10.0, "cpu_time": 10.0, "time_unit": "ms"},
            {"name": FWD + "/real_time", "run_type": "iteration", "iterations": 5,
             "real_time": 14.0, "cpu_time": 14.0, "time_unit": "ms"}]}
        path = self.write("suffixed.json", json.dumps(data))
        status, out, err = run(SINGLE, path, "--markdown")
        self.assertEqual(status, 0, err)
        rows = markdown_rows(out)
        self.assertEqual(rows[FWD]["time B"], "12.00 ms")
        self.assertAlmostEqual(float(rows[FWD]["B/A"]), 1.0, places=3)
        self.assertEqual(rows[FWD]["GFLOPS B"], "")  # B has no counters: empty cells

    def assert_error(self, args, *fragments):
        status, out, err = run(*args)
        self.assertEqual(status, 2, out + err)
        self.assertIn("compare_bench.py: error:", err)
        for fragment in fragments:
            self.assertIn(fragment, err)
        self.assertNotIn("Traceback", err)

    def test_missing_file(self):
        missing = os.path.join(self.tmp.name, "absent.json")
        self.assert_error([SINGLE, missing], missing, "no such file")
        self.assert_error([missing, SINGLE], missing)

    def test_invalid_json(self):
        path = self.write("broken.json", '{"benchmarks": [')
        self.assert_error([SINGLE, path], path, "not valid JSON")

    def test_json_that_is_not_a_benchmark_file(self):
        for text in ('[1, 2, 3]', '{"context": {}}', '{"benchmarks": {}}'):
            path = self.write("other.json", text)
            self.assert_error([path, SINGLE], path, "not a Google Benchmark JSON file")

    def test_a_directory(self):
        self.assert_error([SINGLE, self.tmp.name], self.tmp.name)

    def test_normalize_name_absent(self):
        self.assert_error([SINGLE, REPEATED, "--normalize", ONLY_A], ONLY_A, "in B")
        self.assert_error([SINGLE, REPEATED, "--normalize", ONLY_B], ONLY_B, "in A")
        self.assert_error([SINGLE, REPEATED, "--normalize", "peak_fma"], "no such benchmark")

    def test_normalize_name_failed(self):
        self.assert_error([SINGLE, REPEATED, "--normalize", FAILED], "failed in B",
                          "std::bad_alloc")

    def test_invalid_filter(self):
        self.assert_error([SINGLE, REPEATED, "--filter", "exact_(fwd"], "--filter",
                          "not a valid regular expression")

    def test_script_is_executable(self):
        self.assertTrue(os.access(SCRIPT, os.X_OK))


if __name__ == "__main__":
    unittest.main()
