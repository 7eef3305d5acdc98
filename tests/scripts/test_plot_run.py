#!/usr/bin/python3
"""Tests of scripts/plot_run.py's sweep figures over a sweep directory written here.

Run from anywhere with Debian's python3 (it has matplotlib, which the set-up installs):
/usr/bin/python3 tests/scripts/test_plot_run.py (exits non-zero on failure).

The sweep: a reference arm and one other, two seeds, metrics.csv written as `lpattn train` writes
it with made-up losses whose gaps are known; seed 2's run of the other arm stopped early (it was
interrupted), so the mean over seeds covers only the evaluations both seeds reached.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "plot_run.py")

spec = importlib.util.spec_from_file_location("plot_run", SCRIPT)
plot_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_run)

TOKENS_PER_STEP = 768
# val loss at steps 100, 200, 300, 400 (the header and columns of trainer.cc's metrics.csv).
LOSSES = {
    ("exact", 1): [2.5, 2.0, 1.8, 1.7],
    ("exact", 2): [2.6, 2.1, 1.9, 1.8],
    ("detach", 1): [2.5, 2.0, 1.9, 1.9],    # gaps 0, 0, 0.1, 0.2
    ("detach", 2): [2.7, 2.3],              # gaps 0.1, 0.2; interrupted after step 200
}


def write_sweep(directory):
    runs = {"exact": [], "detach": []}
    for (arm, seed), losses in LOSSES.items():
        run_dir = os.path.join(arm, f"seed-{seed}")
        os.makedirs(os.path.join(directory, run_dir))
        with open(os.path.join(directory, run_dir, "metrics.csv"), "w", encoding="utf-8") as f:
            f.write("step,tokens,train_loss,val_loss,lr,tokens_per_s\n")
            for index, loss in enumerate(losses):
                step = 100 * (index + 1)
                f.write(f"{step},{step * TOKENS_PER_STEP},{loss + 0.05},{loss},0.001,20000\n")
        runs[arm].append({"dir": run_dir, "seed": seed, "done": len(losses) == 4})
    with open(os.path.join(directory, "sweep.json"), "w", encoding="utf-8") as f:
        json.dump({"arms": ["exact", "detach"], "seeds": [1, 2],
                   "config": {"preset": "small", "steps": 400}}, f)
    report = {"reference": "exact", "arms": [
        {"arm": "exact", "runs": runs["exact"], "gap_to_reference": None},
        {"arm": "detach", "runs": runs["detach"],
         "gap_to_reference": {"mean": 0.2, "t95": None, "per_seed": [
             {"seed": 1, "gap": 0.2}, {"seed": 2, "gap": 0.2}]}}]}
    with open(os.path.join(directory, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f)
    return report


class GapSeriesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.report = write_sweep(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_gaps_are_paired_by_seed_and_step(self):
        series = plot_run.gap_series(self.tmp.name, self.report)
        self.assertEqual([arm for arm, _, _ in series], ["detach"])
        _, per_seed, _ = series[0]
        tokens_1, gaps_1 = per_seed[1]
        self.assertEqual(tokens_1, [100 * TOKENS_PER_STEP * k for k in (1, 2, 3, 4)])
        for got, want in zip(gaps_1, [0.0, 0.0, 0.1, 0.2]):
            self.assertAlmostEqual(got, want, places=12)
        tokens_2, gaps_2 = per_seed[2]
        self.assertEqual(tokens_2, [76800, 153600])
        for got, want in zip(gaps_2, [0.1, 0.2]):
            self.assertAlmostEqual(got, want, places=12)

    def test_mean_covers_the_steps_every_seed_reached(self):
        _, _, (tokens, mean) = plot_run.gap_series(self.tmp.name, self.report)[0]
        self.assertEqual(tokens, [76800, 153600])
        for got, want in zip(mean, [0.05, 0.1]):
            self.assertAlmostEqual(got, want, places=12)

    def test_no_reference_means_no_series(self):
        report = dict(self.report, reference=None)
        self.assertEqual(plot_run.gap_series(self.tmp.name, report), [])

    def test_script_draws_the_sweep_figures(self):
        process = subprocess.run([sys.executable, SCRIPT, self.tmp.name], capture_output=True,
                                 text=True, timeout=120)
        self.assertEqual(process.returncode, 0, process.stderr)
        for name in ("loss_curves.png", "gap_curves.png", "gap.png"):
            path = os.path.join(self.tmp.name, "figures", name)
            self.assertTrue(os.path.getsize(path) > 1000, name)
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)


if __name__ == "__main__":
    unittest.main()
