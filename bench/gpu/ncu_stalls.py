#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-SASS-line stall samples.

Run on the GPU machine after a profile (bench/gpu/run.sh does not: profiles are taken by hand):
  ncu --set full --import-source no -k regex:KERNEL --launch-skip N --launch-count 1 -o /tmp/k -f BENCH ...
  ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass > k_sass.csv
  python3 bench/gpu/ncu_stalls.py k_sass.csv [TOP]
Prints the stall reasons over the whole kernel, then per region: for a warp-specialized kernel the code before,
between and after its register moves (setmaxnreg: prologue, consumers, producers), otherwise the code before, in
and after its largest loop; and each region's TOP lines by samples with their main stall reason.
"""
import csv
import re
import sys
from collections import Counter


def num(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def regions(lines):
    """(name, first, end) line ranges of the kernel."""
    moves = [i for i, r in enumerate(lines) if "SETMAXREG" in r[1]]
    if len(moves) >= 2:
        return [("prologue", 0, moves[0]), ("consumers", moves[0], moves[1]), ("producers", moves[1], len(lines))]
    addr = [int(r[0], 16) for r in lines]
    at = {a: i for i, a in enumerate(addr)}
    loops = []
    for i, r in enumerate(lines):
        m = re.search(r"\bBRA\S*\s+(0x[0-9a-f]+)", r[1])
        if m and int(m.group(1), 16) in at and at[int(m.group(1), 16)] < i:
            loops.append((i - at[int(m.group(1), 16)], at[int(m.group(1), 16)], i + 1))
    if not loops:
        return [("kernel", 0, len(lines))]
    _, first, end = max(loops)
    return [("before loop", 0, first), ("loop", first, end), ("after loop", end, len(lines))]


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    rows = list(csv.reader(open(path)))
    header, lines = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = [num(r[col["Warp Stall Sampling (All Samples)"]]) for r in lines]
    total = sum(samples) or 1.0

    def share(first, end):
        c = Counter()
        for r in lines[first:end]:
            for h in reasons:
                c[h[6:]] += num(r[col[h]])
        return ", ".join(f"{k} {100 * v / total:.1f}" for k, v in c.most_common(6))

    print(f"{path}: {len(lines)} SASS lines, {total:.0f} samples; stall reasons, % of all samples:")
    print(f"  all: {share(0, len(lines))}")
    for name, first, end in regions(lines):
        print(f"  {name} (lines {first}-{end}): {100 * sum(samples[first:end]) / total:.1f}%: {share(first, end)}")
        for i in sorted(range(first, end), key=lambda i: -samples[i])[:top]:
            r = lines[i]
            why = max((num(r[col[h]]), h[6:]) for h in reasons)[1]
            print(f"    {i:5d} {100 * samples[i] / total:5.1f}% {why:14s} {r[1].strip()[:72]}")


if __name__ == "__main__":
    main()
