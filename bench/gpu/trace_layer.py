#!/usr/bin/env python3
"""One layer of the decode step in order, from kvtax_gpu_decode_bench --trace's CSV.

  python3 bench/gpu/trace_layer.py TRACE.csv [CODEC DEPTH] [--marker NAME] [--mean]

Takes the (codec, depth) rows (default: the first in the file), splits them into layers at each kernel whose name
starts with the marker (default: the KV encode, one launch per layer), and prints the middle layer's kernels: what
each adds to the step (its end minus the previous kernel's end), its start relative to the previous kernel's end
(negative: it began early, under PDL) and its own duration, in us. With --mean: the mean of each over every layer
of every traced step whose kernels are those of the middle layer, in the same order (the layers that hold a step's
end and the next one's start, with their extra kernels, are left out), and the range of what each adds.
"""
import csv
import sys


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    marker = "encode_kernel"
    if "--marker" in argv:
        marker = argv[argv.index("--marker") + 1]
        args = [a for a in args if a != marker]
    mean = "--mean" in argv
    if not args:
        sys.exit(__doc__)
    rows = list(csv.reader(open(args[0])))
    key = (args[1], args[2]) if len(args) >= 3 else (rows[0][1], rows[0][2])
    recs = [(r[3], int(r[4]), int(r[5]), int(r[6]), int(r[7])) for r in rows if (r[1], r[2]) == key]
    recs.sort(key=lambda r: r[4])
    marks = [i for i, r in enumerate(recs) if r[0].startswith(marker)]
    if len(marks) < 3:
        sys.exit(f"fewer than 3 '{marker}' kernels for {key}")

    def layer(first, end):  # (name, grid, block, added, start, dur) per kernel, us
        return [(recs[i][0], recs[i][1], recs[i][2], (recs[i][4] - recs[i - 1][4]) / 1e3,
                 (recs[i][3] - recs[i - 1][4]) / 1e3, (recs[i][4] - recs[i][3]) / 1e3) for i in range(first, end)]

    mid = len(marks) // 2
    shown = layer(marks[mid], marks[mid + 1])
    shape = [(k[0], k[1], k[2]) for k in shown]
    if mean:
        layers = [layer(a, b) for a, b in zip(marks, marks[1:])]
        layers = [l for l in layers if [(k[0], k[1], k[2]) for k in l] == shape]
        print(f"{key[0]} at depth {key[1]}: mean of {len(layers)} layers like layer {mid} ({len(shape)} kernels)")
        print(f"{'added':>8} {'start':>7} {'dur':>8} {'added min-max':>14}  kernel [grid x block]")
        for j, (name, grid, block) in enumerate(shape):
            col = [l[j] for l in layers]
            avg = [sum(k[c] for k in col) / len(col) for c in (3, 4, 5)]
            lo, hi = min(k[3] for k in col), max(k[3] for k in col)
            print(f"{avg[0]:8.2f} {avg[1]:7.2f} {avg[2]:8.2f} {lo:6.2f}-{hi:<7.2f}  {name} [{grid}x{block}]")
        print(f"{sum(sum(k[3] for k in l) for l in layers) / len(layers):8.2f} us for a layer")
        return
    print(f"{key[0]} at depth {key[1]}: layer {mid} of {len(marks)} marked ({len(shown)} kernels)")
    print(f"{'added':>8} {'start':>7} {'dur':>8}  kernel [grid x block]")
    for name, grid, block, added, start, dur in shown:
        print(f"{added:8.2f} {start:7.2f} {dur:8.2f}  {name} [{grid}x{block}]")
    print(f"{sum(k[3] for k in shown):8.2f} us for the layer")


if __name__ == "__main__":
    main(sys.argv)
