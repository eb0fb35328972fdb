#!/usr/bin/env python3
"""topic-campaign.py — a topic-switching campaign of token ids for a model made with nebula-gen --topics T.

Token v belongs to topic v mod T (tools/nebula-convert/rows.c).  Writes --segments lines (one prompt each, for
`nebula hotlist --ids`), each --length ids of one topic drawn uniformly from the vocabulary, the topics in a
seeded random order that never repeats a topic twice in a row: a conversation that changes subject every
segment.  Standard library only.
"""
import argparse
import random

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--vocab", type=int, required=True, help="the model's vocabulary size")
ap.add_argument("--topics", type=int, required=True, help="T, as given to nebula-gen --topics")
ap.add_argument("--segments", type=int, default=16, help="prompts, one topic each (default 16)")
ap.add_argument("--length", type=int, default=128, help="ids per prompt (default 128)")
ap.add_argument("--seed", type=int, default=1, help="seed (default 1)")
ap.add_argument("--reserved", type=int, default=1024, help="ids at the vocabulary's end left out (special tokens; default 1024)")
a = ap.parse_args()
if a.topics < 1 or a.vocab - a.reserved < a.topics:
    ap.error("need 1 <= topics <= vocab - reserved")
rng = random.Random(a.seed)
last = -1
for _ in range(a.segments):
    t = rng.randrange(a.topics)
    while a.topics > 1 and t == last:
        t = rng.randrange(a.topics)
    last = t
    n = (a.vocab - a.reserved - t + a.topics - 1) // a.topics  # ids t, t + T, ... below vocab - reserved
    print(" ".join(str(t + a.topics * rng.randrange(n)) for _ in range(a.length)))
