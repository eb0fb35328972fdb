# npm-locked.sh — sourced by the tests that run npm packages (the tokenizer
# parity test, the openai client test, the ggml oracle, the browser tests).
#
# npm_need FAIL WHY: fails the test (FAIL, its failure function) unless node
# and npm are installed; WHY ends the message ("node is not installed (WHY)").
npm_need() {
    local fail=$1 why=$2
    command -v node >/dev/null || "$fail" "node is not installed ($why)"
    command -v npm >/dev/null || "$fail" "npm is not installed ($why)"
}

# npm_ci_locked DIR WHAT FAIL: runs `npm ci` in DIR unless every package its
# package-lock.json names is already installed at exactly the locked version
# (so repeated test runs do not reinstall, and a stale node_modules is
# replaced).  WHAT names the packages in the progress line; FAIL is the
# calling test's failure function, called with a message when npm ci fails.
# Further arguments go to npm ci; with --omit=optional the lock's optional
# packages (node-llama-cpp's GPU builds, 600 MB) are neither installed nor
# checked.
npm_ci_locked() {
    local dir=$1 what=$2 fail=$3
    shift 3
    local omit=0
    case " $* " in *" --omit=optional "*) omit=1 ;; esac
    if node -e '
        const lock = require(process.argv[1] + "/package-lock.json").packages;
        const omit = process.argv[2] === "1";
        for (const [p, v] of Object.entries(lock)) {
            if (!p || (omit && v.optional)) continue;
            const got = require(process.argv[1] + "/" + p + "/package.json").version;
            if (got !== v.version) process.exit(1);
        }' "$PWD/$dir" "$omit" 2>/dev/null; then
        return 0
    fi
    echo "installing $what (npm ci)"
    npm ci --prefix "$dir" --no-audit --no-fund "$@" >/dev/null ||
        "$fail" "npm ci --prefix $dir failed (registry unreachable?)"
}

# npm_clients DIR WHAT FAIL: what a test of npm clients against the
# coordinator needs first: node and npm, a built $bin/nebula-coordinator, and
# DIR's locked packages (WHAT names them in messages; FAIL as above).
npm_clients() {
    local dir=$1 what=$2 fail=$3
    npm_need "$fail" "needed for $what"
    [ -x "$bin/nebula-coordinator" ] || "$fail" "$bin/nebula-coordinator is missing: run make first"
    npm_ci_locked "$dir" "$what" "$fail"
}
