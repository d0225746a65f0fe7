"""Train the recall model (runs on the lent GPU machine only).

  python3 tools/recall/train.py --out DIR [--resume RAW | --init-gguf GGUF] --seconds 450 --total-steps 16000

Saves DIR/model.raw (weights + config + tokenizer, the layout in tools/recall/README.md; also the resume
checkpoint: the optimizer restarts with a short warm-up), DIR/log.jsonl (loss, exact greedy recall), and with
--vectors, tokenizer test vectors and reference logits for the C++ tests.
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import Generator, stage3_mix  # noqa: E402
from gguf_weights import check_tensors, check_tokenizer, config_of, read_gguf  # noqa: E402
from kvtok import IM_END  # noqa: E402
from model import Cfg, Model  # noqa: E402

TOKENS_PER_STEP = 65536


def schedule(step, total, start=0, chunk=0):
    """(row length, share of dense "Name: code" rows, share of all-facts first questions, share of rows with a
    copy drill). chunk > 0: the second chunk's schedule (copy drills, short rows first), by its own progress."""
    if chunk > 0:
        f = (step - start) / chunk
        if f < 0.5:
            return [512, 1024][step % 2], 0.3, 0.0, 0.8
        if f < 0.8:
            return [1024, 2048][step % 2], 0.2, 0.05, 0.6
        return [2048, 4096, 8192, 4096][step % 4], 0.15, 0.1, 0.5
    f = step / total
    if f < 0.06:
        return 512, 0.6, 0.0, 0.0
    if f < 0.2:
        return [512, 1024, 2048][step % 3], 0.4, 0.0, 0.0
    if f < 0.45:
        return [1024, 2048, 4096, 2048][step % 4], 0.25, 0.1, 0.0
    return [2048, 4096, 8192, 4096, 16384, 8192][step % 6], 0.15, 0.15, 0.0


