# tiny-a-setup.sh — sourced by the benches that start a coordinator on the
# demo model (alloc-rss.sh, coord-decode.sh): a temporary folder removed at
# exit with the coordinator they started (coord_pid), no nebula.conf of the
# user's, tiny-a converted to f32 ($tmp/a.gguf) and its prompt prefix
# ($tmp/prefix.txt, the fixture's prefix_len ids).  tiny_a_setup BIN.
tiny_a_setup() {
    tmp=$(mktemp -d)
    coord_pid=
    trap '[ -n "$coord_pid" ] && kill "$coord_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
    export XDG_CONFIG_HOME=/nonexistent/nebula-bench
    fx=tests/fixtures/tiny-a
    "$1/nebula-convert" "$fx" "$tmp/a.gguf" --type f32 -q || exit 1
    prefix=$(grep -o '"prefix_len": *[0-9]*' "$fx/manifest.json" | grep -o '[0-9]*$')
    tr -s ' \n' '\n' <"$fx/tokens.txt" | head -n "$prefix" >"$tmp/prefix.txt"
}
