#!/usr/bin/env python3
"""The docs' copies of the code, checked against the code.

  check_docs.py ROOT              checks the tree at ROOT
  check_docs.py --selftest ROOT   a copy with drifted docs must fail

- The lock table of docs/ARCHITECTURE.md lists every rank of
  src/support/lock.h, in its order, each in the file lock.h names, and that
  file (or its header) takes locks of that rank.
- Every file a doc names exists (as a path from the root, from src/ or from
  the doc's own folder), and every file of src/ is named in its folder's
  README.md.
- Every library name a doc quotes (`cpool_...`, `cpool__...`, `CPOOL_...`)
  exists in include/ or src/; where a doc places one in a file (`name`
  (folder/file) or (folder/file, `name`)), that file has it.
- The concepts of graph memory (CONCEPTS) are explained in src/memory/README.md
  and docs/ARCHITECTURE.md, each a paragraph opened by its name in bold, in
  that order, and each paragraph quotes a name of the code that has it.
"""
import os
import re
import shutil
import sys
import tempfile

DOCS = ["README.md", "docs/ARCHITECTURE.md", "docs/GUIDE.md", "docs/SHARED_POOLS.md", "docs/SNAPSHOT.md",
        "docs/BENCHMARKS.md", "CHANGELOG.md", "fuzz/README.md"]
SOURCE_SUFFIXES = (".c", ".h", ".cu", ".cpp", ".py", ".sh")
# A path: folders and a file with a source suffix.
PATH = re.compile(r"(?<![\w/.-])((?:\.\./)?(?:[\w-]+/)*[\w-]+\.(?:c|h|cu|cpp|py|sh|md|json|txt))(?![\w/-])")
NAME = re.compile(r"`((?:cpool_|CPOOL_)\w*)")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def docs_of(root):
    found = [d for d in DOCS if os.path.exists(os.path.join(root, d))]
    for layer in sorted(os.listdir(os.path.join(root, "src"))):
        readme = os.path.join("src", layer, "README.md")
        if os.path.exists(os.path.join(root, readme)):
            found.append(readme)
    return found


