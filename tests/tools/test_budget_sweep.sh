#!/usr/bin/env bash
# budget-sweep.sh and budget_plot.py (issue 15 item 6) on made-up reports in the two tools'
# row formats: the table's values and ratios, the SVG's series, llama.cpp's exps=CPU row drawn
# at every budget, a cut report (no zero-slot row) failing, bad arguments refused, and
# budget-sweep.sh --plot-only redrawing from the reports in OUT.  The measuring itself is
# bench-cuda.sh's and peer-llamacpp.sh's (tests/tools/test_bench_cuda.sh, test_peer_llamacpp.sh).
set -u
. tests/lib/counted.sh
plot=tools/bench/budget_plot.py sweep=tools/bench/budget-sweep.sh
head='| configuration | prompt | prefill tok/s | TTFT s | decode tok/s | ms/token | VRAM hit |
|---|---:|---:|---:|---:|---:|---:|'
neb() { # $1 file, $2 slots tok/s, $3 zero-slot tok/s
    printf '%s\n| slots | 512 | 75.7 | 6.76 | **%s** (24.0–26.0) | 39.0 | 68.2 %% |\n| zero-slot | 512 | 52.9 | 9.67 | %s (10.0–11.0) | 95.1 | 0.0 %% |\n| slots | 4096 | 123.2 | 33.26 | 13.13 | 76.2 | 68.0 %% |\n' \
        "$head" "$2" "$3" >"$1"
}
mkdir -p "$tmp/out"
neb "$tmp/out/nebula-8.md" 20.00 10.00
neb "$tmp/out/nebula-12.md" 25.00 10.00
printf '%s\n| llama.cpp vram (-ngl 99 -ncmoe 44 -fa 1) | 512 | 150.0 | 3.4 | 8.00 (7.9–8.1) | 125.0 | — |\n| llama.cpp cpu-experts (-ngl 99 -ot exps=CPU -fa 1) | 512 | 125.0 | 4.1 | 5.00 (4.9–5.1) | 200.0 | — |\n' "$head" >"$tmp/out/peer-8.md"
printf '%s\n| llama.cpp vram (-ngl 99 -ncmoe 40 -fa 1) | 512 | 179.2 | 2.9 | 10.00 (9.9–10.1) | 100.0 | — |\n' "$head" >"$tmp/out/peer-12.md"
python3 "$plot" --out "$tmp/p" "12=$tmp/out/nebula-12.md,$tmp/out/peer-12.md" "8=$tmp/out/nebula-8.md,$tmp/out/peer-8.md" >"$tmp/t" 2>"$tmp/e" \
    && ok || bad "budget_plot: $(cat "$tmp/e")"
grep -qF '| 8 GiB | 512 | 20.00 | 10.00 | 8.00 | 5.00 | 2.50× | 2.00× |' "$tmp/t" && ok || bad "8 GiB row: $(cat "$tmp/t")"
# 12 GiB: llama.cpp's exps=CPU row (measured at 8) carried over; slots / the best llama.cpp = 25 / 10
grep -qF '| 12 GiB | 512 | 25.00 | 10.00 | 10.00 | 5.00 | 2.50× | 2.50× |' "$tmp/t" && ok || bad "12 GiB row: $(cat "$tmp/t")"
[ "$(sed -n 3p "$tmp/t" | cut -d'|' -f2)" = " 8 GiB " ] && ok || bad "rows not sorted by budget: $(cat "$tmp/t")"
cmp -s "$tmp/t" "$tmp/p/budget.md" && ok || bad "budget.md differs from what was printed"
[ "$(grep -c '<polyline' "$tmp/p/budget.svg")" = 4 ] && ok || bad "the SVG should have 4 series: $(grep -c '<polyline' "$tmp/p/budget.svg")"
python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$tmp/p/budget.svg" 2>"$tmp/e" && ok || bad "the SVG is not XML: $(cat "$tmp/e")"
grep -q '>8 GiB<' "$tmp/p/budget.svg" && grep -q '>12 GiB<' "$tmp/p/budget.svg" && ok || bad "the SVG's budget axis"
# a report cut short (no zero-slot row) fails, naming it
grep -v '^| zero-slot' "$tmp/out/nebula-8.md" >"$tmp/cut.md"
python3 "$plot" --out "$tmp/p2" "8=$tmp/cut.md" >/dev/null 2>"$tmp/e"
[ $? = 1 ] && grep -q "no 'zero-slot' row" "$tmp/e" && ok || bad "a cut report: $(cat "$tmp/e")"
python3 "$plot" --out "$tmp/p2" "8=$tmp/nope.md" >/dev/null 2>"$tmp/e"
[ $? = 1 ] && grep -q "cannot read" "$tmp/e" && ok || bad "a missing report: $(cat "$tmp/e")"
python3 "$plot" --out "$tmp/p2" "eight=$tmp/cut.md" >/dev/null 2>"$tmp/e"
[ $? = 2 ] && ok || bad "a bad budget argument: $(cat "$tmp/e")"
# budget-sweep.sh: arguments, then --plot-only from OUT's reports
bash "$sweep" --help | grep -q -- '--peer-dir' && ok || bad "budget-sweep --help"
bash "$sweep" --budgets 8,x >/dev/null 2>"$tmp/e"
[ $? = 2 ] && grep -q "budgets" "$tmp/e" && ok || bad "bad --budgets: $(cat "$tmp/e")"
bash "$sweep" --gen >/dev/null 2>"$tmp/e"
[ $? = 2 ] && grep -q "needs a value" "$tmp/e" && ok || bad "an option without its value: $(cat "$tmp/e")"
bash "$sweep" --peer-dir "$tmp/nope" --out "$tmp/o2" >/dev/null 2>"$tmp/e"
[ $? = 2 ] && grep -q "not a directory" "$tmp/e" && ok || bad "a missing --peer-dir: $(cat "$tmp/e")"
bash "$sweep" --budgets 8,12 --out "$tmp/out" --plot-only >"$tmp/t2" 2>"$tmp/e" && ok || bad "--plot-only: $(cat "$tmp/e")"
cmp -s "$tmp/t" "$tmp/t2" && [ -s "$tmp/out/budget.svg" ] && ok || bad "--plot-only's table differs: $(cat "$tmp/t2")"
verdict test_budget_sweep
