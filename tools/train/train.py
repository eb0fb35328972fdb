#!/usr/bin/env python3
"""Train the demo qwen4exp model (every layer type, MTP block) on the documentation corpus.

  train.py --data DIR --out DIR [--size demo|toy] [--minutes 20] [--steps N] [--device cuda]

DIR (--data) holds tokenizer.json, tokenizer_config.json, train.bin, heldout.bin (bpe.py).
The step count is fixed by --steps, or (--minutes) measured: after 20 timed steps the total is
set so that training ends within the budget; the learning-rate schedule (warmup + cosine)
follows that total.  Seeds are fixed (torch, data order), so a given --steps reproduces.

Losses: next-token cross entropy; the MTP block's cross entropy on the next-next token
(llama.cpp's graph: trunk wide state at t + embedding of token t+1 at position t+1 → token t+2),
weight --mtp-weight; a Switch balance loss per MoE layer, weight --balance (small: it keeps every
expert in use, the data's own skew stays — routing.tsv records the result); the QSA indexer's
KL to the dense attention mass per block (the top-k itself passes no gradient), weight --index-weight.
bf16 autocast on CUDA.  Checkpoint OUT/ckpt.pt every --ckpt-minutes (resumed when present).

At the end: held-out perplexity (trunk) and MTP top-1 agreement (the MTP's argmax equals the
token at t+2), the routing concentration per layer (share of top-k selections that fall on the
10 % most used experts) into OUT/routing.tsv, and the HF-format export into OUT/hf
(config.json + model.safetensors + tokenizer), which nebula-convert reads.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hfio import save_hf  # noqa: E402
from qwen4exp import Qwen4Exp  # noqa: E402


def make_config(size, vocab, eos):
    """The demo size (≤ 40 MB as a published-like mix) or a toy size for a CPU proof run."""
    if size == "demo":
        c = dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                 linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
                 num_experts=32, num_experts_per_tok=4, moe_intermediate_size=96,
                 shared_expert_intermediate_size=192, hc_lowrank=32, heads_per_ngram=4, ngram_vocab_size_base=4096,
                 split_ngram_parts=4, indexer_n_heads=4, indexer_head_dim=32, indexer_budget=128)
    else:
        c = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                 num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                 hc_lowrank=16, heads_per_ngram=2, ngram_vocab_size_base=509, split_ngram_parts=2,
                 indexer_n_heads=2, indexer_head_dim=16, indexer_budget=16)
    L = c["num_hidden_layers"]
    types = ["qwen_sparse_attention" if i % 3 == 2 else "linear_attention" for i in range(L)]
    c.update(architectures=["Qwen4ExpForCausalLM"], model_type="qwen4_exp_text", vocab_size=vocab,
             layer_types=types, hc_count=4, rms_norm_eps=1e-6, hidden_act="silu", output_gate_type="sigmoid",
             linear_conv_kernel_dim=4, norm_topk_prob=True, ple_layer_ids=[2], ple_embed_dim=c["hidden_size"],
             ple_conv_kernel_size=4, ngram_size=3, make_ngram_vocab_size_divisible_by=128, seed=1234,
             indexer_kv_heads=1, indexer_compress_ratio=4, eos_token_id=eos, bos_token_id=eos, pad_token_id=None,
             tie_word_embeddings=False, attention_bias=False, attention_dropout=0.0, max_position_embeddings=4096,
             rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                              "mrope_section": [2, 1, 1], "mrope_interleaved": True},
             mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, router_aux_loss_coef=0.001,
             initializer_range=0.02, use_cache=True)
    return c


@torch.no_grad()
def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    std = model.cfg["initializer_range"]
    n_layers = model.cfg["num_hidden_layers"] + 1
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            p.copy_(torch.log(torch.empty(p.shape).uniform_(1, 16, generator=g)))
        elif name.endswith("dt_bias"):
            dt = torch.exp(torch.empty(p.shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
            p.copy_(dt + torch.log(-torch.expm1(-dt)))
        elif name.endswith("linear_attn.norm.weight"):
            p.fill_(1.0)
        elif p.dim() == 1 or "norm" in name:
            p.zero_()  # (1 + w) norms start at 1
        elif "conv1d" in name:
            p.copy_(torch.randn(p.shape, generator=g) * (0.02 if ".ple." in name else 0.2))
        else:
            s = std / math.sqrt(2 * n_layers) if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj",
                                                                 "down_proj.weight")) else std
            p.copy_(torch.randn(p.shape, generator=g) * s)


def batches(data, batch, seq, seed):
    g = np.random.default_rng(seed)
    n = len(data) - seq - 2
    while True:
        starts = g.integers(0, n, batch)
        yield torch.from_numpy(np.stack([data[s:s + seq + 2].astype(np.int64) for s in starts]))


def losses(model, ids, args, want_index):
    x = ids[:, :-2]
    out = model(x, want_index_loss=want_index)
    V = model.cfg["vocab_size"]
    lm = F.cross_entropy(out["logits"].float().reshape(-1, V), ids[:, 1:-1].reshape(-1))
    total, parts = lm, {"lm": lm.item()}
    if model.mtp is not None:
        mlog, _ = model.mtp_forward(out["wide"], ids[:, 1:-1], pos0=1)
        mtp = F.cross_entropy(mlog.float().reshape(-1, V), ids[:, 2:].reshape(-1))
        total = total + args.mtp_weight * mtp
        parts["mtp"] = mtp.item()
    bal = sum(m.aux_loss() for m in model.moe_layers())
    total = total + args.balance * bal
    parts["bal"] = bal.item() / len(model.moe_layers())
    if want_index:
        il = [a.index_loss for a in model.qsa_layers() if a.index_loss is not None]
        if il:
            idx = sum(il) / len(il)
            total = total + args.index_weight * idx
            parts["idx"] = idx.item()
    return total, parts


@torch.no_grad()
def evaluate(model, data, args, dev, n_batches):
    model.eval()
    g = batches(data, args.batch, args.seq, seed=args.seed + 1)
    nll, n, mtp_ok, mtp_n = 0.0, 0, 0, 0
    counts = [torch.zeros(m.E, dtype=torch.long) for m in model.moe_layers()]
    for _ in range(n_batches):
        ids = next(g).to(dev)
        with autocast(dev):
            out = model(ids[:, :-2])
            V = model.cfg["vocab_size"]
            nll += F.cross_entropy(out["logits"].float().reshape(-1, V), ids[:, 1:-1].reshape(-1), reduction="sum").item()
            n += ids[:, 1:-1].numel()
            for c, m in zip(counts, model.moe_layers()[:-1]):
                c += m.stats[1].cpu()
            mlog, _ = model.mtp_forward(out["wide"], ids[:, 1:-1], pos0=1)
            counts[-1] += model.moe_layers()[-1].stats[1].cpu()
            mtp_ok += (mlog.argmax(-1) == ids[:, 2:]).sum().item()
            mtp_n += ids[:, 2:].numel()
    model.train()
    conc = []
    for c in counts:
        k = max(1, int(round(0.1 * len(c))))
        conc.append(c.sort(descending=True).values[:k].sum().item() / max(c.sum().item(), 1))
    return math.exp(nll / n), mtp_ok / max(mtp_n, 1), conc, counts


def autocast(dev):
    if dev.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="demo", choices=["demo", "toy"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (else from --minutes)")
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--balance", type=float, default=1e-3)
    ap.add_argument("--index-weight", type=float, default=0.1)
    ap.add_argument("--index-every", type=int, default=4, help="indexer loss on every N-th step (dense probs cost)")
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--call-minutes", type=float, default=0,
                    help="stop this invocation after that much training (checkpoint, exit 3: run again to go on)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    tok = json.load(open(os.path.join(args.data, "tokenizer.json"), encoding="utf-8"))
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab = max(max(tok["model"]["vocab"].values()), max(special.values())) + 1
    cfg = make_config(args.size, vocab, special["<|endoftext|>"])
    model = Qwen4Exp(cfg)
    init_weights(model, args.seed)
    model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters, {cfg['num_hidden_layers']} layers {cfg['layer_types']}", flush=True)
    train = np.fromfile(os.path.join(args.data, "train.bin"), np.uint16)
    held = np.fromfile(os.path.join(args.data, "heldout.bin"), np.uint16)
    print(f"data: {len(train)} train tokens, {len(held)} held-out tokens", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    os.makedirs(args.out, exist_ok=True)
    ckpt = os.path.join(args.out, "ckpt.pt")
    step, total_steps, spent = 0, args.steps, 0.0
    if os.path.exists(ckpt):
        try:  # torch >= 2.6 loads weights only by default; the optimizer state holds plain values too
            st = torch.load(ckpt, map_location=dev, weights_only=False)
        except TypeError:
            st = torch.load(ckpt, map_location=dev)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, total_steps, spent = st["step"], st["total_steps"], st["spent"]
        print(f"resumed at step {step} of {total_steps}", flush=True)
    gen = batches(train, args.batch, args.seq, args.seed)
    for _ in range(step):  # the same data order after a resume
        next(gen)
    log = open(os.path.join(args.out, "train.log"), "a")
    t_start, t_ckpt, first, t_call = time.time() - spent, time.time(), None, time.time()

    def save_ckpt():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "total_steps": total_steps, "spent": time.time() - t_start}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    while total_steps == 0 or step < total_steps:
        if args.call_minutes and time.time() - t_call > args.call_minutes * 60 and total_steps:
            save_ckpt()
            print(f"CONTINUE: step {step} of {total_steps} checkpointed after {args.call_minutes} min; run again", flush=True)
            sys.exit(3)
        if total_steps == 0 and first is not None and step >= 20:
            per = (time.time() - first) / (step - 2)
            total_steps = max(40, int(args.minutes * 60 / per))
            print(f"{per:.3f} s/step → {total_steps} steps in {args.minutes} min", flush=True)
        horizon = total_steps or 10 ** 9
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step / horizon, 1))))
        for gp in opt.param_groups:
            gp["lr"] = lr
        ids = next(gen).to(dev)
        with autocast(dev):
            loss, parts = losses(model, ids, args, step % args.index_every == 0)
        if not math.isfinite(loss.item()):
            save_ckpt()
            sys.exit(f"step {step}: the loss is {loss.item()} ({parts}); checkpoint kept, lower --lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step == 1:
            first = time.time()  # after two steps (the first ones warm up kernels)
        step += 1
        if step % 10 == 0 or step <= 5:
            msg = f"step {step}/{total_steps or '?'} lr {lr:.2e} " + " ".join(f"{k} {v:.4f}" for k, v in parts.items())
            print(msg, flush=True)
            log.write(msg + "\n")
        if time.time() - t_ckpt > args.ckpt_minutes * 60:
            save_ckpt()
            t_ckpt = time.time()
    train_s = time.time() - t_start
    save_ckpt()  # the finished state: a later run only evaluates and exports again
    ppl, mtp_acc, conc, counts = evaluate(model, held, args, dev, args.eval_batches)
    res = {"params": n_params, "steps": step, "train_seconds": round(train_s, 1), "heldout_ppl": ppl,
           "mtp_top1_agreement": mtp_acc, "vocab": vocab, "routing_top10pct_share": conc,
           "tokens_seen": step * args.batch * args.seq}
    print(json.dumps(res), flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "routing.tsv"), "w") as f:
        f.write("layer\ttop10pct_share\tcounts\n")
        for i, (c, k) in enumerate(zip(conc, counts)):
            f.write(f"{i if i < len(conc) - 1 else 'mtp'}\t{c:.4f}\t{' '.join(map(str, k.tolist()))}\n")
    model.to("cpu")
    hf = os.path.join(args.out, "hf")
    save_hf(model, hf, torch.bfloat16)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.data, fn), os.path.join(hf, fn))
    with open(os.path.join(hf, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [special["<|im_end|>"], special["<|endoftext|>"]], "do_sample": True,
                   "temperature": 0.7, "top_p": 0.8, "top_k": 20}, f, indent=1)
    print(f"exported {hf}", flush=True)


if __name__ == "__main__":
    main()
