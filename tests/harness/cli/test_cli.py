"""The lpattn command's refusals (issue 20): each fails before writing anything, with a message
that says what to write instead; and the sweep options of docs/harness.md §3.4-3.5 (seeds,
reference arm, intervals) end to end on a tiny sweep. Run by ctest as
`test_cli.py <lpattn binary>`."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest

LPATTN = None


def lpattn(*args):
    return subprocess.run([LPATTN, *args], capture_output=True, text=True, timeout=120)


class Refusals(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="lpattn-cli-")
        self.out = os.path.join(self.dir.name, "out")

    def tearDown(self):
        self.dir.cleanup()

    def test_duplicate_arm_is_refused(self):
        result = lpattn("sweep", "--arms", "exact,exact", "--seeds", "1", "--out", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn("arm 'exact' is given twice", result.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_arm_of_a_plan_given_again_is_refused(self):
        result = lpattn("sweep", "--plan", "lowp", "--arms", "exact", "--out", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn("arm 'exact' is given twice (--plan lowp has it)", result.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_missing_corpus_fails_before_writing(self):
        result = lpattn("sweep", "--arms", "exact", "--seeds", "1", "--out", self.out,
                        "--data", os.path.join(self.dir.name, "missing.txt"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("missing.txt", result.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_both_seeds_fixed_is_refused(self):
        result = lpattn("sweep", "--arms", "exact", "--seeds", "1,2", "--init-seed", "3",
                        "--data-seed", "4", "--out", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn("--init-seed and --data-seed are both fixed", result.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_reference_outside_the_arms_is_refused(self):
        result = lpattn("sweep", "--arms", "exact,sink", "--seeds", "1", "--reference",
                        "outgate", "--out", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn("the reference arm 'outgate' is not one of the arms", result.stderr)
        self.assertFalse(os.path.exists(self.out))


def write_corpus(path):
    rng = random.Random(5)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away"]
    with open(path, "w") as f:
        for _ in range(40):  # documents separated by blank lines
            f.write(" ".join(rng.choice(words) for _ in range(120)) + "\n\n")


class TinySweep(unittest.TestCase):
    """Three seeds of two arms for a few steps, with one data order and a chosen reference."""

    def test_reference_seeds_and_intervals(self):
        with tempfile.TemporaryDirectory(prefix="lpattn-cli-") as tmp:
            corpus, out = os.path.join(tmp, "corpus.txt"), os.path.join(tmp, "sweep")
            write_corpus(corpus)
            result = lpattn("sweep", "--arms", "exact,sink", "--seeds", "1,2,3", "--data-seed",
                            "7", "--reference", "sink", "--steps", "4", "--eval-every", "2",
                            "--eval-windows", "4", "--threads", "1", "--data", corpus,
                            "--out", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(os.path.join(out, "sweep.json")) as f:
                self.assertEqual(json.load(f)["reference"], "sink")
            with open(os.path.join(out, "exact", "seed-2", "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual((summary["init_seed"], summary["data_seed"]), (2, 7))
            with open(os.path.join(out, "report.json")) as f:
                report = json.load(f)
            self.assertEqual(report["reference"], "sink")
            exact = report["arms"][0]["gap_to_reference"]
            self.assertEqual(exact["n"], 3)
            low, high = exact["t95"]
            self.assertLess(low, exact["mean"])
            self.assertGreater(high, exact["mean"])
            self.assertIn(exact["verdict"], ("within noise", "worse", "better"))
            self.assertIn("gap to sink (mean ± std)", result.stdout)
            # The same runs paired with exact instead, without training again.
            again = lpattn("report", out, "--reference", "exact")
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertIn("gap to exact (mean ± std)", again.stdout)
            with open(os.path.join(out, "report.json")) as f:
                sink = json.load(f)["arms"][1]["gap_to_reference"]
            self.assertAlmostEqual(sink["mean"], -exact["mean"], places=12)
            self.assertEqual(lpattn("report", out, "--reference", "tda").returncode, 1)


def rewrite_checkpoint_with_nan_weights(path, step):
    """The checkpoint at path (docs/harness.md §3.3) with its step set to `step` and every weight
    NaN, its FNV-1a checksum recomputed."""
    with open(path, "rb") as f:
        body = bytearray(f.read()[:-8])
    offset = 8 + 4  # magic, version
    offset += 8 + struct.unpack_from("<Q", body, offset)[0]  # the config's JSON
    struct.pack_into("<q", body, offset, step)
    offset += 8
    count = struct.unpack_from("<Q", body, offset)[0]
    offset += 8
    body[offset:offset + 4 * count] = struct.pack("<f", float("nan")) * count
    checksum = 14695981039346656037
    for byte in body:
        checksum = ((checksum ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    with open(path, "wb") as f:
        f.write(bytes(body) + struct.pack("<Q", checksum))


class Divergence(unittest.TestCase):
    """A run whose loss is not finite stops there and says so (docs/harness.md §3.2)."""

    def test_a_diverged_run_exits_with_status_3(self):
        with tempfile.TemporaryDirectory(prefix="lpattn-cli-") as tmp:
            corpus, run = os.path.join(tmp, "corpus.txt"), os.path.join(tmp, "run")
            write_corpus(corpus)
            result = lpattn("train", "--steps", "4", "--eval-every", "2", "--eval-windows", "4",
                            "--threads", "1", "--data", corpus, "--out", run)
            self.assertEqual(result.returncode, 0, result.stderr)
            # Back to step 2 with NaN weights: step 3's loss is not finite.
            rewrite_checkpoint_with_nan_weights(os.path.join(run, "checkpoint.bin"), 2)
            result = lpattn("train", "--resume", "--out", run)
            self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
            self.assertIn("not finite at step 3", result.stdout)
            with open(os.path.join(run, "summary.json")) as f:
                summary = json.load(f)
            self.assertEqual((summary["diverged_at_step"], summary["steps"]), (3, 2))


class LongerContext(unittest.TestCase):
    """A rotary model trained at 16 tokens, evaluated at 4x (docs/harness.md §3.8)."""

    def test_eval_at_four_times_the_context(self):
        with tempfile.TemporaryDirectory(prefix="lpattn-cli-") as tmp:
            corpus, run = os.path.join(tmp, "corpus.txt"), os.path.join(tmp, "run")
            write_corpus(corpus)
            common = ["--steps", "4", "--eval-every", "2", "--eval-windows", "4", "--context",
                      "16", "--threads", "1", "--data", corpus]
            result = lpattn("train", "--pos", "rope", "--out", run, *common)
            self.assertEqual(result.returncode, 0, result.stderr)
            table = os.path.join(tmp, "context.json")
            result = lpattn("eval", "--checkpoint", os.path.join(run, "checkpoint.bin"),
                            "--context", "4x", "--windows", "3", "--out", table)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("| 48-63 |", result.stdout)
            with open(table) as f:
                saved = json.load(f)
            self.assertEqual((saved["context"], saved["trained_context"]), (64, 16))
            self.assertEqual([b["begin"] for b in saved["buckets"]], [0, 16, 32, 48])
            # A learned-position model is refused, before anything is written.
            learned = os.path.join(tmp, "learned")
            self.assertEqual(lpattn("train", "--out", learned, *common).returncode, 0)
            refused = os.path.join(tmp, "refused.json")
            result = lpattn("eval", "--checkpoint", os.path.join(learned, "checkpoint.bin"),
                            "--context", "4x", "--out", refused)
            self.assertEqual(result.returncode, 1)
            self.assertIn("needs a model trained with --pos rope", result.stderr)
            self.assertFalse(os.path.exists(refused))
            # Interference at evaluation, written as JSON.
            noisy = os.path.join(tmp, "noise.json")
            result = lpattn("eval", "--checkpoint", os.path.join(run, "checkpoint.bin"),
                            "--interference", "noise:rho=0.2,sigma=2", "--out", noisy)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("noise:rho=0.2:sigma=2", result.stdout)
            with open(noisy) as f:
                saved = json.load(f)
            self.assertAlmostEqual(saved["increase"], saved["loss"] - saved["clean_loss"])
            self.assertIsNone(saved["gate_corrupted"])  # exact attention has no gate
            result = lpattn("eval", "--checkpoint", os.path.join(run, "checkpoint.bin"),
                            "--interference", "noise:rho=2")
            self.assertEqual(result.returncode, 1)
            self.assertIn("rho must be in [0, 1]", result.stderr)
            result = lpattn("eval", "--checkpoint", os.path.join(run, "checkpoint.bin"),
                            "--context", "four")
            self.assertEqual(result.returncode, 1)
            self.assertIn("must be a token count or a multiple such as 4x", result.stderr)


if __name__ == "__main__":
    LPATTN = sys.argv[1]
    unittest.main(argv=sys.argv[:1], verbosity=2)
