"""A vectorised, trainable qwen4_exp (Qwen3.8-Flash-Next) forward pass in PyTorch.

Written from docs/CONVERSION.md, /work/shared/MODEL.md and the CPU reference engine/cpu/*.c
(the math oracle).  Parameter names are the Hugging Face checkpoint's (Qwen4ExpForCausalLM,
routed experts fused: mlp.experts.gate_up_proj [E, 2I, C], down_proj [E, C, I]; the PLE table
in memory as one [R, W] matrix), so a state_dict maps 1:1 onto a checkpoint (see export.py).

Precision: the parts transformers runs in float32 (every RMS norm, the GDN core, softmaxes,
RoPE) run here in max(input dtype, float32): float32 under bf16 autocast, float64 when the
whole model is float64 (the fixture check, tests/train/test_forward.py).

Works with torch 1.13 and 2.x.  No python loops over tokens or queries: the GDN is chunked
(loop over 64-token chunks for the state only), QSA block selection is one topk per layer.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

QSA_TYPES = ("qwen_sparse_attention", "full_attention", "deepseek_sparse_attention", "hybrid_indexed")
M64 = (1 << 64) - 1


# True: the float32 islands stay float32 for float64 input too, as transformers runs them (the
# fixture check uses this to match transformers' rounding; training never needs it).
ISLANDS_F32 = False


def hi(x):
    """The island dtype: at least float32."""
    return torch.float64 if x.dtype == torch.float64 and not ISLANDS_F32 else torch.float32


def exact(t):
    """A region where autocast is off: the island math (GDN core, attention scores) stays in
    float32 under bf16 autocast instead of running its matmuls in bf16."""
    return torch.autocast(device_type=t.device.type, enabled=False)


def rms(x, eps):
    d = hi(x)
    xf = x.to(d)
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    """RMS norm with a (1 + w) scale (transformers' Qwen4ExpTextRMSNorm); groups: the norm runs per
    group of `group` values (the grouped norm of the wide residual), the weight spans all."""

    def __init__(self, dim, eps, group=None):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps, self.group = eps, group

    def forward(self, x):
        shp = x.shape
        g = self.group or shp[-1]
        y = rms(x.reshape(*shp[:-1], shp[-1] // g, g), self.eps).reshape(shp)
        return (y * (1.0 + self.weight.to(y.dtype))).to(x.dtype)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def primes_from(base, count):
    out, c = [], max(base, 2)
    while len(out) < count:
        if all(c % d for d in range(2, int(c ** 0.5) + 1)):
            out.append(c)
        c += 1
    return out


def ple_constants(cfg, j):
    """(multipliers [N], head vocab sizes [NH], offsets [NH], table rows R) of the j-th PLE layer
    (docs/CONVERSION.md §1.4)."""
    N, hp, V = cfg["ngram_size"], cfg["heads_per_ngram"], cfg["vocab_size"]
    NH = (N - 1) * hp
    half = max(((2 ** 63 - 1) // V) // 2, 1)
    mult = [2 * (splitmix64((cfg.get("seed", 1234) + 10007 * j + 0x9E3779B97F4A7C15 * (s + 1)) & M64) % half) + 1
            for s in range(N)]
    sizes = primes_from(cfg["ngram_vocab_size_base"], (j + 1) * NH)[j * NH:]
    offs = [sum(sizes[:h]) for h in range(NH)]
    div = cfg.get("make_ngram_vocab_size_divisible_by", 128)
    R = -(-sum(sizes) // div) * div
    return mult, sizes, offs, R


class Rope:
    """NeoX rotate-half over the first `rot` dims; angles in float32 (float64 for a float64 run)."""

    def __init__(self, rot, theta):
        self.rot, self.theta = rot, theta

    def __call__(self, x, pos):
        # x [..., T, H, D] with pos [T] (or broadcastable [..., T]).
        r = self.rot
        if r == 0:
            return x
        d = hi(x)
        inv = 1.0 / (self.theta ** (torch.arange(0, r, 2, dtype=d, device=x.device) / r))
        ang = pos.to(d)[..., None] * inv  # [..., T, r/2]
        cos = torch.cat([ang.cos(), ang.cos()], -1).unsqueeze(-2)
        sin = torch.cat([ang.sin(), ang.sin()], -1).unsqueeze(-2)
        xr = x[..., :r].to(d)
        x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
        rotated = xr * cos + torch.cat([-x2, x1], -1) * sin
        return torch.cat([rotated.to(x.dtype), x[..., r:]], -1)


class HyperConnection(nn.Module):
    """HCmix: grouped norm, low-rank per-value gate, mean over streams; inject weights (not for the head)."""

    def __init__(self, cfg, inject=True):
        super().__init__()
        n, C, r = cfg["hc_count"], cfg["hidden_size"], cfg["hc_lowrank"]
        self.n, self.C = n, C
        self.hc_norm = RMSNorm(n * C, cfg["rms_norm_eps"], group=C)
        self.input_mix_weight_down = nn.Linear(n * C, r, bias=False)
        self.input_mix_weight_up = nn.Linear(r, n * C, bias=False)
        self.block_inject_weight = nn.Linear(n * C, n, bias=False) if inject else None

    def forward(self, X):
        # X [B, T, n*C] -> x [B, T, C], inj [B, T, n] (or None)
        xn = self.hc_norm(X)
        m = torch.sigmoid(self.input_mix_weight_up(F.silu(self.input_mix_weight_down(xn) / self.n)))
        shp = X.shape[:-1] + (self.n, self.C)
        x = (m.reshape(shp) * xn.reshape(shp)).mean(-2)
        inj = None
        if self.block_inject_weight is not None:
            inj = 2.0 * torch.sigmoid(self.block_inject_weight(xn) / self.n)
        return x, inj

    def combine(self, X, y, inj):
        shp = X.shape[:-1] + (self.n, self.C)
        return X + (inj.unsqueeze(-1) * y.unsqueeze(-2)).reshape(X.shape)


def causal_conv(x, w, dilation=1):
    """Depthwise causal conv over time: x [B, T, ch], w [ch, 1, K]; tap K-1 is the current token."""
    K = w.shape[-1]
    T = x.shape[1]
    y = F.conv1d(x.transpose(1, 2), w.to(x.dtype), padding=(K - 1) * dilation, dilation=dilation, groups=x.shape[-1])
    return y[..., :T].transpose(1, 2)


def gdn_chunked(q, k, v, g, beta, chunk=64):
    """Gated delta rule over a whole sequence, chunked.  q, k [B, H, T, dk] (k L2-normed, q scaled),
    v [B, H, T, dv], g (log decay ≤ 0), beta [B, H, T].  Returns o [B, H, T, dv] in the island dtype.
    Per chunk with cumulative log decays c: (I + A)U = βv, (I + A)W = βe^c k with
    A_ij = β_i (k_i·k_j) e^{c_i−c_j} (j < i); δ = U − W S; o = e^c q S + (q kᵀ ∘ e^{c_i−c_j})δ;
    S ← e^{c_L} S + (k ∘ e^{c_L−c})ᵀ δ."""
    d = hi(q)
    q, k, v, g, beta = (t.to(d) for t in (q, k, v, g, beta))
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // chunk
    q, k, v = (t.reshape(B, H, n, chunk, -1) for t in (q, k, v))
    g, beta = g.reshape(B, H, n, chunk), beta.reshape(B, H, n, chunk)
    c = g.cumsum(-1)
    diff = c.unsqueeze(-1) - c.unsqueeze(-2)  # c_i - c_j
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device)
    strict, lower = torch.tril(tri, -1), torch.tril(tri)
    dec_l = torch.exp(diff.masked_fill(~lower, -float("inf")))
    A = (k @ k.transpose(-1, -2)) * dec_l * beta.unsqueeze(-1)
    A = A.masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=d, device=q.device)
    M = eye + A
    rhs = torch.cat([v * beta.unsqueeze(-1), k * (beta * c.exp()).unsqueeze(-1)], -1)
    sol = torch.linalg.solve_triangular(M, rhs, upper=False, unitriangular=True)
    U, W = sol[..., :dv], sol[..., dv:]
    qk = (q @ k.transpose(-1, -2)) * dec_l
    qe = q * c.exp().unsqueeze(-1)
    kend = k * torch.exp(c[..., -1:] - c).unsqueeze(-1)
    S = torch.zeros(B, H, dk, dv, dtype=d, device=q.device)
    outs = []
    for i in range(n):
        delta = U[:, :, i] - W[:, :, i] @ S
        outs.append(qe[:, :, i] @ S + qk[:, :, i] @ delta)
        S = torch.exp(c[:, :, i, -1])[..., None, None] * S + kend[:, :, i].transpose(-1, -2) @ delta
    o = torch.stack(outs, 2).reshape(B, H, n * chunk, dv)
    return o[:, :, :T]


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["hidden_size"]
        self.Hk, self.Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
        self.dk, self.dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
        self.eps = cfg["rms_norm_eps"]
        self.silu_gate = (cfg.get("output_gate_type") or cfg.get("hidden_act", "silu")) == "silu"
        conv_dim = 2 * self.Hk * self.dk + self.Hv * self.dv
        self.in_proj_qkv = nn.Linear(C, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(C, self.Hv * self.dv, bias=False)
        self.in_proj_b = nn.Linear(C, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(C, self.Hv, bias=False)
        self.conv1d = nn.Module()
        self.conv1d.weight = nn.Parameter(torch.zeros(conv_dim, 1, cfg["linear_conv_kernel_dim"]))
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.zeros(self.Hv))
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(self.dv))
        self.out_proj = nn.Linear(self.Hv * self.dv, C, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        Hk, Hv, dk, dv = self.Hk, self.Hv, self.dk, self.dv
        mixed = F.silu(causal_conv(self.in_proj_qkv(x), self.conv1d.weight))
        q, k, v = mixed.split([Hk * dk, Hk * dk, Hv * dv], -1)
        d = hi(x)
        q = q.reshape(B, T, Hk, dk).to(d)
        k = k.reshape(B, T, Hk, dk).to(d)
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        rep = Hv // Hk  # value head h reads key head h // rep (transformers' grouping)
        q = q.repeat_interleave(rep, 2).transpose(1, 2)
        k = k.repeat_interleave(rep, 2).transpose(1, 2)
        v = v.reshape(B, T, Hv, dv).transpose(1, 2)
        beta = torch.sigmoid(self.in_proj_b(x).to(d)).transpose(1, 2)
        g = (-torch.exp(self.A_log.to(d)) * F.softplus(self.in_proj_a(x).to(d) + self.dt_bias.to(d))).transpose(1, 2)
        with exact(x):
            o = gdn_chunked(q, k, v, g, beta).transpose(1, 2)  # [B, T, Hv, dv]
        z = self.in_proj_z(x).reshape(B, T, Hv, dv).to(d)
        o = rms(o, self.eps) * self.norm.weight.to(d)
        o = o * (F.silu(z) if self.silu_gate else torch.sigmoid(z))
        return self.out_proj(o.reshape(B, T, Hv * dv).to(x.dtype))


class Indexer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["hidden_size"]
        self.Hi, self.Di = cfg["indexer_n_heads"], cfg["indexer_head_dim"]
        self.cr, self.budget = cfg["indexer_compress_ratio"], cfg["indexer_budget"]
        self.index_qk_proj = nn.Linear(C, (self.Hi + 1) * self.Di, bias=False)
        self.q_layernorm = RMSNorm(self.Di, cfg["rms_norm_eps"])
        self.k_layernorm = RMSNorm(self.Di, cfg["rms_norm_eps"])

    def scores(self, x, rope):
        """Block scores [B, T, nb] (Σ_heads ReLU(q·K_b)/√Di) for the complete blocks of the whole sequence."""
        B, T, _ = x.shape
        cr = self.cr
        qk = self.index_qk_proj(x)
        q = self.q_layernorm(qk[..., : self.Hi * self.Di].reshape(B, T, self.Hi, self.Di))
        pos = torch.arange(T, device=x.device)
        q = rope(q, pos)
        nb = T // cr
        kr = qk[..., self.Hi * self.Di:][:, : nb * cr]
        kb = kr.to(hi(kr)).reshape(B, nb, cr, self.Di).mean(2)
        kb = self.k_layernorm(kb).unsqueeze(-2)  # [B, nb, 1, Di]
        kb = rope(kb, torch.arange(nb, device=x.device) * cr).squeeze(-2)
        d = hi(q)
        with exact(x):
            s = torch.einsum("bthd,bnd->bthn", q.to(d), kb.to(d))
        return F.relu(s).sum(2) / math.sqrt(self.Di)

    def select(self, scores, T):
        """Token mask [B, T, T] (True: query row may attend key column), and the valid-block mask."""
        cr = self.cr
        top = self.budget // cr
        dev = scores.device
        nb = scores.shape[-1]
        p = torch.arange(T, device=dev)
        nvalid = (p + 1) // cr  # complete blocks at row p
        valid = torch.arange(nb, device=dev)[None, :] < nvalid[:, None]  # [T, nb]
        keep = valid.unsqueeze(0).expand(scores.shape[0], T, nb).clone()
        if nb > top:
            masked = scores.masked_fill(~valid, -float("inf"))
            # Ties (ReLU scores of exactly 0 are common) go to the lower block index, as in
            # Nebula (engine/cpu/qsa.c); torch.topk leaves them unspecified.
            idx = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :top]
            chosen = torch.zeros_like(keep).scatter_(-1, idx, True)
            sparse_rows = (nvalid > top)[None, :, None]
            keep = torch.where(sparse_rows, chosen & valid, keep)
        kpos = torch.arange(T, device=dev)
        kblk = kpos // cr
        in_block = torch.zeros(scores.shape[0], T, T, dtype=torch.bool, device=dev)
        full = kblk < nb
        in_block[..., full] = keep.gather(-1, kblk[full].expand(scores.shape[0], T, -1))
        tail = (kpos[None, :] >= (nvalid * cr)[:, None]) & (kpos[None, :] <= p[:, None])
        return in_block | tail.unsqueeze(0), valid


class QSA(nn.Module):
    def __init__(self, cfg, dense=False):
        super().__init__()
        C = cfg["hidden_size"]
        self.Hq, self.Hkv, self.D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        eps = cfg["rms_norm_eps"]
        self.q_proj = nn.Linear(C, self.Hq * 2 * self.D, bias=False)
        self.k_proj = nn.Linear(C, self.Hkv * self.D, bias=False)
        self.v_proj = nn.Linear(C, self.Hkv * self.D, bias=False)
        self.o_proj = nn.Linear(self.Hq * self.D, C, bias=False)
        self.q_norm = RMSNorm(self.D, eps)
        self.k_norm = RMSNorm(self.D, eps)
        self.indexer = Indexer(cfg)
        self.dense = dense  # the MTP block: dense attention, indexer loaded and unused (llama.cpp)
        self.last_mask = None
        self.index_loss = None

    def forward(self, x, rope, pos, want_index_loss=False):
        B, T, _ = x.shape
        H, Hkv, D = self.Hq, self.Hkv, self.D
        qg = self.q_proj(x).reshape(B, T, H, 2 * D)
        q, gate = qg[..., :D], qg[..., D:]
        q = rope(self.q_norm(q), pos)
        k = rope(self.k_norm(self.k_proj(x).reshape(B, T, Hkv, D)), pos)
        v = self.v_proj(x).reshape(B, T, Hkv, D)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        scores = None
        if self.dense:
            mask = causal.unsqueeze(0).expand(B, T, T)
        else:
            scores = self.indexer.scores(x, rope)
            mask, valid = self.indexer.select(scores.detach(), T)
        self.last_mask = mask
        rep = H // Hkv
        qh = q.transpose(1, 2)
        kh = k.repeat_interleave(rep, 2).transpose(1, 2)
        vh = v.repeat_interleave(rep, 2).transpose(1, 2)
        fused = hasattr(F, "scaled_dot_product_attention") and x.dtype != torch.float64 and not want_index_loss
        if fused:
            att = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask.unsqueeze(1))
        else:
            d = hi(qh)
            with exact(x):
                s = (qh.to(d) @ kh.to(d).transpose(-1, -2)) / math.sqrt(D)
                pr = torch.softmax(s.masked_fill(~mask.unsqueeze(1), -float("inf")), -1)
                att = (pr @ vh.to(d)).to(qh.dtype)
            if want_index_loss and scores is not None:
                self.index_loss = self._index_loss(s.detach(), causal, scores, valid)
        att = att.transpose(1, 2) * torch.sigmoid(gate)
        return self.o_proj(att.reshape(B, T, H * D))

    def _index_loss(self, s, causal, scores, valid):
        """KL(dense attention mass per block || softmax of the indexer's block scores) over the
        complete blocks each row sees (the indexer gets no gradient through top-k)."""
        cr = self.indexer.cr
        B, H, T, _ = s.shape
        nb = scores.shape[-1]
        pd = torch.softmax(s.masked_fill(~causal, -float("inf")), -1).sum(1)[..., : nb * cr]
        tgt = pd.reshape(B, T, nb, cr).sum(-1).masked_fill(~valid, 0.0)
        rows = valid.any(-1)
        tgt = tgt / tgt.sum(-1, keepdim=True).clamp_min(1e-9)
        logp = torch.log_softmax(scores.float().masked_fill(~valid, -float("inf")), -1)
        kl = (tgt * (torch.log(tgt.clamp_min(1e-9)) - logp.masked_fill(~valid, 0.0))).sum(-1)
        return kl[:, rows].mean()


class Experts(nn.Module):
    def __init__(self, E, C, I):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, C))
        self.down_proj = nn.Parameter(torch.zeros(E, C, I))


class SharedExpert(nn.Module):
    def __init__(self, C, I):
        super().__init__()
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, E = cfg["hidden_size"], cfg["num_experts"]
        self.E, self.k, self.I = E, cfg["num_experts_per_tok"], cfg["moe_intermediate_size"]
        self.norm_topk = cfg.get("norm_topk_prob", True)
        self.gate = nn.Linear(C, E, bias=False)
        self.experts = Experts(E, C, self.I)
        self.shared_expert = SharedExpert(C, cfg["shared_expert_intermediate_size"])
        self.shared_expert_gate = nn.Linear(C, 1, bias=False)
        self.stats = None  # (probs mean [E], selection counts [E]) of the last call

    def forward(self, x):
        shp = x.shape
        xf = x.reshape(-1, shp[-1])
        logits = self.gate(xf)
        probs = torch.softmax(logits.to(hi(logits)), -1)
        w, idx = probs.topk(self.k, -1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        w = w.to(x.dtype)
        counts = torch.bincount(idx.reshape(-1), minlength=self.E)
        self.stats = (probs.mean(0), counts)
        out = torch.zeros_like(xf)
        flat_e = idx.reshape(-1)
        order = flat_e.argsort()
        tok = torch.arange(xf.shape[0], device=x.device).repeat_interleave(self.k)[order]
        wts = w.reshape(-1)[order]
        gu, dn = self.experts.gate_up_proj, self.experts.down_proj
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            t, ww = tok[start:start + n], wts[start:start + n]
            start += n
            h = xf[t] @ gu[e].to(x.dtype).t()
            h = F.silu(h[:, : self.I]) * h[:, self.I:]
            out.index_add_(0, t, (h @ dn[e].to(x.dtype).t()) * ww[:, None])
        out = out + torch.sigmoid(self.shared_expert_gate(xf)) * self.shared_expert(xf)
        return out.reshape(shp)

    def aux_loss(self):
        """Switch-style balance loss E·Σ f_e·P_e (1 when uniform): keeps every expert used while the
        data's own skew survives (its coefficient is small)."""
        pm, counts = self.stats
        f = counts.to(pm.dtype) / counts.sum()
        return self.E * (f * pm).sum()


class PLE(nn.Module):
    """Hashed n-gram embedding added to the wide residual (docs/CONVERSION.md §1.4, MODEL.md)."""

    def __init__(self, cfg, j):
        super().__init__()
        n, C = cfg["hc_count"], cfg["hidden_size"]
        N, hp = cfg["ngram_size"], cfg["heads_per_ngram"]
        self.N, self.hp, self.NH, self.n, self.C = N, hp, (N - 1) * hp, n, C
        P = cfg.get("ple_embed_dim") or C
        self.W = P // self.NH
        eos = cfg["eos_token_id"]
        self.eos = eos[0] if isinstance(eos, list) else eos
        mult, sizes, offs, R = ple_constants(cfg, j)
        eps = cfg["rms_norm_eps"]
        self.ple_embedding = nn.Module()
        self.ple_embedding.ngram_embedding = nn.Embedding(R, self.W)
        self.ple_embedding.register_buffer("layer_multipliers", torch.tensor(mult, dtype=torch.int64))
        self.ple_embedding.register_buffer("ngram_heads_offsets", torch.tensor(offs, dtype=torch.int64))
        self.ple_embedding.register_buffer("ngram_heads_vocab_sizes", torch.tensor(sizes, dtype=torch.int64))
        self.key_proj = nn.Linear(P, n * C, bias=False)
        self.value_proj = nn.Linear(P, C, bias=False)
        self.norm_key = RMSNorm(n * C, eps, group=C)
        self.norm_query = RMSNorm(n * C, eps, group=C)
        self.norm_conv = RMSNorm(n * C, eps, group=C)
        self.conv1d = nn.Module()
        self.conv1d.weight = nn.Parameter(torch.zeros(n * C, 1, cfg["ple_conv_kernel_size"]))

    def rows(self, ids):
        """Table rows [B, T, NH] (int64): n-grams never reach back across an EOS or the start."""
        B, T = ids.shape
        pe = self.ple_embedding
        hist = [ids]
        cut = torch.zeros_like(ids, dtype=torch.bool)
        for s in range(1, self.N):
            sh = torch.full_like(ids, self.eos)
            sh[:, s:] = ids[:, :-s]
            start = torch.zeros_like(cut)
            start[:, :s] = True
            cut = cut | start
            hist.append(torch.where(cut, torch.full_like(ids, self.eos), sh))
            cut = cut | (sh == self.eos)
        out = []
        for order in range(2, self.N + 1):
            mix = torch.zeros_like(ids)
            for s in range(order):
                mix = mix ^ (hist[s] * pe.layer_multipliers[s])
            h0 = (order - 2) * self.hp
            vs = pe.ngram_heads_vocab_sizes[h0:h0 + self.hp]
            of = pe.ngram_heads_offsets[h0:h0 + self.hp]
            out.append(torch.remainder(mix.unsqueeze(-1), vs) + of)
        return torch.cat(out, -1)

    def forward(self, X, ids):
        B, T, _ = X.shape
        n, C = self.n, self.C
        e = self.ple_embedding.ngram_embedding(self.rows(ids)).reshape(B, T, -1).to(X.dtype)
        key = self.norm_key(self.key_proj(e)).reshape(B, T, n, C)
        value = self.value_proj(e)
        query = self.norm_query(X).reshape(B, T, n, C)
        d = hi(X)
        s = (key.to(d) * query.to(d)).sum(-1) / math.sqrt(C)
        s = torch.sign(s) * torch.sqrt(s.abs().clamp_min(1e-6))
        G = (torch.sigmoid(s).unsqueeze(-1) * value.to(d).unsqueeze(-2)).reshape(B, T, n * C).to(X.dtype)
        out = G + F.silu(causal_conv(self.norm_conv(G), self.conv1d.weight, dilation=self.N))
        return X + out


class Layer(nn.Module):
    def __init__(self, cfg, qsa, ple_j=None, dense=False):
        super().__init__()
        self.attn_hyper_connection = HyperConnection(cfg)
        self.mlp_hyper_connection = HyperConnection(cfg)
        self.is_qsa = qsa
        if qsa:
            self.self_attn = QSA(cfg, dense=dense)
        else:
            self.linear_attn = GatedDeltaNet(cfg)
        if ple_j is not None:
            self.ple = PLE(cfg, ple_j)
        self.mlp = MoE(cfg)

    def forward(self, X, ids, rope, pos, want_index_loss=False):
        if hasattr(self, "ple"):
            X = self.ple(X, ids)
        hc = self.attn_hyper_connection
        x, inj = hc(X)
        y = self.self_attn(x, rope, pos, want_index_loss) if self.is_qsa else self.linear_attn(x)
        X = hc.combine(X, y, inj)
        hc = self.mlp_hyper_connection
        x, inj = hc(X)
        return hc.combine(X, self.mlp(x), inj)


class Trunk(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        ple_ids = sorted(set(cfg.get("ple_layer_ids") or []))
        types = layer_types(cfg)
        self.layers = nn.ModuleList(
            Layer(cfg, t in QSA_TYPES, ple_ids.index(i + 1) if (i + 1) in ple_ids else None) for i, t in enumerate(types))
        self.hyper_connection_mixer = HyperConnection(cfg, inject=False)


class MTP(nn.Module):
    """The MTP block as llama.cpp's graph_mtp runs it (engine/cpu/mtp.c): P_s = fc_embedding·ê +
    fc_hidden·ĥ_s per stream, one QSA-shaped block with dense attention, its own head mixer,
    the trunk's LM head."""

    def __init__(self, cfg):
        super().__init__()
        n, C = cfg["hc_count"], cfg["hidden_size"]
        self.n, self.C = n, C
        self.fc_embedding = nn.Linear(C, C, bias=False)
        self.fc_hidden = nn.Linear(C, C, bias=False)
        self.pre_fc_norm_embedding = RMSNorm(C, cfg["rms_norm_eps"])
        self.pre_fc_norm_hidden = RMSNorm(n * C, cfg["rms_norm_eps"], group=C)
        self.layers = nn.ModuleList([Layer(cfg, True, None, dense=True)])
        self.hyper_connection_mixer = HyperConnection(cfg, inject=False)

    def forward(self, wide, emb, rope, pos):
        # wide [B, T, nC] (trunk state at t), emb [B, T, C] (embedding of token t+1); returns (head-mixed, R)
        B, T, _ = wide.shape
        e = self.fc_embedding(self.pre_fc_norm_embedding(emb)).unsqueeze(-2)
        h = self.fc_hidden(self.pre_fc_norm_hidden(wide).reshape(B, T, self.n, self.C))
        P = (e + h).reshape(B, T, self.n * self.C)
        R = self.layers[0](P, None, rope, pos)
        return self.hyper_connection_mixer(R)[0], R


def layer_types(cfg):
    t = cfg.get("layer_types")
    if t:
        return t
    iv = cfg.get("full_attention_interval", 4)
    return ["linear_attention" if (i + 1) % iv else "full_attention" for i in range(cfg["num_hidden_layers"])]


class Qwen4Exp(nn.Module):
    def __init__(self, cfg, mtp=None):
        super().__init__()
        self.cfg = cfg
        self.model = Trunk(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if mtp is None:
            mtp = cfg.get("mtp_num_hidden_layers", 0) > 0
        self.mtp = MTP(cfg) if mtp else None
        rp = cfg.get("rope_parameters") or {}
        theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
        self.rope = Rope(int(cfg["head_dim"] * prf), theta)

    def forward(self, ids, want_layers=False, want_index_loss=False):
        """ids [B, T] -> dict(logits, wide (after the last layer), head_mixed, layers (opt.))."""
        B, T = ids.shape
        n = self.cfg["hc_count"]
        pos = torch.arange(T, device=ids.device)
        e = self.model.embed_tokens(ids)
        X = e.repeat(1, 1, n)
        outs = []
        for layer in self.model.layers:
            X = layer(X, ids, self.rope, pos, want_index_loss)
            if want_layers:
                outs.append(X)
        h = self.model.hyper_connection_mixer(X)[0]
        return {"logits": self.lm_head(h), "wide": X, "head_mixed": h, "layers": outs}

    def mtp_forward(self, wide, next_ids, pos0=1):
        """MTP logits for rows t: trunk state at t + token t+1, at positions pos0 + t."""
        T = wide.shape[1]
        pos = torch.arange(pos0, pos0 + T, device=wide.device)
        h, R = self.mtp(wide, self.model.embed_tokens(next_ids), self.rope, pos)
        return self.lm_head(h), R

    def moe_layers(self):
        ls = list(self.model.layers) + (list(self.mtp.layers) if self.mtp is not None else [])
        return [l.mlp for l in ls]

    def qsa_layers(self):
        return [l.self_attn for l in self.model.layers if l.is_qsa]