class Batches(torch.utils.data.IterableDataset):
    def __init__(self, seed, start, total, chunk, stage):
        self.seed, self.start, self.total, self.chunk, self.stage = seed, start, total, chunk, stage

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        gen = Generator(self.seed, self.stage)
        step = self.start + wid
        while True:
            if self.stage >= 3:
                L, dense, allq, drill, follow_all = stage3_mix(step - self.start, self.chunk)
            else:
                (L, dense, allq, drill), follow_all = schedule(step, self.total, self.start, self.chunk), 0.0
            X, M = gen.batch(step, L, TOKENS_PER_STEP // L, dense, allq, drill, follow_all)
            yield step, torch.from_numpy(X).long(), torch.from_numpy(M)
            step += nw


def save_raw(path, model, cfg, tok, step):
    tensors = model.gguf_tensors()
    index, off = [], 0
    for name, t in tensors:
        index.append({"name": name, "shape": list(t.shape), "offset": off})
        off += t.numel() * 4
    header = json.dumps({"format": "kvtax-recall-raw", "version": 1, "config": cfg.as_dict(), "step": step,
                         "tokenizer": {"tokens": tok.tokens, "types": tok.types, "merges": tok.merges,
                                       "bos": 256, "eos": IM_END},
                         "tensors": index}).encode()
    with open(path + ".tmp", "wb") as f:
        f.write(b"KVTXRAW1")
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for _, t in tensors:
            f.write(t.detach().float().cpu().contiguous().numpy().astype("<f4").tobytes())
    os.replace(path + ".tmp", path)


def load_raw(path, model):
    with open(path, "rb") as f:
        assert f.read(8) == b"KVTXRAW1"
        (hl,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(hl))
        data = f.read()
    params = dict(model.gguf_tensors())
    for e in h["tensors"]:
        t = params[e["name"]]
        n = int(np.prod(e["shape"]))
        arr = torch.from_numpy(np.frombuffer(data, "<f4", n, e["offset"]).reshape(e["shape"]).copy())
        with torch.no_grad():
            if tuple(arr.shape) == tuple(t.shape):
                t.copy_(arr)
            else:  # the vocabulary grew: keep the trained rows, new rows keep their fresh init
                assert e["name"] == "token_embd.weight" and arr.shape[0] < t.shape[0], (e, t.shape)
                t[:arr.shape[0]].copy_(arr)
    return h["step"]


def load_gguf(path, model, tok):
    """Start from a GGUF written by `kvtax import-recall` (the shipped model): its architecture, tokenizer
    (same tokens and merges in the same order as `tok`) and tensor shapes must match, or this fails."""
    meta, tensors = read_gguf(path)
    cfg = config_of(meta)
    c = model.c
    for k in ("vocab", "d", "layers", "heads", "kv_heads", "head_dim", "ffn"):
        if cfg[k] != getattr(c, k):
            sys.exit(f"--init-gguf {path}: {k} is {cfg[k]} there, {getattr(c, k)} in model.py's config")
    for k in ("theta", "eps"):
        if abs(cfg[k] - getattr(c, k)) > 1e-6 * abs(getattr(c, k)):
            sys.exit(f"--init-gguf {path}: {k} is {cfg[k]} there, {getattr(c, k)} in model.py's config")
    check_tokenizer(meta, tok)
    check_tensors(tensors, cfg)
    with torch.no_grad():
        for name, t in model.gguf_tensors():
            src = torch.from_numpy(tensors[name])
            if tuple(src.shape) != tuple(t.shape):
                sys.exit(f"--init-gguf {path}: '{name}' is {tuple(src.shape)}, model.py has {tuple(t.shape)}")
            t.copy_(src)
    return int(meta.get("kvtax.recall.train_step", 0))


@torch.no_grad()
def greedy(model, prompts, max_new):
    x = torch.tensor(np.stack(prompts), dtype=torch.long, device="cuda")
    outs = [[] for _ in prompts]
    done = [False] * len(prompts)
    for _ in range(max_new):
        with torch.autocast("cuda", torch.bfloat16):
            nxt = model(x)[:, -1].float().argmax(-1)
        for i, t in enumerate(nxt.tolist()):
            if not done[i]:
                if t == IM_END:
                    done[i] = True
                else:
                    outs[i].append(t)
        if all(done):
            break
        x = torch.cat([x, nxt[:, None]], 1)
    return outs


def evaluate(model, gen, L, n, kind="binding", heldout=False, seed=12345, placement="spread"):
    """Exact greedy recall on harness-style prompts of about L tokens (5 facts, repeated paragraph filler or
    the held-out style). binding: share of answers equal to the asked code; all: mean codes found of 5."""
    r = random.Random(seed + L)
    prompts, want, facts = [], [], []
    for _ in range(n):
        ids, ans, fs = gen.harness_prompt(r, L, 5, "all" if kind == "all" else "binding", heldout=heldout,
                                          style="facilities", repeat=True, placement=placement)
        prompts.append(ids)
        want.append(ans)
        facts.append(fs)
    m = min(len(p) for p in prompts)
    h = 1 + len(gen.user)
    prompts = [np.concatenate([p[:h], p[h + len(p) - m:]]) for p in prompts]  # trim the context start
    model.eval()
    outs = greedy(model, prompts, 14 if kind == "binding" else 56)
    model.train()
    texts = [gen.tok.decode(o) for o in outs]
    if kind == "binding":
        # the harness rule: the asked code appears and no other planted code does
        score = sum((w.split(": ")[-1] in t) and sum(c in t for _, c in fs) == 1
                    for t, w, fs in zip(texts, want, facts)) / n
    else:
        score = sum(sum(c in t for _, c in fs) for t, fs in zip(texts, facts)) / n
    return score, texts[:2], want[:2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", default="")
    ap.add_argument("--init-gguf", default="", help="start from the weights of a GGUF made by kvtax import-recall")
    ap.add_argument("--seconds", type=float, default=450)
    ap.add_argument("--total-steps", type=int, default=16000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--ctx-weight", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chunk-steps", type=int, default=0)
    ap.add_argument("--stage", type=int, default=2, choices=[1, 2, 3])
    ap.add_argument("--stop-step", type=int, default=0, help="stop after this global step (0: by --seconds)")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--eval-every", type=float, default=60)
    ap.add_argument("--final-lengths", default="1024,2048,4096,8192,16384")
    ap.add_argument("--vectors", action="store_true")
    a = ap.parse_args()
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "log.jsonl"), "a")

    def emit(d):
        d["t"] = round(time.time() - t_start, 1)
        print(json.dumps(d), flush=True)
        log.write(json.dumps(d) + "\n")
        log.flush()

    emit({"torch": torch.__version__, "cuda": torch.cuda.get_device_name(0), "args": vars(a)})
    torch.manual_seed(a.seed)
    gen = Generator(a.seed, a.stage)
    cfg = Cfg(gen.tok.n_vocab)
    model = Model(cfg).cuda()
    start = 0
    if a.resume and a.init_gguf:
        sys.exit("--resume and --init-gguf exclude each other")
    if a.resume:
        start = load_raw(a.resume, model)
    if a.init_gguf:
        start = load_gguf(a.init_gguf, model, gen.tok)
    n_params = sum(p.numel() for p in model.parameters())
    emit({"vocab": cfg.vocab, "params": n_params, "start_step": start})
    if a.vectors:
        write_vectors(a.out, gen, model)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), fused=True)
    loader = torch.utils.data.DataLoader(Batches(a.seed, start, a.total_steps, a.chunk_steps, a.stage), batch_size=None,
                                         num_workers=a.workers, pin_memory=True, prefetch_factor=6,
                                         persistent_workers=False)
    model.train()
    t_train = time.time()
    last_eval = t_train
    tok_count, step, ema = 0, start, {}
    local = 0
    for step, X, M in loader:
        if a.stage >= 3:  # cosine over the chunk, by steps or by time, whichever runs out first
            prog = max(local / max(1, a.chunk_steps), (time.time() - t_train) / a.seconds)
        else:
            prog = step / a.total_steps
        lr = a.lr * min(1.0, (local + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))
        for g in opt.param_groups:
            g["lr"] = lr
        X = X.cuda(non_blocking=True)
        M = M.cuda(non_blocking=True)
        inp, tgt, ans = X[:, :-1], X[:, 1:], M[:, 1:].bool()
        with torch.autocast("cuda", torch.bfloat16):
            logits = model(inp)
        ce = F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten(), reduction="none").view_as(tgt)
        ans_loss = (ce * ans).sum() / ans.sum().clamp(min=1)
        ctx_loss = (ce * ~ans).sum() / (~ans).sum()
        loss = ans_loss + a.ctx_weight * ctx_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        local += 1
        tok_count += X.numel()
        if local % 100 == 0:
            emit({"step": step, "L": X.shape[1] - 1, "ans_loss": round(ans_loss.item(), 4),
                  "ctx_loss": round(ctx_loss.item(), 4), "lr": lr,
                  "tok_per_s": round(tok_count / (time.time() - t_train))})
        now = time.time()
        if now - last_eval > a.eval_every:
            res = {"step": step, "eval": {}}
            for L in (1024, 2048, 4096):
                res["eval"][f"bind{L}"] = evaluate(model, gen, L, 32)[0]
            res["eval"]["all2048"] = evaluate(model, gen, 2048, 16, "all")[0]
            if a.stage >= 3:
                res["eval"]["bind16384"] = evaluate(model, gen, 16384, 8)[0]
            emit(res)
            save_raw(os.path.join(a.out, "model.raw"), model, cfg, gen.tok, step + 1)
            last_eval = time.time()
        if now - t_train > a.seconds or (a.stop_step and step + 1 >= a.stop_step):
            break
    save_raw(os.path.join(a.out, "model.raw"), model, cfg, gen.tok, step + 1)
    emit({"saved_step": step + 1, "train_s": round(time.time() - t_train, 1), "tokens": tok_count})
    res = {"final": {}}
    for L in [int(x) for x in a.final_lengths.split(",") if x]:
        n = 32 if L <= 8192 else 16
        s, texts, want = evaluate(model, gen, L, n)
        res["final"][f"bind{L}"] = s
        res["final"][f"sample{L}"] = [texts, want]
        res["final"][f"all{L}"] = evaluate(model, gen, L, 8 if L > 8192 else 16, "all")[0]
    if a.stage >= 3:  # the harness's default placement: facts in the first paragraphs
        for L in (2048, 16384):
            res["final"][f"early_bind{L}"] = evaluate(model, gen, L, 16, placement="early")[0]
            s, texts, want = evaluate(model, gen, L, 8, "all", placement="early")
            res["final"][f"early_all{L}"] = s
            res["final"][f"early_all_sample{L}"] = [texts, want]
    res["final"]["heldout_bind2048"] = evaluate(model, gen, 2048, 32, heldout=True)[0]
    res["final"]["heldout_all2048"] = evaluate(model, gen, 2048, 16, "all", heldout=True)[0]
    emit(res)
    if a.vectors:
        write_ref_logits(a.out, gen, model)


