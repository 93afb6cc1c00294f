"""The walk through the calls from one function of the library, for how
often a reader following the code goes back into a file already read.

Compiles src/ (the host backend; the CUDA backend's files are left out)
with gcc -fcallgraph-info into a temporary folder, builds the static call
graph (calls through function pointers are not in it), then walks it depth
first from FUNCTION, each function once, in the order of the calls in its
body. A call that goes into another .c file than the caller's counts as
entering that file; entering a file the walk entered before counts as
entered again. Files are where functions are defined; an inline helper of
a header is read where it is called (it enters no file), and functions
outside the project (the C library's) are not followed.

    python3 scripts/call_walk.py [FUNCTION]   (default: pool.c's capture_alloc)

Prints the functions reached, the files entered and the files entered
again, then the files by how often the walk entered them.
Needs gcc 10 or later."""
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = re.compile(r'node: \{ title: "([^"]+)" label: "([^"\\]+)(?:\\n([^"]*))?"')
EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def call_graph(out):
    """(where each function is defined, its calls in order, definitions by name)."""
    includes = [os.path.join(ROOT, "include")] + [d for d in glob.glob(os.path.join(ROOT, "src", "*"))
                                                  if os.path.isdir(d)]
    includes += [os.path.join(ROOT, "src", "backend", "host")] + glob.glob(os.path.join(ROOT, "build*", "include"))
    for c in glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True):
        if os.sep + "cuda" + os.sep in c:
            continue
        obj = os.path.join(out, os.path.basename(c) + ".o")
        subprocess.run(["gcc", "-std=c11", "-O0", "-D_GNU_SOURCE", "-fcallgraph-info", "-c", c, "-o", obj] +
                       [f"-I{i}" for i in includes], check=True, cwd=out)
    where, calls, by_name = {}, collections.defaultdict(list), collections.defaultdict(list)
    for ci in glob.glob(os.path.join(out, "*.ci")):
        for line in open(ci):
            m = NODE.search(line)
            if m and m.group(3):
                file = os.path.relpath(m.group(3).split(":")[0], ROOT)
                if file.startswith(".."):
                    continue
                where[m.group(1)] = file
                by_name[m.group(2)].append(m.group(1))
            m = EDGE.search(line)
            if m:
                calls[m.group(1)].append(m.group(2))
    return where, calls, by_name


def walk(start_name, where, calls, by_name):
    def resolve(title):
        if title in where:
            return title
        found = [t for t in by_name.get(title.split(":")[-1], []) if t in where]
        return found[0] if found else None

    start = next((t for t in where if t.endswith(start_name)), None)
    if start is None:
        raise SystemExit(f"call_walk: no function {start_name} defined in src/")
    seen, entered, again = set(), collections.Counter(), 0
    stack = [(start, None)]
    while stack:
        f, caller_file = stack.pop()
        if f in seen:
            continue
        seen.add(f)
        file = where[f] if where[f].endswith(".c") else caller_file
        if file != caller_file:
            again += entered[file] > 0
            entered[file] += 1
        for t in reversed(calls.get(f, [])):
            g = resolve(t)
            if g and g not in seen:
                stack.append((g, file))
    return seen, entered, again


def main():
    start = sys.argv[1] if len(sys.argv) > 1 else "src/objects/pool.c:capture_alloc"
    with tempfile.TemporaryDirectory() as out:
        where, calls, by_name = call_graph(out)
        seen, entered, again = walk(start, where, calls, by_name)
    print(f"call_walk from {start}: {len(seen)} functions, {len(entered)} files, entered again {again}")
    for file, n in entered.most_common():
        print(f"  {n:4d}  {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
