#!/usr/bin/env bash
# adaptive-bench.sh — issue 15 item 3's measure: the adaptive slot cache on
# vs off on the topic-switching campaign, in one run.
#
# A model with topic drift (nebula-gen --topics T, issue 15 item 5; kept in
# --models-dir), a campaign of --segments prompts of --length ids, each of
# one topic, the topic changing every prompt (topic-campaign.py, seed 1), and
# a placement of --slots-per-layer experts a layer in VRAM profiled on another
# campaign of the same kind (seed 2: a static profile that has not seen the
# measured prompts), the RAM arena holding every expert (nebula-prepare
# --arena-vram on).  The pipeline runs it twice, --slots static and --slots
# adaptive (prefill in pieces of --chunk ≤ 16 rows, so the policy sees the
# prompts as the decode path; --gen tokens decoded per prompt): decode and
# prefill tok/s, the VRAM hit rate of every eval, the slot cache's (decode
# sized evals: now and what the placement's slots would have had), swaps,
# bytes copied, evals that waited for a copy (0 by design) and whether the
# output ids were the same.  With the routes of the measured campaign
# (`nebula hotlist --routes`) tools/bench/cache-sim.py's prediction of both hit
# rates is printed beside them.  A Markdown block on stdout.
set -u
usage() {
    cat <<'EOF'
usage: adaptive-bench.sh [BUILD] [options]
  --backend B          cuda (default) or cpu
  --layers N           layers of the synthetic slice (default 8)
  --mix NAME           quant mix (default q4_k_m)
  --topics T           topics (default 16); --skew X router skew (default 0.1: issue 15 item 5's calibration)
  --config FILE        shapes (default conf/qwen3.8-flash-next.config.json)
  --ngram-base B       n-gram table size (default 65536)
  --slots-per-layer N  experts a layer in VRAM (default 89: the 12 GiB budget's share of 512 on the full model)
  --segments S         prompts of the campaign (default 12); --length L ids each (default 128)
  --gen N              tokens decoded per prompt (default 32)
  --chunk C            prefill rows an eval, at most 16 (default 16)
  --threads N          CPU threads per worker (default: all cores)
  --models-dir DIR     where the model and its prepared files are kept (default BUILD/bench-models)
EOF
}
BUILD=build
case ${1:-} in -*|"") ;; *) BUILD=$1; shift ;; esac
backend=cuda layers=8 mix=q4_k_m topics=16 skew=0.1 config=conf/qwen3.8-flash-next.config.json ngram=65536 per_layer=89
segments=12 length=128 gen=32 chunk=16 threads= models=
while [ $# -gt 0 ]; do
    case $1 in
        --backend) backend=$2 ;; --layers) layers=$2 ;; --mix) mix=$2 ;; --topics) topics=$2 ;; --skew) skew=$2 ;;
        --config) config=$2 ;; --ngram-base) ngram=$2 ;; --slots-per-layer) per_layer=$2 ;; --segments) segments=$2 ;;
        --length) length=$2 ;; --gen) gen=$2 ;; --chunk) chunk=$2 ;; --threads) threads=$2 ;; --models-dir) models=$2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "adaptive-bench: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    [ $# -ge 2 ] || { echo "adaptive-bench: $1 needs a value" >&2; exit 2; }
    shift 2
done
die() { echo "adaptive-bench: $*" >&2; exit 1; }
for v in "$layers" "$topics" "$per_layer" "$segments" "$length" "$gen" "$chunk"; do [[ $v =~ ^[0-9]+$ ]] || die "'$v' is not a count"; done
[ "$chunk" -ge 1 ] && [ "$chunk" -le 16 ] || die "--chunk is 1 … 16 (larger prefill pieces are not decode-sized: the policy does not see them)"
case $backend in cuda|cpu) ;; *) die "--backend is cuda or cpu" ;; esac
bin=$BUILD/bin here=$(dirname "$0")
models=${models:-$BUILD/bench-models}
for b in nebula nebula-gen nebula-prepare nebula-coordinator nebula-gpu-worker nebula-cpu-moe-worker nebulactl; do
    [ -x "$bin/$b" ] || die "$bin/$b is not built (make)"
