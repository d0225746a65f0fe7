"""The recall model's tokenizer: GPT-2 style byte-level BPE with merges of our own.

Vocabulary: ids 0..255 are the bytes (GPT-2's byte-to-character alphabet), 256..258 the ChatML control
tokens, then one token per merge result. Merges are whole-word chains ("Ġ"+"A" -> "ĠA", "ĠA"+"u" -> "ĠAu",
...) for a fixed word list: first every word with its leading space, then the capitalised words without it.
With that order, a listed word always becomes one token: inside a word the only pair a space-chain merge can
apply to is (prefix so far, next char), and all space-chain merges rank before the others. Appended last:
digit pairs and capital-letter pairs (with and without a leading space), so a code such as " QX-4471" is
" QX" "-" "44" "71".

Encoding is what kvtax's C++ BPE does (src/tokenizer/tokenizer_bpe.cpp): split control-token text out,
cut each piece with the gpt-2 pre-tokenizer, then in each word apply the lowest-rank merge (leftmost on
ties) until none applies. tests/recall_model_test.cpp (RecallModel.TokenizerMatchesTrainingSide) checks
that both give the same ids, on strings train.py --vectors wrote (tests/data/recall/tokenizer_vectors.json).
"""
import re

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOS, IM_START, IM_END = 256, 257, 258

# gpt-2 pre-tokenizer for ASCII text (our data is ASCII): contractions, letter runs, digit runs,
# other runs (each with an optional leading space), then whitespace runs.
_PRE = re.compile(r"'(?:[stmd]|re|ve|ll)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def byte_alphabet():
    """GPT-2's printable stand-in character for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


class Tokenizer:
    def __init__(self, words, pairs=True):
        alpha = byte_alphabet()
        self.tokens = [alpha[b] for b in range(256)] + list(SPECIALS)
        self.types = [1] * 256 + [3] * len(SPECIALS)
        self.merges = []          # "left right" in alphabet form, rank = index
        self.ranks = {}           # (left id, right id) -> (rank, merged id)
        self.piece_id = {}        # raw bytes of a token -> id (byte tokens and merge results)
        for b in range(256):
            self.piece_id[bytes([b])] = b
        self.alpha = alpha
        spaced = sorted({" " + w for w in words})
        bare = sorted({w for w in words if w[:1].isupper()})
        for w in spaced + bare:
            self._add_chain(w.encode())
        # Appended after the word chains (so every listed word still ends as one token): digit pairs and
        # capital-letter pairs, with and without a leading space, so a code like " QX-4471" is 4-5 tokens.
        if not pairs:  # the first training stage had no pair merges
            self._cache = {}
            return
        digits = [str(d).encode() for d in range(10)]
        caps = [bytes([c]) for c in range(65, 91)]
        for a in digits:
            for b in digits:
                self._add_merge(a, b)
        for a in caps:
            for b in caps:
                self._add_merge(b" " + a, b)
        for a in caps:
            for b in caps:
                self._add_merge(a, b)
        self._cache = {}

    def _add_merge(self, left, right):
        a, b = self.piece_id[left], self.piece_id[right]
        if (a, b) in self.ranks:
            return
        merged = left + right
        if merged in self.piece_id:
            mid = self.piece_id[merged]
        else:
            mid = len(self.tokens)
            self.tokens.append("".join(self.alpha[c] for c in merged))
            self.types.append(1)
            self.piece_id[merged] = mid
        self.ranks[(a, b)] = (len(self.merges), mid)
        self.merges.append(self.tokens[a] + " " + self.tokens[b])

    def _add_chain(self, raw):
        left = raw[:1]
        for i in range(1, len(raw)):
            right = raw[i:i + 1]
            merged = left + right
            a, b = self.piece_id[left], self.piece_id[right]
            if (a, b) not in self.ranks:
                if merged in self.piece_id:  # reachable another way; keep one merge per result
                    mid = self.piece_id[merged]
                else:
                    mid = len(self.tokens)
                    self.tokens.append("".join(self.alpha[c] for c in merged))
                    self.types.append(1)
                    self.piece_id[merged] = mid
                self.ranks[(a, b)] = (len(self.merges), mid)
                self.merges.append(self.tokens[a] + " " + self.tokens[b])
            left = merged

    @property
    def n_vocab(self):
        return len(self.tokens)

    def _bpe(self, word):
        ids = self._cache.get(word)
        if ids is not None:
            return ids
        syms = list(word.encode())
        ranks = self.ranks
        while len(syms) > 1:
            best = None
            for i in range(len(syms) - 1):
                r = ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r[0] < best[0]):
                    best = (r[0], i, r[1])
            if best is None:
                break
            _, i, mid = best
            syms[i:i + 2] = [mid]
        if len(self._cache) < 200000:
            self._cache[word] = syms
        return syms

    def encode_plain(self, text):
        """Text with no control tokens in it."""
        out = []
        for w in _PRE.findall(text):
            out.extend(self._bpe(w))
        return out

    def encode(self, text):
        """Text that may hold control-token strings (parsed as those tokens)."""
        out = []
        pos = 0
        pat = re.compile("|".join(re.escape(s) for s in sorted(SPECIALS, key=len, reverse=True)))
        for m in pat.finditer(text):
            out.extend(self.encode_plain(text[pos:m.start()]))
            out.append(256 + SPECIALS.index(m.group(0)))
            pos = m.end()
        out.extend(self.encode_plain(text[pos:]))
        return out

    def decode(self, ids):
        raw = bytearray()
        inv = {v: k for k, v in self.piece_id.items()} if not hasattr(self, "_inv") else self._inv
        self._inv = inv
        for i in ids:
            if 256 <= i < 256 + len(SPECIALS):
                raw += SPECIALS[i - 256].encode()
            else:
                raw += inv[i]
        return raw.decode("utf-8", "replace")
