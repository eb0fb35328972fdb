#!/usr/bin/env python3
"""roofline.py — the floor of a decode token's time from measured bandwidths and the bytes it must move.

Decode is memory-bound: per token the GPU reads every dense weight once and the routed
experts that are resident in VRAM; the CPU reads the missed experts from RAM; PCIe carries
the hand-offs (and any slot refills).  Within a layer the GPU's hits and the CPU's misses
run at the same time, but the next layer's dense work waits for both, so the floor is

    dense / gpu_bw  +  max(vram_experts / gpu_bw,  ram_experts / ram_bw + pcie / h2d_bw)

(summed over identical layers this is the same expression on per-token totals).  With the
CPU backend (--cpu-only) every byte comes from RAM: (dense + vram_experts + ram_experts) / ram_bw.

Bandwidths come from `nebula-bench-bw` JSON (--bw FILE) or flags (GB/s = 1e9 bytes/s); the
bytes are per token.  Prints a Markdown summary, or one JSON object with --json.
python3 stdlib only.

usage: roofline.py --bw BW.json --dense-bytes D --vram-expert-bytes H --ram-expert-bytes R
                   [--pcie-bytes P] [--measured-ms M] [--cpu-only] [--json]
"""
import argparse
import json
import sys


def die(msg):
    sys.exit(f"roofline: {msg}")


def bandwidths(a):
    """(gpu, h2d, ram) in bytes/s; flags override the JSON."""
    gpu = h2d = ram = None
    if a.bw:
        try:
            with open(a.bw) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            die(f"cannot read {a.bw}: {e}")
        if not isinstance(d, dict) or "ram" not in d:
            die(f"{a.bw} is not nebula-bench-bw output")
        ram = d["ram"]["read_gbs"]
        if d.get("gpu"):
            gpu, h2d = d["gpu"]["read_gbs"], d["gpu"]["h2d_pinned_gbs"]
    gpu = a.gpu_gbs if a.gpu_gbs is not None else gpu
    h2d = a.h2d_gbs if a.h2d_gbs is not None else h2d
    ram = a.ram_gbs if a.ram_gbs is not None else ram
    if ram is None or ram <= 0:
        die("no RAM bandwidth (--bw FILE or --ram-gbs)")
    if not a.cpu_only and (not gpu or not h2d or gpu <= 0 or h2d <= 0):
        die("no GPU/PCIe bandwidth (nebula-bench-bw found no GPU): pass --gpu-gbs/--h2d-gbs or --cpu-only")
    g = 1e9
    return (gpu or 0) * g, (h2d or 0) * g, ram * g


def floor(a):
    for name in ("dense_bytes", "vram_expert_bytes", "ram_expert_bytes", "pcie_bytes"):
        if getattr(a, name) < 0:
            die(f"--{name.replace('_', '-')} is negative")
    gpu, h2d, ram = bandwidths(a)
    if a.cpu_only:
        t = {"dense_s": a.dense_bytes / ram, "vram_experts_s": a.vram_expert_bytes / ram,
             "ram_experts_s": a.ram_expert_bytes / ram, "pcie_s": 0.0}
        total = t["dense_s"] + t["vram_experts_s"] + t["ram_experts_s"]
        bound = "RAM"
    else:
        t = {"dense_s": a.dense_bytes / gpu, "vram_experts_s": a.vram_expert_bytes / gpu,
             "ram_experts_s": a.ram_expert_bytes / ram, "pcie_s": a.pcie_bytes / h2d}
        cpu_side = t["ram_experts_s"] + t["pcie_s"]
        total = t["dense_s"] + max(t["vram_experts_s"], cpu_side)
        if cpu_side > t["vram_experts_s"]:
            bound = "CPU experts (RAM)" if t["ram_experts_s"] >= t["pcie_s"] else "PCIe"
        else:
            bound = "GPU memory"
    r = {"floor_ms": 1e3 * total, "floor_tok_s": 1 / total if total > 0 else None, "bound": bound,
         "bandwidth_gbs": {"gpu_read": gpu / 1e9, "h2d_pinned": h2d / 1e9, "ram_read": ram / 1e9},
         "bytes_per_token": {"dense": a.dense_bytes, "vram_experts": a.vram_expert_bytes,
                             "ram_experts": a.ram_expert_bytes, "pcie": a.pcie_bytes},
         "terms_ms": {k.replace("_s", "_ms"): 1e3 * v for k, v in t.items()}, "cpu_only": a.cpu_only}
    if a.measured_ms is not None:
        r["measured_ms"] = a.measured_ms
        r["measured_over_floor"] = a.measured_ms / r["floor_ms"] if total > 0 else None
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bw", help="nebula-bench-bw JSON")
    ap.add_argument("--gpu-gbs", type=float)
    ap.add_argument("--h2d-gbs", type=float)
    ap.add_argument("--ram-gbs", type=float)
    ap.add_argument("--dense-bytes", type=float, required=True, help="dense weight bytes read per token")
    ap.add_argument("--vram-expert-bytes", type=float, required=True, help="expected VRAM-hit expert bytes per token")
    ap.add_argument("--ram-expert-bytes", type=float, required=True, help="CPU-expert bytes read from RAM per token")
    ap.add_argument("--pcie-bytes", type=float, default=0.0, help="bytes over PCIe per token")
    ap.add_argument("--measured-ms", type=float, help="measured ms/token, to report measured/floor")
    ap.add_argument("--cpu-only", action="store_true", help="CPU backend: every byte from RAM")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = floor(a)
    if a.json:
        print(json.dumps(r))
        return
    bw, b, t = r["bandwidth_gbs"], r["bytes_per_token"], r["terms_ms"]
    print(f"floor {r['floor_ms']:.3f} ms/token ({r['floor_tok_s']:.1f} tok/s), bound by {r['bound']}")
    print()
    print("| term | bytes/token | bandwidth GB/s | ms |")
    print("|---|---:|---:|---:|")
    src = "ram_read" if a.cpu_only else "gpu_read"
    print(f"| dense weights | {b['dense']:.0f} | {bw[src]:.1f} | {t['dense_ms']:.3f} |")
    print(f"| VRAM-hit experts | {b['vram_experts']:.0f} | {bw[src]:.1f} | {t['vram_experts_ms']:.3f} |")
    print(f"| CPU experts from RAM | {b['ram_experts']:.0f} | {bw['ram_read']:.1f} | {t['ram_experts_ms']:.3f} |")
    if not a.cpu_only:
        print(f"| PCIe | {b['pcie']:.0f} | {bw['h2d_pinned']:.1f} | {t['pcie_ms']:.3f} |")
    if "measured_ms" in r:
        print()
        print(f"measured {r['measured_ms']:.3f} ms/token = {r['measured_over_floor']:.2f} x the floor")


if __name__ == "__main__":
    main()
