#!/usr/bin/env python3
"""Checks that every citation of the project's documents resolves (docs/design.md §7).

Code, tests, scripts, the README and the documents themselves cite the documents under docs/
as `docs/math.md §2.3`. A bare `§2.3` refers to the document cited last before it in the same
file; in a document under docs/, to the document itself unless another is named before it on
the same line. This check fails when:
  - a file names the contract the project was built from (the spec folder's documents and the
    design document beside it, outside the repository) instead of its own documents;
  - a cited document does not exist;
  - a cited section is not a numbered heading of that document ("## 2 Title", "### 2.3 Title",
    also "## 2. Title");
  - a bare section sign has no document before it to refer to;
  - a document under docs/ (not the generated reports in its subfolders) or the README names
    a file of the project that does not exist
    (`kernels/entry/validate.h`, `harness/sweep/`), so that the documents follow the code.
Usage: check_citations.py [SOURCE_ROOT]   (default: the repository holding this script)
"""
import glob
import os
import re
import sys

ROOTS = ["kernels", "quant", "harness", "bench", "tests", "examples", "scripts", "cmake", "docs",
         "python", ".ci"]
TOP_FILES = ["README.md", "CMakeLists.txt", "Makefile"]
SUFFIXES = (".h", ".cc", ".c", ".py", ".sh", ".md", ".txt", ".in", ".cmake")
# Names of the documents the project was built from, which are not in the repository.
FOREIGN = re.compile(r"(?<![\w/.])(?:\.\./shared/|shared/spec/|spec/(?:kernels|harness|performance)\.md"
                     r"|DESIGN\.md)")
DOC = re.compile(r"docs/([\w./-]+?\.md)")
SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
# A path into the project's tree, as the documents name files and folders.
PATH = re.compile(r"(?<![\w./-])((?:kernels|quant|harness|bench|tests|scripts|examples|cmake|python)"
                  r"/[\w./-]*[\w/])")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s")


def headings(path):
    """The section numbers of a document's numbered headings (outside code fences)."""
    numbers, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            match = None if fenced else HEADING.match(line)
            if match:
                numbers.add(match.group(1))
    return numbers


def scanned_files(root):
    for name in TOP_FILES:
        if os.path.isfile(os.path.join(root, name)):
            yield name
    for top in ROOTS:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root)


def check(root):
    problems, cited, docs_cache = [], 0, {}
    # The documents written by hand (not the generated reports under docs/<study>/).
    hand_written = {"README.md"} | {os.path.join("docs", n) for n in os.listdir(
        os.path.join(root, "docs")) if n.endswith(".md")} if os.path.isdir(
        os.path.join(root, "docs")) else {"README.md"}

    def sections_of(doc):
        if doc not in docs_cache:
            path = os.path.join(root, "docs", doc)
            docs_cache[doc] = headings(path) if os.path.isfile(path) else None
        return docs_cache[doc]

    for rel in scanned_files(root):
        if rel.startswith(os.path.join("tests", "docs") + os.sep):
            continue  # the check and its test name broken citations on purpose
        itself = rel[len("docs/"):] if rel.startswith("docs/") and rel.endswith(".md") else None
        current = itself
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for number, line in enumerate(lines, 1):
            where = f"{rel}:{number}"
            if itself is not None:
                current = itself
            if rel in hand_written:
                for m in PATH.finditer(line):
                    path = os.path.join(root, m.group(1))
                    # `validate.*` names validate.h and validate.cc: a stem with files is fine.
                    if not os.path.exists(path) and not glob.glob(path + ".*"):
                        problems.append(f"{where}: names {m.group(1)}, which does not exist")
            for m in FOREIGN.finditer(line):
                problems.append(f"{where}: cites '{m.group(0)}', which is not in the project; "
                                "cite docs/ instead")
            # Walk the line left to right: a document name changes what bare sections mean.
            tokens = sorted([(m.start(), "doc", m.group(1)) for m in DOC.finditer(line)] +
                            [(m.start(), "section", m.group(1)) for m in SECTION.finditer(line)])
            for _, kind, value in tokens:
                if kind == "doc":
                    current = value
                    cited += 1
                    if sections_of(value) is None:
                        problems.append(f"{where}: cites docs/{value}, which does not exist")
                    continue
                cited += 1
                if current is None:
                    problems.append(f"{where}: §{value} names no document (write docs/<doc>.md "
                                    f"§{value} at least once before it in the file)")
                    continue
                known = sections_of(current)
                if known is not None and value not in known:
                    problems.append(f"{where}: docs/{current} has no section {value}")
    return problems, cited


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    problems, cited = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken citation(s) of {cited}")
        return 1
    print(f"all {cited} citations of docs/ resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
