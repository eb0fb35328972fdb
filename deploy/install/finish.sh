# shellcheck shell=bash
# finish.sh — the installer's last steps (sourced by deploy/install.sh): the
# settings in nebula.conf, the self-check, the desktop entry.
# Needs: say, log, LOG, BIN, MODEL, MTP, PREP, DEST, STATE, CONFIG, PREPARE, pget, NO_GPU.

# write_conf FILE MODEL MTP PREPARED CTX CHUNK BACKEND: sets model.path, model.mtp,
# model.prepared, engine.ctx, engine.prefill_chunk and engine.backend in FILE, keeping its
# other lines (comments, other keys); creates it when missing.  Checked by
# reading it back with `nebula config`, which refuses a bad file.
write_conf() {
    local file=$1
    mkdir -p "$(dirname "$file")"
    python3 - "$@" <<'PY'
import os, sys
path, model, mtp, prep, ctx, chunk, backend = sys.argv[1:8]
want = {("model", "path"): model, ("model", "mtp"): mtp, ("model", "prepared"): prep,
        ("engine", "ctx"): ctx, ("engine", "prefill_chunk"): chunk, ("engine", "backend"): backend}
lines = open(path).read().splitlines() if os.path.exists(path) else [
    "; nebula.conf — your settings, written by deploy/install.sh (docs/INSTALL.md); keys left",
    "; out keep the defaults of the repository's conf/nebula.conf (docs/RUNNING.md lists them)."]
out, section, done = [], None, set()
def flush(sec):
    for (s, k), v in want.items():
        if s == sec and (s, k) not in done:
            out.append("%s = %s" % (k, v)); done.add((s, k))
for line in lines:
    t = line.strip()
    if t.startswith("[") and t.endswith("]"):
        flush(section); section = t[1:-1].strip()
    elif "=" in t and not t.startswith((";", "#")):
        k = t.split("=", 1)[0].strip()
        if (section, k) in want:
            out.append("%s = %s" % (k, want[(section, k)])); done.add((section, k)); continue
    out.append(line)
flush(section)
for sec in ("model", "engine"):
    if any(s == sec and (s, k) not in done for (s, k) in want):
        out.append(""); out.append("[%s]" % sec); flush(sec)
tmp = path + ".tmp"
open(tmp, "w").write("\n".join(out) + "\n")
os.replace(tmp, path)
PY
    local got
    got=$("$BIN/nebula" config get model.prepared --config "$file" 2>&1) || die "$file: nebula config refuses it: $got"
    [ "$got" = "$4" ] || die "$file: model.prepared reads back as '$got', not '$4'"
}

# f32 logits files: "max|a-b| max|a|" (b may be -: then only a's max and a finiteness check).
compare_logits() {
    python3 - "$1" "$2" <<'PY'
import array, math, sys
def load(p):
    a = array.array("f"); a.frombytes(open(p, "rb").read()); return a
a = load(sys.argv[1])
if not all(math.isfinite(x) for x in a): print("nonfinite"); sys.exit(0)
m = max(abs(x) for x in a) if a else 0.0
if sys.argv[2] == "-": print("0 %g" % m); sys.exit(0)
b = load(sys.argv[2])
if len(a) != len(b): print("length %d %d" % (len(a), len(b))); sys.exit(0)
print("%g %g" % (max(abs(x - y) for x, y in zip(a, b)), m))
PY
}

# logits_parity WORK L: the CUDA backend's logits of WORK/ids.txt against the
# CPU reference's (WORK/cpu.f32 for the whole model, L = 0; else both runs
# with --layers L), max|cuda-cpu| <= 1e-3 x max|cpu|.  Prints one check line.
# Needs BIN, MODEL, LOG.
logits_parity() {
    local work=$1 L=$2 out what=logits lay=() ref=$1/cpu.f32
    if [ "$L" != 0 ]; then
        what="logits of the first $L layers" lay=(--layers "$L") ref=$work/cpu-$L.f32
        "$BIN/nebula" logits -m "$MODEL" "${lay[@]}" --tokens-file "$work/ids.txt" --out "$ref" --ctx 256 >>"$LOG" 2>&1 ||
            { echo "FAIL: CPU $what: nebula logits --layers $L failed (see $LOG)"; return; }
    fi
    if ! "$BIN/nebula" logits -m "$MODEL" "${lay[@]}" --backend cuda --tokens-file "$work/ids.txt" --out "$work/cuda.f32" --ctx 256 >>"$LOG" 2>&1; then
        echo "FAIL: CUDA $what: nebula logits --backend cuda ${lay[*]} failed (see $LOG)"
        return
    fi
    out=$(compare_logits "$work/cuda.f32" "$ref")
    if [[ $out != nonfinite* ]] && [[ $out != length* ]] && awk -v d="${out% *}" -v m="${out#* }" 'BEGIN { exit !(d + 0 <= 1e-3 * m) }'; then
        echo "PASS: CUDA vs CPU $what: max|cuda-cpu| ${out% *} <= 1e-3 x max|cpu| ${out#* }"
    else echo "FAIL: CUDA vs CPU $what: $out (max|diff| max|cpu|)"; fi
}

