"""Deterministic synthetic chat transcripts with planted facts, as token ids.

A row is one ChatML conversation of exactly L+1 tokens: a user message holding filler prose with facts in it
and a question, the assistant's answer (the code, or codes joined by ", "), then further single-fact
question/answer turns. Texts are cut at pre-tokenizer boundaries (each piece after the first starts with
one space and a non-space), so concatenated piece ids equal the ids of the whole text.

Everything depends only on (seed, step): batch(step) can be recomputed on resume.
"""
import random

import numpy as np

import words as W
from kvtok import IM_END, IM_START, Tokenizer

# Fact sentences; {n} name, {c} code. Index 0 is the harness's wording.
FACT_FORMATS = [
    "IMPORTANT: The access code for the {n} vault is {c}.",
    "The access code for the {n} vault is {c}.",
    "{n}: {c}.",
    "Note that the {n} vault uses the code {c}.",
    "Reminder: {n} vault code {c}.",
    "The code to open the {n} vault is {c}.",
    "Record: the {n} vault opens with code {c}.",
]
FACT_WEIGHTS = [5, 2, 2, 1, 1, 1, 1]
HELDOUT_FACTS = [  # never in training: reported apart
    "Please remember that the key of the {n} vault is {c}.",
    "Security file - {n} vault: {c}.",
]
QUESTIONS = [
    "What is the access code for the {n} vault?",
    "What is the access code for the {n} vault mentioned above? Answer with just the code.",
    "Which code opens the {n} vault?",
    "Give the access code for the {n} vault.",
    "{n} vault code?",
    "Tell me the code of the {n} vault.",
]
QUESTION_WEIGHTS = [5, 3, 1, 1, 1, 1]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
HELDOUT_FILLER = [  # a style never trained on
    "Stir the {f} slowly and add a pinch of salt.", "Let the pot rest for {n} minutes before serving.",
    "Chop the {f} into small pieces and set them aside.", "Warm the oven and grease a wide tray.",
    "Serve the {f} with fresh herbs and a slice of lemon.",
]


def all_question(names):
    k = len(names)
    cnt = NUMBER_WORDS[k] if k <= 10 else str(k)
    return (f"List the access codes for all {cnt} vaults mentioned above, in order ({', '.join(names)}). "
            f"Answer with just the {cnt} codes.")


def make_code(r):
    u = r.random()
    L = lambda k: "".join(chr(65 + r.randrange(26)) for _ in range(k))
    D = lambda k: "".join(str(r.randrange(10)) for _ in range(k))
    if u < 0.8:
        return f"{L(2)}-{D(4)}"
    if u < 0.87:
        return f"{L(3)}-{D(3)}"
    if u < 0.94:
        return f"{L(2)}-{D(5)}"
    return f"{L(1)}{D(1)}-{D(4)}"


