"""Llama-architecture model in PyTorch, laid out exactly as kvtax reads it (GGUF tensor names; RoPE on
adjacent pairs (2i, 2i+1) with angle pos * theta^(-2i/head_dim), as llama.cpp's "normal" rope; GQA where
query head h reads KV head h // (n_heads / n_kv_heads); RMSNorm; SwiGLU; output tied to token_embd)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cfg:
    def __init__(self, vocab, d=384, layers=6, heads=6, kv_heads=2, head_dim=64, ffn=1024, theta=1e6, eps=1e-5):
        self.vocab, self.d, self.layers, self.heads, self.kv_heads = vocab, d, layers, heads, kv_heads
        self.head_dim, self.ffn, self.theta, self.eps = head_dim, ffn, theta, eps

    def as_dict(self):
        return dict(self.__dict__)


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope_tables(T, head_dim, theta, device):
    i = torch.arange(0, head_dim, 2, device=device, dtype=torch.float64)
    freq = theta ** (-i / head_dim)
    ang = torch.arange(T, device=device, dtype=torch.float64)[:, None] * freq[None]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):  # x [B, T, H, D]
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    return out.to(x.dtype)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = nn.Parameter(torch.ones(c.d))
        self.ffn_norm = nn.Parameter(torch.ones(c.d))
        self.wq = nn.Linear(c.d, c.heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.d, c.kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.d, c.kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.heads * c.head_dim, c.d, bias=False)
        self.w_gate = nn.Linear(c.d, c.ffn, bias=False)
        self.w_up = nn.Linear(c.d, c.ffn, bias=False)
        self.w_down = nn.Linear(c.ffn, c.d, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        h = rms_norm(x, self.attn_norm, c.eps)
        q = apply_rope(self.wq(h).view(B, T, c.heads, c.head_dim), cos, sin).transpose(1, 2)
        k = apply_rope(self.wk(h).view(B, T, c.kv_heads, c.head_dim), cos, sin).transpose(1, 2)
        v = self.wv(h).view(B, T, c.kv_heads, c.head_dim).transpose(1, 2)
        rep = c.heads // c.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, c.heads * c.head_dim))
        h = rms_norm(x, self.ffn_norm, c.eps)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embd = nn.Embedding(c.vocab, c.d)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.out_norm = nn.Parameter(torch.ones(c.d))
        self._rope = None
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c.layers) if n.endswith(("wo.weight", "w_down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def rope(self, T, device):
        if self._rope is None or self._rope[0].shape[0] < T or self._rope[0].device != device:
            self._rope = rope_tables(max(T, 1024), self.c.head_dim, self.c.theta, device)
        return self._rope[0][:T], self._rope[1][:T]

    def forward(self, ids):
        cos, sin = self.rope(ids.shape[1], ids.device)
        x = self.embd(ids)
        for b in self.blocks:
            x = b(x, cos, sin)
        x = rms_norm(x, self.out_norm, self.c.eps)
        return x @ self.embd.weight.t()

    def gguf_tensors(self):
        """(GGUF name, tensor) in the order the raw file stores them."""
        out = [("token_embd.weight", self.embd.weight)]
        for i, b in enumerate(self.blocks):
            p = f"blk.{i}."
            out += [(p + "attn_norm.weight", b.attn_norm), (p + "attn_q.weight", b.wq.weight),
                    (p + "attn_k.weight", b.wk.weight), (p + "attn_v.weight", b.wv.weight),
                    (p + "attn_output.weight", b.wo.weight), (p + "ffn_norm.weight", b.ffn_norm),
                    (p + "ffn_gate.weight", b.w_gate.weight), (p + "ffn_up.weight", b.w_up.weight),
                    (p + "ffn_down.weight", b.w_down.weight)]
        out.append(("output_norm.weight", self.out_norm))
        return out
