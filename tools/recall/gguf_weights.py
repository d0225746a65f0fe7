"""Read the recall model's GGUF (as `kvtax import-recall` writes it) back into float32 arrays, so training can
resume from the shipped file. Needs numpy only (no torch), so it can be checked on a machine without a GPU:

  python3 tools/recall/gguf_weights.py models/kvtax-recall-12m.gguf

GGUF v2/v3: magic, version, tensor count, metadata count; metadata key/value pairs; tensor infos (name,
dims, ne, type, offset); data at the next multiple of `general.alignment` (default 32). Only F32 and F16
tensors are accepted (what import-recall writes). ne is the PyTorch shape reversed.
"""
import struct
import sys

import numpy as np

F32, F16 = 0, 1
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class GgufError(ValueError):
    pass


class _Cursor:
    def __init__(self, buf, path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GgufError(f"{self.path}: {what} runs past the end of the file (at byte {self.pos}, {n} bytes)")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.scalar("<Q", what)
        return bytes(self.take(n, what)).decode("utf-8")

    def value(self, t, what, depth=0):
        if t in _SCALARS:
            return self.scalar(_SCALARS[t], what)
        if t == STRING:
            return self.string(what)
        if t == ARRAY:
            if depth > 4:
                raise GgufError(f"{self.path}: {what}: arrays nested too deep")
            et = self.scalar("<I", what)
            n = self.scalar("<Q", what)
            if n > len(self.buf):
                raise GgufError(f"{self.path}: {what}: array of {n} items is longer than the file")
            return [self.value(et, what, depth + 1) for _ in range(n)]
        raise GgufError(f"{self.path}: {what}: unknown value type {t}")


def read_gguf(path):
    """(metadata dict, {name: float32 array in PyTorch shape}) of a GGUF file holding F32/F16 tensors."""
    with open(path, "rb") as f:
        buf = memoryview(f.read())
    c = _Cursor(buf, path)
    if bytes(c.take(4, "magic")) != b"GGUF":
        raise GgufError(f"{path}: not a GGUF file (magic GGUF missing)")
    version = c.scalar("<I", "version")
    if version not in (2, 3):
        raise GgufError(f"{path}: GGUF version {version} (only 2 and 3 are read)")
    n_tensors = c.scalar("<Q", "tensor count")
    n_kv = c.scalar("<Q", "metadata count")
    if n_tensors > 1 << 20 or n_kv > 1 << 20:
        raise GgufError(f"{path}: {n_tensors} tensors / {n_kv} metadata entries is implausible")
    meta = {}
    for i in range(n_kv):
        key = c.string(f"metadata key {i}")
        t = c.scalar("<I", f"type of '{key}'")
        meta[key] = c.value(t, f"value of '{key}'")
    infos = []
    for i in range(n_tensors):
        name = c.string(f"tensor name {i}")
        nd = c.scalar("<I", f"dims of '{name}'")
        if not 1 <= nd <= 4:
            raise GgufError(f"{path}: tensor '{name}' has {nd} dimensions")
        ne = [c.scalar("<Q", f"ne of '{name}'") for _ in range(nd)]
        typ = c.scalar("<I", f"type of '{name}'")
        off = c.scalar("<Q", f"offset of '{name}'")
        infos.append((name, ne, typ, off))
    align = meta.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise GgufError(f"{path}: general.alignment {align} is not a power of two")
    base = (c.pos + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        if typ not in (F32, F16):
            raise GgufError(f"{path}: tensor '{name}' has ggml type {typ}; only F32 (0) and F16 (1) are read")
        n = int(np.prod(ne))
        width = 4 if typ == F32 else 2
        start = base + off
        if off % align or start + n * width > len(buf):
            raise GgufError(f"{path}: tensor '{name}' ({n} values at offset {off}) is misaligned or runs past the file")
        arr = np.frombuffer(buf, "<f4" if typ == F32 else "<f2", n, start).astype(np.float32)
        if not np.isfinite(arr).all():
            raise GgufError(f"{path}: tensor '{name}' holds a non-finite value")
        tensors[name] = arr.reshape(list(reversed(ne)))
    return meta, tensors


def config_of(meta):
    """model.Cfg's fields from the llama.* metadata."""
    def need(k):
        if k not in meta:
            raise GgufError(f"metadata '{k}' missing")
        return meta[k]
    if need("general.architecture") != "llama":
        raise GgufError(f"architecture '{meta['general.architecture']}' is not llama")
    heads = need("llama.attention.head_count")
    d = need("llama.embedding_length")
    return dict(vocab=len(need("tokenizer.ggml.tokens")), d=d, layers=need("llama.block_count"), heads=heads,
                kv_heads=need("llama.attention.head_count_kv"),
                head_dim=meta.get("llama.attention.key_length", d // heads),
                ffn=need("llama.feed_forward_length"), theta=float(need("llama.rope.freq_base")),
                eps=float(need("llama.attention.layer_norm_rms_epsilon")))


def pytorch_shapes(cfg):
    """[(GGUF name, PyTorch shape)] in model.Model.gguf_tensors() order, for a config dict."""
    d, q, kv, ffn = cfg["d"], cfg["heads"] * cfg["head_dim"], cfg["kv_heads"] * cfg["head_dim"], cfg["ffn"]
    out = [("token_embd.weight", [cfg["vocab"], d])]
    for i in range(cfg["layers"]):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", [d]), (p + "attn_q.weight", [q, d]), (p + "attn_k.weight", [kv, d]),
                (p + "attn_v.weight", [kv, d]), (p + "attn_output.weight", [d, q]), (p + "ffn_norm.weight", [d]),
                (p + "ffn_gate.weight", [ffn, d]), (p + "ffn_up.weight", [ffn, d]), (p + "ffn_down.weight", [d, ffn])]
    out.append(("output_norm.weight", [d]))
    return out


def check_tensors(tensors, cfg):
    """Fail unless the file holds exactly the tensors the config implies, in the PyTorch shapes."""
    want = pytorch_shapes(cfg)
    names = {n for n, _ in want}
    extra = sorted(set(tensors) - names)
    if extra:
        raise GgufError(f"unexpected tensors: {extra[:5]}")
    for n, shape in want:
        if n not in tensors:
            raise GgufError(f"tensor '{n}' missing")
        if list(tensors[n].shape) != shape:
            raise GgufError(f"tensor '{n}' has shape {list(tensors[n].shape)}, expected {shape}")


def check_tokenizer(meta, tok):
    """Fail unless the GGUF's vocabulary and merges are exactly those of a kvtok.Tokenizer (same order)."""
    got_t, got_m = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    if got_t != tok.tokens:
        n = min(len(got_t or []), len(tok.tokens))
        first = next((i for i in range(n) if got_t[i] != tok.tokens[i]), n)
        raise GgufError(f"tokenizer differs: GGUF has {len(got_t or [])} tokens, kvtok builds {len(tok.tokens)}; "
                        f"first difference at id {first}")
    if got_m != tok.merges:
        n = min(len(got_m or []), len(tok.merges))
        first = next((i for i in range(n) if got_m[i] != tok.merges[i]), n)
        raise GgufError(f"tokenizer merges differ: GGUF has {len(got_m or [])}, kvtok builds {len(tok.merges)}; "
                        f"first difference at rank {first}")
    if meta.get("tokenizer.ggml.token_type") != tok.types:
        raise GgufError("tokenizer token types differ from what kvtok builds")


if __name__ == "__main__":
    meta, tensors = read_gguf(sys.argv[1])
    cfg = config_of(meta)
    check_tensors(tensors, cfg)
    n = sum(int(t.size) for t in tensors.values())
    print(f"{sys.argv[1]}: {len(tensors)} tensors, {n:,} parameters, config {cfg}, "
          f"train_step {meta.get('kvtax.recall.train_step')}")
