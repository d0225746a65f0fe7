#!/usr/bin/env python3
"""Torch baselines for decode attention at the kvtax_gpu_bench shape: one query token, 32 query heads,
8 KV heads, head_dim 128, bf16 K/V. Times scaled_dot_product_attention (default backend, and each
backend torch offers here) and an unfused matmul-softmax-matmul path, with CUDA events, rotating over
enough K/V copies that each call reads device memory. Prints one line per (path, depth)."""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_calls(fn, n_copies, inner=20, reps=7):
    for i in range(3):
        fn(i % n_copies)
    torch.cuda.synchronize()
    ms = []
    k = 0
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn(k % n_copies)
            k += 1
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) / inner)
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", default="2048,8192,32768,131072")
    ap.add_argument("--copy-gbs", type=float, default=0.0, help="measured copy bandwidth for the % column")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    hq, hkv, d = 32, 8, 128
    rows = []
    torch.manual_seed(0)
    q = torch.randn(1, hq, 1, d, device=dev, dtype=torch.bfloat16)
    for L in [int(x) for x in args.depths.split(",")]:
        kv_bytes = 2 * hkv * L * d * 2
        n = max(1, min(64, math.ceil((768 << 20) / kv_bytes)))
        ks = [torch.randn(1, hkv, L, d, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        vs = [torch.randn(1, hkv, L, d, device=dev, dtype=torch.bfloat16) for _ in range(n)]
        paths = {"sdpa-default": lambda i: F.scaled_dot_product_attention(q, ks[i], vs[i], enable_gqa=True)}
        for name, be in [("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION), ("sdpa-math", SDPBackend.MATH)]:
            def run(i, be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, ks[i], vs[i], enable_gqa=True)
            paths[name] = run
        qg = q.view(hkv, hq // hkv, d)

        def unfused(i):
            s = torch.matmul(qg, ks[i].view(hkv, L, d).transpose(1, 2)) * (1.0 / math.sqrt(d))
            return torch.matmul(torch.softmax(s.float(), dim=-1).to(torch.bfloat16), vs[i].view(hkv, L, d))
        paths["unfused"] = unfused
        ref = paths["sdpa-math"](0).float().view(hkv, hq // hkv, d)
        for name, fn in paths.items():
            try:
                out = fn(0).float().view(hkv, hq // hkv, d)
                err = ((out - ref).norm() / ref.norm()).item()
                ms = time_calls(fn, n)
            except Exception as e:  # a backend may refuse this shape
                print(f"{name:15s} {L:7d}: unavailable ({type(e).__name__}: {str(e)[:80]})", flush=True)
                continue
            gbs = kv_bytes / (ms * 1e-3) / 1e9
            pct = 100.0 * gbs / args.copy_gbs if args.copy_gbs > 0 else float("nan")
            rows.append({"kernel": "torch-" + name, "size": L, "us": ms * 1e3, "bytes": kv_bytes, "gbs": gbs,
                         "pct_copy": pct, "rel_err_vs_math": err})
            print(f"{name:15s} {L:7d}: {ms * 1e3:8.1f} us {gbs:7.0f} GB/s {pct:5.1f}% copy  err {err:.1e}", flush=True)
        del ks, vs
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name()}) + "\n")
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
