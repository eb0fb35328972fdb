#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages Nebula needs, and only those missing.
#
#   deploy/install-deps.sh           install what is missing (root, or sudo)
#   deploy/install-deps.sh --check   list what is missing; exit 1 if anything is
#
# Idempotent: when everything is present it prints one line and does nothing.
# Each package is listed with the reason Nebula needs it.  A row whose second
# word is cmd=NAME counts as present when the command NAME is (node and npm
# installed from elsewhere than Debian, e.g. NodeSource, must not be replaced).
set -euo pipefail

# package            why
PACKAGES=(
  "build-essential   C compiler, make (builds everything)"
  "pkg-config        finds library flags at build time"
  "git               the build stamps binaries and benchmark rows with the commit"
  "clang             libFuzzer targets (make fuzz) and the fuzz-corpus replay in make test"
  "libclang-rt-dev   libFuzzer and sanitizer runtimes for clang"
  "libcjson-dev      JSON parsing: safetensors headers, config.json, index.json"
  "libcriterion-dev  C unit tests (make test)"
  "libutf8proc-dev   Unicode categories for the tokenizer's pre-split"
  "libzmq3-dev       the control plane between the coordinator, the workers and nebulactl"
  "libssl-dev        SHA-256 (OpenSSL EVP) for the checksums of nebula-prepare's outputs"
  "liburing-dev      io_uring reads of cold experts and n-gram pages (nebula-ssd-pager)"
  "libmicrohttpd-dev the coordinator's HTTP API (OpenAI-compatible, SSE streaming)"
  "libinih-dev       parses conf/nebula.conf, the one INI file of defaults (core/conf)"
  "libjemalloc-dev   the heap of every Nebula process (linked by the Makefile; not in the sanitized build)"
  "python3           small build/test scripts (standard library only)"
  "python3-jinja2    tests/api/test_chat_template.py renders the released chat template with jinja2, as transformers does"
  "chromium          headless browser of the web page's tests (tests/web/, driven by playwright-core)"
  "nginx             serves the chat page and proxies the API (run by deploy/start.sh, not as the system service)"
  "curl              deploy/start.sh checks that the page and the API answer"
  "iproute2          ss: deploy/start.sh names the program that holds a busy port"
  "nodejs cmd=node   the web page's build (make web) and the JS tests (openai client, tokenizer parity)"
  "npm cmd=npm       installs the locked JS packages of web/ and tests/ (npm ci)"
)

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  -h|--help) sed -n "2,10p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "install-deps.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps.sh: this script supports Debian/Ubuntu (dpkg/apt) only." >&2
  exit 1
fi

missing=()
for row in "${PACKAGES[@]}"; do
  pkg=${row%% *}
  rest=${row#"$pkg"}; rest=${rest#"${rest%%[! ]*}"}
  if [[ $rest == cmd=* ]]; then
    cmd=${rest%% *}
    command -v "${cmd#cmd=}" >/dev/null 2>&1 && continue
  fi
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$row")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: missing packages:"
for row in "${missing[@]}"; do echo "  $row"; done
[ "$check_only" -eq 1 ] && exit 1

SUDO=
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo
  else echo "install-deps: need root or sudo to install them." >&2; exit 1; fi
fi

names=()
for row in "${missing[@]}"; do names+=("${row%% *}"); done
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${names[@]}"
echo "install-deps: installed ${names[*]}"

# Debian starts the system nginx (port 80, all interfaces) when the package is
# installed.  Nebula runs its own nginx on 127.0.0.1 only; a system service
# that exists only because of this script is stopped and disabled again.
if [[ " ${names[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null 2>&1 &&
   systemctl is-enabled --quiet nginx 2>/dev/null; then
  if $SUDO systemctl disable --now nginx >/dev/null 2>&1; then
    echo "install-deps: stopped and disabled the system nginx service the package started (Nebula runs its own)"
  else
    echo "install-deps: note: the system nginx service (port 80) is running; Nebula does not need it"
  fi
fi
