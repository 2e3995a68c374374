#!/usr/bin/env python3
"""Holds the tree to the rules of DESIGN.md ("Layers"): fails on an #include across a forbidden arrow; on a
circle of files (a module, foo.h with foo.cc, that reaches itself through includes) anywhere in src/; on a source
file of more than 600 lines under src/, tools/, bindings/, trainer/ or perf/ (tests excepted); on a public
declaration of include/strata/ without a /// comment of its own (scripts/check_public_docs.py); and on an
algorithm's name compared with a string literal in src/ or tools/ outside the algorithm table (the records of
src/collectives/ and algorithms.cc): the rest of the tree asks an algorithm's record.

usage: scripts/check_layers.py [--root DIR]   (DIR: the repository root; default: this script's parent's parent)
Prints one line per violation, naming the file, the line (the include, the line count or the declaration) and
the rule, and exits 1; exits 0 when the tree is clean. Run by `make test` (ctest layer_check).
"""
import argparse
import os
import re
import sys

# The public-API documentation rule lives in its own script of this folder; importing it writes no bytecode into
# the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_public_docs  # noqa: E402

# Quoted includes only: <...> are system and third-party headers. "strata/..." is the public API (include/),
# open to everyone. A bare name ("report.h") is a file of the including file's own folder.
PUBLIC = ("strata/",)

# Header-only, dependency-free helpers that the layers limited to the public API may use as well: they have no
# symbols, so nothing of libstrata's internals is linked through them.
HEADER_HELPERS = ("util/json_escape.h", "util/dtype_codec.h", "util/float_format.h")

# Which folders of src/ each layer may include, lowest layer first (the arrows of DESIGN.md).
SRC_LAYERS = {
    "util": ("util/",),
    "kernels": ("kernels/", "util/"),
    "bootstrap": ("bootstrap/", "util/"),
    "topology": ("topology/", "bootstrap/", "util/"),
    "transport": ("transport/", "bootstrap/", "util/"),
    "collectives": ("collectives/", "topology/", "util/"),
    "device": ("device/", "collectives/", "kernels/", "util/"),
    "core": ("core/", "collectives/", "transport/", "topology/", "bootstrap/", "kernels/", "util/"),
    "engine": ("engine/", "core/", "device/", "collectives/", "transport/", "topology/", "bootstrap/", "kernels/",
               "util/"),
    "api": ("api/", "engine/", "core/", "device/", "collectives/", "transport/", "topology/", "bootstrap/",
            "kernels/", "util/"),
    "overlap": HEADER_HELPERS,
    # The NCCL drop-in (libnccl.so.2): above every layer, it may use any of them.
    "nccl": ("nccl/", "api/", "engine/", "core/", "device/", "collectives/", "transport/", "topology/", "bootstrap/",
             "kernels/", "util/"),
}

# Everything outside src/ that ships or measures uses the public API only, except these files, each for the
# reason DESIGN.md gives.
OUTSIDE = ("tools", "perf", "trainer", "bindings", "examples")
EXCEPTIONS = {
    # strata-topo prints what discovery, the topology files and the cost model make of a machine: it is a window
    # on those internals, linked statically.
    "tools/strata-topo/main.cc": ("bootstrap/", "topology/", "collectives/algorithms.h", "collectives/cost_model.h",
                                  "util/config.h", "util/error.h"),
    # strata-sim runs the plan generators (and loaded plan programs) and the simulator, and reads its cluster files
    # with the JSON reader.
    "tools/strata-sim/main.cc": ("collectives/algorithms.h", "collectives/host_layout.h", "collectives/plan_program.h",
                                 "collectives/sim.h", "topology/json.h", "util/error.h"),
    # strata-plan loads, proves and dumps algorithm files: the plan programs, the generators and the proof.
    "tools/strata-plan/main.cc": ("collectives/algorithms.h", "collectives/plan_program.h", "core/plan_proof.h",
                                  "util/error.h"),
    # Kernel micro-benchmarks time the internal kernels and the CUDA loader directly.
    "perf/bench_reduce.cc": ("kernels/", "util/"),
    "perf/bench_gpu_reduce.cc": ("kernels/", "util/"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".c", ".cu", ".cuh")

# One idea per file: a source file of these folders is at most MAX_LINES lines. Tests are exempt (a test file
# holds the cases of one subject, however many), and so are build folders.
MAX_LINES = 600
SIZED = ("src", "tools", "bindings", "trainer", "perf")
SIZED_EXT = SOURCE_EXT + (".py", ".sh")
TEST_DIRS = ("tests", "test")


def is_build_dir(d):
    return d in ("build", "__pycache__") or d.startswith("build-")


def source_files(root, top, ext=SOURCE_EXT, skip=()):
    base = os.path.join(root, top)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not is_build_dir(d) and d not in skip)
        for f in sorted(filenames):
            if f.endswith(ext):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


def allowed_for(path):
    """(allowed prefixes or files, rule text) for a file, or None when anything goes (tests)."""
    parts = path.split(os.sep)
    if parts[0] == "src" and len(parts) > 2:
        layer = parts[1]
        if layer not in SRC_LAYERS:
            return (), "src/%s is not a layer of DESIGN.md" % layer
        allowed = SRC_LAYERS[layer]
        return allowed, "%s may include only %s" % (layer, ", ".join(allowed + PUBLIC))
    if parts[0] in OUTSIDE:
        extra = EXCEPTIONS.get("/".join(parts), ())
        allowed = HEADER_HELPERS + extra
        return allowed, "%s may include only the public API (strata/) and %s" % (
            parts[0], ", ".join(allowed))
    return None


