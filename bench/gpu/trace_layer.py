#!/usr/bin/env python3
"""One layer of the decode step in order, from kvtax_gpu_decode_bench --trace's CSV.

  python3 bench/gpu/trace_layer.py TRACE.csv [CODEC DEPTH] [--marker NAME]

Takes the (codec, depth) rows (default: the first in the file), splits them into layers at each kernel whose name
starts with the marker (default: the KV encode, one launch per layer), and prints the middle layer's kernels: what
each adds to the step (its end minus the previous kernel's end), its start relative to the previous kernel's end
(negative: it began early, under PDL) and its own duration, in us.
"""
import csv
import sys


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    marker = "encode_kernel"
    if "--marker" in argv:
        marker = argv[argv.index("--marker") + 1]
        args = [a for a in args if a != marker]
    if not args:
        sys.exit(__doc__)
    rows = list(csv.reader(open(args[0])))
    key = (args[1], args[2]) if len(args) >= 3 else (rows[0][1], rows[0][2])
    recs = [(r[3], int(r[4]), int(r[5]), int(r[6]), int(r[7])) for r in rows if (r[1], r[2]) == key]
    recs.sort(key=lambda r: r[4])
    marks = [i for i, r in enumerate(recs) if r[0].startswith(marker)]
    if len(marks) < 3:
        sys.exit(f"fewer than 3 '{marker}' kernels for {key}")
    mid = len(marks) // 2
    first, end = marks[mid], marks[mid + 1]
    print(f"{key[0]} at depth {key[1]}: layer {mid} of {len(marks)} marked ({end - first} kernels)")
    print(f"{'added':>8} {'start':>7} {'dur':>8}  kernel [grid x block]")
    total = 0
    for i in range(first, end):
        name, grid, block, start, stop = recs[i]
        prev = recs[i - 1][4]
        added, rel = (stop - prev) / 1e3, (start - prev) / 1e3
        total += added
        print(f"{added:8.2f} {rel:7.2f} {(stop - start) / 1e3:8.2f}  {name} [{grid}x{block}]")
    print(f"{total:8.2f} us for the layer")


if __name__ == "__main__":
    main(sys.argv)
