#!/usr/bin/env bash
# test_install.sh — deploy/install.sh end to end on a small model, and the
# profile selection of nebula-prepare on faked hardware:
#   - a split model with its MTP file (tiny-b's weights, tiny-a's tokenizer:
#     the round trip is checked for real) served by tests/deploy/range_server.py
#     on 127.0.0.1, whose first GET of shard 1 drops the connection half-way:
#     the install resumes it with a Range request, verifies every file against
#     the manifest, prepares, self-checks (the CUDA half must SKIP here, never
#     PASS, without a GPU) and starts; the page answers; nebula.conf names the
#     prepared directory;
#   - a second run says "nothing to do", fetches nothing, and a second
#     `nebula start` finds the engine running (and, with a DISPLAY, hands the
#     URL to xdg-open, a stand-in here); `nebula stop` stops it;
#   - a corrupted shard (same size) is found by its checksum and fetched again;
#   - a .part left by a killed run is continued from its length (Range);
#   - a local directory is verified in place (checksums recorded on first
#     use, nothing copied), with --desktop's entry, unit and ~/.local/bin link
#     (a private HOME); a corrupted local shard is refused;
#   - a malformed profiles file is refused with its line; --profile-table on
#     the small model gives 16 fitting rows; the what-if flag cannot reach a
#     placement; nebula-gen --sparse writes a full-size layout taking no disk;
#   - too little disk, too little RAM (faked by --hw-file) name the GiB missing,
#     exit 1 and create no file or directory;
#   - nebula-prepare --profile auto picks each of the 16 rows of
#     conf/profiles.tsv from a faked machine of that class (at the nominal size
#     and at 96% of it), 20 GB VRAM + 80 GB RAM gives v16-r64, 6 GiB of VRAM
#     none (with the GiB missing);
#   - docs/INSTALL.md's profile table is what deploy/install/profile-table.sh
#     computes now.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
tmp=$(mktemp -d /tmp/nbinst.XXXXXX)
[ -n "${KEEP:-}" ] && echo "keeping $tmp"
srv_pid=
cleanup() {
    [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null
    NEBULA_BIN=$bin bash deploy/stop.sh --state "$tmp/s" >/dev/null 2>&1
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
expect() { if grep -q -- "$2" "$3"; then ok; else bad "$1: no '$2' in the output"; sed 's/^/    /' "$3" | tail -n 15; fi; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- the model: a split set (the n-gram table in shard 2) and an MTP file ----
mkdir -p "$tmp/hf" "$tmp/srv"
for f in tests/fixtures/tiny-b/*; do ln -s "$PWD/$f" "$tmp/hf/"; done
ln -s "$PWD/tests/fixtures/tiny-a/tokenizer.json" "$PWD/tests/fixtures/tiny-a/tokenizer_config.json" "$tmp/hf/"
"$bin/nebula-convert" "$tmp/hf" "$tmp/srv/tb.gguf" --split --mtp-out "$tmp/srv/tb-mtp.gguf" -q || { echo "FAIL: convert"; exit 1; }
S1=tb-00001-of-00002.gguf S2=tb-00002-of-00002.gguf
for f in "$tmp"/srv/*.gguf; do
    printf '%s\t%s\t%s\n' "$(basename "$f")" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
done >"$tmp/manifest.tsv"
half=$(($(stat -c %s "$tmp/srv/$S1") / 2))
python3 tests/deploy/range_server.py "$tmp/srv" "$tmp/port" "$tmp/srv.log" --cut "$S1:$half" &
srv_pid=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
url=http://127.0.0.1:$(cat "$tmp/port")
port=$(free_port) api=$(free_port)
hw() { printf 'gpu_name=Fake GPU\ngpu_count=1\ngpu_vram_mib=%s\ngpu_driver=550.0\ngpu_cc=8.9\nram_mib=%s\ncores=8\nthreads=16\navx2=yes\ndisk_free_mib=%s\n' "$1" "$2" "$3"; }
hw 16384 65536 100000 >"$tmp/hw.env"
inst() { # LOGNAME ARGS...
    local out=$1
    shift
    NEBULA_BIN=$bin bash deploy/install.sh --model "$url/$S1" --mtp "$url/tb-mtp.gguf" --manifest "$tmp/manifest.tsv" \
        --port "$port" --api-port "$api" "$@" >"$tmp/$out" 2>&1
}

# ---- first run: interrupted download resumed, verified, prepared, checked, started ----
if inst run1 --dest "$tmp/dest" --state "$tmp/s" --config "$tmp/conf/nebula.conf" --hw-file "$tmp/hw.env"; then ok; else bad "first install exited $?"; tail -n 20 "$tmp/run1"; fi
grep -q "^GET $S1 - 200 $half\$" "$tmp/srv.log" && ok || bad "the first GET of shard 1 was not cut at $half bytes"
grep -q "^GET $S1 bytes=$half- 206 " "$tmp/srv.log" && ok || bad "shard 1 was not resumed with Range: bytes=$half-"
expect "resume" "the download stopped (curl exit 18)" "$tmp/run1"
for f in "$S1" "$S2" tb-mtp.gguf; do
    cmp -s "$tmp/dest/$f" "$tmp/srv/$f" && ok || bad "$f: the downloaded file differs"
    [ ! -e "$tmp/dest/$f.part" ] && ok || bad "$f.part left behind"
done
expect "profile" "profile v16-r64" "$tmp/run1"
expect "campaign" "hotlist: running the campaign" "$tmp/run1"
# nebula hotlist counts the MTP block's routing itself (no rows padded in): its layer has counts
mtp_layer=$("$bin/nebula-gguf" info --key qwen4exp.block_count "$tmp/srv/$S1")
mtp_layer=$((mtp_layer - 1))
awk -v l="$mtp_layer" '$1 == l { s += $3 } END { exit !(s > 0) }' "$tmp/dest/hotlist.tsv" && ok ||
    bad "the campaign's hotlist has no counts for the MTP layer $mtp_layer"
expect "prepared check" "PASS: prepared files" "$tmp/run1"
expect "placement check" "PASS: placement" "$tmp/run1"
expect "tokenizer check" "PASS: tokenizer round trip" "$tmp/run1"
expect "CPU check" "PASS: CPU reference logits" "$tmp/run1"
expect "memory check" "PASS: memory" "$tmp/run1"
if "$bin/nebula-gpu-worker" --probe cuda >/dev/null 2>&1; then
    expect "CUDA check" "PASS: CUDA vs CPU logits" "$tmp/run1"
else
    expect "CUDA check skips" "SKIP: CUDA vs CPU logits: no usable GPU" "$tmp/run1"
    grep -q "PASS: CUDA" "$tmp/run1" && bad "a CUDA check claims a pass without a GPU" || ok
fi
[ "$("$bin/nebula" config get model.prepared --config "$tmp/conf/nebula.conf")" = "$tmp/dest/prepared" ] && ok ||
    bad "nebula.conf's model.prepared is not the prepared directory"
[ -s "$tmp/s/install.log" ] && ok || bad "no install.log in the state directory"
curl -fsS -m 10 "http://127.0.0.1:$port/api/status" >"$tmp/status.json" && ok || bad "the page's /api/status does not answer after the install"
grep -q "\"path\":\"$tmp/dest/$S1\"" "$tmp/status.json" && ok || bad "/api/status does not serve the installed model"
grep -q '"has_mtp":true' "$tmp/status.json" && ok || bad "/api/status: the MTP file was not loaded"
grep -q '"max_prefill_chunk":1024' "$tmp/status.json" && ok || bad "/api/status: the profile's prefill chunk (nebula.conf) is not used"

# ---- second run: nothing to do; a second start reuses the engine ----
gets=$(grep -c '^GET' "$tmp/srv.log")
if inst run2 --dest "$tmp/dest" --state "$tmp/s" --config "$tmp/conf/nebula.conf" --hw-file "$tmp/hw.env"; then ok; else bad "second install exited $?"; fi
expect "second run" "already installed and verified" "$tmp/run2"
[ "$(grep -c '^GET' "$tmp/srv.log")" = "$gets" ] && ok || bad "the second run fetched again"
cpid=$(cat "$tmp/s/coordinator.pid")
"$bin/nebula" start --no-browser --state "$tmp/s" --config "$tmp/conf/nebula.conf" --port "$port" --api-port "$api" >"$tmp/start2" 2>&1 && ok || bad "nebula start (second) failed"
expect "second start" "already running" "$tmp/start2"
[ "$(cat "$tmp/s/coordinator.pid")" = "$cpid" ] && ok || bad "the second start replaced the coordinator"
# On a desktop the page is opened: a stand-in xdg-open records the URL.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "$1" >"%s/opened"\n' "$tmp" >"$tmp/fakebin/xdg-open"
chmod +x "$tmp/fakebin/xdg-open"
DISPLAY=:77 PATH=$tmp/fakebin:$PATH "$bin/nebula" start --state "$tmp/s" --config "$tmp/conf/nebula.conf" --port "$port" \
    --api-port "$api" >"$tmp/start3" 2>&1 && ok || bad "nebula start (desktop) failed"
[ "$(cat "$tmp/opened" 2>/dev/null)" = "http://127.0.0.1:$port/" ] && ok || bad "nebula start did not open http://127.0.0.1:$port/ (got '$(cat "$tmp/opened" 2>/dev/null)')"
"$bin/nebula" stop --state "$tmp/s" >"$tmp/stop" 2>&1 && ok || bad "nebula stop failed: $(cat "$tmp/stop")"
alive() { local st; st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; st=${st##*) }; [ "${st%% *}" != Z ]; }
alive "$cpid" && bad "the coordinator still runs after nebula stop" || ok

# ---- a corrupted shard: found by its checksum, fetched again ----
printf 'X' | dd of="$tmp/dest/$S2" bs=1 seek=100 conv=notrunc status=none
if inst run3 --dest "$tmp/dest" --state "$tmp/s" --config "$tmp/conf/nebula.conf" --hw-file "$tmp/hw.env" --no-start; then ok; else bad "install after corruption exited $?"; tail -n 20 "$tmp/run3"; fi
expect "corruption found" "$S2: SHA-256 .* the manifest says" "$tmp/run3"
[ "$(grep -c "^GET $S2 " "$tmp/srv.log")" = 2 ] && ok || bad "shard 2 was not fetched again"
cmp -s "$tmp/dest/$S2" "$tmp/srv/$S2" && ok || bad "shard 2 is still corrupt"

# ---- a .part left by a killed run is resumed from its length ----
third=$(($(stat -c %s "$tmp/srv/$S1") / 3))
mkdir -p "$tmp/dest4"
head -c "$third" "$tmp/srv/$S1" >"$tmp/dest4/$S1.part"
if inst run4 --dest "$tmp/dest4" --state "$tmp/s4" --config "$tmp/conf4/nebula.conf" --hw-file "$tmp/hw.env" --no-start --hotlist neutral; then ok
else bad "install over a .part exited $?"; tail -n 20 "$tmp/run4"; fi
expect "part resumed" "$S1: resuming at $third bytes" "$tmp/run4"
grep -q "^GET $S1 bytes=$third- 206 " "$tmp/srv.log" && ok || bad "the .part was not continued with Range: bytes=$third-"
cmp -s "$tmp/dest4/$S1" "$tmp/srv/$S1" && ok || bad "the resumed shard 1 differs"

# ---- a local directory: verified in place, checksums recorded on first use ----
mkdir -p "$tmp/local"
cp "$tmp"/srv/*.gguf "$tmp/local/"
local_inst() { HOME=$tmp/home XDG_DATA_HOME= XDG_CONFIG_HOME= NEBULA_BIN=$bin bash deploy/install.sh --model "$tmp/local" --dest "$tmp/dest5" \
    --state "$tmp/s5" --config "$tmp/conf5/nebula.conf" --hw-file "$tmp/hw.env" --no-start --hotlist neutral --desktop >"$tmp/$1" 2>&1; }
if local_inst run5; then ok; else bad "install from a directory exited $?"; tail -n 20 "$tmp/run5"; fi
expect "local MTP found" "MTP file: $tmp/local/tb-mtp.gguf" "$tmp/run5"
expect "first use" "$S1: no published checksum; recorded" "$tmp/run5"
for f in "$S1" "$S2" tb-mtp.gguf; do
    [ "$(awk -F'\t' -v n="$f" '$1 == n { print $3 }' "$tmp/dest5/manifest.tsv")" = "$(sha256sum <"$tmp/local/$f" | cut -d' ' -f1)" ] && ok ||
        bad "$f: DEST/manifest.tsv does not record its SHA-256"
    [ ! -e "$tmp/dest5/$f" ] && ok || bad "$f: a local file was copied"
done
[ "$("$bin/nebula" config get model.path --config "$tmp/conf5/nebula.conf")" = "$tmp/local/$S1" ] && ok ||
    bad "model.path is not the local file"
grep -qx "Exec=$bin/nebula start --config $tmp/conf5/nebula.conf" "$tmp/home/.local/share/applications/nebula.desktop" && ok ||
    bad "--desktop: no desktop entry running nebula start"
grep -qx "ExecStop=$bin/nebula stop" "$tmp/home/.config/systemd/user/nebula.service" 2>/dev/null && ok ||
    bad "--desktop: no systemd user unit running nebula stop"
[ "$(readlink "$tmp/home/.local/bin/nebula")" = "$bin/nebula" ] && ok || bad "--desktop: ~/.local/bin/nebula is not a link to $bin/nebula"
printf 'X' | dd of="$tmp/local/$S2" bs=1 seek=100 conv=notrunc status=none
if local_inst run6; then bad "a corrupted local shard was accepted"; else ok; fi
expect "local corruption" "$S2: SHA-256 .* the manifest says .*a local file is not fetched again" "$tmp/run6"

# ---- no GPU: refused with what is missing; --cpu-only installs for the CPU backend ----
printf 'gpu_name=\ngpu_count=0\ngpu_vram_mib=0\nram_mib=65536\ncores=8\nthreads=16\navx2=yes\ndisk_free_mib=100000\n' >"$tmp/hw-nogpu.env"
if inst run-nogpu --dest "$tmp/ng/dest" --state "$tmp/ng/state" --config "$tmp/ng/conf/nebula.conf" --hw-file "$tmp/hw-nogpu.env"; then
    bad "a machine without a GPU was not refused"
else ok; fi
expect "no GPU" "missing: GPU: no NVIDIA GPU found .*--cpu-only installs for the CPU backend" "$tmp/run-nogpu"
[ ! -e "$tmp/ng" ] && ok || bad "the refused GPU-less install created files"
cpu_port=$(free_port) cpu_api=$(free_port)
mkdir -p "$tmp/local-cpu" && cp "$tmp"/srv/*.gguf "$tmp/local-cpu/"
HOME=$tmp/home NEBULA_BIN=$bin bash deploy/install.sh --model "$tmp/local-cpu" --dest "$tmp/cpu/dest" --state "$tmp/cpu/state" \
    --config "$tmp/cpu/conf/nebula.conf" --hw-file "$tmp/hw-nogpu.env" --cpu-only --hotlist neutral --port "$cpu_port" \
    --api-port "$cpu_api" >"$tmp/run-cpu" 2>&1 && ok || { bad "--cpu-only install exited $?"; tail -n 20 "$tmp/run-cpu"; }
expect "cpu-only profile" "profile cpu-r64: experts per layer 0 in VRAM" "$tmp/run-cpu"
expect "cpu-only CUDA skip" "SKIP: CUDA vs CPU logits: --cpu-only (no GPU used)" "$tmp/run-cpu"
expect "cpu-only CPU check" "PASS: CPU reference logits" "$tmp/run-cpu"
expect "cpu-only backend" "backend: cpu" "$tmp/run-cpu"
[ "$("$bin/nebula" config get engine.backend --config "$tmp/cpu/conf/nebula.conf")" = cpu ] && ok || bad "--cpu-only: engine.backend is not cpu"
curl -fsS -m 10 "http://127.0.0.1:$cpu_port/api/status" >/dev/null && ok || bad "--cpu-only: the page does not answer"
NEBULA_BIN=$bin bash deploy/stop.sh --state "$tmp/cpu/state" >/dev/null 2>&1

# ---- no --dest: the place on an internal SSD with room, else said; --require-ssd refuses ----
places() { # NAME:FREE_MIB:KIND...
    hw 16384 65536 100000 | grep -v '^disk_'
    for p in "$@"; do printf 'place=%s/pl/%s %s %s\n' "$tmp" "${p%%:*}" "$(cut -d: -f2 <<<"$p")" "${p##*:}"; done
}
where() { # LOG ARGS...: a --check-only run without --dest
    local out=$1
    shift
    HOME=$tmp/home NEBULA_BIN=$bin bash deploy/install.sh --model "$tmp/local-cpu" --state "$tmp/pl-state" --config "$tmp/pl.conf" \
        --check-only "$@" >"$tmp/$out" 2>&1
}
places hdd:100000:hdd small:10:ssd fast:100000:ssd >"$tmp/hw-pl1.env"
where pl1 --hw-file "$tmp/hw-pl1.env" && ok || bad "places: --check-only exited $?"
expect "SSD chosen" "models go to $tmp/pl/fast: an internal SSD with .* GiB free" "$tmp/pl1"
grep -q "is on a hdd disk" "$tmp/pl1" && bad "places: a note about a hdd although an SSD was chosen" || ok
places hdd:100000:hdd small:10:ssd >"$tmp/hw-pl2.env"
where pl2 --hw-file "$tmp/hw-pl2.env" && ok || bad "places, only a hdd with room: exited $?"
expect "hdd said" "models go to $tmp/pl/hdd: .*no internal SSD among the places has" "$tmp/pl2"
expect "hdd note" "note: $tmp/pl/hdd is on a hdd disk" "$tmp/pl2"
if where pl3 --hw-file "$tmp/hw-pl2.env" --require-ssd; then bad "--require-ssd accepted a hdd"; else ok; fi
expect "require-ssd" "missing: disk: $tmp/pl/hdd is on a hdd disk, not an internal SSD (--require-ssd); no internal SSD with" "$tmp/pl3"
[ ! -e "$tmp/pl" ] && ok || bad "the place checks created $(find "$tmp/pl" | head -n 3 | tr '\n' ' ')"
mkdir -p "$tmp/pl/hdd" && : >"$tmp/pl/hdd/install.stamp"
where pl4 --hw-file "$tmp/hw-pl1.env" && ok || bad "places with an earlier install: exited $?"
expect "earlier install kept" "models go to $tmp/pl/hdd: an earlier install of tb is there (hdd disk)" "$tmp/pl4"

# ---- the shipped manifests: well-formed, and read ----
awk -F'\t' '!/^#/ && !(NF == 3 && $2 ~ /^[0-9]+$/ && length($3) == 64 && $3 ~ /^[0-9a-f]+$/) { print FILENAME ":" FNR; bad = 1 } END { exit bad }' conf/manifests/*.tsv &&
    ok || bad "a malformed line in conf/manifests"
[ "$(NEBULA_REPO=$PWD DEST=$tmp bash -c '. deploy/install/fetch.sh; manifest_entry Qwen3.8-Flash-Next-UD-IQ1_S-00002-of-00003.gguf')" = \
    "49990818368 3a62e35bbf9add4733bd1438ebd3a67649d5edd6cb0e72bb78e33c913992b2b6" ] && ok || bad "the shipped UD-IQ1_S manifest is not read"

# ---- the CLI pieces the installer leans on ----
"$bin/nebula" logits -m "$tmp/dest/$S1" --tokens-file /dev/null --out "$tmp/x.f32" --backend gpu >"$tmp/lb" 2>&1
[ $? = 2 ] && grep -q "backend takes cpu or cuda, got 'gpu'" "$tmp/lb" && ok || bad "nebula logits --backend gpu: $(cat "$tmp/lb")"
"$bin/nebula" start --help | grep -q "^usage: nebula start" && ok || bad "nebula start --help"

# ---- a malformed profiles file is refused with its line ----
printf 'profile\tvram_gib\tram_gib\tctx\tprefill_chunk\tvram_keep_gib\tram_keep_gib\nv8-r32\t8\t32\t100\t512\t1\t6\n' >"$tmp/bad.tsv"
"$bin/nebula-prepare" "$tmp/dest/$S1" --profile-table --profiles "$tmp/bad.tsv" >"$tmp/bad.out" 2>&1
[ $? = 2 ] && grep -q "bad.tsv:2: " "$tmp/bad.out" && ok || bad "a profile with ctx 100 was not refused with its line: $(cat "$tmp/bad.out")"
"$bin/nebula-prepare" "$tmp/dest/$S1" --profile-table >"$tmp/tiny-table.md" 2>&1
[ "$(grep -c '^| v' "$tmp/tiny-table.md")" = 16 ] && ! grep -q 'does not fit' "$tmp/tiny-table.md" && ok ||
    bad "--profile-table on the small model: not 16 fitting rows: $(head -n 5 "$tmp/tiny-table.md")"


# ---- requirements not met: the GiB missing, nothing changed ----
hw 16384 65536 0 >"$tmp/hw-disk.env"
hw 16384 16000 100000 >"$tmp/hw-ram.env"
for what in disk ram; do
    d=$tmp/no-$what
    if inst "run-$what" --dest "$d/dest" --state "$d/state" --config "$d/conf/nebula.conf" --hw-file "$tmp/hw-$what.env"; then
        bad "$what: the install went ahead"
    else ok; fi
    [ ! -e "$d" ] && ok || bad "$what: the failed check created $(find "$d" | head -n 3 | tr '\n' ' ')"
done
expect "disk missing" "missing: disk: 0.0 GiB free .* GiB missing" "$tmp/run-disk"
expect "RAM missing" "missing: RAM: 15.6 GiB, the smallest profile needs 30.4 GiB (32 GB): 14.8 GiB missing" "$tmp/run-ram"

# ---- profile selection on faked hardware ----
pick() { # VRAM_MIB RAM_MIB
    hw "$1" "$2" 100000 >"$tmp/hw-pick.env"
    "$bin/nebula-prepare" "$tmp/dest/$S1" --mtp "$tmp/dest/tb-mtp.gguf" --profile auto --hw-file "$tmp/hw-pick.env" \
        --profile-info 2>&1 | sed -n 's/^profile=//p;s/^nebula-prepare: //p'
}
for v in 8 12 16 24; do
    for r in 32 64 96 128; do
        got=$(pick $((v * 1024)) $((r * 1024)))
        [ "$got" = "v$v-r$r" ] && ok || bad "$v GiB VRAM, $r GiB RAM: profile '$got', want v$v-r$r"
        got=$(pick $((v * 1024 * 96 / 100)) $((r * 1024 * 96 / 100)))
        [ "$got" = "v$v-r$r" ] && ok || bad "96% of $v GiB VRAM, $r GiB RAM: profile '$got', want v$v-r$r"
    done
done
got=$(pick $((20 * 1000 * 1000 * 1000 / 1048576)) $((80 * 1000 * 1000 * 1000 / 1048576)))
[ "$got" = v16-r64 ] && ok || bad "20 GB VRAM + 80 GB RAM: profile '$got', want v16-r64"
got=$(pick 6144 65536)
[[ $got == *"no profile for this machine: 6.0 GiB of GPU memory is 1.6 GiB short"* ]] && ok || bad "6 GiB VRAM: '$got'"
# --cpu-only: the RAM class alone; no VRAM budget; the RAM pays the dense weights and K/V first
hw 0 $((96 * 1024)) 100000 >"$tmp/hw-cpu.env"
hw 8192 $((96 * 1024)) 100000 >"$tmp/hw-gpu.env"
"$bin/nebula-prepare" "$tmp/dest/$S1" --mtp "$tmp/dest/tb-mtp.gguf" --profile auto --cpu-only --hw-file "$tmp/hw-cpu.env" --profile-info >"$tmp/pc.env" 2>&1
"$bin/nebula-prepare" "$tmp/dest/$S1" --mtp "$tmp/dest/tb-mtp.gguf" --profile auto --hw-file "$tmp/hw-gpu.env" --profile-info >"$tmp/pg.env" 2>&1
pv() { sed -n "s/^$2=//p" "$1"; }
[ "$(pv "$tmp/pc.env" profile)" = cpu-r96 ] && [ "$(pv "$tmp/pc.env" vram_budget)" = 0 ] && [ "$(pv "$tmp/pc.env" vram_layer)" = 0 ] && ok ||
    bad "--cpu-only on 96 GiB: $(tr '\n' ' ' <"$tmp/pc.env")"
[ "$(pv "$tmp/pc.env" ram_budget)" -lt "$(pv "$tmp/pg.env" ram_budget)" ] && [ "$(pv "$tmp/pc.env" ram_used)" -gt "$(pv "$tmp/pg.env" ram_used)" ] && ok ||
    bad "--cpu-only: the RAM does not pay the dense weights and K/V (cpu: $(pv "$tmp/pc.env" ram_budget) budget $(pv "$tmp/pc.env" ram_used) used; gpu: $(pv "$tmp/pg.env" ram_budget) $(pv "$tmp/pg.env" ram_used))"
"$bin/nebula-prepare" "$tmp/dest/$S1" --cpu-only --profile-table >"$tmp/pt" 2>&1
[ $? = 2 ] && grep -q -- "--cpu-only goes with --profile" "$tmp/pt" && ok || bad "--cpu-only without --profile: $(cat "$tmp/pt")"

# ---- nebula-gen --sparse: a full-size layout that takes no disk ----
"$bin/nebula-gen" "$tmp/sparse.gguf" --layers 2 --sparse -q && ok || bad "nebula-gen --sparse failed"
apparent=$(stat -c %s "$tmp/sparse.gguf" 2>/dev/null || echo 0) used=$(du -k "$tmp/sparse.gguf" 2>/dev/null | cut -f1)
[ "$apparent" -gt $((1 << 30)) ] && [ "${used:-0}" -lt 16384 ] && ok || bad "--sparse: $apparent bytes long, ${used} KiB on disk"
"$bin/nebula-gguf" info --no-tensors "$tmp/sparse.gguf" >/dev/null && ok || bad "--sparse: nebula-gguf cannot open it"
# The self-check's choice of first layers for a model too large for the GPU
# (deploy/install/finish.sh): the layers whose tensors fit the budget.
L=$(BIN=$bin bash -c '. deploy/install/finish.sh; first_layers_fit "$1" $((1 << 40))' _ "$tmp/sparse.gguf") && [ "$L" = 2 ] && ok ||
    bad "first_layers_fit with room for all: '$L', want 2 (all the layers)"
BIN=$bin bash -c '. deploy/install/finish.sh; first_layers_fit "$1" $((1 << 30))' _ "$tmp/sparse.gguf" >/dev/null &&
    bad "first_layers_fit found layers fitting 1 GiB beside a full-size head" || ok
rm -f "$tmp/sparse.gguf"

# ---- docs/INSTALL.md's table is the computed one ----
if bash deploy/install/profile-table.sh "$BUILD" >"$tmp/table.md" 2>"$tmp/table.err"; then ok; else bad "profile-table.sh failed: $(cat "$tmp/table.err")"; fi
sed -n '/<!-- profile table: deploy\/install\/profile-table.sh -->/,/<!-- end of profile table -->/p' docs/INSTALL.md | sed '1d;$d' >"$tmp/doc.md"
if diff -u "$tmp/doc.md" "$tmp/table.md" >"$tmp/table.diff"; then ok; else bad "docs/INSTALL.md's profile table differs from profile-table.sh's output:"; head -n 20 "$tmp/table.diff"; fi

echo "test_install: $((n - fail)) of $n checks passed"
[ "$fail" = 0 ]