def source_files(root):
    out = []
    for top in ("src", "include"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            out += [os.path.join(folder, f) for f in files if f.endswith(SOURCE_SUFFIXES)]
    return out


def check_locks(root, fail):
    lock_h = read(os.path.join(root, "src/support/lock.h"))
    enum = lock_h[lock_h.index("typedef enum cpool__rank"):lock_h.index("CPOOL__RANK_COUNT")]
    ranks = re.findall(r"(CPOOL__RANK_\w+)(?: = 1)?,\s*/\*\s*([\w./]+):", enum)
    arch = read(os.path.join(root, "docs/ARCHITECTURE.md"))
    rows = re.findall(r"^\| (\d+) \| [^|]+ \| ([\w./]+) \|$", arch, re.M)
    if len(rows) != len(ranks):
        fail(f"docs/ARCHITECTURE.md lists {len(rows)} lock ranks, src/support/lock.h has {len(ranks)}")
    for i, ((name, owner), (number, path)) in enumerate(zip(ranks, rows)):
        if int(number) != i + 1:
            fail(f"docs/ARCHITECTURE.md: lock row {i + 1} says rank {number}")
        if os.path.basename(path) != os.path.basename(owner):
            fail(f"{name}: lock.h names {owner}, docs/ARCHITECTURE.md rank {number} names {path}")
        full = os.path.join(root, "src", path)
        if not os.path.exists(full):
            fail(f"docs/ARCHITECTURE.md rank {number}: no file src/{path}")
            continue
        header = full[:-2] + ".h"
        text = read(full) + (read(header) if os.path.exists(header) else "")
        if name not in text:
            fail(f"{name}: src/{path}, which lock.h and docs/ARCHITECTURE.md name, takes no lock of it")


def tree_files(root):
    """Every file of the tree but builds and git's."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".git", "build")) and d != "__pycache__"]
        out += [os.path.join(folder, f) for f in files]
    return out


def resolve(root, doc, path, files=None):
    """The file a doc means by path: from the root, src/ or the doc's folder;
    a bare name, any file of that name."""
    for base in (root, os.path.join(root, "src"), os.path.join(root, os.path.dirname(doc))):
        if os.path.exists(os.path.normpath(os.path.join(base, path))):
            return os.path.normpath(os.path.join(base, path))
    if "/" not in path and files is not None:
        for f in files:
            if os.path.basename(f) == path:
                return f
    return None


# Files a doc names that the tree does not hold by design: what a user
# writes, and what a run writes.
NOT_IN_TREE = {"app.c", "results.md", "SNAPSHOT.json", "nccl.h"}


def check_paths(root, fail):
    files = tree_files(root)
    for doc in docs_of(root):
        text = read(os.path.join(root, doc))
        for path in sorted(set(PATH.findall(text))):
            if path.startswith("../") or path in NOT_IN_TREE or resolve(root, doc, path, files):
                continue
            fail(f"{doc} names {path}, which does not exist")
    for layer in sorted(os.listdir(os.path.join(root, "src"))):
        folder = os.path.join(root, "src", layer)
        readme = os.path.join(folder, "README.md")
        if not os.path.isdir(folder) or not os.path.exists(readme):
            continue
        text = read(readme)
        for sub, _, names in os.walk(folder):
            for f in names:
                # A header is named with its .c, or alone when it has none.
                alone = f.endswith(".h") and f[:-2] + ".c" not in names
                if (f.endswith(".c") or alone) and f not in text:
                    rel = os.path.relpath(os.path.join(sub, f), os.path.join(root, "src"))
                    fail(f"src/{layer}/README.md does not name {rel}")


def check_names(root, fail):
    words = set()
    for path in tree_files(root):
        if path.endswith(SOURCE_SUFFIXES + ("CMakeLists.txt", ".cmake", "run")):
            words.update(re.findall(r"\b(?:cpool_|CPOOL_)\w*", read(path)))
    for doc in docs_of(root):
        text = read(os.path.join(root, doc))
        for name in sorted(set(NAME.findall(text))):
            if name not in words and not name.endswith("_"):
                fail(f"{doc} quotes `{name}`, which is in neither include/ nor src/")
        # `name` (folder/file...), `name`, folder/file and (folder/file,
        # `name`): the file has it.
        placed = re.findall(r"`(\w+)`,? \(((?:[\w-]+/)*[\w-]+\.[ch])\b", text)
        placed += re.findall(r"`(\w+)`,\s+((?:[\w-]+/)+[\w-]+\.[ch])\b", text)
        placed += [(n, p) for p, n in re.findall(r"\(((?:[\w-]+/)*[\w-]+\.[ch]),\s+`(\w+)`", text)]
        for name, path in placed:
            if not name.startswith(("cpool", "CPOOL")):
                continue
            full = resolve(root, doc, path)
            if full and name not in read(full):
                fail(f"{doc} places `{name}` in {path}, which does not have it")


# Graph memory, in the order a newcomer meets it.
CONCEPTS = ["Arenas", "The shared set", "Runs", "The packed region", "Loans", "Guesses"]
CONCEPT_DOCS = ["src/memory/README.md", "docs/ARCHITECTURE.md"]


def check_concepts(root, fail):
    words = set()
    for path in source_files(root):
        words.update(re.findall(r"\b(?:cpool_|CPOOL_)\w*", read(path)))
    for doc in CONCEPT_DOCS:
        text = read(os.path.join(root, doc))
        at = -1
        for concept in CONCEPTS:
            start = text.find(f"**{concept}.**")
            if start < 0:
                fail(f"{doc} explains no concept \"{concept}\" (a paragraph opened by **{concept}.**)")
                continue
            if start < at:
                fail(f"{doc} explains \"{concept}\" out of order ({', '.join(CONCEPTS)})")
            at = start
            end = text.find("\n\n", start)
            paragraph = text[start:end if end > 0 else len(text)]
            if not any(n in words for n in NAME.findall(paragraph)):
                fail(f"{doc}: the paragraph on \"{concept}\" quotes no name of the code")


def check(root):
    failures = []
    check_concepts(root, failures.append)
    check_locks(root, failures.append)
    check_paths(root, failures.append)
    check_names(root, failures.append)
    for f in failures:
        print("check_docs:", f)
    return not failures


def selftest(root):
    """Each kind of drift, made in a copy, must be caught."""
    drifts = [
        ("docs/ARCHITECTURE.md", "| 2 |", "| 3 |", "lock row 2"),
        ("src/support/lock.h", "/* event.c:", "/* stream.c:", "lock.h names stream.c"),
        ("docs/ARCHITECTURE.md", "(objects/capture.c)", "(objects/no_such_file.c)", "no_such_file.c"),
        ("docs/ARCHITECTURE.md", "`cpool_capture_begin`", "`cpool_capture_begin_no_more`",
         "cpool_capture_begin_no_more"),
        ("src/memory/README.md", "**Runs.**", "**Runs**", "concept \"Runs\""),
        ("docs/ARCHITECTURE.md", "`cpool__capture_fork`,\nobjects/capture_record.c",
         "`cpool__capture_fork`,\nobjects/capture.c", None),
    ]
    ok = True
    for doc, old, new, expect in drifts:
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "tree")
            shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git", "build*"))
            path = os.path.join(copy, doc)
            text = read(path)
            if old not in text:
                if expect is None:
                    continue  # a drift this tree's wording does not offer
                print(f"selftest: {doc} no longer has {old!r}: update the selftest")
                return False
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))
            import io
            import contextlib
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                caught = not check(copy)
            if not caught or (expect and expect not in out.getvalue()):
                print(f"selftest: {new!r} in {doc} was not caught:\n{out.getvalue()}")
                ok = False
    if ok:
        print("selftest: every drift was caught")
    return ok


def main(argv):
    if len(argv) == 3 and argv[1] == "--selftest":
        return 0 if selftest(argv[2]) else 1
    if len(argv) != 2:
        print(__doc__)
        return 2
    if not check(argv[1]):
        return 1
    print("check_docs: the docs agree with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
