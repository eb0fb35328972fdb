#!/usr/bin/env python3
"""tools/train/qwen4exp.py against the transformers fixtures (float64) and, for the MTP block,
against Nebula's CPU reference (`nebula logits --mtp-out`).

Checks per fixture (tests/fixtures/tiny-a, tiny-b): the PLE hash constants against the
checkpoint's int64 buffers, the PLE table rows against ple_ids.txt, the QSA selection masks
against qsa_select.u8 (exact), and the wide residual after every layer (layer_out.f32), the head
mixer's output and the logits: relative L2 error ≤ 1e-6, and largest error / largest reference
magnitude ≤ max(1e-6, 2 × island noise).  Island noise: transformers' float64 run keeps its norms,
GDN core, softmaxes and RoPE in float32 (docs/CONVERSION.md §6), so its outputs carry float32
rounding (~1e-6 of the largest value after a few GDN layers); we measure that noise as the
difference between our own float64 run and our run with the same islands in float32
(qwen4exp.ISLANDS_F32), per tensor.  A real error (a wrong sign, eps, order) is orders larger.
MTP (tiny-b, which carries random mtp.* tensors): our MTP logits vs Nebula's on the fixture's
tokens, converted with --type f32 (Nebula runs in float32: ≤ 1e-4 relative).  Export: a random
toy model of train.py's shapes written by hfio.save_hf, converted, trunk and MTP logits vs ours.

Prints SKIP (exit 0) when torch is missing; any failed check exits 1.
usage: test_forward.py [--nebula build/bin/nebula] [--convert build/bin/nebula-convert]
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
try:
    import torch
except Exception as exc:  # noqa: BLE001
    print(f"SKIP test_forward: torch is not importable ({exc}); on Debian: apt-get install python3-torch, /usr/bin/python3")
    sys.exit(0)
import numpy as np  # noqa: E402  (torch brings numpy)

import qwen4exp  # noqa: E402
from hfio import load_hf  # noqa: E402
from qwen4exp import ple_constants  # noqa: E402

torch.set_num_threads(1)
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def close(name, ours, ours32, ref):
    l2 = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    mx, noise = rel(ours, ref), rel(ours32, ours)
    check(name, l2 <= 1e-6 and mx <= max(1e-6, 2 * noise),
          f"rel L2 {l2:.2e}, max rel {mx:.2e} (island noise {noise:.2e})")


def fixture(name):
    d = os.path.join(ROOT, "tests", "fixtures", name)
    model, cfg = load_hf(d, torch.float64)
    model.eval()
    ids = torch.tensor([[int(t) for t in open(os.path.join(d, "tokens.txt")).read().split()]])
    T, V, L = ids.shape[1], cfg["vocab_size"], cfg["num_hidden_layers"]
    wide = cfg["hc_count"] * cfg["hidden_size"]
    with torch.no_grad():
        qwen4exp.ISLANDS_F32 = True
        out32 = model(ids, want_layers=True)
        qwen4exp.ISLANDS_F32 = False
        out = model(ids, want_layers=True)
    ple_layers = [l.ple for l in model.model.layers if hasattr(l, "ple")]
    for j, p in enumerate(ple_layers):
        mult, sizes, offs, R = ple_constants(cfg, j)
        pe = p.ple_embedding
        check(f"{name} ple constants", pe.layer_multipliers.tolist() == mult and pe.ngram_heads_vocab_sizes.tolist() == sizes
              and pe.ngram_heads_offsets.tolist() == offs and pe.ngram_embedding.weight.shape[0] == R)
    rows = ple_layers[0].rows(ids)[0].tolist()
    ref_rows = [[int(x) for x in line.split()] for line in open(os.path.join(d, "ple_ids.txt")) if line.strip()]
    check(f"{name} ple rows", rows == ref_rows, f"({T} tokens)")
    sel = np.fromfile(os.path.join(d, "qsa_select.u8"), np.uint8)
    masks = [a.last_mask[0].numpy().astype(np.uint8) for a in model.qsa_layers()]
    sel = sel.reshape(len(masks), T, T)
    for i, m in enumerate(masks):
        check(f"{name} qsa select {i}", (m == sel[i]).all(), f"({int((m != sel[i]).sum())} cells differ)")
    lo = np.fromfile(os.path.join(d, "layer_out.f32"), np.float32).reshape(L, T, wide)
    for i in range(L):
        close(f"{name} layer_out[{i}] {cfg['layer_types'][i]}", out["layers"][i][0].numpy(),
              out32["layers"][i][0].numpy(), lo[i])
    hm = np.fromfile(os.path.join(d, "head_mixed.f32"), np.float32).reshape(T, -1)
    close(f"{name} head_mixed", out["head_mixed"][0].numpy(), out32["head_mixed"][0].numpy(), hm)
    lg = np.fromfile(os.path.join(d, "logits.f32"), np.float32).reshape(T, V)
    close(f"{name} logits", out["logits"][0].numpy(), out32["logits"][0].numpy(), lg)
    return model, ids, out


def nebula_logits(args, hf_dir, ids, V):
    """Convert hf_dir to f32 and run `nebula logits --mtp-out` on ids: (trunk [T, V], MTP [T-1, V])."""
    T = ids.shape[1]
    with tempfile.TemporaryDirectory() as tmp:
        gguf, tok, mo = os.path.join(tmp, "m.gguf"), os.path.join(tmp, "tok.txt"), os.path.join(tmp, "mtp.f32")
        subprocess.run([args.convert, hf_dir, gguf, "--type", "f32", "-q"], check=True, stdout=subprocess.DEVNULL)
        with open(tok, "w") as f:
            f.write(" ".join(str(t) for t in ids[0].tolist()))
        subprocess.run([args.nebula, "logits", "-m", gguf, "--tokens-file", tok, "--out", os.path.join(tmp, "l.f32"),
                        "--mtp-out", mo, "--threads", "1"], check=True, stderr=subprocess.DEVNULL)
        return (np.fromfile(os.path.join(tmp, "l.f32"), np.float32).reshape(T, V),
                np.fromfile(mo, np.float32).reshape(T - 1, V))


def have_nebula(args, what):
    ok = os.access(args.nebula, os.X_OK) and os.access(args.convert, os.X_OK)
    if not ok:
        check(what, False, f"(build {args.nebula} and {args.convert}: make -j2 build/bin/nebula build/bin/nebula-convert)")
    return ok


def mtp_check(model, ids, out, args):
    """tiny-b's random mtp.* tensors: our MTP block against Nebula's (transformers has none)."""
    if not have_nebula(args, "tiny-b mtp vs nebula"):
        return
    trunk, ref = nebula_logits(args, os.path.join(ROOT, "tests", "fixtures", "tiny-b"), ids, model.cfg["vocab_size"])
    with torch.no_grad():
        lg, _ = model.mtp_forward(out["wide"][:, :-1], ids[:, 1:], pos0=1)
    r = rel(lg[0].numpy(), ref)
    check("tiny-b mtp vs nebula", r <= 1e-4, f"rel {r:.2e} over {ids.shape[1] - 1} rows")
    r = rel(out["logits"][0].numpy(), trunk)
    check("tiny-b trunk vs nebula (sanity)", r <= 1e-4, f"rel {r:.2e}")


def export_check(args):
    """train.py's toy model with every parameter random, exported by hfio.save_hf (float32): Nebula
    reads the export as we compute it (names, fused experts, PLE shards and constants, (1+w) norms,
    mtp.*) — trunk and MTP logits against ours."""
    if not have_nebula(args, "export vs nebula"):
        return
    from hfio import save_hf
    from train import make_config

    cfg = make_config("toy", 300, 299)
    cfg["ngram_vocab_size_base"] = 61
    torch.manual_seed(5)
    model = qwen4exp.Qwen4Exp(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape) * (0.3 if p.dim() == 1 else 1.0 / math.sqrt(p.shape[-1])))
    ids = torch.randint(0, 299, (1, 96))
    ids[0, 40] = 299  # an EOS inside: PLE segmentation
    with tempfile.TemporaryDirectory() as tmp:
        save_hf(model, tmp, torch.float32)
        trunk, mtp = nebula_logits(args, tmp, ids, cfg["vocab_size"])
    model.double()
    with torch.no_grad():
        out = model(ids)
        lg, _ = model.mtp_forward(out["wide"][:, :-1], ids[:, 1:], pos0=1)
    r = rel(out["logits"][0].numpy(), trunk)
    check("export: trunk vs nebula", r <= 1e-4, f"rel {r:.2e} (96 tokens, sparse QSA from token 16)")
    r = rel(lg[0].numpy(), mtp)
    check("export: mtp vs nebula", r <= 1e-4, f"rel {r:.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nebula", default=os.path.join(ROOT, "build", "bin", "nebula"))
    ap.add_argument("--convert", default=os.path.join(ROOT, "build", "bin", "nebula-convert"))
    ap.add_argument("--no-mtp", action="store_true", help="skip the checks that need Nebula (MTP, export)")
    args = ap.parse_args()
    fixture("tiny-a")
    model, ids, out = fixture("tiny-b")
    if not args.no_mtp:
        mtp_check(model, ids, out, args)
        export_check(args)
    print(f"test_forward: {'FAIL ' + ', '.join(failures) if failures else 'all passed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
