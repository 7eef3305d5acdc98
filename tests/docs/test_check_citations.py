#!/usr/bin/env python3
"""The citation check itself (check_citations.py): it must pass a tree whose citations resolve
and name each kind of broken citation in one that has them."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_citations.py")
# The names of the foreign documents, assembled so that this file does not cite them itself.
FOREIGN_SPEC = "spec" + "/kernels.md"
FOREIGN_DESIGN = "DESIGN" + ".md"


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(root):
    result = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
    return result.returncode, result.stdout


class CheckCitations(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        write(self.root, "docs/math.md",
              "# Math\n## 0 Shapes\n## 1 Exact\n### 1.1 Sinks\n## 2. K-interval\n"
              "```\n## 9 inside a code fence is no heading\n```\nSee §1.1 and docs/design.md §3.\n")
        write(self.root, "docs/design.md", "# Design\n## 3 The skeleton\n### 3.1 Dense\n")

    def tearDown(self):
        self.dir.cleanup()

    def test_resolving_citations_pass(self):
        write(self.root, "kernels/a.cc",
              "// Exact attention (docs/math.md §1, §1.1): the bare §2 refers to math.md.\n"
              "// The skeleton: docs/design.md §3.1, and §3 again.\n")
        code, out = run(self.root)
        self.assertEqual(code, 0, out)
        self.assertIn("citations of docs/ resolve", out)

    def test_missing_section_fails(self):
        write(self.root, "kernels/a.cc", "// docs/math.md §1.2\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("kernels/a.cc:1: docs/math.md has no section 1.2", out)

    def test_fenced_heading_is_not_a_section(self):
        write(self.root, "kernels/a.cc", "// docs/math.md §9\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("has no section 9", out)

    def test_missing_document_fails(self):
        write(self.root, "harness/b.h", "// see docs/harness.md §1\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("harness/b.h:1: cites docs/harness.md, which does not exist", out)

    def test_bare_section_without_document_fails(self):
        write(self.root, "tests/c.cc", "// §1: zeros\n// docs/math.md §1\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("tests/c.cc:1: §1 names no document", out)
        self.assertNotIn("tests/c.cc:2", out)

    def test_bare_section_follows_the_last_document_named(self):
        write(self.root, "bench/d.cc", "// docs/design.md §3\n// §1.1 is not design's\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("bench/d.cc:2: docs/design.md has no section 1.1", out)

    def test_in_a_document_bare_sections_are_its_own_past_the_line(self):
        write(self.root, "docs/design.md",
              "# Design\n## 3 The skeleton\nThe math is in docs/math.md §2.\nHere §3 is design's.\n")
        code, out = run(self.root)
        self.assertEqual(code, 0, out)
        write(self.root, "docs/design.md", "# Design\n## 3 The skeleton\nSee §2.\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("docs/design.md:3: docs/design.md has no section 2", out)

    def test_documents_name_files_that_exist(self):
        write(self.root, "kernels/entry/validate.h", "// no citation\n")
        write(self.root, "docs/design.md", "# Design\n## 3 The skeleton\n"
              "Checks in kernels/entry/validate.h and `kernels/entry/validate.*`.\n")
        code, out = run(self.root)
        self.assertEqual(code, 0, out)
        write(self.root, "README.md", "The skeleton is kernels/tiled_attention-inl.h.\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn("README.md:1: names kernels/tiled_attention-inl.h, which does not exist", out)

    def test_foreign_contract_is_rejected(self):
        write(self.root, "quant/e.h", f"// the {FOREIGN_SPEC} §4 formats\n")
        write(self.root, "README.md", f"As {FOREIGN_DESIGN} says.\n")
        code, out = run(self.root)
        self.assertEqual(code, 1)
        self.assertIn(f"quant/e.h:1: cites '{FOREIGN_SPEC}'", out)
        self.assertIn(f"README.md:1: cites '{FOREIGN_DESIGN}'", out)


if __name__ == "__main__":
    unittest.main()