done
tmp=$(mktemp -d) coord_pid=
cleanup() {
    if [ -n "$coord_pid" ]; then kill "$coord_pid" 2>/dev/null; wait "$coord_pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$models" || die "cannot create $models"

gen_args=(--config "$config" --layers "$layers" --mix "$mix" --ngram-base "$ngram" --no-mtp --skew "$skew" --topics "$topics")
"$bin/nebula-gen" --dry-run "${gen_args[@]}" >"$tmp/slice.json" 2>"$tmp/e" || die "nebula-gen: $(cat "$tmp/e")"
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab'])" "$tmp/slice.json")
name=synthetic-$(basename "$config" .json)-${layers}l-$mix-skew$skew-topics$topics
model=$models/$name.gguf
if [ ! -s "$model" ]; then
    echo "adaptive-bench: generating $model" >&2
    "$bin/nebula-gen" "$model" "${gen_args[@]}" ${threads:+--threads "$threads"} -q || die "nebula-gen failed"
fi
campaign() { python3 "$here/topic-campaign.py" --vocab "$vocab" --topics "$topics" --segments "$segments" --length "$length" --seed "$1"; }
campaign 1 >"$tmp/camp.txt" && campaign 2 >"$tmp/profile.txt" || die "topic-campaign.py failed"
hot=$tmp/profile.tsv
"$bin/nebula" hotlist -m "$model" --ids --prompts "$tmp/profile.txt" --out "$hot" --routes "$tmp/profile.routes" --backend "$backend" \
    ${threads:+--threads "$threads"} 2>"$tmp/e" || die "nebula hotlist (profile): $(tail -2 "$tmp/e")"
"$bin/nebula" hotlist -m "$model" --ids --prompts "$tmp/camp.txt" --out "$tmp/camp.tsv" --routes "$tmp/camp.routes" \
    --backend "$backend" ${threads:+--threads "$threads"} 2>"$tmp/e" || die "nebula hotlist --routes: $(tail -2 "$tmp/e")"

# The placement: per_layer experts a layer in VRAM (their bytes from a first placement's blob sizes), the arena holding all.
prep=$models/$name.prepared-adaptive
ctx=$((length + gen + 16))
prepare() { "$bin/nebula-prepare" "$model" "$prep" --hotlist "$hot" --ram-budget all --arena-vram on --ctx "$ctx" -q "$@" 2>"$tmp/e" \
    || die "nebula-prepare: $(tail -3 "$tmp/e")"; }
prepare --vram-slots 0
slots=$(python3 -c "import json,sys; print(sum(int(sys.argv[2]) * l['blob_bytes'] for l in json.load(open(sys.argv[1]))['layers']))" \
    "$prep/placement.json" "$per_layer")
prepare --vram-slots "$slots"

measure() { # $1 = static | adaptive: one line of JSON into $tmp/$1.json, the ids into $tmp/$1.out
    rm -rf "$tmp/run"
    "$bin/nebula-coordinator" --backend "$backend" --model "$model" --prepared "$prep" --runtime "$tmp/run" --http off \
        --chunk "$chunk" --cache off --slots "$1" ${threads:+--threads "$threads"} 2>"$tmp/coord-$1.log" &
    coord_pid=$!
    local ready=0
    for _ in $(seq 3000); do # the arena and the slots load first
        "$bin/nebulactl" --runtime "$tmp/run" --json status 2>/dev/null \
            | python3 -c "import json,sys; sys.exit(0 if all(w['state'] == 'ready' for w in json.load(sys.stdin)['workers']) else 1)" 2>/dev/null \
            && ready=1 && break
        sleep 0.1
    done
    [ "$ready" = 1 ] || die "$1: workers not ready: $(tail -3 "$tmp/coord-$1.log")"
    : >"$tmp/$1.out" && : >"$tmp/$1.err"
    while read -r line; do
        tr ' ' '\n' <<<"$line" >"$tmp/seg.txt"
        "$bin/nebula" generate --server "$tmp/run" --tokens-file "$tmp/seg.txt" --greedy -n "$gen" --print-ids >>"$tmp/$1.out" \
            2>>"$tmp/$1.err" || die "$1: generate: $(tail -2 "$tmp/$1.err")"
    done <"$tmp/camp.txt"
    "$bin/nebulactl" --runtime "$tmp/run" --json status >"$tmp/$1.status" || die "$1: status"
    "$bin/nebulactl" --runtime "$tmp/run" shutdown >/dev/null
    wait "$coord_pid"
    coord_pid=
}
measure static
measure adaptive
python3 "$here/cache-sim.py" "$tmp/camp.routes" --slots "$per_layer" --profile "$tmp/profile.routes" --start static --json \
    >"$tmp/sim.json" || die "cache-sim.py failed"
cmp -s "$tmp/static.out" "$tmp/adaptive.out" && same=yes || same=NO
python3 - "$tmp" "$same" <<PY
import json, re, sys
tmp, same = sys.argv[1], sys.argv[2]
print("## Adaptive slot cache on the topic-switching campaign (issue 15 item 3)\n")
print("- model: $name ($layers layers, $mix, $topics topics, skew $skew); $per_layer experts a layer in VRAM (profiled on a")
print("  second campaign), the arena holding every expert; campaign: $segments prompts of $length ids, one topic each;")
print("  prefill in pieces of $chunk rows, $gen tokens decoded per prompt; backend $backend; slots.* at their defaults.")
print("- output ids the same with adaptive slots as with static ones: **%s**\n" % same)
print("| slots | decode tok/s | prefill tok/s | VRAM hit rate (every eval) | slot hit rate (decode-sized) | the placement's | swaps | MiB copied | evals waited |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for conf in ("static", "adaptive"):
    g = p = gt = pt = 0.0
    for line in open(f"{tmp}/{conf}.err"):
        m = re.search(r"prompt (\d+) tokens in ([0-9.]+) s .*generated (\d+) in ([0-9.]+) s", line)
        if m: p, pt, g, gt = p + int(m[1]), pt + float(m[2]), g + int(m[3]), gt + float(m[4])
    st = json.load(open(f"{tmp}/{conf}.status"))
    s = st["slots"]
    dyn = conf == "adaptive"
    print(f"| {conf} | {g / gt if gt else 0:.1f} | {p / pt if pt else 0:.1f} | {100 * st['vram_hit_rate']:.1f} % | "
          + (f"{100 * s['hit_rate']:.1f} % | {100 * s['static_hit_rate']:.1f} % | {s['swaps']:.0f} | {s['bytes'] / 2**20:.1f} | {s['waited_steps']:.0f} |"
             if dyn else "— | — | 0 | 0 | 0 |"))
sim = json.load(open(f"{tmp}/sim.json"))
if sim.get("hit_rate"):
    h = sim["hit_rate"]
    print(f"\ncache-sim.py on the campaign's routes (the same rule, a swap counting from the next token): static "
          f"{100 * h['static']['mean']:.1f} %, adaptive {100 * h['adaptive']['mean']:.1f} %, ideal {100 * h['ideal']['mean']:.1f} %")
PY
[ "$same" = yes ]
