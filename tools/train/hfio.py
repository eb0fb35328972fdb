"""Hugging Face checkpoint I/O for qwen4exp.py without the safetensors package (torch only).

load_hf(dir) reads config.json + model.safetensors or shards (+ index), either expert layout
(per expert or fused), the PLE table as shards, either prefix (model. / model.language_model.),
and mtp.*.  save_hf(model, dir) writes what transformers' save_pretrained would (a single
model.safetensors, routed experts fused as in the released checkpoint, the PLE table as
split_ngram_parts shards, the int64 PLE buffers, mtp.* with the released names).
"""
from __future__ import annotations

import json
import os
import re
import struct

import torch

DT = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
      "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
NAME = {v: k for k, v in DT.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = DT[v["dtype"]]
        t = torch.frombuffer(data[a:b], dtype=dt) if b > a else torch.zeros(0, dtype=dt)
        out[k] = t.reshape(v["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        hdr[k] = {"dtype": NAME[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_checkpoint(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    sd = {}
    for f in files:
        sd.update(read_safetensors(os.path.join(d, f)))
    return sd


def text_config(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    return cfg.get("text_config", cfg)


def to_model_names(sd):
    """Checkpoint names -> this model's state_dict names (fuse experts, concatenate PLE shards)."""
    out, experts, shards = {}, {}, {}
    for k, v in sd.items():
        if k.startswith("model.visual."):
            continue
        k = k.replace("model.language_model.", "model.", 1)
        m = re.match(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", k)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
            continue
        m = re.match(r"(.*\.ngram_embedding)\.shard_(\d+)\.weight$", k)
        if m:
            shards.setdefault(m.group(1), {})[int(m.group(2))] = v
            continue
        out[k] = v
    for pre, ex in experts.items():
        E = len(ex)
        out[pre + ".gate_up_proj"] = torch.stack([torch.cat([ex[e]["gate"], ex[e]["up"]], 0) for e in range(E)])
        out[pre + ".down_proj"] = torch.stack([ex[e]["down"] for e in range(E)])
    for pre, sh in shards.items():
        out[pre + ".weight"] = torch.cat([sh[i] for i in sorted(sh)], 0)
    return out


def load_hf(d, dtype=torch.float64, mtp=None):
    from qwen4exp import Qwen4Exp

    cfg = text_config(d)
    sd = to_model_names(read_checkpoint(d))
    if mtp is None:
        mtp = any(k.startswith("mtp.") for k in sd)
    model = Qwen4Exp(cfg, mtp=mtp)
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    if missing or unexpected:
        raise SystemExit(f"{d}: checkpoint does not match the model: missing {missing[:8]}, unexpected {unexpected[:8]}")
    for k, v in own.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            raise SystemExit(f"{d}: {k} has shape {tuple(sd[k].shape)}, the model wants {tuple(v.shape)}")
    model.load_state_dict(sd)
    model.to(dtype)
    # model.to(dtype) leaves the int64 PLE buffers as loaded (floating tensors only).
    return model, cfg


def save_hf(model, d, dtype=torch.bfloat16):
    """Write config.json + model.safetensors in the released naming (fused experts, table shards)."""
    os.makedirs(d, exist_ok=True)
    cfg = dict(model.cfg)
    S = cfg.get("split_ngram_parts", 1)
    out = {}
    for k, v in model.state_dict().items():
        if v.dtype != torch.int64:
            v = v.to(dtype)
        m = re.match(r"(.*\.ngram_embedding)\.weight$", k)
        if m:
            if v.shape[0] % S:
                raise SystemExit(f"PLE table rows {v.shape[0]} not divisible by split_ngram_parts {S}")
            for i, part in enumerate(torch.chunk(v, S, 0)):
                out[f"{m.group(1)}.shard_{i}.weight"] = part
            continue
        out[k] = v
    cfg["dtype"] = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}[dtype]
    cfg.setdefault("architectures", ["Qwen4ExpForCausalLM"])
    cfg.setdefault("model_type", "qwen4_exp_text")
    write_safetensors(os.path.join(d, "model.safetensors"), out)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    return out