def write_vectors(out, gen, model):
    """Strings and the ids this tokenizer gives them, for tests/recall_tokenizer_test.cpp."""
    r = random.Random(99)
    samples = ["Hello world", "IMPORTANT: The access code for the Aurora vault is QX-4471. ",
               "What is the access code for the Ember vault?", "QX-4471, ZR-9028, MP-1357",
               "  two  spaces\n\nand\tnew lines\n", "It's the cat's toy, isn't it? we'll see; I'd say so.",
               "Unlisted words: zygote, Xylophone, Quetzalcoatl 12345 3.14159 -- (x+y)*z!",
               "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n", "Dovewing Basalt  Cinder\n Ember",
               "numbers 0 00 000 4471 99999 and A1-2345"]
    for L in (300, 1200):
        ids, _, _ = gen.harness_prompt(r, L, 5, "binding")
        samples.append(gen.tok.decode(ids.tolist()))
        ids, _, _ = gen.harness_prompt(r, L, 5, "all", heldout=True)
        samples.append(gen.tok.decode(ids.tolist()))
    vec = [{"text": s, "ids": gen.tok.encode(s)} for s in samples]
    with open(os.path.join(out, "tokenizer_vectors.json"), "w") as f:
        json.dump(vec, f)


@torch.no_grad()
def write_ref_logits(out, gen, model):
    """Logits of the last 4 positions of a harness prompt, fp32, with the weights rounded to f16 as the GGUF
    stores matrices (norms stay f32), for tests/recall_model_test.cpp."""
    r = random.Random(7)
    ids, ans, _ = gen.harness_prompt(r, 600, 5, "binding")
    m = Model(model.c).cuda().float()
    m.load_state_dict(model.state_dict())
    for n, p in m.named_parameters():
        if p.dim() == 2:
            p.copy_(p.half().float())
    m.eval()
    x = torch.tensor(ids[None], dtype=torch.long, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    logits = m(x)[0, -4:].double().cpu().numpy()
    with open(os.path.join(out, "ref_logits.json"), "w") as f:
        json.dump({"ids": ids.tolist(), "positions": list(range(len(ids) - 4, len(ids))),
                   "logits": [[float(v) for v in row] for row in logits], "answer": ans}, f)


if __name__ == "__main__":
    main()
