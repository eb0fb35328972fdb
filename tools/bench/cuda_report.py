#!/usr/bin/env python3
"""cuda_report.py — the helpers of bench-cuda.sh that need arithmetic (python3 stdlib only).

  cuda_report.py record CONFIG PROMPT GEN A_ERR A_BEFORE A_AFTER B_ERR B_AFTER D_BEFORE D_AFTER E_AFTER
      one JSON line from four requests.  A and B have the PROMPT-token prompt: A generates
      1 token (its prompt time is the time to first token), B generates GEN (decode tok/s
      at that context); the routing counters of decode are B's minus A's (the same prompt
      routes the same way in exact mode, so the difference is exact).  D and E repeat that
      with an 8-token prompt: the CPU-expert time and PCIe bytes per decode token are E's
      minus D's, where a short prefill leaves no timing noise to subtract.  *_ERR are
      `nebula generate` stderr files, the others `nebulactl --json stats` replies taken
      before A, after A, after B, before D, after D, after E.
  cuda_report.py report META.json RECORDS.jsonl BW.json
      the Markdown block: one row per configuration and prompt length (medians over the
      repetitions, min–max of decode tok/s), the roofline floor of each row, and the
      speed-up of the slot configuration over the zero-slot one.
  cuda_report.py vram CONFIG PLACEMENT.json STATUS.json
      one Markdown line: the VRAM budget placement.json records (the gpu-worker's, with its
      parts) against the measured peak in a `nebulactl --json status` reply; exit 1, saying
      so loudly, when the peak is over the budget.
"""
import json
import re
import statistics
import subprocess
import sys
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def die(msg):
    sys.exit(f"cuda_report: {msg}")


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read {path}: {e}")


LINE = re.compile(r"prompt (\d+) tokens in ([0-9.]+) s \(([0-9.]+) tok/s\), generated (\d+) in ([0-9.]+) s \(([0-9.]+) tok/s\)")


def timings(err_path):
    try:
        text = open(err_path).read()
    except OSError as e:
        die(f"cannot read {err_path}: {e}")
    m = None
    for m in LINE.finditer(text):
        pass
    if not m:
        die(f"{err_path}: no timing line from nebula generate: {text.strip()[-300:]}")
    return {"prompt_tokens": int(m[1]), "prompt_s": float(m[2]), "generated": int(m[4]), "gen_s": float(m[5]),
            "gen_tps": float(m[6])}


def counters(before, after):
    """Per worker name: after − before of every counter."""
    b = {w["name"]: w["counters"] for w in load_json(before)["workers"]}
    d = {}
    for w in load_json(after)["workers"]:
        prev = b.get(w["name"], {})
        d[w["name"]] = {k: v - prev.get(k, 0) for k, v in w["counters"].items()}
    return d


def record(a):
    config, prompt, gen = a[0], int(a[1]), int(a[2])
    ta, tb = timings(a[3]), timings(a[6])
    da, db = counters(a[4], a[5]), counters(a[5], a[7])
    dd, de = counters(a[8], a[9]), counters(a[9], a[10])
    zero = {"tokens": 0, "expert_hits": 0, "expert_misses": 0, "bytes_copied": 0, "busy_ns": 0, "experts_computed": 0,
            "ring_wait_ns": 0}

    def side(d, name):
        return {k: d.get(name, zero).get(k, 0) for k in zero}
    gwa, gwb = side(da, "gpu-worker"), side(db, "gpu-worker")
    cma, cmb = side(da, "cpu-moe-worker"), side(db, "cpu-moe-worker")
    dec = {k: gwb[k] - gwa[k] for k in zero}
    tokens = dec["tokens"]
    if tokens <= 0:
        die(f"{config} prompt {prompt}: the decode run evaluated no token more than the prefill run")
    hits, misses = dec["expert_hits"], dec["expert_misses"]
    computed = dec["experts_computed"] + cmb["experts_computed"] - cma["experts_computed"]
    gwd, gwe = side(dd, "gpu-worker"), side(de, "gpu-worker")
    cmd, cme = side(dd, "cpu-moe-worker"), side(de, "cpu-moe-worker")
    short_tokens = gwe["tokens"] - gwd["tokens"]
    if short_tokens <= 0:
        die(f"{config}: the short decode run evaluated no token more than its prefill run")
    print(json.dumps({
        "config": config, "prompt": prompt, "gen": gen,
        "ttft_s": ta["prompt_s"], "prefill_tps": ta["prompt_tokens"] / ta["prompt_s"] if ta["prompt_s"] > 0 else 0,
        "decode_tps": tb["gen_tps"], "decode_tokens": tokens,
        "vram_hit_rate": hits / (hits + misses) if hits + misses else 0,
        "pcie_bytes_per_token": (gwe["bytes_copied"] - gwd["bytes_copied"]) / short_tokens,
        "cpu_expert_ms_per_token": (cme["busy_ns"] - cmd["busy_ns"]) / short_tokens / 1e6,
        "gpu_wait_ms_per_token": (gwe["ring_wait_ns"] - gwd["ring_wait_ns"]) / short_tokens / 1e6,
        # decode only: the long run's eval time less its prompt-only twin's, as decode_tps is measured
        "gpu_busy_ms_per_token": dec["busy_ns"] / tokens / 1e6,
        "experts_per_token": computed / tokens}))


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def handoff_bytes(meta, hit):
    """The PCIe bytes the design must move per decode token when experts miss VRAM: each
    MoE layer's input row to the host (C floats) and one result row (C floats) back per
    missed expert.  What the roofline charges when the worker counts fewer (or none)."""
    if meta["backend"].startswith("cpu") or hit >= 1:
        return 0.0
    C, L, k = meta["hidden"], meta["layers"], meta["experts_used"]
    return L * 4.0 * C * (1 + (1 - hit) * k)


