"""The lpattn command's refusals (issue 20): each fails before writing anything, with a message
that says what to write instead. Run by ctest as `test_cli.py <lpattn binary>`."""
import os
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


if __name__ == "__main__":
    LPATTN = sys.argv[1]
    unittest.main(argv=sys.argv[:1], verbosity=2)