# first_layers_fit MODEL BUDGET_BYTES: the most layers, up to 4 (GDN layers,
# the n-gram layer 1 and the first attention layer 3 of the released model),
# whose tensors with the embedding, the head and its mixer — the n-gram
# table stays in host memory — fit the budget with a margin (device formats
# a quarter larger, 1 GiB for the context and scratch).  Fails when not
# even the first layer fits.
first_layers_fit() {
    local blocks nextn
    blocks=$("$BIN/nebula-gguf" info --key qwen4exp.block_count "$1" 2>/dev/null) || return 1
    nextn=$("$BIN/nebula-gguf" info --key qwen4exp.nextn_predict_layers "$1" 2>/dev/null) || nextn=0
    "$BIN/nebula-gguf" info "$1" 2>/dev/null | awk -v budget="$2" -v trunk=$((blocks - nextn)) '
        $2 ~ /\.weight$|\.bias$|^blk\./ && $(NF - 1) ~ /^[0-9]+$/ {
            if ($2 ~ /^blk\./) { split($2, p, "."); layer[p[2]] += $(NF - 1); if (p[2] + 1 > n) n = p[2] + 1 }
            else if ($2 !~ /^per_layer_token_embd/) dense += $(NF - 1)
        }
        END {
            best = 0; sum = dense
            for (l = 0; l < n && l < trunk && l < 4; l++) { sum += layer[l]; if (sum * 1.25 + 2^30 <= budget) best = l + 1 }
            if (best) print best; exit !best
        }'
}

mem_available_mib() { awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo; }

