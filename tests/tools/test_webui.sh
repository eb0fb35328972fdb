#!/usr/bin/env bash
# test_webui.sh — the chat page (web/) tested in a real browser against the
# real stack.
#
# 1. node --test tests/web/unit.test.mjs tests/web/modules.test.mjs: the
#    page's SSE parser and the text it builds (documents in the prompt,
#    Markdown export), under node; and the shape of web/js/ (a comment atop
#    each module, at most 400 lines each, imports that exist, no cycles).
# 2. tests/web/run-webui-tests.mjs: playwright-core (locked in
#    tests/web/package-lock.json) drives Debian's chromium, headless, against
#    deploy/start.sh --demo-random on free ports with a temporary state directory:
#    nginx serving web/ and proxying to nebula-coordinator with the demo
#    model.  New chat, streamed answer, rename, reload, delete; thinking
#    on/off; documents; Markdown export; stop; errors (4xx, coordinator gone);
#    the loading progress bar; the prefill progress bar; and the scenarios of
#    tests/web/features.mjs (system prompt, sampling, edit, fork, search,
#    context meter, thinking-only answers, titles, a stopped answer's count,
#    tool calls against tests/web/mock-server.mjs, the coordinator killed
#    with -9 and restarted).
#
# Needs node, npm (npm ci here and in web/), chromium and nginx; CI gets them
# from deploy/install-deps.sh (make test runs it).  Any of them missing is a
# failure with the reason, never a pass.  Run from the repository root with
# BUILD set (make test does).
set -euo pipefail
BUILD=${BUILD:-build}
export BUILD
DIR=tests/web

fail() { echo "test_webui: FAIL: $*" >&2; exit 1; }

. tests/lib/npm-locked.sh
npm_need fail "deploy/install-deps.sh installs it"
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || fail "$CHROMIUM is missing: the browser tests need Debian's chromium (deploy/install-deps.sh installs it)"
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || fail "nginx is not installed (deploy/install-deps.sh installs it)"
[ -x "$BUILD/bin/nebula-coordinator" ] || fail "$BUILD/bin/nebula-coordinator is missing: run make first"
[ -f deploy/start.sh ] || fail "deploy/start.sh is missing"

# The page's vendored packages (web/vendor/), as make run builds them.
make --no-print-directory web >/dev/null || fail "make web failed (npm ci in web/: registry unreachable?)"

# The locked npm packages, installed unless exactly those versions are there.
npm_ci_locked "$DIR" "playwright-core" fail

node --test "$DIR/unit.test.mjs" "$DIR/modules.test.mjs" || fail "unit tests of the page's modules"
CHROMIUM=$CHROMIUM node "$DIR/run-webui-tests.mjs" || fail "browser tests"
echo "test_webui: ok"
