#!/usr/bin/env python3
"""budget_plot.py — decode tok/s against the VRAM budget, Nebula and llama.cpp (issue 15 item 6).

    budget_plot.py --out DIR  G=NEBULA.md[,PEER.md] ...

Each argument names a budget in GiB and the reports measured at it: bench-cuda.sh's (rows
"| slots | …" and "| zero-slot | …") and, optional, peer-llamacpp.sh's ("| llama.cpp … |"; its
"vram" placement is the one within the budget, "cpu-experts" every routed expert on the CPU).
Both reports share the column layout "| configuration | prompt | prefill tok/s | TTFT s | decode
tok/s | …"; a row's decode cell is "median (min–max)".  Rows of the first prompt length found are
used.  Writes DIR/budget.svg (one line per series; the plot is made here, no plotting library) and
DIR/budget.md (the table and the ratios at each budget), and prints the table.  Exit 1 when a
report is missing or has no rows of a series it should have (a cut run), 2 for bad arguments.
"""
import html
import os
import re
import sys

SERIES = [  # (key, label, colour)
    ("slots", "Nebula, expert slots in the budget", "#1f6feb"),
    ("zero-slot", "Nebula, every routed expert on the CPU", "#8250df"),
    ("llama-vram", "llama.cpp, --n-cpu-moe within the budget", "#d1242f"),
    ("llama-cpu", "llama.cpp, -ot exps=CPU (measured once)", "#bc4c00"),
]


def die(msg, code=1):
    print(f"budget_plot: {msg}", file=sys.stderr)
    sys.exit(code)


def rows(path):
    """{series key: (prompt, decode tok/s, prefill tok/s)} of a report, the first prompt length's."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        die(f"cannot read {path}: {e.strerror}")
    out = {}
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| configuration") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not re.fullmatch(r"\d+", cells[1]):
            continue
        cfg = cells[0]
        if cfg.startswith("slots"):
            key = "slots"
        elif cfg.startswith("zero-slot"):
            key = "zero-slot"
        elif cfg.startswith("llama.cpp vram") or "-ncmoe" in cfg:
            key = "llama-vram"
        elif cfg.startswith("llama.cpp cpu") or "exps=CPU" in cfg:
            key = "llama-cpu"
        else:
            continue
        m = re.match(r"\**([0-9.]+)", cells[4])
        p = re.match(r"\**([0-9.]+)", cells[2])
        if not m:
            continue
        prompt = int(cells[1])
        if key in out and out[key][0] != prompt:
            continue  # the first prompt length only
        if key in out:  # several llama.cpp rows (one per -ub): decode is the same measure, prefill the best
            out[key] = (prompt, out[key][1], max(out[key][2], float(p.group(1)) if p else 0.0))
        else:
            out[key] = (prompt, float(m.group(1)), float(p.group(1)) if p else 0.0)
    return out


def svg(points, path):
    """points: {key: [(budget, tok/s), ...]} → a line chart written to path."""
    W, H, L, R, T, B = 720, 440, 70, 20, 30, 130
    xs = sorted({b for pts in points.values() for b, _ in pts})
    ymax = max(v for pts in points.values() for _, v in pts)
    ymax = ymax * 1.1 if ymax > 0 else 1.0
    xmin, xmax = (xs[0], xs[-1]) if xs[0] != xs[-1] else (xs[0] - 1, xs[0] + 1)
    X = lambda b: L + (b - xmin) / (xmax - xmin) * (W - L - R)
    Y = lambda v: T + (1 - v / ymax) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         'font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">decode tok/s against the VRAM budget</text>']
    for i in range(6):  # y grid
        v = ymax * i / 5
        o.append(f'<line x1="{L}" y1="{Y(v):.1f}" x2="{W - R}" y2="{Y(v):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for b in xs:
        o.append(f'<text x="{X(b):.1f}" y="{H - B + 18}" text-anchor="middle">{b:g} GiB</text>')
    o.append(f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#333"/>')
    o.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
             'text-anchor="middle">decode tok/s</text>')
    ly = H - B + 40
    for key, label, colour in SERIES:
        pts = sorted(points.get(key, []))
        if not pts:
            continue
        d = " ".join(f"{X(b):.1f},{Y(v):.1f}" for b, v in pts)
        o.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for b, v in pts:
            o.append(f'<circle cx="{X(b):.1f}" cy="{Y(v):.1f}" r="3.5" fill="{colour}"/>')
        o.append(f'<line x1="{L}" y1="{ly}" x2="{L + 24}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        o.append(f'<text x="{L + 30}" y="{ly + 4}">{html.escape(label)}</text>')
        ly += 18
    o.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(o) + "\n")


def main(argv):
    out, specs = None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--out" and i + 1 < len(argv):
            out = argv[i + 1]
            i += 2
            continue
        if argv[i] in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)=([^,]+)(?:,(.+))?", argv[i])
        if not m:
            die(f"'{argv[i]}' is not G=NEBULA.md[,PEER.md] (try --help)", 2)
        specs.append((float(m.group(1)), m.group(2), m.group(3)))
        i += 1
    if not out or not specs:
        die("give --out DIR and at least one G=NEBULA.md[,PEER.md] (try --help)", 2)
    points, table = {}, []
    for g, neb, peer in sorted(specs):
        r = rows(neb)
        for key in ("slots", "zero-slot"):
            if key not in r:
                die(f"{neb} has no '{key}' row (was the run cut short?)")
        if peer:
            pr = rows(peer)
            if "llama-vram" not in pr and "llama-cpu" not in pr:
                die(f"{peer} has no llama.cpp row")
            r.update(pr)
        for key, _, _ in SERIES:
            if key in r and key != "llama-cpu":
                points.setdefault(key, []).append((g, r[key][1]))
        table.append((g, r))
    # llama.cpp with every routed expert on the CPU does not depend on the budget: measured once, drawn at each
    cpu = next((r["llama-cpu"] for _, r in table if "llama-cpu" in r), None)
    if cpu:
        for g, r in table:
            r.setdefault("llama-cpu", cpu)
        points["llama-cpu"] = [(g, cpu[1]) for g, _ in table]
    os.makedirs(out, exist_ok=True)
    svg(points, os.path.join(out, "budget.svg"))
    lines = ["| budget | prompt | Nebula slots | Nebula zero-slot | llama.cpp in budget | llama.cpp exps=CPU | "
             "slots / llama.cpp | slots / zero-slot |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cell = lambda r, k: f"{r[k][1]:.2f}" if k in r else "—"
    for g, r in table:
        best = max((r[k][1] for k in ("llama-vram", "llama-cpu") if k in r), default=0)
        ratio = f"{r['slots'][1] / best:.2f}×" if best > 0 else "—"
        lines.append(f"| {g:g} GiB | {r['slots'][0]} | {cell(r, 'slots')} | {cell(r, 'zero-slot')} | "
                     f"{cell(r, 'llama-vram')} | {cell(r, 'llama-cpu')} | {ratio} | "
                     f"{r['slots'][1] / r['zero-slot'][1]:.2f}× |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "budget.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
