#!/usr/bin/env bash
# install.sh — installs a Qwen3.8-Flash-Next model for Nebula on this machine
# (docs/INSTALL.md): checks the hardware against the profiles, fetches and
# verifies the files, prepares and places the experts for the machine's
# profile, writes the settings to nebula.conf, checks the numbers, and starts
# Nebula.  Each step is skipped when its result is already there and
# verified, so a re-run resumes an interrupted install and a run after a
# complete one does nothing (and says so).
#
# Steps: the files' sizes → where they go (--dest, else the first place on an
# internal SSD with room: deploy/install/hw.sh, places) → hardware →
# requirements (nothing is written before they pass) →
# fetch + verify → profile → hotlist → nebula-prepare → nebula.conf →
# self-check → start.  A log of every step: STATE/install.log.
set -euo pipefail
NEBULA_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$NEBULA_REPO/deploy/install/hw.sh"
. "$NEBULA_REPO/deploy/install/fetch.sh"
. "$NEBULA_REPO/deploy/install/finish.sh"

usage() {
    cat <<'EOF'
usage: deploy/install.sh --model SOURCE [--mtp SOURCE] [options]

SOURCE is an https URL of the model file (of any shard of a split set
NAME-00001-of-0000N.gguf: the other shards are fetched beside it), a local
file, or a directory holding a split set (and its MTP file as MTP/*.gguf).

  --mtp SOURCE       the separate MTP (draft) GGUF, as Unsloth ships MTP/mtp-*.gguf
  --dest DIR         where downloads and the prepared files go (default: the first place
                     on an internal SSD with room among ~/.local/share/nebula/models/NAME,
                     /var/lib/nebula/models/NAME and the other mounted file systems you can
                     write, MOUNT/nebula/models/NAME; the install says which and why)
  --require-ssd      refuse a place that is not on an internal SSD (default: say so and go on)
  --manifest FILE    sizes and SHA-256 to check against (NAME<TAB>BYTES<TAB>SHA256 lines),
                     beside the shipped conf/manifests/*.tsv
  --profile P        a profile of conf/profiles.tsv (v16-r64), or auto (default: this machine's)
  --hw-file FILE     a hardware description (key=value: gpu_vram_mib, ram_mib, disk_free_mib, ...)
                     instead of detecting it (deploy/install/hw.sh lists the keys)
  --hotlist H        campaign (default: nebula hotlist over conf/hotlist-prompts.txt, 12 domains),
                     neutral (expert order), or a hotlist.tsv file
  --config FILE      the nebula.conf to write the settings to (default
                     $XDG_CONFIG_HOME/nebula/nebula.conf, your copy)
  --state DIR        the state directory (install.log; default ~/.local/state/nebula)
  --port N, --api-port N, --backend B   passed to deploy/start.sh
  --cpu-only         a machine without a usable NVIDIA GPU: the CPU backend (much slower), the
                     profile by RAM alone (cpu-rNN, no experts in VRAM), the CUDA self-check skipped
                     (without it a machine without a GPU is refused)
  --no-start         install only
  --check-only       check the hardware and the requirements, change nothing
  --desktop          also write a desktop entry, a systemd user unit (nebula start/stop) and
                     ~/.local/bin/nebula, a link to this build's nebula
Exit status: 0 installed (or nothing to do), 1 a requirement or a step failed (the
message says what and by how many GiB), 2 a usage error.
EOF
}

die() { printf 'nebula-install: %s\n' "$*" >&2; log "FAILED: $*"; exit 1; }
say() { printf 'nebula-install: %s\n' "$*"; log "$*"; }
# The log is kept in a temporary file until the requirements pass (a failed
# check changes nothing), then moved into the state directory.
LOG=$(mktemp /tmp/nebula-install.XXXXXX.log)
log() { printf '%s %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S')" "$*" >>"$LOG"; }
cleanup_log() { case $LOG in /tmp/nebula-install.*) rm -f "$LOG" ;; esac; }
trap cleanup_log EXIT

MODEL_SRC= MTP_SRC= DEST= MANIFEST= PROFILE=auto HW_FILE= HOTLIST=campaign CONFIG= STATE= START=1 CHECK_ONLY=0 DESKTOP=0
CPU_ONLY=0 REQUIRE_SSD=0 BACKEND_GIVEN=0
start_args=()
while [ $# -gt 0 ]; do
    case $1 in
    --model) MODEL_SRC=${2:?}; shift ;;
    --mtp) MTP_SRC=${2:?}; shift ;;
    --dest) DEST=${2:?}; shift ;;
    --manifest) MANIFEST=${2:?}; shift ;;
    --profile) PROFILE=${2:?}; shift ;;
    --hw-file) HW_FILE=${2:?}; shift ;;
    --hotlist) HOTLIST=${2:?}; shift ;;
    --config) CONFIG=${2:?}; shift ;;
    --state) STATE=${2:?}; shift ;;
    --port | --api-port | --backend) start_args+=("$1" "${2:?}"); [ "$1" = --backend ] && BACKEND_GIVEN=1; shift ;;
    --cpu-only) CPU_ONLY=1 ;;
    --require-ssd) REQUIRE_SSD=1 ;;
    --no-start) START=0 ;;
    --check-only) CHECK_ONLY=1 ;;
    --desktop) DESKTOP=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "nebula-install: unknown option $1 (--help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$MODEL_SRC" ] || { echo "nebula-install: --model SOURCE is required (--help)" >&2; exit 2; }
[ -z "$MANIFEST" ] || [ -r "$MANIFEST" ] || { echo "nebula-install: cannot read --manifest $MANIFEST" >&2; exit 2; }
[ -z "$HW_FILE" ] || [ -r "$HW_FILE" ] || { echo "nebula-install: cannot read --hw-file $HW_FILE" >&2; exit 2; }
case $HOTLIST in campaign | neutral) ;; *) [ -r "$HOTLIST" ] || { echo "nebula-install: --hotlist: campaign, neutral or a readable file" >&2; exit 2; } ;; esac
BIN=${NEBULA_BIN:-$NEBULA_REPO/${BUILD:-build}/bin}
for b in nebula nebula-prepare nebula-gguf nebula-tokenize; do
    [ -x "$BIN/$b" ] || { echo "nebula-install: $BIN/$b is missing: run make first" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "nebula-install: curl is missing (apt-get install curl)" >&2; exit 1; }
STATE=${STATE:-${NEBULA_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/nebula}}
CONFIG=${CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/nebula/nebula.conf}
case $STATE in /*) ;; *) STATE=$PWD/$STATE ;; esac

# ---- the files the sources name ----
# FILES: "NAME<TAB>URL-or-PATH" lines, the main file (shard 1) first.
shard_re='^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$'
list_source() { # SOURCE ROLE(model|mtp)
    local src=$1 base dir n k f
    if [[ $src == *://* ]]; then
        url_ok "$src" || die "$src: only https URLs are fetched (http only from 127.0.0.1)"
        base=${src##*/} dir=${src%/*}
        if [[ $base =~ $shard_re ]]; then
            n=$((10#${BASH_REMATCH[3]}))
            for ((k = 1; k <= n; k++)); do
                f=$(printf '%s-%05d-of-%05d.gguf' "${BASH_REMATCH[1]}" "$k" "$n")
                printf '%s\t%s\n' "$f" "$dir/$f"
            done
        else
            printf '%s\t%s\n' "$base" "$src"
        fi
    elif [ -d "$src" ]; then
        # A directory: its split set (shard 1 names the rest), else its one
        # model file; an MTP file (MTP/*.gguf, *mtp*.gguf) is not the model.
        [ "$2" = model ] || die "--mtp $src: give the MTP file, not a directory"
        local models=() one first=
        for one in "$src"/*.gguf; do
            [ -f "$one" ] || continue
            base=$(basename "$one")
            [[ ${base,,} == *mtp* ]] && continue
            models+=("$one")
            [[ $base =~ $shard_re ]] && [ "$((10#${BASH_REMATCH[2]}))" = 1 ] && first=$one
        done
        [ -n "$first" ] || { [ ${#models[@]} = 1 ] && first=${models[0]}; }
        [ -n "$first" ] || die "$src: ${#models[@]} model files and no split set in it: give the file (--model FILE)"
        list_source "$first" model
    elif [ -f "$src" ]; then
        base=$(basename "$src") dir=$(cd "$(dirname "$src")" && pwd)
        if [[ $base =~ $shard_re ]]; then
            n=$((10#${BASH_REMATCH[3]}))
            for ((k = 1; k <= n; k++)); do
                f=$(printf '%s-%05d-of-%05d.gguf' "${BASH_REMATCH[1]}" "$k" "$n")
                [ -f "$dir/$f" ] || die "$dir/$f: shard $k of $n of the split set is missing"
                printf '%s\t%s\n' "$f" "$dir/$f"
            done
        else
            printf '%s\t%s\n' "$base" "$dir/$base"
        fi
    else
        die "$src: no such file or directory (and not a URL)"
    fi
}
FILES=$(list_source "$MODEL_SRC" model)
if [ -z "$MTP_SRC" ] && [ -d "$MODEL_SRC" ]; then
    for f in "$MODEL_SRC"/MTP/*.gguf "$MODEL_SRC"/*[mM][tT][pP]*.gguf; do [ -f "$f" ] && MTP_SRC=$f && break; done
    [ -n "$MTP_SRC" ] && say "MTP file: $MTP_SRC"
fi
MTP_LINE=
[ -n "$MTP_SRC" ] && MTP_LINE=$(list_source "$MTP_SRC" mtp)
MAIN_NAME=$(head -n 1 <<<"$FILES" | cut -f1)
NAME=$(basename "$MAIN_NAME" .gguf)
[[ $MAIN_NAME =~ $shard_re ]] && NAME=$(basename "${BASH_REMATCH[1]}")

# ---- the files' sizes (the manifest's, the server's, the local file's) ----
SIZES=() model_bytes=0 url_bytes=0
while IFS=$'\t' read -r fname src; do
    [ -n "$fname" ] || continue
    entry=$(manifest_entry "$fname")
    if [[ $src == *://* ]]; then
        b=${entry%% *}
        [ -n "$entry" ] || b=$(remote_bytes "$src")
        [[ ${b:-} =~ ^[0-9]+$ ]] || die "$fname: cannot learn its size from $src (is the URL right?)"
        url_bytes=$((url_bytes + b))
    else
        b=$(file_bytes "$src")
    fi
    SIZES+=("$b")
    model_bytes=$((model_bytes + b))
done <<<"$FILES${MTP_LINE:+
$MTP_LINE}"

# ---- where it goes: --dest, else the first place on an internal SSD with room ----
HW=$(mktemp /tmp/nebula-hw.XXXXXX)
trap 'cleanup_log; rm -f "$HW" "$HW.d" "$HW.p"' EXIT
: >"$HW.p"
ssd_short=
if [ -z "$DEST" ]; then
    choose_dest $((url_bytes + model_bytes + (1 << 30)))
else
    case $DEST in /*) ;; *) DEST=$PWD/$DEST ;; esac
fi
PREP=$DEST/prepared

# ---- hardware ----
hw_detect "$DEST" >"$HW.d"
cat "$HW.p" ${HW_FILE:+"$HW_FILE"} >"$HW.f"
hw_merge "$HW.f" "$HW.d" | grep -v '^place=' >"$HW"
rm -f "$HW.f"
hw() { hw_get "$HW" "$1"; }
msg="hardware: GPU $(hw gpu_name) ($(hw gpu_vram_mib) MiB, driver $(hw gpu_driver), compute $(hw gpu_cc); $(hw gpu_count) found),"
msg+=" RAM $(hw ram_mib) MiB, $(hw cores) cores / $(hw threads) threads, AVX-512 $(hw avx512), AVX2 $(hw avx2),"
say "$msg disk $(hw disk_path): $(hw disk_free_mib) MiB free ($(hw disk_kind))${HW_FILE:+ [from $HW_FILE]}"
while IFS= read -r l; do log "hw: $l"; done <"$HW"

# ---- requirements: every one checked, each shortfall in GiB; nothing written before ----
short=()
profiles=$NEBULA_REPO/conf/profiles.tsv
min_of() { awk -F'\t' -v c="$1" '!/^#/ && $1 != "profile" && NF >= 7 { if (m == "" || $c < m) m = $c } END { print m }' "$profiles"; }
# A class is reached at 95% of its nominal GiB (tools/nebula-prepare/profile.c: PROFILE_CLASS_SHARE).
need_gib() { awk -v g="$1" 'BEGIN { printf "%.1f", g * 0.95 }'; }
have_gib() { awk -v m="$1" 'BEGIN { printf "%.1f", m / 1024 }'; }
lacks() { awk -v h="$1" -v n="$2" 'BEGIN { exit !(h < n) }'; }
vmin=$(min_of 2) rmin=$(min_of 3)
vram_h=$(have_gib "$(hw gpu_vram_mib)") ram_h=$(have_gib "$(hw ram_mib)")
if [ "$CPU_ONLY" = 1 ]; then
    say "--cpu-only: the GPU is not used; the CPU backend runs the model (much slower than a GPU), the profile follows the RAM alone"
elif [ "$(hw gpu_count)" = 0 ] || [ "$(hw gpu_vram_mib)" = 0 ] || [ -z "$(hw gpu_vram_mib)" ]; then
    short+=("GPU: no NVIDIA GPU found (nvidia-smi lists none, or the driver is missing): the profiles need one with at least $(need_gib "$vmin") GiB (a ${vmin} GB card); --cpu-only installs for the CPU backend instead (much slower)")
elif lacks "$vram_h" "$(need_gib "$vmin")"; then
    short+=("GPU memory: $vram_h GiB, the smallest profile needs $(need_gib "$vmin") GiB (a ${vmin} GB card): $(awk -v a="$(need_gib "$vmin")" -v b="$vram_h" 'BEGIN { printf "%.1f", a - b }') GiB missing (or --cpu-only)")
fi
if lacks "$ram_h" "$(need_gib "$rmin")"; then
    short+=("RAM: $ram_h GiB, the smallest profile needs $(need_gib "$rmin") GiB (${rmin} GB): $(awk -v a="$(need_gib "$rmin")" -v b="$ram_h" 'BEGIN { printf "%.1f", a - b }') GiB missing")
fi
[ "$(hw avx2)" = yes ] || short+=("CPU: no AVX2 (the expert kernels need it)")
# Disk: what is still to download, and the prepared copy (about the model's size).
dl_bytes=0 k=0
while IFS=$'\t' read -r fname src; do
    [ -n "$fname" ] || continue
    b=${SIZES[k]} k=$((k + 1))
    if [[ $src == *://* ]]; then
        have=0
        [ -f "$DEST/$fname" ] && have=$(file_bytes "$DEST/$fname")
        [ -f "$DEST/$fname.part" ] && have=$(file_bytes "$DEST/$fname.part")
        [ "$have" -le "$b" ] && dl_bytes=$((dl_bytes + b - have))
    fi
done <<<"$FILES${MTP_LINE:+
$MTP_LINE}"
prep_bytes=$model_bytes
[ -f "$PREP/checksums.sha256" ] && grep -q ' experts.bin$' "$PREP/checksums.sha256" && prep_bytes=0
need_bytes=$((dl_bytes + prep_bytes + (1 << 30)))
free_mib=$(hw disk_free_mib)
if [ "$((free_mib << 20))" -lt "$need_bytes" ]; then
    msg="disk: $(have_gib "$free_mib") GiB free on $(hw disk_path), needs $(gib_of "$need_bytes") GiB"
    short+=("$msg ($(gib_of "$dl_bytes") to download, $(gib_of "$prep_bytes") prepared, 1 spare): $(gib_of $((need_bytes - (free_mib << 20)))) GiB missing")
fi
if [ "$(hw disk_kind)" != ssd ]; then
    if [ "$REQUIRE_SSD" = 1 ]; then
        kind_said="a $(hw disk_kind) disk"
        [ "$(hw disk_kind)" = unknown ] && kind_said="a disk of unknown kind (no lsblk answer)"
        short+=("disk: $(hw disk_path) is on $kind_said, not an internal SSD (--require-ssd)${ssd_short:+; $ssd_short}")
    elif [ "$(hw disk_kind)" != unknown ]; then
        say "note: $(hw disk_path) is on a $(hw disk_kind) disk; the SSD tier is read at random: an internal SSD (--dest) is much faster"
    fi
fi
if [ ${#short[@]} -gt 0 ]; then
    for s in "${short[@]}"; do printf 'nebula-install: missing: %s\n' "$s" >&2; done
    echo "nebula-install: nothing was changed" >&2
    exit 1
fi
say "requirements met: model $(gib_of "$model_bytes") GiB, $(gib_of "$dl_bytes") GiB to download, $(have_gib "$free_mib") GiB free"
[ "$CHECK_ONLY" = 1 ] && { say "--check-only: nothing was changed"; exit 0; }

# ---- from here on things are written ----
mkdir -p "$STATE" "$DEST"
chmod 700 "$STATE"
cat "$LOG" >>"$STATE/install.log"
rm -f "$LOG"
LOG=$STATE/install.log
cp "$HW" "$STATE/hardware.env"

# The install's identity: the sources, their sizes, mtimes and ctimes to the
# nanosecond (a file changed in place within the second of the last run keeps
# its size and its whole-second mtime), the options.
# A run that finds it unchanged beside a complete prepared directory has nothing to do.
stamp() {
    printf 'sources %s %s\nprofile %s%s\nhotlist %s\nconfig %s\nprep %s\n' "$MODEL_SRC" "${MTP_SRC:-}" "$PROFILE" \
        "$([ "$CPU_ONLY" = 1 ] && echo ' cpu-only')" "$HOTLIST" "$CONFIG" "$PREP"
    # the hardware the profile is picked from: another GPU or more RAM re-places the experts
    printf 'hw %s\n' "$(grep -E '^(gpu_vram_mib|ram_mib)=' "$HW" | tr '\n' ' ')"
    while IFS=$'\t' read -r fname src; do
        [ -n "$fname" ] || continue
        p=$src
        [[ $src == *://* ]] && p=$DEST/$fname
        printf 'file %s %s %s\n' "$fname" "$(file_bytes "$p")" "$(stat -L -c '%.9Y %.9Z' "$p" 2>/dev/null || echo -)"
    done <<<"$FILES${MTP_LINE:+
$MTP_LINE}"
    [ -f "$PREP/placement.json" ] && printf 'placement %s\n' "$(sha256sum <"$PREP/placement.json" | cut -c1-16)"
    return 0
}
if [ -f "$DEST/install.stamp" ] && [ "$(stamp)" = "$(cat "$DEST/install.stamp")" ] && [ -f "$PREP/placement.json" ]; then
    say "already installed and verified ($DEST, profile $(sed -n 's/^profile=//p' "$DEST/profile.env" 2>/dev/null)): nothing to do"
    if [ "$START" = 1 ]; then bash "$NEBULA_REPO/deploy/start.sh" --config "$CONFIG" --state "$STATE" "${start_args[@]}"; fi
    exit 0
fi

# ---- fetch and verify ----
resolved() { # NAME SRC: the local path of the file
    if [[ $2 == *://* ]]; then fetch_url "$2" "$1" >&2; printf '%s\n' "$DEST/$1"
    else
        verify_file "$2" "$1" >&2 || die "$2: $VERIFY_WHY (a local file is not fetched again: replace it)"
        say "$1: verified in place" >&2
        printf '%s\n' "$2"
    fi
}
MODEL=
while IFS=$'\t' read -r fname src; do
    p=$(resolved "$fname" "$src")
    [ -n "$MODEL" ] || MODEL=$p
done <<<"$FILES"
MTP=
[ -n "$MTP_LINE" ] && MTP=$(resolved "$(cut -f1 <<<"$MTP_LINE")" "$(cut -f2 <<<"$MTP_LINE")")
"$BIN/nebula-gguf" info --no-tensors "$MODEL" >/dev/null 2>>"$LOG" || die "$MODEL: not a GGUF Nebula can read (see $LOG)"

# ---- profile: what the machine's class means for this file ----
mtp_args=()
[ -n "$MTP" ] && mtp_args=(--mtp "$MTP")
prof_args=(--profile "$PROFILE" --profiles "$profiles" --hw-file "$STATE/hardware.env")
NO_GPU=$CPU_ONLY
if [ "$CPU_ONLY" = 1 ]; then
    prof_args+=(--cpu-only)
    [ "$BACKEND_GIVEN" = 1 ] || start_args+=(--backend cpu)
fi
"$BIN/nebula-prepare" "$MODEL" "${mtp_args[@]}" "${prof_args[@]}" --profile-info >"$DEST/profile.env" 2>>"$LOG" ||
    die "the profile: $(tail -n 1 "$LOG")"
pget() { sed -n "s/^$1=//p" "$DEST/profile.env"; }
[ "$(pget fits)" = yes ] || die "profile $(pget profile) does not fit this model: $(pget why)"
msg="profile $(pget profile): experts per layer $(pget vram_layer) in VRAM, $(pget ram_layer) in RAM, $(pget ssd_layer) on SSD;"
say "$msg n-gram table $(pget ple_tier); context $(pget ctx), prefill chunk $(pget prefill_chunk)"

# ---- hotlist ----
hot_args=()
case $HOTLIST in
neutral) say "hotlist: neutral (expert order)" ;;
campaign)
    if [ "$("$BIN/nebula-gguf" info --key tokenizer.ggml.model "$MODEL" 2>/dev/null || echo none)" = none ]; then
        say "hotlist: the model has no tokenizer, so the prompt campaign cannot run: neutral (expert order)"
    else
        hl=$DEST/hotlist.tsv
        id="$(stamp | grep '^file')"
        if [ -f "$hl" ] && [ "$(cat "$hl.id" 2>/dev/null)" = "$id" ]; then
            say "hotlist: the campaign's result is here ($hl)"
        else
            say "hotlist: running the campaign (conf/hotlist-prompts.txt, 12 domains) on the CPU reference; this reads the model"
            "$BIN/nebula" hotlist -m "$MODEL" "${mtp_args[@]}" --prompts "$NEBULA_REPO/conf/hotlist-prompts.txt" --out "$hl.tmp" >>"$LOG" 2>&1 ||
                die "the hotlist campaign failed (see $LOG)"
            mv "$hl.tmp" "$hl"
            printf '%s\n' "$id" >"$hl.id"
        fi
        hot_args=(--hotlist "$hl")
    fi
    ;;
*) hot_args=(--hotlist "$HOTLIST") ;;
esac

# ---- prepare and place ----
say "preparing into $PREP (this reads the whole model once; a re-run verifies and resumes)"
mkdir -p "$PREP"
PREPARE=("$BIN/nebula-prepare" "$MODEL" "$PREP" "${mtp_args[@]}" "${prof_args[@]}" "${hot_args[@]}")
log "run: ${PREPARE[*]}"
"${PREPARE[@]}" >>"$LOG" 2>&1 || die "nebula-prepare failed: $(tail -n 1 "$LOG") (all of it in $LOG)"
say "$(grep 'placement:' "$LOG" | tail -n 1)"

# ---- settings: the user's nebula.conf ----
conf_backend=auto
[ "$CPU_ONLY" = 1 ] && conf_backend=cpu
write_conf "$CONFIG" "$MODEL" "$MTP" "$PREP" "$(pget ctx)" "$(pget prefill_chunk)" "$conf_backend"
say "settings written to $CONFIG (model, prepared directory, context, prefill chunk, backend $conf_backend): the CLI and the page read them"

# ---- self-check ----
self_check || die "the self-check failed (details in $LOG)"
stamp >"$DEST/install.stamp"
[ "$DESKTOP" = 1 ] && write_desktop
say "installed. Start: $BIN/nebula start   Stop: $BIN/nebula stop   (log: $LOG)"
if [ "$START" = 1 ]; then
    bash "$NEBULA_REPO/deploy/start.sh" --config "$CONFIG" --state "$STATE" "${start_args[@]}"
fi
