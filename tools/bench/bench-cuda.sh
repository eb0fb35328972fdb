#!/usr/bin/env bash
# bench-cuda.sh [BUILD] [options] — the issue-5 engine benchmark (docs/BENCHMARKS.md).
#
# On a synthetic full-width model (nebula-gen, a slice of L of the 48 layers,
# published-like mix, calibrated router skew) it measures, in one run:
#   - the slot configuration: nebula-prepare --vram-slots with the expert-slot
#     bytes a 12 GiB card leaves, scaled by L/48; the budget it records (the
#     slice's dense weights as the device holds them + K/V for the run's context
#     + scratch + those slots) is the gpu-worker's --vram-budget;
#   - the zero-slot configuration: --vram-slots 0 (every routed expert on the
#     CPU, llama.cpp's -ot exps=CPU), its budget likewise;
# each configuration's budget against the gpu-worker's measured peak VRAM
# (nebulactl status): a peak over the budget fails the run;
# for each prompt length: prefill tok/s, time to first token, decode tok/s, VRAM
# hit rate, PCIe bytes and CPU-expert time per decode token (nebulactl stats
# deltas), routed experts computed per token (must be k × layers: exactness),
# and the roofline floor of each row from nebula-bench-bw's bandwidths
# measured in the same run (tools/bench/roofline.py).  The expert placement
# comes from a measured hotlist (nebula hotlist on a random-id campaign); the
# held-out routing curve is printed with the results.
# Prints a Markdown block (run-bench.sh appends it to docs/BENCHMARKS.md), or
# appends it itself with --append FILE.  Without a GPU, --backend cuda prints
# "SKIP: …" and exits 0; --backend cpu runs the same flow on the CPU backend
# (how the script is tested on a GPU-less machine).
set -u
usage() {
    cat <<'EOF'
usage: bench-cuda.sh [BUILD] [options]
  --backend B       cuda (default) or cpu
  --kernels K       the gpu-worker's CUDA matrix kernels, ref or fast (default fast; the
                    coordinator's --kernels)
  --cpu-kernels K   the cpu-moe-worker's expert kernels, ref or fast (default: fast beside cuda,
                    ref beside cpu; the coordinator's --cpu-kernels); both recorded with the results
  --layers N        layers of the synthetic slice (default 8)
  --mix NAME        quant mix (default q4_k_m; nebula-gen --help)
  --skew X          router skew (default: nebula-gen's calibrated one)
  --config FILE     shapes (default conf/qwen3.8-flash-next.config.json)
  --ngram-base B    n-gram table size (default 65536: PLE rows cost no decode bandwidth)
  --vram-gib G      card to emulate (default 12); --reserve-gib R of it is not for weights
                    (default 1: CUDA context, KV, GDN state, scratch of the full model); the full
                    model's dense + PLE table bytes are scaled by the slice's device/file ratio
                    (the device holds both, some types widened to F32)
  --slot-fraction F instead: slot budget = F × the slice's expert bytes (small test configs)
  --prompts LIST    prompt lengths, comma-separated (default 512,2048)
  --gen N           generated tokens per request (default 128)
  --reps N          repetitions (default 3)
  --campaign N      hotlist campaign prompts of 64 random ids (default 32; and as many held out)
  --threads N       CPU threads per worker (default: all cores)
  --coord-args "A"  extra nebula-coordinator arguments
  --models-dir DIR  where models, hotlists and prepared files are kept (default BUILD/bench-models)
  --append FILE     append the dated block to FILE (default: print only)
  --setup-only      make the model and its hotlists (kept in --models-dir), measure nothing:
                    splits a long first run where commands have a time limit
EOF
}
BUILD=build
case ${1:-} in -*|"") ;; *) BUILD=$1; shift ;; esac
backend=cuda kernels=fast cpu_kernels= layers=8 mix=q4_k_m skew= config=conf/qwen3.8-flash-next.config.json
ngram=65536 vram_gib=12 reserve_gib=1 slot_fraction= prompts=512,2048 gen=128 reps=3 campaign=32 threads=
coord_args= models= append= setup_only=0
while [ $# -gt 0 ]; do
    case $1 in
        --backend) backend=$2 ;; --kernels) kernels=$2 ;; --cpu-kernels) cpu_kernels=$2 ;; --layers) layers=$2 ;; --mix) mix=$2 ;; --skew) skew=$2 ;;
        --config) config=$2 ;; --ngram-base) ngram=$2 ;; --vram-gib) vram_gib=$2 ;; --reserve-gib) reserve_gib=$2 ;;
        --slot-fraction) slot_fraction=$2 ;; --prompts) prompts=$2 ;; --gen) gen=$2 ;; --reps) reps=$2 ;;
        --campaign) campaign=$2 ;; --threads) threads=$2 ;; --coord-args) coord_args=$2 ;;
        --models-dir) models=$2 ;; --append) append=$2 ;;
        -h|--help) usage; exit 0 ;;
        --setup-only) setup_only=1; shift; continue ;;
        *) echo "bench-cuda: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    [ $# -ge 2 ] || { echo "bench-cuda: $1 needs a value" >&2; exit 2; }
    shift 2