class Generator:
    def __init__(self, seed, stage=2):
        """stage 1: the first training chunk (no pair merges, answers are the bare codes, no copy drills);
        stage 2: the second (pair merges, answers restate the name: " Aurora: QX-4471");
        stage 3: the fine-tune of the shipped model (stage 2's tokenizer; all-facts questions in follow-up
        turns too, mostly in context order; a quarter of the rows place the facts early, as the harness does)."""
        self.seed = seed
        self.stage = stage
        self.tok = Tokenizer(W.template_words(), pairs=stage >= 2)
        r = random.Random(seed * 7919 + 1)
        # Filler pool: per style, sentences as (ids with a leading space, ids without).
        self.styles = {}
        for style, temps in W.TEMPLATES.items():
            self.styles[style] = [self._sent(self._fill(r, r.choice(temps))) for _ in range(1500)]
        self.styles["facilities"] = [self._sent(s) for s in W.FACILITIES]
        self.heldout_filler = [self._sent(self._fill(r, r.choice(HELDOUT_FILLER))) for _ in range(200)]
        self.style_names = sorted(self.styles)
        self.nl2 = self.tok.encode_plain("\n\n")
        self.nl = self.tok.encode_plain("\n")
        self.user = self.tok.encode_plain("user\n")
        self.assistant = self.tok.encode_plain("assistant\n")

    def _sent(self, s):
        return (np.array(self.tok.encode_plain(" " + s), np.int32), np.array(self.tok.encode_plain(s), np.int32))

    @staticmethod
    def _fill(r, t):
        s = r.choice(W.SUBJECTS)
        return t.format(S=s[0].upper() + s[1:], s=s, v=r.choice(W.VERBS), v2=r.choice(W.VERBS),
                        o=r.choice(W.OBJECTS), o2=r.choice(W.OBJECTS), t=r.choice(W.TIMES), w=r.choice(W.WEATHER),
                        p=r.choice(W.PLACES), adj=r.choice(W.ADJ), f=r.choice(W.FOODS), f2=r.choice(W.FOODS),
                        an=r.choice(W.ANIMALS), n=r.randrange(2, 999))

    # ---- pieces -------------------------------------------------------------------------------------------
    def _filler_stream(self, r, heldout=False, style=None, repeat=None):
        """Endless sentence ids (with leading space)."""
        if heldout:
            pool = self.heldout_filler
        else:
            if style is None:
                style = r.choice(self.style_names + ["mixed"])
            pool = (self.styles[style] if style != "mixed"
                    else [s for st in self.style_names for s in self.styles[st][:60]])
        if repeat is None:
            repeat = r.random() < 0.3
        if repeat:  # one paragraph verbatim, again and again (the harness's default filler)
            para = [r.choice(pool) for _ in range(r.randrange(3, 8))]
            while True:
                for s in para:
                    yield s[0]
        while True:
            yield r.choice(pool)[0]

    def _turn(self, q_ids, a_ids):
        return [IM_START] + self.user + q_ids + [IM_END] + self.nl + [IM_START] + self.assistant, a_ids + [IM_END] + self.nl

    def example(self, r, L, dense, allq_rate, heldout=False, n_facts=None, fmt=None, style=None, repeat=None,
                n_turns=None, depth=None, force_all=False, q_index=None, drill=0.0, follow_all=0.0):
        """(ids of length L+1, answer mask, facts, first question text kind). The row's first question follows
        the context in the user message, as the harness asks it."""
        tok = self.tok
        if n_facts is None:
            n_facts = (r.randrange(8, max(9, min(41, L // 40))) if dense
                       else r.choice([1, 2, 3, 4, 5, 5, 5, 6, 7, 8, 10, 12]))
        names = r.sample(W.NAMES, n_facts)
        codes = {}  # distinct codes in draw order (a set's order would follow the per-process string hash)
        while len(codes) < n_facts:
            codes[make_code(r)] = None
        codes = list(codes)
        facts = list(zip(names, codes))
        fmts = HELDOUT_FACTS if heldout else FACT_FORMATS
        if fmt is None:
            one_fmt = r.random() < 0.6
            f0 = (r.randrange(len(fmts)) if heldout else r.choices(range(len(fmts)), FACT_WEIGHTS)[0])
            if dense and r.random() < 0.5:
                f0 = 2  # "Name: code" practice
            fmt_of = [f0 if one_fmt else r.randrange(len(fmts)) for _ in facts]
        else:
            fmt_of = [fmt] * n_facts
        fact_ids = [np.array(tok.encode_plain(" " + fmts[f].format(n=n, c=c)), np.int32)
                    for (n, c), f in zip(facts, fmt_of)]

        # Question turns: the first in the user message with the context, then follow-ups.
        turns = []  # (question ids, answer ids)
        first_all = force_all or (r.random() < allq_rate and n_facts > 1)
        if first_all:
            turns.append(self._all_turn(r, names, codes, force_all))
        if n_turns is None:
            n_turns = r.randrange(2, 9) if not dense else r.randrange(8, 25)
        order = list(range(n_facts))
        r.shuffle(order)
        while len(turns) < n_turns:
            if self.stage >= 3 and n_facts > 1 and r.random() < follow_all:
                turns.append(self._all_turn(r, names, codes, False))
                continue
            i = order[len(turns) % n_facts]
            qf = q_index if q_index is not None else r.choices(range(len(QUESTIONS)), QUESTION_WEIGHTS)[0]
            turns.append((QUESTIONS[qf].format(n=names[i]),
                          f" {names[i]}: {codes[i]}" if self.stage >= 2 else codes[i]))
        q0, a0 = turns[0]
        head = [IM_START] + self.user
        first_q = self.nl2 + tok.encode_plain(q0)
        tail_ids, tail_mask = [], []
        first_turn_tail = [IM_END] + self.nl + [IM_START] + self.assistant
        ans = tok.encode_plain(a0) + [IM_END]
        tail_ids += first_turn_tail + ans + self.nl
        tail_mask += [0] * len(first_turn_tail) + [1] * len(ans) + [0] * len(self.nl)
        max_tail = int(L * (0.45 if dense else 0.25))
        for q, a in turns[1:]:
            pre, post = self._turn(tok.encode_plain(q), tok.encode_plain(a))
            if len(tail_ids) + len(pre) + len(post) > max_tail:
                break
            tail_ids += pre + post
            tail_mask += [0] * len(pre) + [1] * (len(post) - len(self.nl)) + [0] * len(self.nl)
        fixed = len(head) + len(first_q) + len(tail_ids)
        facts_len = sum(len(f) for f in fact_ids)
        budget = L + 1 - fixed  # context tokens
        if budget < facts_len + 8:
            # too long for this row: drop follow-up turns
            tail_ids = first_turn_tail + ans + self.nl
            tail_mask = [0] * len(first_turn_tail) + [1] * len(ans) + [0] * len(self.nl)
            fixed = len(head) + len(first_q) + len(tail_ids)
            budget = L + 1 - fixed
            if budget < facts_len + 8:
                return None
        # Copy drill: a roster of other names and codes, later re-checked in shuffled order; the re-checked
        # codes are supervised like answers, so every row carries many name -> code lookups.
        drill1 = drill2 = None
        if self.stage >= 2 and r.random() < drill:
            others = [n for n in r.sample(W.NAMES, 24) if n not in names][:r.randrange(4, 13)]
            dcodes = [make_code(r) for _ in others]
            roster = " " + r.choice(["Roster:", "List:", "Codes:", "Index:"]) + "".join(
                f" {n}: {c}." for n, c in zip(others, dcodes))
            drill1 = (np.array(tok.encode_plain(roster), np.int32), None)
            ids2, m2 = list(tok.encode_plain(" " + r.choice(["Check:", "Again:", "Review:"]))), []
            m2 = [0] * len(ids2)
            for j in r.sample(range(len(others)), len(others)):
                a_ = tok.encode_plain(f" {others[j]}:")
                b_ = tok.encode_plain(f" {dcodes[j]}.")
                ids2 += a_ + b_
                m2 += [0] * len(a_) + [1] * len(b_)
            drill2 = (np.array(ids2, np.int32), np.array(m2, np.int8))
            if len(drill1[0]) + len(drill2[0]) + facts_len + 8 > budget:
                drill1 = drill2 = None
        drill_len = 0 if drill1 is None else len(drill1[0]) + len(drill2[0])
        # Filler sentences until the budget is covered, facts between them.
        stream = self._filler_stream(r, heldout, style, repeat)
        sents, tot = [], 0
        need = budget - facts_len - drill_len
        if dense:
            need = min(need, r.randrange(0, 4) * 15 * n_facts)  # a little prose between dense facts
        while tot < need:
            s = next(stream)
            sents.append(s)
            tot += len(s)
        nb = len(sents)
        # fact positions: sentence boundaries 0..nb-1 (never after the last sentence, which may be cut)
        if depth is not None:
            pos = [min(nb - 1, int(round(nb * d))) if nb else 0 for d in depth]
        elif dense:
            pos = sorted(r.randrange(0, max(1, nb)) for _ in facts)
        elif self.stage >= 3 and r.random() < 0.25:
            # the harness's default placement: every fact in the first few paragraphs, the question far away
            top = max(1, int(nb * r.uniform(0.03, 0.2)))
            pos = sorted(r.randrange(0, min(top, max(1, nb))) for _ in facts)
        else:
            span = r.random()
            lo = r.random() * (1 - span)
            pos = sorted(min(max(nb - 1, 0), int(nb * (lo + span * r.random()))) for _ in facts)
        d1 = d2 = -1
        if self.stage >= 2:
            d1 = r.randrange(0, max(1, nb))
            d2 = r.randrange(d1, max(d1 + 1, nb))
        pieces = []  # (ids, answer mask or None)
        fi = 0
        for b in range(nb + 1):
            if drill1 is not None and b == d1:
                pieces.append(drill1)
            while fi < n_facts and pos[fi] == b:
                pieces.append((fact_ids[fi], None))
                fi += 1
            if drill1 is not None and b == d2:
                pieces.append(drill2)
            if b < nb:
                pieces.append((sents[b], None))
        while fi < n_facts:
            pieces.append((fact_ids[fi], None))
            fi += 1
        if pieces:
            # the context's first piece has no leading space after "user\n"
            pieces[0] = (self._bare(pieces[0][0]), None)
        more = []
        tot = sum(len(p[0]) for p in pieces)
        while tot < budget:  # dense rows: more filler after the facts
            s = next(stream)
            more.append((s, None))
            tot += len(s)
        pieces += more
        ctx = np.concatenate([p[0] for p in pieces])[:budget]
        cmask = np.concatenate([p[1] if p[1] is not None else np.zeros(len(p[0]), np.int8) for p in pieces])[:budget]
        ids = np.concatenate([np.array(head, np.int32), ctx, np.array(first_q + tail_ids, np.int32)])
        mask = np.concatenate([np.zeros(len(head), np.int8), cmask, np.zeros(len(first_q), np.int8),
                               np.array(tail_mask, np.int8)])
        assert len(ids) == L + 1, (len(ids), L)
        return ids, mask, facts, turns

    def _all_turn(self, r, names, codes, force_all):
        """An all-facts question turn: (question text, answer text). Stage 3 asks mostly for every fact in
        context order, as the harness does, and sometimes for all or some of them in another order; the answer
        walks the question's list, restating each name, so every step is a single-fact lookup."""
        n = len(names)
        if self.stage >= 3:
            u = 0.0 if force_all else r.random()
            if u < 0.6:
                asked = list(range(n))
            elif u < 0.8:
                asked = r.sample(range(n), n)
            else:
                asked = r.sample(range(n), r.randrange(2, min(n, 10) + 1))
        else:
            k = n if force_all else r.randrange(2, min(n, 10) + 1)
            if force_all or (k == n and r.random() < 0.5):
                asked = list(range(n))  # in context order, like the harness
            else:
                asked = r.sample(range(n), k)
        q = all_question([names[i] for i in asked])
        a = (",".join(f" {names[i]}: {codes[i]}" for i in asked) if self.stage >= 2
             else ", ".join(codes[i] for i in asked))
        return q, a

    def _bare(self, ids_with_space):
        text = self.tok.decode(ids_with_space.tolist())
        return np.array(self.tok.encode_plain(text[1:] if text.startswith(" ") else text), np.int32)

    def batch(self, step, L, rows, dense_rate, allq_rate, drill=0.0, follow_all=0.0):
        r = random.Random((self.seed << 32) ^ (step * 2654435761 % (1 << 31)))
        X = np.zeros((rows, L + 1), np.int32)
        M = np.zeros((rows, L + 1), np.int8)
        for i in range(rows):
            while True:
                ex = self.example(r, L, r.random() < dense_rate, allq_rate, drill=drill, follow_all=follow_all)
                if ex is not None:
                    break
            X[i], M[i] = ex[0], ex[1]
        return X, M

    def harness_prompt(self, r, L, facts_n=5, question="binding", heldout=False, style="facilities", repeat=True,
                       placement="spread"):
        """A prompt as the harness builds it (facts spread evenly, or "early": one every ~300 tokens from the
        start, like the harness's default), one question, no answer, cut to about L tokens.
        Returns (ids, expected answer text, facts)."""
        if placement == "early":
            depth = [min(0.95, 300 * (i + 1) / L) for i in range(facts_n)]
        else:
            depth = [(i + 1) / (facts_n + 1) for i in range(facts_n)]
        ex = None
        while ex is None:
            ex = self.example(r, L + 80, False, 0.0, heldout=heldout, force_all=(question == "all"),
                              n_facts=facts_n, fmt=(0 if not heldout else None), style=style, repeat=repeat,
                              n_turns=1, q_index=0, depth=depth)
        ids, mask, facts, turns = ex
        # cut after the assistant header of the first turn: the answer starts at the first masked token
        first_ans = int(np.argmax(mask))
        return ids[:first_ans], turns[0][1], facts


def stage3_mix(k, chunk):
    """Stage 3's schedule for local step k of a chunk planned at `chunk` steps: (row length, share of dense
    rows, share of all-facts first questions, share of rows with a copy drill, chance that a follow-up turn is
    an all-facts question). Short rows first, then a cycle with 40% of the tokens in 8k-16k rows."""
    if k < 0.15 * chunk:
        L = [512, 1024, 2048, 4096][k % 4]
    else:
        L = [512, 1024, 2048, 4096, 8192, 16384, 2048, 8192, 16384, 1024][k % 10]
    return L, 0.1, 0.6, 0.4, 0.35