def roofline(meta, bw, hit, pcie, ms):
    """floor via roofline.py (one formula, one place)."""
    per_sel = meta["bytes_per_expert"]
    sel = meta["experts_used"] * meta["layers"]
    pcie = max(pcie, handoff_bytes(meta, hit))
    args = [sys.executable, os.path.join(HERE, "roofline.py"), "--bw", bw, "--json",
            "--dense-bytes", str(meta["dense_read_bytes"]),
            "--vram-expert-bytes", str(hit * sel * per_sel),
            "--ram-expert-bytes", str((1 - hit) * sel * per_sel),
            "--pcie-bytes", str(pcie), "--measured-ms", str(ms)]
    if meta["backend"].startswith("cpu"):
        args.append("--cpu-only")
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode:
        die(out.stderr.strip())
    return json.loads(out.stdout)


def report(a):
    meta, bw_path = load_json(a[0]), a[2]
    bw = load_json(bw_path)
    rows = []
    try:
        with open(a[1]) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        die(f"cannot read {a[1]}: {e}")
    if not rows:
        die("no measurements")
    want_k = meta["experts_used"] * meta["layers"]
    groups = {}
    for r in rows:
        groups.setdefault((r["config"], r["prompt"]), []).append(r)
    g = bw.get("gpu")
    print(f"- Synthetic Qwen3.8-Flash-Next slice: {meta['layers']} of 48 layers at the released widths, mix "
          f"{meta['mix']}, router skew {meta['skew']}, {meta['backend']} backend; {meta['gen']} generated tokens, "
          f"{meta['reps']} repetitions (median; decode min–max).")
    print(f"- Budgets: `slots` = the gpu-worker's VRAM budget {meta['slots_budget_bytes'] / 2**30:.2f} GiB "
          f"(nebula-prepare --vram-slots; {meta['budget_note']}); `zero-slot` = --vram-slots 0 (every routed "
          f"expert on the CPU, as llama.cpp `-ot exps=CPU`); RAM budget all.")
    print(f"- Bandwidths ({bw.get('source', 'nebula-bench-bw, same run')}): "
          + (f"GPU {g['name']} read {g['read_gbs']:.0f} GB/s, copy {g['copy_gbs']:.0f} GB/s, pinned H2D "
             f"{g['h2d_pinned_gbs']:.1f} GB/s; " if g else "no GPU; ")
          + f"RAM read {bw['ram']['read_gbs']:.1f} GB/s with {bw['ram']['threads']} threads.")
    print(f"- Roofline: `tools/bench/roofline.py` on the row's bytes per decode token: dense "
          f"{meta['dense_read_bytes'] / 1e6:.0f} MB, {want_k} routed experts × {meta['bytes_per_expert'] / 1e6:.3f} MB "
          f"split by the measured VRAM hit rate, PCIe bytes as counted by the gpu-worker (`bytes_copied`) but at least the "
          f"hand-off (per layer the input row to the host and a result row back per missed expert, fp32). "
          f"`gpu-worker waits` = its time waiting for the cpu-moe-worker's answers (ring_wait_ns), the hand-off plus "
          f"the CPU experts' time not hidden behind the GPU's.")
    print()
    print("| configuration | prompt | prefill tok/s | TTFT s | decode tok/s | ms/token | VRAM hit | PCIe B/token "
          "| CPU-expert ms/token | gpu-worker waits ms/token | experts/token | floor ms | measured/floor | bound |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    decode = {}
    bad = []
    for (config, prompt), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0] != "slots")):
        d = [r["decode_tps"] for r in rs]
        dm = med(d)
        decode[(config, prompt)] = dm
        hit = med([r["vram_hit_rate"] for r in rs])
        pcie = med([r["pcie_bytes_per_token"] for r in rs])
        ept = sorted({round(r["experts_per_token"], 6) for r in rs})
        if any(abs(e - want_k) > 1e-9 for e in ept):
            bad.append(f"{config} prompt {prompt}: {ept} routed experts computed per token, want {want_k}")
        ms = 1e3 / dm if dm > 0 else float("nan")
        rf = roofline(meta, bw_path, hit, pcie, ms)
        print(f"| {config} | {prompt} | {med([r['prefill_tps'] for r in rs]):.1f} | {med([r['ttft_s'] for r in rs]):.3f} "
              f"| {dm:.2f} ({min(d):.2f}–{max(d):.2f}) | {ms:.2f} | {100 * hit:.1f} % | {pcie:.0f} "
              f"| {med([r['cpu_expert_ms_per_token'] for r in rs]):.2f} "
              f"| {med([r.get('gpu_wait_ms_per_token', float('nan')) for r in rs]):.2f} | {'/'.join(f'{e:g}' for e in ept)} "
              f"| {rf['floor_ms']:.2f} | {rf['measured_over_floor']:.2f} | {rf['bound']} |")
    print()
    for (config, prompt), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0] != "slots")):
        busy = med([r.get("gpu_busy_ms_per_token", float("nan")) for r in rs])
        if busy != busy:  # records from before the gpu-worker's busy time was kept
            continue
        ms = 1e3 / decode[(config, prompt)] if decode[(config, prompt)] > 0 else float("nan")
        wait = med([r.get("gpu_wait_ms_per_token", float("nan")) for r in rs])
        print(f"- {config}, prompt {prompt}: a decode token {ms:.2f} ms = the gpu-worker's eval {busy:.2f} ms "
              f"(waiting for the cpu-moe-worker {wait:.2f}, the GPU's own work and the hand-offs {busy - wait:.2f}) "
              f"+ {ms - busy:.2f} ms outside it (coordinator, step ring, sampling)")
    for prompt in sorted({p for _, p in decode}):
        s, z = decode.get(("slots", prompt)), decode.get(("zero-slot", prompt))
        if s and z:
            print(f"- prompt {prompt}: slots / zero-slot decode = {s / z:.2f}×")
    if meta.get("curve"):
        print()
        print(f"Routing concentration of this model ({meta['curve_note']}):")
        print()
        print("| slots per layer | fraction | held-out hit rate |")
        print("|---:|---:|---:|")
        for c in meta["curve"]:
            print(f"| {c['slots_per_layer']} | {100 * c['fraction']:.1f} % | {100 * c['hit_rate']:.1f} % |")
    if bad:
        print()
        for b in bad:
            print(f"- EXACTNESS FAILURE: {b}")
        sys.exit(1)


