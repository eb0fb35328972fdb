#!/usr/bin/env bash
# The CUDA backend against the CPU reference on this machine's GPU
# (tests/cuda/check_backend.c): every fixture converted to f32 and to the
# published-like quant mix, then a synthetic 4-layer model at the released
# widths (GDN, QSA, PLE and MTP layers; 64 experts to keep the CPU side
# short) with GREEDY tokens of greedy generation under several expert
# placements, the expert re-layout, the VRAM tier and budget — each model
# once per matrix kernel set in KERNELS ("ref fast": the bit-faithful kernels
# and matvec.cu's fp32 ones, which must pass the same 1e-3 tolerance and
# greedy identity), with the verify-window checks (VERIFY tokens) on the
# fixtures and the synthetic models.  Exits 1 with a FAIL line where there is no GPU
# (tests/lib/gpu.sh): never green without having run.  Binaries from
# `make all cuda-check` (BIN, CHECK to use others); the models are written
# to WORK.  GREEDY (default 128) tokens after a PROMPT (default 64) tokens on
# the synthetic model keep each synthetic model's run near 3 minutes on an
# H200 (the CPU reference side, ~5 tok/s, is most of it).
# FIXTURES (default: all three) names the fixtures; empty checks only the
# synthetic model.  LOWBIT: the stored quant types checked one at a time
# (below).  SWEEP names the sweep fixtures (default: all).
# GDN key and value heads of different sizes beyond the sweep's: synthetic
# models of tiny-a's shapes with the GDN head sizes DK:DV of each
# GDN_DIMS entry (default "16:24 24:16 16:40 160:24": values wider, narrower,
# over two 32-column blocks with a partial one, and keys past the 128 that
# the register decode kernel holds, so the plain one runs), f32 and mix, with
# tiny-a's tokens; and the released-width synthetic model again with
# linear_value_head_dim WIDE_DV (default 192; empty skips it).  SYNTHETIC=0
# leaves out both released-width models (a run split over device calls);
# WIDE (default "mix dv") names which of the two run.
set -u
. "$(dirname "$0")/../lib/gpu.sh"
BIN=${BIN:-build/bin}
CHECK=${CHECK:-build/tests/cuda/check_backend}
gpu_check_begin run-backend-on-gpu.sh "make all cuda-check: needs nvcc and libcudart_static.a" "$BIN/nebula-convert" "$CHECK"
WORK=${WORK:-build/cuda-check}
GREEDY=${GREEDY:-128}
PROMPT=${PROMPT:-64} # prompt tokens on the synthetic model (the CPU reference prefills at ~15 tok/s)
KERNELS=${KERNELS:-ref fast}
FIXTURE_GREEDY=${FIXTURE_GREEDY:-64}
VERIFY=${VERIFY:-32} # tokens of the verify-window checks (check_verify.c) on the fixtures and the synthetic models; 0: none
FIXTURES=${FIXTURES-tiny-a tiny-b tiny-b-vl} # set empty to check only the synthetic model
GDN_DIMS=${GDN_DIMS-16:24 24:16 16:40 160:24}
WIDE_DV=${WIDE_DV-192}
mkdir -p "$WORK"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fail=0
for fx in $FIXTURES; do
    for ty in f32 mix; do
        "$BIN/nebula-convert" "tests/fixtures/$fx" "$WORK/$fx-$ty.gguf" --type "$ty" -q || { fail=1; continue; }
        for k in $KERNELS; do
            "$CHECK" "$WORK/$fx-$ty.gguf" "tests/fixtures/$fx/tokens.txt" --greedy "$FIXTURE_GREEDY" --remote --kernels "$k" \
                --verify "$VERIFY" \
                || { echo "FAIL: $fx-$ty (kernels $k)"; fail=1; }
        done
    done
done
# The sweep (tests/fixtures/sweep: random legal configurations and issue 11's
# cases, docs/PARITY.md): each in f32 under every kernel set, with the remote
# placements.  SWEEP (default: every fixture there) names them; empty skips.
SWEEP=${SWEEP-$(ls tests/fixtures/sweep 2>/dev/null)}
for fx in $SWEEP; do
    "$BIN/nebula-convert" "tests/fixtures/sweep/$fx" "$WORK/$fx-f32.gguf" --type f32 -q || { echo "FAIL: convert $fx"; fail=1; continue; }
    for k in $KERNELS; do
        "$CHECK" "$WORK/$fx-f32.gguf" "tests/fixtures/sweep/$fx/tokens.txt" --greedy "$FIXTURE_GREEDY" --remote --kernels "$k" \
            || { echo "FAIL: sweep $fx (kernels $k)"; fail=1; }
    done
