#!/usr/bin/env python3
"""The machine code of the device executor's data loops, read from the built library (sm_90 image).

For every executor kernel (one per dtype x operator, src/device/cuda/exec_*.cu) prints its registers, stack and
local-memory instructions, and the loads and stores of its data loops by width. A data loop is an innermost loop
(a backward branch and the code it jumps back over) with an instruction whose source line, or a line it was
inlined at, lies between the markers "sass-check: data loops begin" and "... end" in src/device/proto.h.

Fails (exit 1) when, for a kernel of a 2- or 4-byte dtype (the issue's rule; the others are reported), a data loop
loads or stores with an instruction narrower than 16 bytes, when any data loop of any kernel touches local memory
(a spill), or when a kernel has no data loop at all (the markers or the line information are gone, and the check
would pass without looking). Exit 77: skipped (no CUDA build, or the disassembler is missing), saying why.

usage: sass_check.py LIB_OR_OBJECT [--source src/device/proto.h] [--arch sm_90] [--kernel-filter SUBSTRING]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

DTYPES = {0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4), 4: ("int64", 8), 5: ("uint64", 8),
          6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8), 9: ("bfloat16", 2), 10: ("float8e4m3", 1),
          11: ("float8e5m2", 1)}
OPS = {0: "sum", 1: "prod", 2: "max", 3: "min"}
MEM = re.compile(r"\b(LDG|STG|LD|ST|LDL|STL)(\.[A-Z0-9_]+)*\b")
INSN = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\b.*`\(([^)]+)\)")
LABEL = re.compile(r"^(\.L_x_\d+|\.text\.[^:]+):")
LINE = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
KERNEL = re.compile(r"devExecKernelIL16strataDataType_t(\d+)ELNS_10ReduceKindE(\d+)E")


def tool(name):
    found = shutil.which(name)
    if found:
        return found
    for base in sys.path:
        cand = os.path.join(base, "nvidia", "cu13", "bin", name)
        if os.path.exists(cand):
            return cand
    return None


def width(mnemonic):
    """Bytes of a load/store mnemonic such as LD.E.128, STG.E.U16, LD.E.64.STRONG.SYS."""
    parts = mnemonic.split(".")
    for p in parts[1:]:
        if p in ("128", "64"):
            return int(p) // 8
        if p in ("U8", "S8"):
            return 1
        if p in ("U16", "S16"):
            return 2
    return 4


def marker_lines(source):
    begin = end = None
    with open(source) as f:
        for i, line in enumerate(f, 1):
            if "sass-check: data loops begin" in line:
                begin = i
            elif "sass-check: data loops end" in line:
                end = i
    if begin is None or end is None or end <= begin:
        sys.exit(f"sass_check: {source} has no 'sass-check: data loops begin/end' markers")
    return begin, end


def parse_functions(text):
    """nvdisasm -c -gi output -> {function: [(addr, insn, [(file, line), ...])]} and each function's labels."""
    funcs, labels = {}, {}
    cur = None
    pending = []  # the line annotations in force: the last block before an instruction holds until the next block
    fresh = True  # the next annotation starts a new block
    for raw in text.splitlines():
        m = LABEL.match(raw.strip())
        if m:
            name = m.group(1)
            if name.startswith(".text."):
                cur = name[len(".text."):]
                funcs[cur], labels[cur] = [], {}
            elif cur is not None:
                labels[cur][name] = None  # resolved to the next instruction's address
                labels[cur]["_pending_" + name] = True
            continue
        m = LINE.search(raw)
        if m:
            if fresh:
                pending, fresh = [], False
            pending.append((m.group(1), int(m.group(2))))
            if m.group(3):
                pending.append((m.group(3), int(m.group(4))))
            continue
        m = INSN.match(raw)
        if m and cur is not None:
            addr = int(m.group(1), 16)
            for k in [k for k in labels[cur] if k.startswith("_pending_")]:
                labels[cur][k[len("_pending_"):]] = addr
                del labels[cur][k]
            funcs[cur].append((addr, m.group(2), pending))
            fresh = True
    return funcs, labels


