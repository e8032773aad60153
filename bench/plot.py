#!/usr/bin/env python3
"""Plots `simdattn bench --format json` records as one PNG.

One row of panels per op, one column per thread count; in each panel, bars
per shape: GFLOP/s (matmul, mha, attention) or GB/s (softmax, dropout,
decode) for every (library, target) series. Several files compare machines
or commits: each series is then prefixed with its machine, the CPU model
bench/results.sh writes into every record ("machine"), else the file's name
without .json; --labels overrides them, and files from the same machine are
told apart by their names.

  python3 bench/plot.py bench/results.json -o bench/results.png
  python3 bench/plot.py epyc.json graviton.json -o compare.png
  python3 bench/plot.py before.json after.json --labels before,after -o ab.png

Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import os
import sys


def load(paths, labels):
    """Returns records with 'series' and 'rate' keys, in file order.

    labels: one per file, or None to label each file by its records'
    machine.
    """
    files = []
    for i, path in enumerate(paths):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, list):
            sys.exit(f"{path}: not a list of simdattn bench records")
        stem = os.path.splitext(os.path.basename(path))[0]
        if labels:
            label = labels[i]
        else:
            machines = ordered(r["machine"] for r in data if "machine" in r)
            label = " + ".join(machines) or stem
        files.append((data, label, stem))
    all_labels = [label for _, label, _ in files]
    records = []
    for data, label, stem in files:
        if all_labels.count(label) > 1:
            label = f"{label} ({stem})"
        for r in data:
            if r.get("check"):
                continue  # --check records have no rates.
            rate = r.get("gflops", r.get("gb_per_s"))
            if rate is None:
                continue
            series = f"{r['library']} {r['target']}"
            if len(files) > 1:
                series = f"{label}: {series}"
            records.append(dict(r, series=series, rate=rate))
    return records


def ordered(values):
    """Unique values in first-seen order."""
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="JSON from simdattn bench")
    parser.add_argument("-o", "--output", required=True, help="PNG to write")
    parser.add_argument("--labels",
                        help="comma-separated, one per file (default: the "
                        "records' machine, else the file's name)")
    parser.add_argument("--title", default="simdattn bench")
    args = parser.parse_args()
    labels = args.labels.split(",") if args.labels else None
    if labels and len(labels) != len(args.files):
        sys.exit("--labels: need one label per file")

    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")  # No display needed.
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    records = load(args.files, labels)
    if not records:
        sys.exit("no benchmark records in " + ", ".join(args.files))
    ops = ordered(r["op"] for r in records)
    threads = sorted(set(r["threads"] for r in records))
    series = ordered(r["series"] for r in records)
    palette = 10 if len(series) <= 10 else 20  # Several machines: more.
    colors = plt.get_cmap(f"tab{palette}")

    fig, axes = plt.subplots(len(ops), len(threads), squeeze=False,
                             figsize=(7.5 * len(threads), 3.6 * len(ops)))
    for row, op in enumerate(ops):
        op_records = [r for r in records if r["op"] == op]
        shapes = ordered(r["shape"] for r in op_records)
        unit = "GFLOP/s" if "gflops" in op_records[0] else "GB/s"
        op_series = [s for s in series
                     if any(r["series"] == s for r in op_records)]
        for col, t in enumerate(threads):
            ax = axes[row][col]
            rate = {(r["series"], r["shape"]): r["rate"]
                    for r in op_records if r["threads"] == t}
            # Bars centred on each shape over the series measured there
            # (oneDNN has no causal softmax, OpenBLAS no softmax at all).
            present = [[s for s in op_series if (s, shape) in rate]
                       for shape in shapes]
            width = 0.8 / max(max(len(p) for p in present), 1)
            labelled = set()
            for i, shape in enumerate(shapes):
                for k, s in enumerate(present[i]):
                    ax.bar(i + (k - (len(present[i]) - 1) / 2) * width,
                           rate[(s, shape)], width,
                           label=None if s in labelled else s,
                           color=colors(series.index(s) % palette))
                    labelled.add(s)
            ax.set_xticks(range(len(shapes)))
            ax.set_xticklabels(shapes, rotation=30, ha="right", fontsize=7)
            ax.set_ylabel(unit)
            ax.set_title(f"{op}, {t} thread{'s' if t > 1 else ''}",
                         fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(args.title)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
