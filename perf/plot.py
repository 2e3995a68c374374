#!/usr/bin/env python3
"""Plots strata-perf results: bus bandwidth against size, one line per implementation.

    perf/plot.py results.json [more.json ...] -o busbw.png

Each JSON file (strata-perf --json, e.g. one run on 2 ranks and one on 4) gets a column of two panels:
bus bandwidth against size for every size, and latency (time in us) for the sizes up to 64 KiB. The lines
are Strata out of place, Strata in place, and every baseline the run measured (--baseline mpi,gloo). A run
with several types or ops gets one line per implementation, type and op. Runs headless (Agg backend).
"""

import argparse
import json
import math
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
import matplotlib  # noqa: E402

matplotlib.use(os.environ["MPLBACKEND"])
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

LATENCY_MAX_BYTES = 64 * 1024

# One colour per implementation, the same in every panel.
COLORS = {"strata": "tab:blue", "strata in-place": "tab:cyan", "mpi": "tab:orange", "gloo": "tab:green",
          "oneccl": "tab:purple"}
ORDER = ["strata", "strata in-place", "mpi", "gloo", "oneccl"]  # legend order; other baselines follow by name
MARKERS = ["o", "s", "^", "v", "D", "x", "+", "*"]


def size_label(nbytes):
    """1024-based size label: 0, 512, 1K, 64K, 1M, 2G."""
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if nbytes >= unit:
            value = nbytes / unit
            return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.1f}{suffix}"
    return str(int(nbytes))


def load(path):
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from e
    if "results" not in data or "environment" not in data:
        raise ValueError(f"{path}: not a strata-perf --json file (no 'results' or 'environment')")
    return data


def series(data):
    """{(implementation, type, op): [(size, time_us, busbw), ...]} for every implementation in the run."""
    env = data["environment"]
    names = [b["name"] for b in env.get("baselines", [])]
    out = {}

    def add(impl, row, m):
        if m is None or m.get("busbw_gbps") is None:
            return
        out.setdefault((impl, row["type"], row["redop"]), []).append((row["size"], m["time_us"], m["busbw_gbps"]))

    for row in data["results"]:
        add("strata", row, row.get("out_of_place"))
        add("strata in-place", row, row.get("in_place"))
        for name in names:
            add(name, row, (row.get("baselines") or {}).get(name))
    return {key: sorted(points) for key, points in out.items()}


def title(data, path):
    env = data["environment"]
    return (f"{env.get('collective', '?')} {env.get('dtype', '')} {env.get('op', '')}, "
            f"{env.get('nranks', '?')} ranks on {env.get('hostname', '?')}\n{os.path.basename(path)}")


def set_size_axis(ax, sizes):
    """Log-2 x axis with at most ~10 labelled sizes (0 bytes cannot go on a log axis)."""
    ticks = sorted({s for s in sizes if s > 0})
    if not ticks:
        return
    ax.set_xscale("log", base=2)
    step = max(1, math.ceil(len(ticks) / 10))
    shown = ticks[::step]
    ax.xaxis.set_major_locator(FixedLocator(shown))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([size_label(s) for s in shown], rotation=45, ha="right")


def plot_run(ax_bw, ax_lat, data, path):
    lines = series(data)
    several = len({(t, op) for _, t, op in lines}) > 1
    kinds = sorted({(t, op) for _, t, op in lines})
    all_sizes = []
    def order(item):
        (impl, dtype, op), _ = item
        return (ORDER.index(impl) if impl in ORDER else len(ORDER), impl, dtype, op)

    for (impl, dtype, op), points in sorted(lines.items(), key=order):
        name = "strata out-of-place" if impl == "strata" else impl
        label = name if not several else f"{name} {dtype} {op}"
        style = dict(color=COLORS.get(impl), marker=MARKERS[kinds.index((dtype, op)) % len(MARKERS)], markersize=4,
                     linestyle="--" if impl == "strata in-place" else "-")
        positive = [(s, t, b) for s, t, b in points if s > 0]
        all_sizes += [s for s, _, _ in positive]
        ax_bw.plot([s for s, _, _ in positive], [b for _, _, b in positive], label=label, **style)
        small = [(s, t) for s, t, _ in positive if s <= LATENCY_MAX_BYTES]
        if small:
            ax_lat.plot([s for s, _ in small], [t for _, t in small], label=label, **style)
    ax_bw.set_title(title(data, path), fontsize=9)
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_bw.grid(True, which="both", alpha=0.3)
    set_size_axis(ax_bw, all_sizes)
    if lines:
        ax_bw.legend(fontsize=7)
    small_sizes = [s for s in all_sizes if s <= LATENCY_MAX_BYTES]
    ax_lat.set_ylabel("time (us)")
    ax_lat.set_xlabel("size (bytes)")
    ax_lat.grid(True, which="both", alpha=0.3)
    if small_sizes:
        set_size_axis(ax_lat, small_sizes)
        ax_lat.set_yscale("log")
        ax_lat.set_title(f"latency, sizes up to {size_label(LATENCY_MAX_BYTES)}", fontsize=9)
        ax_lat.legend(fontsize=7)
    else:
        ax_lat.text(0.5, 0.5, f"no sizes up to {size_label(LATENCY_MAX_BYTES)}", ha="center", va="center",
                    transform=ax_lat.transAxes)
        ax_lat.set_xticks([])
        ax_lat.set_yticks([])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="strata-perf --json files (one column of panels each)")
    parser.add_argument("-o", "--output", default="busbw.png", help="image to write (default busbw.png)")
    args = parser.parse_args(argv)

    try:
        runs = [(path, load(path)) for path in args.results]
    except (OSError, ValueError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(2, len(runs), figsize=(6.5 * len(runs), 9), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, (path, data) in enumerate(runs):
        plot_run(axes[0][col], axes[1][col], data, path)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot.py: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
