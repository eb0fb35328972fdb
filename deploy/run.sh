#!/usr/bin/env bash
# run.sh BUILD [MODEL [MTP]] — what `make run` does after installing and building:
# picks the model, prepares it when that pays, and starts Nebula with
# deploy/start.sh (the chat page on http://127.0.0.1:8090/).
#
# Without MODEL it serves the bundled demo model: tests/fixtures/tiny-a
# converted to GGUF, a tiny model with random weights — its answers are
# noise; it exists so that everything can be tried without downloading
# 110 GB.  `make run MODEL=/path/to/model.gguf` serves a real
# Qwen3.8-Flash-Next GGUF: a model with routed experts larger than 4 GiB is
# first split by nebula-prepare into PREPARED (default
# ~/.cache/nebula/prepared/<name>/) with its experts placed on VRAM, RAM and
# SSD by the machine's sizes (VRAM_BUDGET, RAM_BUDGET override them); a
# directory already prepared for this file is used as it is.  `make run
# MODEL=… MTP=mtp.gguf` adds a separate MTP (draft) GGUF, as Unsloth ships
# MTP/mtp-*.gguf: it is prepared and served with the model.
#
# Environment (make passes its variables of the same names): PORT, API_PORT,
# NEBULA_STATE_DIR, PREPARED, VRAM_BUDGET, RAM_BUDGET, THREADS, BACKEND (auto, cuda or cpu).
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-}
MTP=${3:-}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf 'nebula: %s\n' "$*"; }
export NEBULA_BIN=$PWD/$BUILD/bin
case $BUILD in /*) NEBULA_BIN=$BUILD/bin ;; esac
# No MODEL: nebula.conf's model.path, if it names one (else the demo model).
[ -n "$MODEL" ] || MODEL=$("$NEBULA_BIN/nebula" config get model.path 2>/dev/null || true)
[ -n "$MTP" ] || MTP=$("$NEBULA_BIN/nebula" config get model.mtp 2>/dev/null || true)

# What make passes overrides nebula.conf, which start.sh reads for the rest.
args=()
[ -n "${PORT:-}" ] && args+=(--port "$PORT")
[ -n "${API_PORT:-}" ] && args+=(--api-port "$API_PORT")
[ -n "${THREADS:-}" ] && args+=(--threads "$THREADS")
[ -n "${BACKEND:-}" ] && args+=(--backend "$BACKEND")

if [ -z "$MODEL" ]; then
    say "no MODEL given: the bundled demo model (make run MODEL=path.gguf serves a real one)"
    args+=(--demo)
else
    [ -r "$MODEL" ] || { say "cannot read the model file '$MODEL'"; exit 1; }
    "$NEBULA_BIN/nebula-gguf" info --no-tensors "$MODEL" >/dev/null ||
        { say "'$MODEL' is not a GGUF file Nebula can read (nebula-gguf info says why above)"; exit 1; }
    say "model: $MODEL${MTP:+ (MTP: $MTP)}"
    args+=(--model "$MODEL")
    if [ -n "$MTP" ]; then
        [ -r "$MTP" ] || { say "cannot read the MTP file '$MTP'"; exit 1; }
        args+=(--mtp "$MTP")
    fi
    experts=$("$NEBULA_BIN/nebula-gguf" info --key qwen4exp.expert_count "$MODEL" 2>/dev/null || echo 0)
    bytes=$(stat -L -c %s "$MODEL")
    # A split model (NAME-00001-of-00005.gguf): all its shards count.
    if [[ $MODEL =~ ^(.*)-[0-9]{5}-of-([0-9]{5})\.gguf$ ]]; then
        bytes=0
        for f in "${BASH_REMATCH[1]}"-[0-9][0-9][0-9][0-9][0-9]-of-"${BASH_REMATCH[2]}".gguf; do
            [ -e "$f" ] && bytes=$((bytes + $(stat -L -c %s "$f")))
        done
    fi
    prep=${PREPARED:-}
    if [ -z "$prep" ] && [ "${experts:-0}" -gt 0 ] && [ "$bytes" -gt $((4 << 30)) ]; then
        name=$(basename "$MODEL" .gguf)
        name=${name%-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]}
        prep=${XDG_CACHE_HOME:-$HOME/.cache}/nebula/prepared/$name
    fi
    if [ -n "$prep" ]; then
        # placement.json is the last part nebula-prepare writes: newer than
        # the model means this directory was finished for it (re-verifying
        # 100 GB on every start would take minutes; nebula-prepare does it
        # when run by hand).
        if [ ! -f "$prep/placement.json" ] || [ "$MODEL" -nt "$prep/placement.json" ] ||
            { [ -n "$MTP" ] && [ "$MTP" -nt "$prep/placement.json" ]; }; then
            gib() { echo "$(($1 >> 30))G"; }
            # nebula.conf's engine.vram_budget / engine.ram_budget (0: measured here) unless given.
            conf_bytes() { local v; v=$("$NEBULA_BIN/nebula" config get "$1" 2>/dev/null) && [ "$v" != 0 ] && echo "$v"; }
            vram=${VRAM_BUDGET:-$(conf_bytes engine.vram_budget || true)}
            if [ -z "$vram" ]; then
                mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | sort -n | tail -n 1 || true)
                # What the KV cache and the activations need stays free.
                if [[ $mib =~ ^[0-9]+$ ]] && [ "$mib" -gt 4096 ]; then vram=$(gib $(((mib - 2048) << 20))); else vram=0; fi
            fi
            ram=${RAM_BUDGET:-$(conf_bytes engine.ram_budget || true)}
            if [ -z "$ram" ]; then
                kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
                # 8 GiB stay for the system and the engine's buffers.
                ram=$(((kib << 10) - (8 << 30)))
                [ "$ram" -gt 0 ] && ram=$(gib "$ram") || ram=0
            fi
            say "preparing $MODEL into $prep (VRAM budget $vram, RAM budget $ram; the rest on SSD): this reads the whole model once"
            mkdir -p "$prep"
            "$NEBULA_BIN/nebula-prepare" "$MODEL" "$prep" --vram-budget "$vram" --ram-budget "$ram" ${MTP:+--mtp "$MTP"}
        fi
        args+=(--prepared "$prep")
    fi
fi

bash deploy/start.sh "${args[@]}"