def vram(a):
    label, pl = a[0], load_json(a[1])
    peak = int(load_json(a[2]).get("vram_peak_bytes") or 0)
    m, req = pl["model"], pl["request"]
    budget = int(req["vram_budget"])
    mib = lambda b: f"{b / 2**20:.1f}"
    plan = (f"planned {mib(budget)} MiB (dense {mib(m['vram_dense_bytes'])} + K/V and scratch for {req['vram_ctx']} "
            f"positions {mib(m['vram_reserve_bytes'])} + slots {mib(budget - m['vram_fixed_bytes'])}: "
            f"{pl['totals']['vram']['experts']} experts)")
    if not peak:
        print(f"- {label}: VRAM {plan}; no peak measured (a backend without a device)")
    elif peak <= budget:
        print(f"- {label}: VRAM {plan}, measured peak {mib(peak)} MiB ({100 * peak / budget:.0f} % of it)")
    else:
        print(f"- **VRAM BUDGET EXCEEDED** {label}: measured peak {mib(peak)} MiB > {plan}")
        print(f"cuda_report: {label}: peak VRAM {peak} B is over the budget of {budget} B", file=sys.stderr)
        sys.exit(1)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "record" and len(sys.argv) == 13:
        record(sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "report" and len(sys.argv) == 5:
        report(sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "vram" and len(sys.argv) == 5:
        vram(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
