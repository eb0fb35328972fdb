#!/usr/bin/env bash
# test_openai_client.sh — the official `openai` npm client (version locked in
# tests/openai/package-lock.json), unmodified, against Nebula: deploy/start.sh
# serves the demo model (tiny-a) on free ports with a temporary state
# directory, and client.mjs talks to http://127.0.0.1:PORT/v1 (through nginx)
# with apiKey "none": models.list(), a streamed and a non-streamed chat
# completion, a long prompt streamed with its `: prefill` progress comments
# (sent, and skipped by the client), another model id served and echoed, typed
# errors for an unknown field, a bad field and an unknown model looked up, and a
# response_format json_schema answer that fits its schema.
#
# Needs node and npm (make test installs them): without them, or without the
# registry for the first npm ci, this fails loudly rather than passing without
# testing anything.  Run from the repository root with BUILD set (make test does).
set -euo pipefail
BUILD=${BUILD:-build}
bin=$BUILD/bin
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
DIR=tests/openai
fail() { echo "test_openai_client: FAIL: $*" >&2; exit 1; }

. tests/lib/npm-locked.sh
npm_clients "$DIR" "the openai client" fail # the locked packages, installed unless exactly those are there

tmp=$(mktemp -d /tmp/nboai.XXXXXX)
cleanup() {
    local p
    deploy/stop.sh --state "$tmp/s" >/dev/null 2>&1 || true
    for p in $(cat "$tmp/s/nginx.pid" "$tmp/s/coordinator.pid" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
read -r port api_port <<<"$(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"

"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/demo.gguf" --type f32 --name nebula-demo -q || fail "convert"
NEBULA_BIN=$bin deploy/start.sh --model "$tmp/demo.gguf" --demo --threads 1 --wait 60 \
    --port "$port" --api-port "$api_port" --state "$tmp/s" >"$tmp/start.out" 2>&1 ||
    { cat "$tmp/start.out"; fail "deploy/start.sh"; }
node "$DIR/client.mjs" "http://127.0.0.1:$port/v1" || { tail -n 20 "$tmp/s/coordinator.log"; fail "the openai client"; }
deploy/stop.sh --state "$tmp/s" >/dev/null || fail "deploy/stop.sh"
echo "test_openai_client: ok"