def innermost_loops(insns, labels):
    loops = []
    for addr, text, _ in insns:
        m = BRANCH.search(text)
        if m and labels.get(m.group(1)) is not None and labels[m.group(1)] <= addr:
            loops.append((labels[m.group(1)], addr))
    return [l for l in loops if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--source", default=os.path.join(here, "..", "src", "device", "proto.h"))
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--kernel-filter", default="")
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        print(f"skipped: {args.binary} does not exist (a build without CUDA has no executor kernels)")
        return 77
    cuobjdump, nvdisasm = tool("cuobjdump"), tool("nvdisasm")
    if not cuobjdump or not nvdisasm:
        print("skipped: cuobjdump/nvdisasm not found (scripts/install_deps.sh installs PyPI's nvidia-cuda-cuobjdump "
              "and nvidia-cuda-nvdisasm)")
        return 77
    begin, end = marker_lines(args.source)
    src_name = os.path.basename(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(args.binary)], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        cubins = sorted(glob.glob(os.path.join(tmp, f"*.{args.arch}.cubin")))
        if not cubins:
            print(f"sass_check: no {args.arch} image of the executor kernels in {args.binary}")
            return 1
        resources = {}
        res = subprocess.run([cuobjdump, "-res-usage", os.path.abspath(args.binary)], capture_output=True, text=True,
                             check=True).stdout
        fn = None
        for line in res.splitlines():
            m = re.search(r"Function (\S+):", line)
            if m:
                fn = m.group(1)
            m = re.search(r"REG:(\d+) STACK:(\d+)", line)
            if m and fn:
                resources[fn] = (int(m.group(1)), int(m.group(2)))
        rows, failures = [], []
        for cubin in cubins:
            text = subprocess.run([nvdisasm, "-c", "-gi", cubin], capture_output=True, text=True, check=True).stdout
            funcs, labels = parse_functions(text)
            for name, insns in funcs.items():
                k = KERNEL.search(name)
                if "devExecKernel" not in name or args.kernel_filter not in name:
                    continue
                if k:
                    dt, op = int(k.group(1)), int(k.group(2))
                    dname, size = DTYPES[dt]
                    oname = OPS[op]
                else:  # one kernel for every pair (before the executor had a kernel per pair): reported only
                    dname, size, oname = "all", 0, "all"
                loops = innermost_loops(insns, labels[name])
                data_loops = []
                for lo, hi in loops:
                    body = [i for i in insns if lo <= i[0] <= hi]
                    if any(f.endswith(src_name) and begin <= ln <= end for _, _, lines in body for f, ln in lines):
                        data_loops.append(body)
                loads, stores, local_in_loops = {}, {}, 0
                for body in data_loops:
                    for _, t, _ in body:
                        m = MEM.search(t)
                        if not m:
                            continue
                        mn = t[m.start():].split()[0]
                        kind = mn.split(".")[0]
                        if kind in ("LDL", "STL"):
                            local_in_loops += 1
                            continue
                        table = loads if kind in ("LD", "LDG") else stores
                        table[width(mn)] = table.get(width(mn), 0) + 1
                local_all = sum(1 for _, t, _ in insns if re.search(r"\b(LDL|STL)\b", t))
                reg, stack = resources.get(name, (-1, -1))
                rows.append((dname, oname, reg, stack, local_all, len(data_loops), loads, stores, local_in_loops))
                where = f"{dname} {oname}"
                if not data_loops:
                    failures.append(f"{where}: no data loop found (markers in {src_name} lines {begin}-{end})")
                if local_in_loops:
                    failures.append(f"{where}: {local_in_loops} local-memory accesses (spills) in the data loops")
                narrow = {w: n for t in (loads, stores) for w, n in t.items() if w < 16}
                if size in (2, 4) and narrow:
                    failures.append(f"{where}: data loops use loads/stores narrower than 16 bytes: "
                                    + ", ".join(f"{n} of {w} B" for w, n in sorted(narrow.items())))
    rows.sort(key=lambda r: (r[0], r[1]))

    def fmt(t):
        return " ".join(f"{w}B:{t[w]}" for w in sorted(t, reverse=True)) or "-"

    print(f"{'dtype':<11} {'op':<4} {'regs':>4} {'stack':>5} {'local':>5} {'loops':>5}  "
          f"{'data-loop loads':<22} {'data-loop stores':<22} {'spills':>6}")
    for d, o, reg, stack, local_all, nl, ld, st, sp in rows:
        print(f"{d:<11} {o:<4} {reg:>4} {stack:>5} {local_all:>5} {nl:>5}  {fmt(ld):<22} {fmt(st):<22} {sp:>6}")
    print(f"# {len(rows)} executor kernels ({args.arch}); data loops: innermost loops with code from "
          f"{src_name}:{begin}-{end}; 'local': LDL/STL anywhere in the kernel")
    if not rows:
        print("sass_check: FAILED: no executor kernel found")
        return 1
    if failures:
        print("sass_check: FAILED")
        for f in failures:
            print("  " + f)
        return 1
    print("sass_check: passed (2- and 4-byte dtypes: every data-loop load and store is 16 bytes; no data loop spills)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
