#!/usr/bin/env python3
"""Render a Strata overlap trace (Chrome/Perfetto JSON from OverlapScheduler::writeTrace*) as a timeline PNG.

One row per (rank, lane): compute (backward, exposed waits) and comm (bucket collectives). Shows the last
--steps steps, so warm-up does not squeeze the picture.

    perf/plot_trace.py trace.json -o trace.png [--steps 3]
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--steps", type=int, default=3, help="last N steps to show (default 3)")
    a = p.parse_args()
    events = json.load(open(a.trace))
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        print(f"plot_trace: no spans in {a.trace}", file=sys.stderr)
        return 1
    # A step starts with a backward span on rank 0: keep the last N of them.
    starts = sorted(e["ts"] for e in spans if e["pid"] == min(x["pid"] for x in spans) and e["name"].startswith("backward"))
    t0 = starts[-a.steps] if len(starts) >= a.steps else min(e["ts"] for e in spans)
    spans = [e for e in spans if e["ts"] + e["dur"] >= t0]
    rows = sorted({(e["pid"], e["tid"]) for e in spans})
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(rows) + 1.5))
    colors = {"backward": "#4c72b0", "finish": "#c44e52", "all_reduce": "#55a868", "reduce_scatter": "#55a868",
              "all_gather": "#8172b2"}
    for y, row in enumerate(rows):
        for e in spans:
            if (e["pid"], e["tid"]) != row:
                continue
            key = next((k for k in colors if e["name"].startswith(k)), None)
            ax.broken_barh([((e["ts"] - t0) / 1000, e["dur"] / 1000)], (y - 0.4, 0.8),
                           facecolors=colors.get(key, "#999999"), edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"rank {pid} {names.get((pid, tid), tid)}" for pid, tid in rows])
    ax.set_xlabel("ms")
    ax.set_title("Overlap: backward compute (blue), exposed wait in finish (red), bucket all-reduces (green)")
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
