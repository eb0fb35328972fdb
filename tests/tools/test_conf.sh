#!/usr/bin/env bash
# test_conf.sh — nebula.conf from the shell: `nebula config get` prints a
# key's value (the file's, else the built-in default) and refuses an unknown
# key or a bad file naming file:line; a key in a config file changes what the
# coordinator does (engine.ctx → /v1/models' context_length, server.max_queue
# → /api/status), a flag overrides the file, and a bad file stops the
# coordinator (and deploy/start.sh) with exit 2 and file:line.  Run by tests/run-tests.sh with BUILD set.
set -u
BUILD=${BUILD:-build}
bin=$BUILD/bin
tmp=$(mktemp -d)
coord_pid=
stop_coord() { [ -z "$coord_pid" ] || { kill "$coord_pid" 2>/dev/null; wait "$coord_pid" 2>/dev/null; }; coord_pid=; rm -rf "$tmp/run"; }
trap 'stop_coord; rm -rf "$tmp"' EXIT
fail=0 n=0
ok() { n=$((n + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); n=$((n + 1)); }
export XDG_CONFIG_HOME=$tmp/xdg # no user copy: the repository's conf/nebula.conf is the fallback

# nebula config
cat >"$tmp/a.conf" <<'CONF'
[engine]
threads = 1
ctx = 777
[server]
max_queue = 3
CONF
[ "$("$bin/nebula" config get engine.ctx --config "$tmp/a.conf")" = 777 ] && ok || bad "config get engine.ctx"
[ "$("$bin/nebula" config get engine.prefill_chunk --config "$tmp/a.conf")" = 512 ] && ok || bad "a key the file leaves out: its default"
[ "$("$bin/nebula" config get server.port)" = 8090 ] && ok || bad "the repository's file"
[ "$("$bin/nebula" config path)" -ef conf/nebula.conf ] && ok || bad "config path: $("$bin/nebula" config path)"
mkdir -p "$tmp/xdg/nebula" && printf '[server]\nport = 9999\n' >"$tmp/xdg/nebula/nebula.conf"
[ "$("$bin/nebula" config get server.port)" = 9999 ] && ok || bad "the user's copy comes before the repository's"
rm -r "$tmp/xdg/nebula"
"$bin/nebula" config get engine.nope >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "unknown key 'engine.nope'" "$tmp/e" && ok || bad "unknown key: exit $rc, $(cat "$tmp/e")"
printf '[engine]\nthreads = 2\nbackend = tpu\n' >"$tmp/bad.conf"
"$bin/nebula" config get engine.threads --config "$tmp/bad.conf" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -qF "$tmp/bad.conf:3: engine.backend: 'tpu'" "$tmp/e" && ok || bad "bad file: exit $rc, $(cat "$tmp/e")"
"$bin/nebula" config get engine.threads --config "$tmp/none.conf" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--config" "$tmp/e" && ok || bad "a missing --config file: exit $rc, $(cat "$tmp/e")"

# The coordinator reads it: engine.ctx and server.max_queue from the file, --ctx over it.
"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/a.gguf" --type f32 -q || { echo "FAIL: convert"; exit 1; }
api() { # $1 = log, $2 = path: the coordinator's answer
    local port
    port=$(sed -n 's|.*http on http://127.0.0.1:\([0-9]*\).*|\1|p' "$1" | head -1)
    [ -n "$port" ] && curl -fsS -m 5 "http://127.0.0.1:$port$2"
}
run_coord() { # $1 = log, then flags; waits until /api/status says ready
    local log=$1; shift
    "$bin/nebula-coordinator" --model "$tmp/a.gguf" --runtime "$tmp/run" --http 127.0.0.1:0 --backend cpu "$@" 2>"$log" &
    coord_pid=$!
    for _ in $(seq 300); do
        api "$log" /api/status 2>/dev/null | grep -q '"phase": *"ready"' && return 0
        kill -0 "$coord_pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
ctx_of() { python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["nebula"]["context_length"])'; }
if run_coord "$tmp/c1.log" --config "$tmp/a.conf"; then
    [ "$(api "$tmp/c1.log" /v1/models | ctx_of)" = 777 ] && ok || bad "engine.ctx = 777 not in /v1/models: $(api "$tmp/c1.log" /v1/models)"
    api "$tmp/c1.log" /api/status | grep -q '"capacity": *3' && ok || bad "server.max_queue = 3 not in /api/status"
    grep -qF "config: $tmp/a.conf" "$tmp/c1.log" && ok || bad "the coordinator does not say which file it read"
else
    bad "coordinator with --config: $(tail -3 "$tmp/c1.log")"
fi
stop_coord
if run_coord "$tmp/c2.log" --config "$tmp/a.conf" --ctx 555; then
    [ "$(api "$tmp/c2.log" /v1/models | ctx_of)" = 555 ] && ok || bad "--ctx 555 does not override the file"
else
    bad "coordinator with --config and --ctx: $(tail -3 "$tmp/c2.log")"
fi
stop_coord
"$bin/nebula-coordinator" --config "$tmp/bad.conf" --model "$tmp/a.gguf" --http off 2>"$tmp/e" >/dev/null; rc=$?
[ $rc -eq 2 ] && grep -qF "$tmp/bad.conf:3: engine.backend" "$tmp/e" && ok || bad "coordinator with a bad file: exit $rc, $(cat "$tmp/e")"

# deploy/start.sh takes its defaults through `nebula config get`: a bad file stops it first.
BUILD=$BUILD NEBULA_STATE_DIR=$tmp/state bash deploy/start.sh --config "$tmp/bad.conf" >/dev/null 2>"$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -qF "$tmp/bad.conf:3: engine.backend" "$tmp/e" && [ ! -e "$tmp/state" ] && ok \
    || bad "start.sh with a bad file: exit $rc, $(cat "$tmp/e")"

echo "$n checks, $fail failed"
[ "$fail" -eq 0 ]
