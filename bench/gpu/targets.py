#!/usr/bin/env python3
"""The CUDA issue's targets against one bench/gpu/run.sh run: each measured value, its goal, met or missed.

  python3 bench/gpu/targets.py RUN_DIR     (run.sh calls it last; reads kernels.jsonl, torch.jsonl,
                                            decode_step.jsonl and prefill.jsonl there; a missing file or row is
                                            reported as not measured, never as met)
"""
import json
import os
import sys


def rows(run, name):
    path = os.path.join(run, name)
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut short by a killed run
    return out


class Table:
    def __init__(self):
        self.lines = []
        self.missed = 0
        self.unmeasured = 0

    def add(self, what, value, goal, ok):
        if value is None:
            self.unmeasured += 1
            verdict = "not measured"
        else:
            self.missed += 0 if ok else 1
            verdict = "met" if ok else "MISSED"
        self.lines.append((what, "-" if value is None else value, goal, verdict))

    def show(self):
        w = [max(len(str(l[i])) for l in self.lines + [("target", "measured", "goal", "")]) for i in range(4)]
        head = ("target", "measured", "goal", "")
        for l in [head] + self.lines:
            print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(l)).rstrip())
        print(f"{len(self.lines) - self.missed - self.unmeasured} met, {self.missed} missed, "
              f"{self.unmeasured} not measured")


def main():
    run = sys.argv[1] if len(sys.argv) > 1 else "."
    kernels, torch = rows(run, "kernels.jsonl"), rows(run, "torch.jsonl")
    steps = [r for r in rows(run, "decode_step.jsonl") if r.get("bench") == "decode_step"]
    prefill = [r for r in rows(run, "prefill.jsonl") if r.get("bench") == "prefill"]
    t = Table()

    def attention_us(codec, depth):
        us = [r["us"] for r in kernels if r.get("kernel") == "attention" and r.get("type") == codec
              and r.get("size") == depth]
        return min(us) if us else None

    sdpa = [r["us"] for r in torch if str(r.get("kernel", "")).startswith("torch-sdpa-")
            and r.get("kernel") != "torch-sdpa-math" and r.get("size") == 131072]
    sdpa_us = min(sdpa) if sdpa else None
    for codec, goal in (("f16", 1.0), ("fp8", 1.8)):
        us = attention_us(codec, 131072)
        ratio = sdpa_us / us if us and sdpa_us else None
        t.add(f"decode attention {codec} at 128k vs torch SDPA's fastest",
              None if ratio is None else f"{ratio:.2f}x ({us:.1f} vs {sdpa_us:.1f} us)", f">= {goal}x",
              ratio is not None and ratio >= goal)

    def step(weights, kv, depth):
        r = [s for s in steps if s.get("weights") == weights and s.get("kv") == kv and s.get("depth") == depth]
        return r[-1] if r else None

    for weights in ("bf16", "q4_K"):
        for kv in ("f16", "fp8", "q4r"):
            for depth in (32768, 131072):
                s = step(weights, kv, depth)
                pct = s["pct_roofline"] if s else None
                t.add(f"decode step {weights} weights, {kv} KV, {depth // 1024}k",
                      None if s is None else f"{pct:.1f}% ({s['ms_per_token']:.3f} ms)", ">= 85% of roofline",
                      pct is not None and pct >= 85.0)
    f16, fp8 = step("q4_K", "f16", 32768), step("q4_K", "fp8", 32768)
    ratio = f16["ms_per_token"] / fp8["ms_per_token"] if f16 and fp8 else None
    t.add("fp8 / f16 KV decode speed, Q4_K weights, 32k", None if ratio is None else f"{ratio:.2f}x", ">= 1.25x",
          ratio is not None and ratio >= 1.25)

    for weights in sorted({"bf16", "q4_K"} | {p.get("weights") for p in prefill}):
        last = {p["kv"]: p for p in prefill if p.get("weights") == weights and p.get("prompt") == 32768}
        mine = list(last.values())  # a run appended to an earlier one: its rows replace the earlier ones
        if not mine:
            t.add(f"prefill 32k, {weights} weights", None, "<= 2x FLOP floor", False)
        for p in mine:
            t.add(f"prefill 32k, {weights} weights, {p['kv']} KV", f"{p['x_floor']:.2f}x ({p['ttft_s']:.3f} s)",
                  "<= 2x FLOP floor", p["x_floor"] <= 2.0)

    # GEMV at the FFN shapes (rows * 100000 + cols in kernels.jsonl); quantized types as the decode step runs them,
    # with x's int8 codes already made by the kernel before (gemv-xready).
    for ty, kernel in (("f16", "gemv"), ("bf16", "gemv"), ("q8_0", "gemv-xready"), ("q4_0", "gemv-xready"),
                       ("q4_K", "gemv-xready")):
        for size in (1433604096, 409614336):
            pct = [r["pct_copy"] for r in kernels if r.get("kernel") == kernel and r.get("type") == ty
                   and r.get("size") == size]
            shape = f"{size // 100000}x{size % 100000}"
            t.add(f"{kernel} {ty} {shape}", f"{max(pct):.1f}% of copy" if pct else None, ">= 80% of copy",
                  bool(pct) and max(pct) >= 80.0)
    t.show()


if __name__ == "__main__":
    main()
