# check.sh — sourced by the shell tests of the bench tools: a counted check
# and the verdict.
#
# check WHAT CMD...: runs CMD; prints "ok   WHAT" or "FAIL WHAT" and counts
# the failures in $fails.  check_done: prints the count and returns 0 only
# when nothing failed (the test's exit status).
fails=0
check() {
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
check_done() {
    echo "$fails failed"
    [ "$fails" -eq 0 ]
}
