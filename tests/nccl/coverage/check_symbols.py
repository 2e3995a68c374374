#!/usr/bin/env python3
"""Holds the NCCL drop-in (libnccl.so.2) to the names its users link against: every function the nccl.h it was
built against declares, every nccl* symbol torch's libraries import, and every nccl*/pnccl* symbol the real
libnccl.so.2 next to that nccl.h exports must be exported by the drop-in. Also checks that its SONAME is
libnccl.so.2, that it NEEDs no libnccl (it must never load the real NCCL), and that it exports NCCL's names only.

usage: check_symbols.py --dropin build/strata-nccl/libnccl.so.2 --include DIR_OF_NCCL_H [--torch-lib DIR]
                        [--real-nccl FILE]
--torch-lib and --real-nccl default to torch's lib folder (found through `import torch`) and ../lib/libnccl.so.2
next to the header; a reference that is absent is skipped with a line saying why. Prints every missing or extra
name and exits 1 when any check fails, 0 when all pass.
"""
import argparse
import os
import re
import subprocess
import sys

NCCL_NAME = re.compile(r"^p?nccl[A-Za-z0-9_]*$")
# Symbols every shared object may export besides its API: the linker's section markers and init/fini.
STANDARD = {"_init", "_fini", "_edata", "_end", "__bss_start", "_DYNAMIC", "_GLOBAL_OFFSET_TABLE_"}


def header_functions(path):
    """Function names (nccl*/pnccl*) declared in the header: a name followed by '(' outside comments, strings and
    preprocessor lines. Both branches of every #if count (ncclResetDebugInit is declared only under NCCL_OS_LINUX,
    and libnccl.so.2 exports it on Linux)."""
    text = open(path, encoding="utf-8", errors="replace").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    # Joined continuation lines, then without preprocessor lines (macros such as NCCL_VERSION(X,Y,Z) and the
    # #else branch's `#define ncclResetDebugInit()`).
    text = text.replace("\\\n", " ")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return set(re.findall(r"\b(p?nccl[A-Za-z0-9_]*)\s*\(", code))


def dynamic_symbols(path, defined):
    """Names in the dynamic symbol table: defined (exported) or undefined (imported), without version suffixes.
    Returns {name: nm type letter}."""
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, path], check=True, capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name = parts[-1].split("@")[0]
        symbols[name] = parts[-2] if len(parts) >= 2 else "?"
    return symbols


def dynamic_section(path):
    """(SONAME, [NEEDED...]) from readelf -d."""
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    soname = None
    needed = []
    for line in out.splitlines():
        m = re.search(r"\((SONAME|NEEDED)\)\s+.*\[(.*)\]", line)
        if m and m.group(1) == "SONAME":
            soname = m.group(2)
        elif m:
            needed.append(m.group(2))
    return soname, needed


def torch_lib_dir():
    """torch's lib folder, or None (with the reason printed) when torch cannot be imported."""
    probe = "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"torch: not importable by {sys.executable} ({last}); torch's imports not checked")
        return None
    return r.stdout.strip().splitlines()[-1]


def report_missing(what, wanted, exported):
    missing = sorted(wanted - exported)
    print(f"{what}: {len(wanted)} names, {len(wanted) - len(missing)} exported by the drop-in")
    for name in missing:
        print(f"  MISSING {name}")
    return not missing


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dropin", required=True, help="the drop-in (build/strata-nccl/libnccl.so.2)")
    ap.add_argument("--include", required=True, help="the folder of the nccl.h the drop-in was built against")
    ap.add_argument("--torch-lib", help="torch's lib folder (default: found through `import torch`)")
    ap.add_argument("--real-nccl", help="the real libnccl.so.2 (default: ../lib/libnccl.so.2 next to the header)")
    args = ap.parse_args()

    ok = True
    exported_types = dynamic_symbols(args.dropin, defined=True)
    exported = set(exported_types)
    print(f"drop-in: {os.path.realpath(args.dropin)}, {len(exported)} exported symbols")

    # The header the drop-in implements.
    header = os.path.join(args.include, "nccl.h")
    declared = header_functions(header)
    if len(declared) < 50 or "ncclAllReduce" not in declared:
        print(f"{header}: only {len(declared)} functions found; the header parser is wrong for this header")
        ok = False
    ok &= report_missing(f"functions declared in {header}", declared, exported)

    # What torch links against: every nccl* its libraries import (libtorch_cuda.so above all).
    tdir = args.torch_lib or torch_lib_dir()
    if tdir and not os.path.isdir(tdir):
        print(f"torch: {tdir} is not a folder; torch's imports not checked")
    elif tdir:
        cuda = os.path.join(tdir, "libtorch_cuda.so")
        libs = sorted(os.path.join(tdir, f) for f in os.listdir(tdir) if ".so" in f)
        if not os.path.exists(cuda):
            print(f"torch: {cuda} does not exist (a CPU-only torch?); torch's imports not checked")
        else:
            imported = {}
            for lib in libs:
                if not os.path.isfile(lib):
                    continue
                try:
                    names = dynamic_symbols(lib, defined=False)
                except subprocess.CalledProcessError:
                    continue  # not an ELF object
                for name in names:
                    if NCCL_NAME.match(name):
                        imported.setdefault(name, []).append(os.path.basename(lib))
            if not any("libtorch_cuda.so" in v for v in imported.values()):
                print(f"torch: {cuda} imports no nccl* symbol (torch built without NCCL?)")
                ok = False
            ok &= report_missing(f"nccl* symbols imported by torch's libraries ({tdir})", set(imported), exported)

    # The library the header came with.
    real = args.real_nccl or os.path.normpath(os.path.join(args.include, "..", "lib", "libnccl.so.2"))
    if os.path.exists(real):
        real_exports = {n for n in dynamic_symbols(real, defined=True) if NCCL_NAME.match(n)}
        ok &= report_missing(f"nccl*/pnccl* symbols exported by {real}", real_exports, exported)
    else:
        print(f"real NCCL: {real} does not exist; its exports not compared")

    # The drop-in's identity: SONAME libnccl.so.2, no NCCL underneath, NCCL's names only.
    soname, needed = dynamic_section(args.dropin)
    if soname != "libnccl.so.2":
        print(f"SONAME is {soname!r}, not 'libnccl.so.2'")
        ok = False
    else:
        print("SONAME: libnccl.so.2")
    nccl_needed = [n for n in needed if "nccl" in n.lower()]
    if nccl_needed:
        print(f"NEEDED {', '.join(nccl_needed)}: the drop-in must not link an NCCL")
        ok = False
    else:
        print(f"NEEDED: {', '.join(needed)} (no NCCL)")
    # Absolute symbols (type A) are version nodes, not code.
    extra = sorted(n for n, t in exported_types.items()
                   if not NCCL_NAME.match(n) and n not in STANDARD and t != "A")
    for name in extra:
        print(f"  EXTRA export {name} ({exported_types[name]}): not an NCCL name")
    if extra:
        print(f"{len(extra)} exported symbols are not nccl*/pnccl*: Strata's internals must stay hidden")
        ok = False

    print("nccl_symbol_coverage: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
