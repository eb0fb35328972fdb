#!/usr/bin/env python3
"""Train a byte-level BPE tokenizer (Qwen layout, ChatML + think tokens) and tokenize the splits.

The tokenizer.json / tokenizer_config.json layout is tests/fixtures/make_tiny_tokenizer.py's
(GPT-2 byte alphabet as ids 0..255, merges after, the Qwen special tokens at the top, the Qwen2
split regex); this trainer is the fast incremental one (pair counts updated per merge, only in
the words that contain the merged pair).  Deterministic: ties go to the lexically largest pair.
The chat template is tests/fixtures/chat-template/qwen3.6.jinja.

usage: bpe.py DATA_DIR OUT_DIR [--vocab 6144] [--sample-mb 8] [--encode [--chat-repeat 4]]
  reads DATA_DIR/{train,heldout}.txt, writes OUT_DIR/{tokenizer.json, tokenizer_config.json}
  and, with --encode, OUT_DIR/{train,heldout}.bin (uint16 ids, documents joined by <|endoftext|>)
"""
import argparse
import collections
import heapq
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
from make_tiny_tokenizer import SPECIALS, byte_alphabet, tokenizer_json  # noqa: E402

EOT = "<|endoftext|>"
# QWEN_SPLIT in Python's re (no \p classes): letters [^\W\d_], numbers \d, "not letter/number"
# as (?:[^\w]|_).  Nebula's own split (core/tokenizer) is the authority; bpe.py --check compares.
SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|(?:[^\r\n\w]|_)?[^\W\d_]+|\d| ?(?:[^\s\w]|_)+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def words(text):
    return SPLIT.findall(text)


def count_words(text):
    c = collections.Counter()
    for piece in text.split(EOT):
        for w in words(piece):
            c[w] += 1
    return c


def train(counts, n_merges, alpha):
    seqs = [list(alpha[b] for b in w.encode("utf-8")) for w in counts]
    freq = list(counts.values())
    pairs = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for i, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += freq[i]
            where[(a, b)].add(i)
    heap = [(-c, tuple(-ord(ch) for ch in a + "\0" + b), (a, b)) for (a, b), c in pairs.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, _, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -negc or -negc <= 0:
            if pairs.get(pair, 0) > 0:
                a, b = pair
                heapq.heappush(heap, (-pairs[pair], tuple(-ord(ch) for ch in a + "\0" + b), pair))
            continue
        merges.append(pair)
        a, b = pair
        new = a + b
        touched = collections.defaultdict(int)
        for i in sorted(where.pop(pair, ())):
            s, f = seqs[i], freq[i]
            for x, y in zip(s, s[1:]):
                pairs[(x, y)] -= f
                touched[(x, y)] += 0
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == a and s[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            seqs[i] = out
            for x, y in zip(out, out[1:]):
                pairs[(x, y)] += f
                where[(x, y)].add(i)
                touched[(x, y)] += 0
        pairs.pop(pair, None)
        for p in touched:
            if pairs.get(p, 0) > 0 and p != pair:
                heapq.heappush(heap, (-pairs[p], tuple(-ord(ch) for ch in p[0] + "\0" + p[1]), p))
    return merges


def write_tokenizer(out, merges, alpha, vocab_size):
    vocab = {s: i for i, s in enumerate(alpha)}
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    first_special = vocab_size - len(SPECIALS)
    assert len(vocab) <= first_special, (len(vocab), first_special)
    for i in range(len(vocab), first_special):  # unused filler ids keep the specials at the top
        vocab.setdefault(f"<|reserved_{i}|>", i)
    added = [{"id": first_special + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    added += [{"id": i, "content": f"<|reserved_{i}|>", "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": True} for i in range(len(alpha) + len(merges), first_special)
              if f"<|reserved_{i}|>" in vocab]
    tok = tokenizer_json(vocab, merges, added)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    tmpl = open(os.path.join(ROOT, "tests", "fixtures", "chat-template", "qwen3.6.jinja"), encoding="utf-8").read()
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": EOT, "bos_token": None,
           "add_bos_token": False, "add_prefix_space": False, "chat_template": tmpl}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    return {s: first_special + i for i, s in enumerate(SPECIALS)}


def encoder(merges, alpha, specials, vocab_size):
    """A python encoder matching the trained merges (for the training data; Nebula's own
    tokenizer is the authority at inference — train.py checks they agree on a sample)."""
    vocab = {s: i for i, s in enumerate(alpha)}
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    rank = {p: i for i, p in enumerate(merges)}
    cache = {}
    sp = re.compile("(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")")

    def bpe(w):
        if w in cache:
            return cache[w]
        s = [alpha[b] for b in w.encode("utf-8")]
        while len(s) > 1:
            best = min(((rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(s, s[1:]))))
            if best[0] == 1 << 30:
                break
            i = best[1]
            s = s[:i] + [s[i] + s[i + 1]] + s[i + 2:]
        ids = [vocab[t] for t in s]
        cache[w] = ids
        return ids

    def encode(text):
        out = []
        for part in sp.split(text):
            if part in specials:
                out.append(specials[part])
            elif part:
                for w in words(part):
                    out.extend(bpe(w))
        return out

    return encode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=6144)
    ap.add_argument("--sample-mb", type=float, default=8)
    ap.add_argument("--encode", action="store_true")
    ap.add_argument("--chat-repeat", type=int, default=4, help="the training ids hold each chat pair this often")
    a = ap.parse_args()
    alpha = byte_alphabet()
    text = open(os.path.join(a.data, "train.txt"), encoding="utf-8").read()
    sample = text[: int(a.sample_mb * 1e6)]
    n_merges = a.vocab - len(SPECIALS) - 256
    merges = train(count_words(sample), n_merges, alpha)
    specials = write_tokenizer(a.out, merges, alpha, a.vocab)
    print(f"{a.out}: {256 + len(merges)} BPE tokens, specials from {min(specials.values())}, vocab {a.vocab}")
    if a.encode:
        import numpy as np
        enc = encoder(merges, alpha, specials, a.vocab)
        chats = [d for d in text.split(EOT + "\n") if d.startswith("<|im_start|>")]
        for split in ("train", "heldout"):
            t = text if split == "train" else open(os.path.join(a.data, split + ".txt"), encoding="utf-8").read()
            if split == "train" and a.chat_repeat > 1:  # the chat pairs are ~1 % of the text: weigh them up
                t += "".join(d + EOT + "\n" for d in chats) * (a.chat_repeat - 1)
            ids = np.array(enc(t), dtype=np.uint16)
            ids.tofile(os.path.join(a.out, split + ".bin"))
            print(f"{split}: {len(ids)} tokens ({len(t.encode()) / max(len(ids), 1):.2f} bytes/token)")


if __name__ == "__main__":
    main()
