#!/usr/bin/env python3
"""Compares strata-sim's predictions with strata-perf's measurements (perf/sim_validate.sh's OUTDIR).

Reads OUTDIR/meas_<layout>_<algo>[_<part>...].json (strata-perf --json; the files of one layout and algorithm,
e.g. _small and _large, or launches _l1 _l2 _l3, are merged by size, the median where several have it) and OUTDIR/pred_<layout>.json (strata-sim --algo all --json),
where <layout> is shm_n<N> (N ranks on this machine's shared memory) or net_<H>x<R> (H namespace hosts of R
ranks). Times are strata-perf's out-of-place times (the median over the timed runs of the slowest rank).

Prints markdown: a summary per layout, then per layout a table with, per size, every algorithm's measured and
predicted time and the prediction's error (pred - meas) / meas (signed; the summary uses its absolute value),
the measured best algorithm, the predicted best (among the algorithms measured at that size) and whether
it is the measured best or within TOL (10%) of the measured best's time.

Targets (issue 17), at sizes >= MIN (1 MiB): the median absolute error over all algorithms <= 15%, and the
predicted best algorithm the measured best or within 10% of its time at every size.

usage: perf/sim_compare.py OUTDIR [MEASDIR...] [--pred-dir DIR] [--min-bytes BYTES] [--tol FRACTION] [--target FRACTION]

Further MEASDIRs add their meas_*.json to OUTDIR's (the same configuration in several directories counts as
several launches: the median); --pred-dir reads pred_*.json from DIR instead of OUTDIR, e.g. measurements of an
earlier run against predictions just made on new cluster files:
  SV_PARTS=sim perf/sim_validate.sh /tmp/pred && perf/sim_compare.py /tmp/sv_dev --pred-dir /tmp/pred
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

ALGO_ORDER = ["ring", "oneshot", "twoshot", "rhd", "tree", "hier"]


def algo_key(a):
    return (ALGO_ORDER.index(a) if a in ALGO_ORDER else len(ALGO_ORDER), a)


def layout_key(name):
    m = re.fullmatch(r"shm_n(\d+)", name)
    if m:
        return (0, 1, int(m.group(1)))
    m = re.fullmatch(r"net_(\d+)x(\d+)", name)
    if m:
        return (1, int(m.group(1)), int(m.group(2)))
    return (2, 0, 0)


def layout_title(name):
    m = re.fullmatch(r"shm_n(\d+)", name)
    if m:
        return f"shared memory, {m.group(1)} ranks on this machine (clusters/this-machine-shm.json)"
    m = re.fullmatch(r"net_(\d+)x(\d+)", name)
    if m:
        return f"{m.group(1)} namespace hosts x {m.group(2)} ranks at 1 Gbit/s (clusters/netns-1g.json)"
    return name


def size_str(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def time_str(us):
    if us is None:
        return "n/a"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms" if us < 1e4 else f"{us / 1e3:.1f} ms"
    return f"{us:.3g} us" if us < 100 else f"{us:.0f} us"


def pct(x, signed=False):
    if x is None:
        return "n/a"
    return f"{x * 100:+.0f}%" if signed else f"{x * 100:.0f}%"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"sim_compare: {path}: {e}", file=sys.stderr)
        return None


def load(measdirs, preddir):
    """(meas, pred, runinfo): meas[layout][algo][size] = us, the median over every file that has the size
    (launches _l1, _l2, ... of one configuration, in any of measdirs); pred[layout][size] = {algo: us} (from
    preddir); runinfo[layout] = {description of a run: {algo: files}}."""
    samples, pred, info = {}, {}, {}
    for path in sorted(p for d in measdirs for p in glob.glob(os.path.join(d, "meas_*.json"))):
        m = re.fullmatch(r"meas_(shm_n\d+|net_\d+x\d+)_([a-z0-9]+)((?:_[a-z0-9]+)*)\.json", os.path.basename(path))
        if not m:
            continue
        layout, algo = m.group(1), m.group(2)
        doc = load_json(path)
        if doc is None:
            continue
        env = doc.get("environment", {})
        rows = [r for r in doc.get("results", []) if (r.get("out_of_place") or {}).get("time_us") is not None]
        if rows:
            lo, hi = size_str(rows[0]["size"]), size_str(rows[-1]["size"])
            desc = f"{lo if lo == hi else lo + ' to ' + hi} with -n {env.get('iters')} -w {env.get('warmup_iters')}"
            runs = info.setdefault(layout, {}).setdefault(desc, {})
            runs[algo] = runs.get(algo, 0) + 1
        for r in rows:
            samples.setdefault(layout, {}).setdefault(algo, {}).setdefault(r["size"], []).append(
                r["out_of_place"]["time_us"])
    meas = {l: {a: {s: statistics.median(v) for s, v in sizes.items()} for a, sizes in algos.items()}
            for l, algos in samples.items()}
    for path in sorted(glob.glob(os.path.join(preddir, "pred_*.json"))):
        m = re.fullmatch(r"pred_(shm_n\d+|net_\d+x\d+)\.json", os.path.basename(path))
        if not m:
            continue
        doc = load_json(path)
        if doc is None:
            continue
        for r in doc.get("rows", []):
            algos = r.get("algorithms") or {r.get("algorithm"): {"timeUs": r.get("timeUs")}}
            pred.setdefault(m.group(1), {})[r["bytes"]] = {a: v["timeUs"] for a, v in algos.items()}
    return meas, pred, info


def describe_runs(runs, algos):
    """'64 KiB to 4 MiB with -n 10 -w 2 (every algorithm, 3 launches each, median)' and the like."""
    parts = []
    for desc, per_algo in sorted(runs.items()):
        who = "every algorithm" if set(per_algo) >= set(algos) else ", ".join(sorted(per_algo, key=algo_key))
        launches = set(per_algo.values())
        n = f", {launches.pop()} launches each, the median" if len(launches) == 1 and max(per_algo.values()) > 1 else ""
        parts.append(f"{desc} ({who}{n})")
    return "; ".join(parts)


def analyse(layout, meas, pred, min_bytes, tol):
    """Per size rows and the layout's summary."""
    lm, lp = meas.get(layout, {}), pred.get(layout, {})
    algos = sorted(set(lm) | {a for p in lp.values() for a in p}, key=algo_key)
    sizes = sorted(set(lp) | {s for v in lm.values() for s in v})
    rows, big_errs, per_algo = [], [], {}
    agree = total = 0
    for s in sizes:
        cells = {}
        for a in algos:
            mt, pt = lm.get(a, {}).get(s), lp.get(s, {}).get(a)
            err = (pt - mt) / mt if mt and pt is not None else None
            cells[a] = (mt, pt, err)
            if err is not None and s >= min_bytes:
                big_errs.append(abs(err))
                per_algo.setdefault(a, []).append(err)
        measured = {a: c[0] for a, c in cells.items() if c[0] is not None}
        predicted = {a: c[1] for a, c in cells.items() if c[1] is not None and a in measured}
        best_m = min(measured, key=measured.get) if measured else None
        best_p = min(predicted, key=predicted.get) if predicted else None
        best_all = min(lp.get(s, {}), key=lp[s].get) if lp.get(s) else None
        ok = None
        ratio = None
        if best_m and best_p:
            ratio = measured[best_p] / measured[best_m]
            ok = best_p == best_m or ratio <= 1 + tol
            if s >= min_bytes:
                total += 1
                agree += ok
        rows.append(dict(size=s, cells=cells, best_m=best_m, best_p=best_p, best_all=best_all, ratio=ratio, ok=ok))
    summary = dict(
        median=statistics.median(big_errs) if big_errs else None,
        points=len(big_errs),
        agree=agree,
        total=total,
        per_algo={a: (statistics.median([abs(e) for e in v]), statistics.median(v), len(v)) for a, v in per_algo.items()},
    )
    return algos, rows, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", help="perf/sim_validate.sh's OUTDIR: measurements and predictions")
    ap.add_argument("measdirs", nargs="*", help="more directories of measurements (launches of the same runs)")
    ap.add_argument("--pred-dir", help="read the predictions from here instead of OUTDIR")
    ap.add_argument("--min-bytes", type=int, default=1 << 20, help="sizes the summary covers (default 1 MiB)")
    ap.add_argument("--tol", type=float, default=0.10, help="predicted best within this of the measured best")
    ap.add_argument("--target", type=float, default=0.15, help="median absolute error target")
    args = ap.parse_args()
    meas, pred, info = load([args.outdir] + args.measdirs, args.pred_dir or args.outdir)
    layouts = sorted(set(meas) | set(pred), key=layout_key)
    if not layouts:
        print(f"sim_compare: nothing to compare in {args.outdir}", file=sys.stderr)
        return 1
    ms = size_str(args.min_bytes)
    results = {l: analyse(l, meas, pred, args.min_bytes, args.tol) for l in layouts}

    print("## strata-sim against measurements (all-reduce, float32 sum, out-of-place time)\n")
    print(f"Targets at sizes >= {ms}: median |pred - meas| / meas <= {args.target * 100:.0f}% over all algorithms; "
          f"the predicted best algorithm the measured best or within {args.tol * 100:.0f}% of its time.\n")
    print(f"| layout | median abs error >= {ms} | points | predicted best = measured best or within "
          f"{args.tol * 100:.0f}% (sizes >= {ms}) | error target | best target |")
    print("|---|---|---|---|---|---|")
    for l in layouts:
        _, _, sm = results[l]
        med_ok = "n/a" if sm["median"] is None else ("met" if sm["median"] <= args.target else "missed")
        best_ok = "n/a" if not sm["total"] else ("met" if sm["agree"] == sm["total"] else "missed")
        print(f"| {l} | {pct(sm['median'])} | {sm['points']} | {sm['agree']} of {sm['total']} | {med_ok} | {best_ok} |")
    print()
    print(f"Median error per algorithm at sizes >= {ms} (absolute / signed; signed < 0: the prediction is "
          "faster than the measurement):\n")
    all_algos = sorted({a for l in layouts for a in results[l][2]["per_algo"]}, key=algo_key)
    print("| layout | " + " | ".join(all_algos) + " |")
    print("|---|" + "---|" * len(all_algos))
    for l in layouts:
        pa = results[l][2]["per_algo"]
        print(f"| {l} | " + " | ".join(
            f"{pct(pa[a][0])} / {pct(pa[a][1], True)}" if a in pa else "n/a" for a in all_algos) + " |")
    print()

    for l in layouts:
        algos, rows, sm = results[l]
        print(f"### {l}: {layout_title(l)}\n")
        if l in info:
            print("Measured: " + describe_runs(info[l], [a for a in algos if a in meas.get(l, {})]) +
                  ". Cells: measured / predicted (error).\n")
        print("| size | " + " | ".join(algos) + " | measured best | predicted best | its measured time / best's | ok |")
        print("|---|" + "---|" * len(algos) + "---|---|---|---|")
        for r in rows:
            cells = []
            for a in algos:
                mt, pt, err = r["cells"][a]
                cells.append(f"{time_str(mt)} / {time_str(pt)} ({pct(err, True)})" if mt is not None
                             else f"n/a / {time_str(pt)}")
            bp = r["best_p"] or "n/a"
            if r["best_all"] and r["best_p"] and r["best_all"] != r["best_p"]:
                bp += f" ({r['best_all']} if unmeasured ones count)"
            ok = "n/a" if r["ok"] is None else ("yes" if r["ok"] else "**no**")
            ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
            print(f"| {size_str(r['size'])} | " + " | ".join(cells) +
                  f" | {r['best_m'] or 'n/a'} | {bp} | {ratio} | {ok} |")
        print()
        unmeasured = []
        for a in algos:
            sizes = [r["size"] for r in rows if r["cells"][a][0] is None and r["cells"][a][1] is not None]
            if sizes and a in meas.get(l, {}):
                unmeasured.append(f"{a} at {', '.join(size_str(x) for x in sizes)}")
        if unmeasured:
            print("Not measured (perf/sim_validate.sh caps them; predicted only, left out of the summary): " +
                  "; ".join(unmeasured) + ".\n")
        print(f"Sizes >= {ms}: median abs error {pct(sm['median'])} over {sm['points']} points; predicted best = "
              f"measured best or within {args.tol * 100:.0f}% at {sm['agree']} of {sm['total']} sizes.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