done
die() { echo "bench-cuda: $*" >&2; exit 1; }
isnum() { [[ $2 =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "bench-cuda: $1 wants a number, got '$2'" >&2; exit 2; }; }
for v in "--layers $layers" "--gen $gen" "--reps $reps" "--campaign $campaign" "--vram-gib $vram_gib" "--reserve-gib $reserve_gib"; do isnum $v; done
[ -z "$slot_fraction" ] || isnum --slot-fraction "$slot_fraction"
[[ $prompts =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bench-cuda: --prompts wants lengths like 512,2048" >&2; exit 2; }
[ "$gen" -ge 2 ] || { echo "bench-cuda: --gen must be at least 2 (decode is measured from the second token)" >&2; exit 2; }
case $backend in cuda|cpu) ;; *) echo "bench-cuda: --backend is cuda or cpu, got '$backend'" >&2; exit 2 ;; esac
[ -n "$cpu_kernels" ] || { cpu_kernels=ref; [ "$backend" = cuda ] && cpu_kernels=fast; }
for k in "--kernels $kernels" "--cpu-kernels $cpu_kernels"; do
    case ${k#* } in ref|fast) ;; *) echo "bench-cuda: ${k% *} is ref or fast, got '${k#* }'" >&2; exit 2 ;; esac
done
bin=$BUILD/bin
models=${models:-$BUILD/bench-models}
here=$(dirname "$0")
for b in nebula nebula-gen nebula-prepare nebula-coordinator nebula-gpu-worker nebulactl; do
    [ -x "$bin/$b" ] || die "$bin/$b is not built (make)"
done

# The gpu-worker takes its budget from placement.json (nebula-prepare's): no --vram-budget.
ctx=$(( $(echo "${prompts//,/ }" | tr ' ' '\n' | sort -n | tail -1) + gen + 16 )) # the longest request, K/V sized for it

# The machine: bandwidths first (and whether there is a GPU at all).
tmp=$(mktemp -d)
coord_pid=
cleanup() {
    if [ -n "$coord_pid" ]; then kill "$coord_pid" 2>/dev/null; wait "$coord_pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
if [ -x "$bin/nebula-bench-bw" ]; then
    bw_args=(--ram-mib 2048 ${threads:+--threads "$threads"})
    [ "$backend" = cpu ] && bw_args=(--ram-only --ram-mib 512 --reps 3 ${threads:+--threads "$threads"})
    "$bin/nebula-bench-bw" "${bw_args[@]}" >"$tmp/bw.json" 2>"$tmp/bw.err" || die "nebula-bench-bw: $(cat "$tmp/bw.err")"
    has_gpu=$(python3 -c "import json,sys; print(1 if json.load(open(sys.argv[1]))['gpu'] else 0)" "$tmp/bw.json")
else
    [ "$backend" = cpu ] || { echo "SKIP: no $bin/nebula-bench-bw (nvcc not found at build time): no CUDA on this machine"; exit 0; }
    has_gpu=0
    python3 - "$tmp/bw.json" <<'PY' || die "measuring RAM bandwidth failed"
# No nvcc here: RAM read bandwidth of one Python thread over 512 MiB (a lower bound, noted as such).
import json, sys, time
buf = bytearray(512 << 20)
best = 0
for _ in range(3):
    t = time.perf_counter(); bytes(buf); dt = time.perf_counter() - t
    best = max(best, len(buf) / dt / 1e9)
json.dump({"gpu": None, "ram": {"read_gbs": best, "threads": 1, "bytes": len(buf), "checksum": 0}, "reps": 3,
           "source": "no nebula-bench-bw: one Python thread copying 512 MiB, a lower bound"}, open(sys.argv[1], "w"))
PY
fi
if [ "$backend" = cuda ] && [ "$has_gpu" != 1 ]; then
    echo "SKIP: no CUDA device ($(cat "$tmp/bw.err" 2>/dev/null | head -1)); --backend cpu runs the same flow on the CPU backend"
    exit 0
fi
if [ "$backend" = cuda ]; then
    . "$(dirname "$0")/../../tests/lib/gpu.sh"
    gpu_exclusive bench-cuda.sh # the VRAM peaks it reports are device-wide
fi
# The workers' backend and kernels: the coordinator's flags, sent in their configure.
"$bin/nebula-coordinator" --help 2>&1 | grep -q -- "--cpu-kernels" || die "this build's nebula-coordinator cannot pick a backend"
engine_args=(--backend "$backend" --kernels "$kernels" --cpu-kernels "$cpu_kernels")

# The model (kept between runs: generating is minutes per layer on few cores).
mkdir -p "$models" || die "cannot create $models"
gen_args=(--config "$config" --layers "$layers" --mix "$mix" --ngram-base "$ngram" --no-mtp ${skew:+--skew "$skew"})
"$bin/nebula-gen" --dry-run "${gen_args[@]}" >"$tmp/slice.json" 2>"$tmp/e" || die "nebula-gen: $(cat "$tmp/e")"
slice() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$tmp/slice.json" "$1"; }
skew=$(slice skew) vocab=$(slice vocab)
cfgname=$(basename "$config" .json)
name=synthetic-${cfgname%.config}-${layers}l-$mix-skew$skew
model=$models/$name.gguf
if [ ! -s "$model" ]; then
    echo "bench-cuda: generating $model" >&2
    "$bin/nebula-gen" "$model" "${gen_args[@]}" ${threads:+--threads "$threads"} -q || die "nebula-gen failed"
fi

# Hotlist from a random-id campaign; a second campaign is held out for the curve.
campaign_file() { # $1 = seed, $2 = file
    python3 - "$1" "$2" "$campaign" "$vocab" <<'PY'
import random, sys
seed, path, n, vocab = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed)
with open(path, "w") as f:
    for _ in range(n):
        f.write(" ".join(str(r.randrange(vocab)) for _ in range(64)) + "\n")
PY
}
hot=$models/$name.hotlist-c$campaign.tsv held=$models/$name.heldout-c$campaign.tsv
for h in "$hot:1" "$held:2"; do
    f=${h%:*}
    [ -s "$f" ] && continue
    campaign_file "${h##*:}" "$tmp/campaign.txt" || die "making the campaign failed"
    "$bin/nebula" hotlist -m "$model" --ids --prompts "$tmp/campaign.txt" --out "$f" --backend "$backend" ${threads:+--threads "$threads"} 2>"$tmp/e" \
        || die "nebula hotlist: $(tail -2 "$tmp/e")"
done
python3 "$here/hotlist-curve.py" "$hot" "$held" --json >"$tmp/curve.json" || die "hotlist-curve.py failed"
if [ "$setup_only" = 1 ]; then
    echo "bench-cuda: $model and its hotlists are ready; routing: $(python3 "$here/hotlist-curve.py" "$hot" "$held" --fractions 0.167 | tail -1)" >&2
    exit 0
fi

# Budgets.
"$bin/nebula-gen" --dry-run --config "$config" --mix "$mix" --no-mtp --ngram-base "$ngram" >"$tmp/full.json" 2>"$tmp/e" \
    || die "nebula-gen --dry-run: $(cat "$tmp/e")"
prep=$models/$name.prepared
prepare() { # $1 = label, then nebula-prepare's VRAM options
    local label=$1
    shift
    "$bin/nebula-prepare" "$model" "$prep" "$@" --ctx "$ctx" --ram-budget all --hotlist "$hot" -q 2>"$tmp/e" \
        || die "nebula-prepare ($label): $(tail -3 "$tmp/e")"
}
prepare zero-slot --vram-slots 0 # the slice's dense bytes on the device, from its placement
python3 - "$tmp/slice.json" "$tmp/full.json" "$vram_gib" "$reserve_gib" "${slot_fraction:-}" "$prep/placement.json" >"$tmp/budget" <<'PY' || exit 1
import json, sys
s, f = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
gib, reserve, frac = float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
pj = json.load(open(sys.argv[6]))
pm, ctx = pj["model"], pj["request"]["vram_ctx"]
# The device holds the dense tensors and the PLE table (some types widened to F32): the slice's
# device bytes over its file bytes scale the full model's.
widen = pm["vram_dense_bytes"] / (s["dense_bytes"] + s["ple_table_bytes"])
if frac:
    slots = float(frac) * s["expert_bytes"]
    note = f"slots {float(frac):g} of the slice's expert bytes"
else:
    full_dense = (f["dense_bytes"] + f["ple_table_bytes"]) * widen
    full_slots = (gib - reserve) * 2**30 - full_dense
    if full_slots <= 0:
        sys.exit(f"bench-cuda: a {gib:g} GiB card holds no expert slot next to the full model's {full_dense / 2**30:.2f} GiB of dense weights")
    slots = full_slots * s["layers"] / f["layers"]
    note = (f"slots: a {gib:g} GiB card less {reserve:g} GiB reserve less the full model's {full_dense / 2**30:.2f} GiB dense "
            f"on the device leaves {full_slots / 2**30:.2f} GiB, × {s['layers']}/{f['layers']}")
note += (f"; + the slice's dense {pm['vram_dense_bytes'] / 2**30:.2f} GiB on the device + K/V for {ctx} positions and scratch "
         f"{pm['vram_reserve_bytes'] / 2**30:.2f} GiB")
print(int(slots))
print(note)
PY
slot_bytes=$(sed -n 1p "$tmp/budget") budget_note=$(sed -n 2p "$tmp/budget")

# One configuration: prepare (re-placing the same folder), start, measure every prompt length.
records=$tmp/records.jsonl
: >"$records"
stats() { "$bin/nebulactl" --runtime "$tmp/run" --json stats >"$1" || die "nebulactl stats failed"; }
measure() { # $1 = label, $2 = bytes of expert slots
    prepare "$1" --vram-slots "$2"
    cp "$prep/placement.json" "$tmp/placement-$1.json"
    rm -rf "$tmp/run"
    # shellcheck disable=SC2086 # coord_args is a list of words
    "$bin/nebula-coordinator" --model "$model" --prepared "$prep" --runtime "$tmp/run" --http off ${threads:+--threads "$threads"} \
        "${engine_args[@]}" $coord_args 2>"$tmp/coord-$1.log" &
    coord_pid=$!
    ready() {
        "$bin/nebulactl" --runtime "$tmp/run" --json status 2>/dev/null |
            python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(not all(w['state'] == 'ready' for w in d['workers']))" 2>/dev/null
    }
    for _ in $(seq 1500); do # up to 5 min: the RAM arena and the slots load first
        ready && break
        kill -0 "$coord_pid" 2>/dev/null || die "$1: the coordinator exited: $(tail -5 "$tmp/coord-$1.log")"
        sleep 0.2
    done
    ready || die "$1: the workers were not ready after 5 min: $(tail -5 "$tmp/coord-$1.log")"
    python3 -c "import random; r=random.Random(8); print(' '.join(str(r.randrange($vocab)) for _ in range(8)))" >"$tmp/prompt-short.txt"
    run() { # $1 = prompt file, $2 = tokens to generate, $3 = stderr file
        "$bin/nebula" generate --server "$tmp/run" --tokens-file "$1" --greedy -n "$2" >/dev/null 2>"$3" || die "$label: $(tail -2 "$3")"
    }
    local label=$1
    for p in ${prompts//,/ }; do
        python3 -c "import random,sys; r=random.Random(int(sys.argv[1])); print(' '.join(str(r.randrange(int(sys.argv[2]))) for _ in range(int(sys.argv[1]))))" \
            "$p" "$vocab" >"$tmp/prompt-$p.txt"
        for rep in $(seq "$reps"); do
            stats "$tmp/a0.json"
            run "$tmp/prompt-$p.txt" 1 "$tmp/a.err"
            stats "$tmp/a1.json"
            run "$tmp/prompt-$p.txt" "$gen" "$tmp/b.err"
            stats "$tmp/b1.json"
            run "$tmp/prompt-short.txt" 1 "$tmp/d.err"
            stats "$tmp/d1.json"
            run "$tmp/prompt-short.txt" "$gen" "$tmp/e.err"
            stats "$tmp/e1.json"
            python3 "$here/cuda_report.py" record "$1" "$p" "$gen" "$tmp/a.err" "$tmp/a0.json" "$tmp/a1.json" \
                "$tmp/b.err" "$tmp/b1.json" "$tmp/b1.json" "$tmp/d1.json" "$tmp/e1.json" >>"$records" || exit 1
            echo "bench-cuda: $1 prompt $p rep $rep: $(tail -1 "$records")" >&2
        done
    done
    "$bin/nebulactl" --runtime "$tmp/run" --json status >"$tmp/status-$1.json" 2>/dev/null
    "$bin/nebulactl" --runtime "$tmp/run" shutdown >/dev/null 2>&1
    wait "$coord_pid" 2>/dev/null
    coord_pid=
    # the gpu-worker's last word on VRAM: its measured peak beside its own blocks by the plan's parts
    grep -h "VRAM" "$tmp/run/gpu-worker.log" 2>/dev/null | tail -2 | sed "s/^/bench-cuda: $1: /" >&2
}
measure slots "$slot_bytes"
measure zero-slot 0
budget=$(python3 -c "import json,sys; print(int(json.load(open(sys.argv[1]))['request']['vram_budget']))" "$tmp/placement-slots.json")

python3 - "$tmp/slice.json" "$tmp/curve.json" "$backend" "$gen" "$reps" "$budget" "$budget_note" "$kernels" "$cpu_kernels" >"$tmp/meta.json" <<'PY'
import json, os, sys
s, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cpu_k = "CPU experts " + sys.argv[9]
s.update(backend=sys.argv[3] + (" (" + cpu_k + ")" if sys.argv[3] == "cpu" else " (kernels " + sys.argv[8] + "; " + cpu_k + ")"), gen=int(sys.argv[4]), reps=int(sys.argv[5]), slots_budget_bytes=int(sys.argv[6]),
         budget_note=sys.argv[7], curve=c["curve"],
         curve_note=f"hotlist of one random-id campaign, hit rate measured on a second one; {c['selections']} routed selections",
         dense_read_bytes=s["dense_bytes"] - s["token_embd_bytes"] + s["token_embd_row_bytes"])
print(json.dumps(s))
PY
python3 "$here/cuda_report.py" report "$tmp/meta.json" "$records" "$tmp/bw.json" >"$tmp/report.md"
status=$?
for c in slots zero-slot; do # planned (the budget the gpu-worker enforced) against its measured peak
    python3 "$here/cuda_report.py" vram "$c" "$tmp/placement-$c.json" "$tmp/status-$c.json" >>"$tmp/report.md" || status=1
done
cat "$tmp/report.md"
if [ -n "$append" ]; then # a failed exactness check is recorded too (the report says so)
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
    {
        printf '\n## bench-cuda.sh — %s\n\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
        printf -- '- commit: %s\n- machine: %s, %s cores%s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
            "$cpu" "$(nproc)" "$(python3 -c "import json,sys; g=json.load(open(sys.argv[1]))['gpu']; print(', ' + g['name'] if g else '')" "$tmp/bw.json")"
        printf -- '- command: `bash tools/bench/bench-cuda.sh %s --backend %s --layers %s --mix %s --prompts %s --gen %s --reps %s`\n\n' \
            "$BUILD" "$backend" "$layers" "$mix" "$prompts" "$gen" "$reps"
        cat "$tmp/report.md"
    } >>"$append"
    echo "bench-cuda: appended to $append" >&2
fi
exit $status