def check_arrows(root, files):
    bad = []
    for path in files:
        rule = allowed_for(path)
        if rule is None:
            continue
        allowed, text = rule
        for n, inc in includes(root, path):
            if inc.startswith(PUBLIC) or "/" not in inc:
                continue
            if any(inc == a or (a.endswith("/") and inc.startswith(a)) for a in allowed):
                continue
            bad.append("%s:%d: includes \"%s\": %s (DESIGN.md, Layers)" % (path, n, inc, text))
    return bad


def check_circles(root, files):
    """A module is a file without its extension (foo.h + foo.cc); an edge is an include of another module."""
    src = [p for p in files if p.startswith("src" + os.sep)]
    module_of = {}
    for p in src:
        rel = os.path.relpath(p, "src")
        module_of[rel] = os.path.splitext(rel)[0]
    edges = {m: set() for m in module_of.values()}
    where = {}
    for p in src:
        me = module_of[os.path.relpath(p, "src")]
        for n, inc in includes(root, p):
            target = inc if "/" in inc else os.path.join(os.path.dirname(os.path.relpath(p, "src")), inc)
            other = module_of.get(os.path.normpath(target))
            if other and other != me:
                edges[me].add(other)
                where.setdefault((me, other), "%s:%d" % (p, n))
    # Tarjan's strongly connected components: any component of more than one module is a circle.
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    bad = []
    for comp in comps:
        members = set(comp)
        links = ["%s -> %s (%s)" % (a, b, where[(a, b)]) for a in comp for b in sorted(edges[a]) if b in members]
        bad.append("circle of files in src/: %s: %s" % (", ".join(comp), "; ".join(links)))
    return bad


def line_count(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def check_long_files(root):
    """Source files of SIZED over MAX_LINES lines, outside test and build folders."""
    bad, checked = [], 0
    for top in SIZED:
        if not os.path.isdir(os.path.join(root, top)):
            continue
        for path in source_files(root, top, SIZED_EXT, TEST_DIRS):
            checked += 1
            n = line_count(os.path.join(root, path))
            if n > MAX_LINES:
                bad.append("%s: %d lines, more than %d: split it, one idea per file (DESIGN.md, Layers)" %
                           (path, n, MAX_LINES))
    return bad, checked


# The algorithm table: the records' names (`.name = "ring"` in the family files) and the files that may spell them.
RECORD_NAME = re.compile(r'^\s*\.name\s*=\s*"([^"]+)"')
# Baselines of strata-perf run other libraries' algorithms, some of which share a name with one of Strata's.
NAME_EXEMPT = ("tools/strata-perf/baseline_",)


def algorithm_names(root):
    """(names, files that declare records): every `.name = "..."` of src/collectives/."""
    names, registry = set(), {os.path.join("src", "collectives", "algorithms.cc")}
    for path in source_files(root, os.path.join("src", "collectives")):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            found = [m.group(1) for m in map(RECORD_NAME.match, f) if m]
        if found:
            names.update(found)
            registry.add(path)
    return names, registry


def check_algorithm_names(root, files):
    """A comparison (==, !=, strcmp, compare) of an algorithm's name with a literal outside the table."""
    names, registry = algorithm_names(root)
    if not names:
        return ["src/collectives: no algorithm record (`.name = \"...\"`) found: the algorithm-name rule has nothing "
                "to check (DESIGN.md, Algorithms and selection)"]
    alt = "|".join(re.escape(n) for n in sorted(names))
    compared = re.compile(r'(?:[!=]=\s*"(%s)")|(?:"(%s)"\s*[!=]=)|(?:(?:strcmp|compare)\s*\([^;]*"(%s)")' %
                          (alt, alt, alt))
    bad = []
    for path in files:
        if not path.startswith(("src" + os.sep, "tools" + os.sep)) or path in registry:
            continue
        if path.replace(os.sep, "/").startswith(NAME_EXEMPT):
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                code = line.split("//", 1)[0]
                m = compared.search(code)
                if m:
                    name = next(g for g in m.groups() if g)
                    bad.append("%s:%d: compares algorithm name \"%s\" with a literal: ask its record "
                               "(collectives/algorithms.h) instead (DESIGN.md, Algorithms and selection)" %
                               (path, n, name))
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = []
    for top in ("src",) + OUTSIDE:
        if os.path.isdir(os.path.join(root, top)):
            files.extend(source_files(root, top))
    long_files, sized = check_long_files(root)
    bad = (check_arrows(root, files) + check_circles(root, files) + long_files + check_public_docs.check(root) +
           check_algorithm_names(root, files))
    for line in bad:
        print(line)
    if bad:
        print("check_layers: %d violation(s) in %d files checked (%d for their length, %d public headers)" %
              (len(bad), len(files), sized, len(check_public_docs.HEADERS)))
        return 1
    print("check_layers: %d files, no forbidden include, no circle of files; %d files of at most %d lines; every "
          "public declaration of %d headers documented; no algorithm name compared outside the table" %
          (len(files), sized, MAX_LINES, len(check_public_docs.HEADERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
