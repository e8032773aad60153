#!/usr/bin/env python3
"""One line per (op, shape, target) from `simdattn bench --format json`.

    bench/table.py results.json

Columns: simdattn's rate and share of the peak at each thread count, then
its rate over oneDNN's and OpenBLAS's at each thread count (> 1: simdattn is
faster), as measured in the same run. bench/results.sh puts this table in
bench/RESULTS.md; results.json keeps every record.
"""

import json
import sys


def rate(record):
    if "gflops" in record:
        return f"{record['gflops']:.1f} GFLOP/s"
    return f"{record['gb_per_s']:.1f} GB/s"


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        records = json.load(f)
    ours = [r for r in records if r["library"] == "simdattn"]
    threads = sorted({r["threads"] for r in ours})
    rows, keys = {}, []
    for r in ours:
        key = (r["op"], r["shape"], r["target"])
        if key not in rows:
            rows[key] = {}
            keys.append(key)
        rows[key][r["threads"]] = r
    header = ["op", "shape", "target"]
    for t in threads:
        header += [f"{t} thread{'s' if t > 1 else ''}", "of peak"]
    compared = [lib for lib in ("onednn", "openblas")
                if any(f"vs_{lib}" in r for r in ours)]
    header += [f"vs {lib} ({' / '.join(map(str, threads))})" for lib in compared]
    lines = [header]
    for key in keys:
        line = list(key)
        for t in threads:
            r = rows[key].get(t)
            line += [rate(r), f"{r['peak_fraction']:.0%}"] if r else ["", ""]
        for lib in compared:
            ratios = [rows[key].get(t, {}).get(f"vs_{lib}") for t in threads]
            line.append(" / ".join(f"{x:.2f}x" for x in ratios if x is not None)
                        if any(x is not None for x in ratios) else "")
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        cells = [c.ljust(w) if i < 3 else c.rjust(w)
                 for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells).rstrip())


if __name__ == "__main__":
    main()
