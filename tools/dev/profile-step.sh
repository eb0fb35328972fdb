#!/usr/bin/env bash
# profile-step.sh — on the GPU machine (repository root, .devrun/ carried):
# where a decode step's GPU time goes.  Makes a synthetic slice (LAYERS,
# default 4, q4_k_m) unless it exists, times `nebula generate --backend cuda`
# (all experts on the device) for each CUDA kernel set in KERNELS, then runs
# ncu over a window of decode-step kernels (--launch-skip SKIP, --launch-count
# COUNT) and writes the per-kernel summary to $OUT/ncu.csv.
set -u
OUT=${OUT:-/tmp/nebula-profile}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devrun/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=.devrun/build
M=${MODEL:-/tmp/nebula-profile-${LAYERS:-4}l.gguf}
t0=$(date +%s)
[ -f "$M" ] || "$B/bin/nebula-gen" "$M" --layers "${LAYERS:-4}" --ngram-base 65536 -q || exit 1
echo "model ready at $(($(date +%s) - t0)) s"
python3 -c "import random; r=random.Random(1); print(' '.join(str(r.randrange(1000, 200000)) for _ in range(${PROMPT:-64})))" >/tmp/nebula-profile-prompt.txt
for k in ${KERNELS:-fast}; do
    echo "kernels $k: $("$B/bin/nebula" generate --backend cuda --kernels "$k" -m "$M" --tokens-file /tmp/nebula-profile-prompt.txt \
        -n "${GEN:-64}" --greedy 2>&1 >/dev/null | tail -1)"
done
if command -v ncu >/dev/null 2>&1; then
    timeout "${NCU_S:-240}" ncu --clock-control none --metrics gpu__time_duration.sum \
        --launch-skip "${SKIP:-2000}" --launch-count "${COUNT:-700}" --print-summary per-kernel --csv \
        "$B/bin/nebula" generate --backend cuda --kernels fast -m "$M" --tokens-file /tmp/nebula-profile-prompt.txt -n 40 --greedy \
        >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
    echo "ncu: rc=$? at $(($(date +%s) - t0)) s"
    python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
if not rows: sys.exit("no ncu rows")
h = rows[0]; print(h[:12])
tot = collections.Counter(); cnt = collections.Counter()
for r in rows[1:]:
    d = dict(zip(h, r))
    name = d.get("Kernel Name", d.get("Function Name", "?"))[:60]
    try: avg = float(d.get("Average", d.get("Metric Value", "0")).replace(",", ""))
    except ValueError: continue
    n = int(d.get("Invocations", d.get("ID", "1")) or 1) if d.get("Invocations") else 1
    tot[name] += avg * n; cnt[name] += n
s = sum(tot.values())
for name, t in tot.most_common(25): print(f"{t/1e3:10.1f} us {100*t/s:5.1f}% x{cnt[name]:5d}  {name}")
print(f"total {s/1e3:.1f} us over the window")
PY
else
    echo "ncu: not installed"
fi