# Each check says PASS, FAIL or SKIP (with why) on one line, in the log too;
# a SKIP is never counted as a pass.  0 when nothing failed.
self_check() {
    local fails=0 work mem0 mem1 out ids back n_vocab
    work=$(mktemp -d "$STATE/selfcheck.XXXXXX")
    check() { say "self-check: $*"; case $1 in FAIL:*) fails=$((fails + 1)) ;; esac; }
    mem0=$(mem_available_mib)
    { ls -d /dev/shm/nebula-* 2>/dev/null || true; } >"$work/shm0"

    # Prepared files: nebula-prepare again verifies every part against
    # checksums.sha256 and must write nothing.
    out=$("${PREPARE[@]}" 2>&1) || true
    printf '%s\n' "$out" >>"$LOG"
    if grep -q ', 0 written)' <<<"$out"; then check "PASS: prepared files: $(grep -o '([0-9]* parts verified, 0 written)' <<<"$out")"
    else check "FAIL: prepared files: nebula-prepare did not verify them unchanged: $(tail -n 1 <<<"$out")"; fi
    # Placement: every expert in one tier, the profile's budget and context recorded.
    out=$(python3 - "$PREP/placement.json" "$(pget vram_budget)" "$(pget ctx)" "$(pget ple_tier)" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
n = sum(len(l["vram"]) + len(l["ram"]) + len(l["ssd"]) for l in p["layers"])
per = [len(l["vram"]) + len(l["ram"]) + len(l["ssd"]) for l in p["layers"]]
bad = []
if len(set(per)) != 1: bad.append("layers hold different expert counts %s" % sorted(set(per)))
for l in p["layers"]:
    ids = l["vram"] + l["ram"] + l["ssd"]
    if sorted(ids) != list(range(len(ids))): bad.append("layer %d: experts missing or repeated" % l["layer"])
r = p["request"]
if r["vram_budget"] != int(sys.argv[2]): bad.append("vram_budget %s, the profile's %s" % (r["vram_budget"], sys.argv[2]))
if r["vram_ctx"] != int(sys.argv[3]): bad.append("vram_ctx %s, the profile's %s" % (r["vram_ctx"], sys.argv[3]))
if sys.argv[4] != "none" and r["ple_tier"] != sys.argv[4]: bad.append("ple_tier %s, the profile's %s" % (r["ple_tier"], sys.argv[4]))
t = p["totals"]
print(("FAIL: placement: " + "; ".join(bad)) if bad else "PASS: placement: %d experts in %d layers (vram %d, ram %d, ssd %d), budget and context as the profile's" % (
    n, len(per), t["vram"]["experts"], t["ram"]["experts"], t["ssd"]["experts"]))
PY
) || out="FAIL: placement: placement.json unreadable"
    check "$out"

    # Tokenizer round trip.
    local text="Nebula checks its tokenizer: 12 + 30 = 42, naïve café, 東京."
    if [ "$("$BIN/nebula-gguf" info --key tokenizer.ggml.model "$MODEL" 2>/dev/null || echo none)" = none ]; then
        check "SKIP: tokenizer round trip: the model has no tokenizer (ids only)"
        ids="1 2 3 4 5 6 7 8"
    else
        ids=$("$BIN/nebula-tokenize" -m "$MODEL" --no-special "$text" 2>>"$LOG") || ids=
        back=$([ -n "$ids" ] && "$BIN/nebula-tokenize" -m "$MODEL" --decode $ids 2>>"$LOG") || back=
        if [ -n "$ids" ] && [ "$back" = "$text" ]; then check "PASS: tokenizer round trip ($(wc -w <<<"$ids") ids)"
        else check "FAIL: tokenizer round trip: '$text' came back as '$back'"; fi
    fi
    [ -n "$ids" ] || ids="1 2 3 4 5 6 7 8"
    printf '%s\n' "$ids" >"$work/ids.txt"

    # The CPU reference's logits of the short prompt: finite, the right size.
    local mtp_args=()
    [ -n "$MTP" ] && mtp_args=(--mtp "$MTP")
    n_vocab=$("$BIN/nebula-gguf" info --key qwen4exp.vocab_size "$MODEL" 2>/dev/null || true)
    if "$BIN/nebula" logits -m "$MODEL" "${mtp_args[@]}" --tokens-file "$work/ids.txt" --out "$work/cpu.f32" --ctx 256 >>"$LOG" 2>&1; then
        out=$(compare_logits "$work/cpu.f32" -)
        local rows=$(($(file_bytes "$work/cpu.f32") / 4 / ${n_vocab:-1}))
        if [[ $out == nonfinite* ]]; then check "FAIL: CPU logits: not finite"
        elif [ -n "$n_vocab" ] && [ "$rows" != "$(wc -w <"$work/ids.txt")" ]; then check "FAIL: CPU logits: $rows rows for $(wc -w <"$work/ids.txt") tokens"
        else check "PASS: CPU reference logits: $(wc -w <"$work/ids.txt") tokens, finite, max|logit| ${out#* }"; fi
    else
        check "FAIL: CPU logits: nebula logits failed (see $LOG)"
    fi

    # CUDA vs the CPU reference, on the same tokens: the whole model when it
    # fits the GPU, else its first layers on both (nebula logits --layers).
    local why L
    if [ "$NO_GPU" = 1 ]; then
        check "SKIP: CUDA vs CPU logits: --cpu-only (no GPU used); not checked"
    elif ! why=$("$BIN/nebula-gpu-worker" --probe cuda 2>&1); then
        check "SKIP: CUDA vs CPU logits: no usable GPU here (${why:-nebula-gpu-worker --probe cuda failed}); not checked"
    elif [ "$(pget ram_layer)" = 0 ] && [ "$(pget ssd_layer)" = 0 ]; then
        check "$(logits_parity "$work" 0)"
    elif L=$(first_layers_fit "$MODEL" "$(pget vram_budget)"); then
        say "self-check: the model does not fit the GPU whole: CUDA vs CPU on its first $L layers (then the head)"
        check "$(logits_parity "$work" "$L")"
    else
        check "FAIL: CUDA vs CPU logits: not even the first layer and the head fit the VRAM budget $(pget vram_budget) bytes"
    fi

    # Memory given back once the checks' processes are gone: no shared-memory
    # region of theirs left, and MemAvailable back near where it was (others
    # on the machine move it too: a few seconds for it to settle).
    local left=() r k
    for r in /dev/shm/nebula-*; do [ -e "$r" ] && ! grep -qxF "$r" "$work/shm0" && left+=("$r"); done
    for ((k = 0; k < 10; k++)); do
        mem1=$(mem_available_mib)
        [ "$mem1" -ge $((mem0 - 1024 - mem0 / 20)) ] && break
        sleep 0.5
    done
    if [ ${#left[@]} -gt 0 ]; then check "FAIL: memory: shared memory left behind: ${left[*]}"
    elif [ "$mem1" -ge $((mem0 - 1024 - mem0 / 20)) ]; then check "PASS: memory: ${mem1} MiB available again (${mem0} before), no shared memory left"
    else check "FAIL: memory: ${mem1} MiB available, ${mem0} before the checks"; fi
    rm -rf "$work"
    [ "$fails" = 0 ]
}

# A desktop entry and a systemd user unit running nebula start / stop, and
# ~/.local/bin/nebula (on the PATH of most desktops) linked to this build's.
write_desktop() {
    local apps=${XDG_DATA_HOME:-$HOME/.local/share}/applications units=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
    local link=$HOME/.local/bin/nebula
    mkdir -p "$apps" "$units" "$(dirname "$link")"
    if [ -e "$link" ] && [ ! -L "$link" ]; then
        say "note: $link exists and is not a link: left alone (run $BIN/nebula start)"
    else
        ln -sfn "$BIN/nebula" "$link"
        log "linked $link -> $BIN/nebula"
    fi
    cat >"$apps/nebula.desktop" <<EOF
[Desktop Entry]
Type=Application
Name=Nebula
Comment=Chat with the local model (starts the engine, opens the page)
Exec=$BIN/nebula start --config $CONFIG
Terminal=false
Categories=Utility;
EOF
    cat >"$units/nebula.service" <<EOF
[Unit]
Description=Nebula (local LLM engine and chat page on 127.0.0.1)

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=$BIN/nebula start --no-browser --config $CONFIG
ExecStop=$BIN/nebula stop
TimeoutStartSec=1800

[Install]
WantedBy=default.target
EOF
    say "desktop entry $apps/nebula.desktop, user unit $units/nebula.service (systemctl --user enable nebula) and $link written"
}
