#!/usr/bin/env bash
# test_sdk_dialects.sh — the official `@anthropic-ai/sdk` and `openai` npm clients (versions locked
# in tests/openai/package-lock.json), unmodified, against nebula-coordinator's POST /v1/messages and
# POST /v1/responses (tests/openai/dialects.mjs): the demo model (tiny-a) served directly (HTTP on a
# free port) with --test-hooks, so tool calls, thinking and stop sequences can be scripted.
#
# Needs node and npm (make test installs them): without them, or without the registry for the
# first npm ci, this fails loudly.  Run from the repository root with BUILD set (make test does).
set -euo pipefail
BUILD=${BUILD:-build}
bin=$BUILD/bin
DIR=tests/openai
fail() { echo "test_sdk_dialects: FAIL: $*" >&2; exit 1; }

. tests/lib/npm-locked.sh
npm_clients "$DIR" "the openai and anthropic clients" fail

tmp=$(mktemp -d /tmp/nbsdk.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
"$bin/nebula-convert" tests/fixtures/tiny-a "$tmp/demo.gguf" --type f32 --name nebula-demo -q || fail "convert"
: >"$tmp/coord.log" # there before the background job opens it: the loop reads it at once
"$bin/nebula-coordinator" --model "$tmp/demo.gguf" --runtime "$tmp/run" --threads 1 --http 127.0.0.1:0 --demo --test-hooks \
    2>"$tmp/coord.log" &
pid=$!
port=
for _ in $(seq 1 300); do
    port=$(sed -n 's/^nebula-coordinator: http on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/coord.log" || true)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/api/status" | grep -q '"phase":"ready"' && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/coord.log"; fail "the coordinator exited"; }
    sleep 0.1
done
[ -n "$port" ] || { cat "$tmp/coord.log"; fail "no HTTP port"; }
node "$DIR/dialects.mjs" "http://127.0.0.1:$port" || { tail -n 20 "$tmp/coord.log"; fail "the SDK clients"; }
"$bin/nebulactl" --runtime "$tmp/run" shutdown >/dev/null || fail "nebulactl shutdown"
wait "$pid" || fail "the coordinator exited $?"
pid=
echo "test_sdk_dialects: ok"