done
# A config.json with some fields replaced: SRC OUT key=value...
edit_config() {
    python3 - "$@" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = c.get("text_config") or c
for kv in sys.argv[3:]:
    k, v = kv.split("=")
    t[k] = int(v)
json.dump(c, open(sys.argv[2], "w"))
PY
}
for dims in $GDN_DIMS; do
    dk=${dims%%:*} dv=${dims##*:}
    edit_config tests/fixtures/tiny-a/config.json "$WORK/tiny-a-dk$dk-dv$dv.json" linear_key_head_dim="$dk" \
        linear_value_head_dim="$dv" || { fail=1; continue; }
    for ty in f32 mix; do
        gg="$WORK/tiny-a-dk$dk-dv$dv-synthetic-$ty.gguf"
        "$BIN/nebula-convert" --synthetic "$WORK/tiny-a-dk$dk-dv$dv.json" "$gg" --type "$ty" -q || { fail=1; continue; }
        for k in $KERNELS; do
            "$CHECK" "$gg" tests/fixtures/tiny-a/tokens.txt --greedy "$FIXTURE_GREEDY" --remote --kernels "$k" \
                || { echo "FAIL: tiny-a dk $dk dv $dv $ty (kernels $k)"; fail=1; }
        done
    done
done
# Every stored quant type on the device (cuda_types.h): tiny-a's layer
# pattern at widths of 256 (so the 256-value block types fit the experts,
# the attention and GDN projections and the n-gram table instead of falling
# back to a 32-value type), converted with one type for every matrix (the
# mixes named after the type, or TYPE-all where a published mix took the
# name: nebula-convert --help), each checked like the
# fixtures.  LOWBIT names the types (empty skips them).
LOWBIT=${LOWBIT-q4_1 q2_K q3_K iq2_xxs-all iq2_xs-all iq2_s iq3_xxs iq3_s-all iq1_s iq1_m tq1_0 tq2_0 mxfp4 nvfp4 q1_0 q2_0-all f16 iq4_xs}
if [ -n "$LOWBIT" ]; then
    edit_config tests/fixtures/tiny-a/config.json "$WORK/tiny-a-256.json" hidden_size=256 head_dim=64 \
        moe_intermediate_size=256 shared_expert_intermediate_size=256 ple_embed_dim=256 linear_value_head_dim=64 \
        linear_num_value_heads=4 linear_key_head_dim=64 linear_num_key_heads=2 || fail=1
fi
for ty in $LOWBIT; do
    gg="$WORK/tiny-a-256-$ty.gguf"
    "$BIN/nebula-convert" --synthetic "$WORK/tiny-a-256.json" "$gg" --type "$ty" -q || { echo "FAIL: convert $ty"; fail=1; continue; }
    for k in $KERNELS; do
        "$CHECK" "$gg" tests/fixtures/tiny-a/tokens.txt --greedy "$FIXTURE_GREEDY" --remote --kernels "$k" \
            || { echo "FAIL: tiny-a-256 $ty (kernels $k)"; fail=1; }
    done
done
# The published mixes (nebula-gen --help) as users get them: a split set (the
# n-gram table alone in shard 2) and the MTP block in its own file, opened
# from shard 1 with --mtp; CPU and CUDA must agree (logits, routes, greedy
# tokens, the MTP block's outputs).  MIXES names them (empty skips them).
MIXES=${MIXES-ud-iq1_s iq2_xxs iq2_xs q2_0 iq3_s ds4-iq2_xxs ud-q4_k_xl q4_k_m}
if [ -n "$MIXES" ] && [ ! -f "$WORK/tiny-a-256-mtp.json" ]; then
    edit_config tests/fixtures/tiny-a/config.json "$WORK/tiny-a-256-mtp.json" hidden_size=256 head_dim=64 \
        moe_intermediate_size=256 shared_expert_intermediate_size=256 ple_embed_dim=256 linear_value_head_dim=64 \
        linear_num_value_heads=4 linear_key_head_dim=64 linear_num_key_heads=2 mtp_num_hidden_layers=1 || fail=1
fi
for mix in $MIXES; do
    d="$WORK/mix-$mix"
    mkdir -p "$d"
    "$BIN/nebula-convert" --synthetic "$WORK/tiny-a-256-mtp.json" "$d/m.gguf" --type "$mix" --split --mtp-out "$d/mtp.gguf" -q ||
        { echo "FAIL: convert $mix (split, separate MTP)"; fail=1; continue; }
    for k in $KERNELS; do
        "$CHECK" "$d/m-00001-of-00002.gguf" tests/fixtures/tiny-a/tokens.txt --mtp "$d/mtp.gguf" --greedy "$FIXTURE_GREEDY" \
            --remote --kernels "$k" || { echo "FAIL: mix $mix (split set + MTP file, kernels $k)"; fail=1; }
    done
done
edit_config conf/qwen3.8-flash-next.config.json "$WORK/cfg64.json" num_experts=64
WIDE=${WIDE-mix dv} # which released-width models: mix (synthetic-4l-64e-mix), dv (its WIDE_DV twin)
wide=
case " $WIDE " in *" mix "*) wide="synthetic-4l-64e-mix" ;; esac
case " $WIDE " in *" dv "*) ;; *) WIDE_DV= ;; esac
[ "${SYNTHETIC:-1}" = 0 ] && wide= WIDE_DV=
[ -n "$WIDE_DV" ] && edit_config "$WORK/cfg64.json" "$WORK/cfg64-dv$WIDE_DV.json" linear_value_head_dim="$WIDE_DV" &&
    wide="$wide synthetic-4l-64e-dv$WIDE_DV-mix"
for name in $wide; do
    cfg="$WORK/cfg64.json"
    [ "$name" = "synthetic-4l-64e-mix" ] || cfg="$WORK/cfg64-dv$WIDE_DV.json"
    t0=$(date +%s)
    "$BIN/nebula-convert" --synthetic "$cfg" "$WORK/$name.gguf" --layers 4 --ngram-base 65536 --type mix -q || { fail=1; continue; }
    echo "$name converted in $(($(date +%s) - t0)) s"
    for k in $KERNELS; do
        t0=$(date +%s)
        "$CHECK" "$WORK/$name.gguf" tests/fixtures/tiny-a/tokens.txt --greedy "$GREEDY" --prompt "$PROMPT" --remote \
            --kernels "$k" --verify "$VERIFY" || { echo "FAIL: $name (kernels $k)"; fail=1; }
        echo "$name checked with kernels $k in $(($(date +%s) - t0)) s"
    done
done
echo "run-backend-on-gpu: $(($(date +%s) - start)) s in all"
if [ $fail -ne 0 ]; then echo "FAIL: some CUDA backend checks failed"; exit 1; fi
echo "OK: every CUDA backend check passed"
