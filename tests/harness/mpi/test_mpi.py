"""Data-parallel training and distributed sweeps under mpirun (docs/harness.md §3.7).

Run by ctest as `test_mpi.py <lpattn binary> <mpirun>`. Every job runs on this machine with
--oversubscribe (and, as root, Open MPI's run-as-root permission), on a generated corpus:
  - a 2-rank run is bit-identical run to run (losses and checkpoint);
  - its losses match the one-process run within fp32 summation-order differences;
  - a rank that fails mid-run ends the job with a message naming it, the last checkpoint
    stays, and --resume under mpirun finishes with the numbers of an uninterrupted run;
  - a sweep started on 4 ranks, ended by a failing rank and resumed on 2, gives every run the
    numbers of a one-process sweep;
  - bad input (more ranks than windows, a command that is not data-parallel) fails cleanly.
"""
import csv
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

LPATTN = MPIRUN = None

# The tiny preset for 40 steps, small enough that each job takes about a second.
TRAIN = ["--preset", "tiny", "--steps", "40", "--eval-every", "10", "--checkpoint-every", "10",
         "--threads", "1", "--eval-windows", "16"]

# Observed between 1 and 2 or 3 ranks over 40-60 steps: at most 6e-8 (one float ulp at a loss
# of 5); the bound leaves a factor of 150. Wrong windows on a rank, or gradients not weighted by
# each rank's share of the batch (visible with 3 ranks, whose shares of 8 windows differ: Adam
# would hide a common scale), move the losses by far more.
LOSS_BOUND = 1e-5


def mpi_env(extra=None):
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    env.pop("LPATTN_FAIL_AT_STEP", None)
    env.update(extra or {})
    return env


def run(args, ranks=None, fail_at=None, check=True):
    command = [LPATTN] + args
    if ranks is not None:
        command = [MPIRUN, "-np", str(ranks), "--oversubscribe"] + command
    extra = {"LPATTN_FAIL_AT_STEP": fail_at} if fail_at else None
    result = subprocess.run(command, env=mpi_env(extra), capture_output=True, text=True,
                            timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def losses(run_dir):
    """(step, train_loss, val_loss) of each metrics row; tokens_per_s is timing, left out."""
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return [(int(r["step"]), float(r["train_loss"]), float(r["val_loss"]))
                for r in csv.DictReader(f)]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class MpiTraining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lpattn-mpi-")
        rng = random.Random(5)
        words = ["the", "of", "and", "attention", "sink", "gate", "value", "query", "key",
                 "softmax", "threshold", "interval", "grid", "token", "head", "layer"]
        text = " ".join(rng.choice(words) for _ in range(60000))
        cls.corpus = os.path.join(cls.dir, "corpus.txt")
        with open(cls.corpus, "w") as f:
            f.write(text)
        cls.args = TRAIN + ["--data", cls.corpus]
        cls.one = os.path.join(cls.dir, "one")
        run(["train"] + cls.args + ["--out", cls.one])
        cls.two = os.path.join(cls.dir, "two")
        run(["train"] + cls.args + ["--out", cls.two], ranks=2)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_two_ranks_are_bit_identical_run_to_run(self):
        again = os.path.join(self.dir, "two-again")
        run(["train"] + self.args + ["--out", again], ranks=2)
        self.assertEqual(losses(self.two), losses(again))
        self.assertEqual(read_bytes(os.path.join(self.two, "checkpoint.bin")),
                         read_bytes(os.path.join(again, "checkpoint.bin")))

    def test_two_ranks_match_one_process_within_summation_order(self):
        one, two = losses(self.one), losses(self.two)
        self.assertEqual([r[0] for r in one], [r[0] for r in two])
        for (step, train1, val1), (_, train2, val2) in zip(one, two):
            self.assertLessEqual(abs(train1 - train2), LOSS_BOUND, f"train loss, step {step}")
            self.assertLessEqual(abs(val1 - val2), LOSS_BOUND, f"val loss, step {step}")

    def test_three_uneven_ranks_match_one_process_within_summation_order(self):
        three = os.path.join(self.dir, "three")
        run(["train"] + self.args + ["--out", three], ranks=3)  # 2, 3 and 3 of 8 windows
        for (step, train1, val1), (_, train3, val3) in zip(losses(self.one), losses(three)):
            self.assertLessEqual(abs(train1 - train3), LOSS_BOUND, f"train loss, step {step}")
            self.assertLessEqual(abs(val1 - val3), LOSS_BOUND, f"val loss, step {step}")

    def test_failed_rank_ends_the_job_and_resume_finishes_the_same_run(self):
        broken = os.path.join(self.dir, "broken")
        result = run(["train"] + self.args + ["--out", broken], ranks=2, fail_at="1:25",
                     check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("rank 1 of 2: failure injected at step 25", result.stderr)
        self.assertIn("last good checkpoint", result.stderr)
        self.assertEqual([r[0] for r in losses(broken)], [10, 20])  # nothing after step 20
        self.assertTrue(os.path.exists(os.path.join(broken, "checkpoint.bin")))
        self.assertFalse(os.path.exists(os.path.join(broken, "summary.json")))
        run(["train", "--resume", "--out", broken], ranks=2)
        self.assertEqual(losses(broken), losses(self.two))
        self.assertEqual(read_bytes(os.path.join(broken, "checkpoint.bin")),
                         read_bytes(os.path.join(self.two, "checkpoint.bin")))

    def test_sweep_started_on_four_ranks_and_resumed_on_two_matches_one_process(self):
        sweep = TRAIN[:] + ["--data", self.corpus, "--arms", "exact,sink", "--seeds", "1,2"]
        alone = os.path.join(self.dir, "sweep-1")
        run(["sweep"] + sweep + ["--out", alone])
        spread = os.path.join(self.dir, "sweep-4-2")
        # Rank 3 trains the 4th run (sink, seed 2) and fails at step 15, after its checkpoint at 10.
        result = run(["sweep"] + sweep + ["--out", spread], ranks=4, fail_at="3:15", check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("failure injected at step 15", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(spread, "sink", "seed-2", "summary.json")))
        self.assertTrue(os.path.exists(os.path.join(spread, "exact", "seed-1", "summary.json")))
        result = run(["sweep"] + sweep + ["--out", spread], ranks=2)
        self.assertIn("sink seed 2", result.stderr)
        self.assertIn("(resuming)", result.stderr)
        for name in ["exact/seed-1", "exact/seed-2", "sink/seed-1", "sink/seed-2"]:
            self.assertEqual(losses(os.path.join(alone, name)), losses(os.path.join(spread, name)),
                             name)
            self.assertEqual(read_bytes(os.path.join(alone, name, "checkpoint.bin")),
                             read_bytes(os.path.join(spread, name, "checkpoint.bin")), name)
        self.assertIn("exact", read_bytes(os.path.join(spread, "report.md")).decode())

    def test_more_ranks_than_windows_fail_before_writing(self):
        out = os.path.join(self.dir, "too-many")
        result = run(["train"] + self.args + ["--batch", "2", "--out", out], ranks=3, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("a batch of 2 windows cannot be split over 3 ranks", result.stderr)
        self.assertFalse(os.path.exists(out))

    def test_commands_that_are_not_data_parallel_are_refused(self):
        result = run(["info"], ranks=2, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("lpattn info runs in one process", result.stderr)


if __name__ == "__main__":
    LPATTN, MPIRUN = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
