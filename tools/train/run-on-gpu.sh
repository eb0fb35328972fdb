#!/usr/bin/env bash
# The demo model on the GPU machine: train (resumable), then export, convert, measure.
#
# The device runs one command for at most 10 minutes, so this script does what fits in one call
# and is run again until it prints DONE: each call trains for at most CALL_MINUTES (default 8.5)
# and checkpoints into WORK (build/train: an ignored path, kept between calls while the machine
# stays warm; a cold machine starts over).  The step count is fixed on the first call from the
# measured step time so that training takes TRAIN_MINUTES (default 16) in all: three calls (8.5,
# 8.5 minutes of training, then ~4 minutes of export and measurements), ~25 minutes of device
# time with the machine's start.  The last call
# evaluates (held-out perplexity, MTP top-1 agreement, routing concentration), exports the HF
# directory, converts it (TYPE, default q4_k_m, a published-like mix) and checks the file is
# ≤ 40 MiB, checks Nebula's tokenizer against the training ids, runs `nebula hotlist` (and on the
# synthetic model of the same shapes, for the routing concentration side by side), sample
# chats and MTP speculative decoding at draft windows 1..4, and leaves in $OUT (≤ 8 files of
# ≤ 16 MiB come back): demo.gguf split into 15 MiB parts (cat demo.gguf.part-* > demo.gguf),
# and report.tar.gz (results.json, train.log, routing.tsv, hotlist.tsv, samples.txt, spec.txt,
# tokcheck.txt, the HF config).
#
# Data: DATA (default tools/train/work/data: tokenizer.json, tokenizer_config.json, train.bin,
# heldout.bin, heldout.txt), built on the development machine by tools/train/build-data.sh and
# carried (carry: ["tools/train/work/data"]). TRAIN_ARGS: more train.py options (a CPU proof:
# SIZE=toy TRAIN_ARGS="--device cpu --batch 4 --seq 64 --steps 12 --warmup 2 --eval-batches 2").
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${DATA:-tools/train/work/data}
WORK=${WORK:-build/train}
OUT=${OUT:-$WORK/out}
TYPE=${TYPE:-q4_k_m}
TRAIN_MINUTES=${TRAIN_MINUTES:-16}
TAIL_AFTER=${TAIL_AFTER:-300} # seconds: a call that trained longer leaves the rest (~4 min) to the next
CALL_MINUTES=${CALL_MINUTES:-8.5}
SIZE=${SIZE:-demo}
PY=${PY:-python3}
BIN=build/bin
mkdir -p "$WORK" "$OUT"
t0=$(date +%s)
for f in tokenizer.json train.bin heldout.bin heldout.txt; do
    [ -f "$DATA/$f" ] || { echo "FAIL: $DATA/$f missing (tools/train/build-data.sh, then carry $DATA)"; exit 1; }
done
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
# The binaries build on the CPUs while the GPU trains (first call only).
if [ ! -x $BIN/nebula ] || [ ! -x $BIN/nebula-convert ] || [ ! -x $BIN/nebula-tokenize ]; then
    (make -j"$(nproc)" $BIN/nebula $BIN/nebula-convert $BIN/nebula-tokenize >"$WORK/make.log" 2>&1; echo "rc=$?" >>"$WORK/make.log") &
fi
set +e
$PY tools/train/train.py --data "$DATA" --out "$WORK" --size "$SIZE" --minutes "$TRAIN_MINUTES" \
    --call-minutes "$CALL_MINUTES" --threads 4 ${TRAIN_ARGS:-} 2>&1 | tee -a "$WORK/stdout.log"
rc=${PIPESTATUS[0]}
set -e
wait
if [ "$rc" = 3 ]; then echo "CONTINUE: run the same command again (checkpoint in $WORK)"; exit 0; fi
[ "$rc" = 0 ] || { echo "FAIL: train.py exited $rc"; exit 1; }
if [ $(($(date +%s) - t0)) -gt "$TAIL_AFTER" ]; then
    echo "CONTINUE: training is done; run the same command again for the export and the measurements"; exit 0
fi
grep -q '^rc=0' "$WORK/make.log" 2>/dev/null || [ -x $BIN/nebula ] || { tail -20 "$WORK/make.log"; echo "FAIL: build"; exit 1; }
G=$WORK/demo.gguf
DESC="Nebula's demo model: a small model (~55 M parameters, the Qwen4Exp architecture) trained for minutes on one GPU \
on the documentation of a Debian system (man pages, /usr/share/doc). It is not Qwen3.8-Flash-Next: its answers are short \
and often wrong; it shows the chat, speculative drafts and expert routing working on real weights (docs/DEMO.md)."
$BIN/nebula-convert "$WORK/hf" "$G" --type "$TYPE" --name nebula-demo-docs --description "$DESC" -q
size=$(stat -c %s "$G")
echo "gguf: $size bytes ($TYPE)"
[ "$size" -le $((40 * 1024 * 1024)) ] || echo "WARN: $G is over 40 MiB"
# Nebula's tokenizer against the ids the model was trained on (the first 4000 lines of held-out text).
head -n 4000 "$DATA/heldout.txt" >"$WORK/tok-sample.txt" # whole lines: no UTF-8 sequence cut
$BIN/nebula-tokenize -m "$G" --file "$WORK/tok-sample.txt" >"$WORK/tok-nebula.txt"
$PY - "$DATA/heldout.bin" "$WORK/tok-nebula.txt" "$DATA/tokenizer.json" >"$WORK/tokcheck.txt" <<'EOF'
import sys, numpy as np
sys.path.insert(0, "tools/train")
neb = [int(x) for x in open(sys.argv[2]).read().split()]
ref = np.fromfile(sys.argv[1], np.uint16)[: len(neb)].tolist()
same = next((i for i, (a, b) in enumerate(zip(neb, ref)) if a != b), min(len(neb), len(ref)))
print(f"nebula-tokenize: {len(neb)} ids; identical to the training ids for the first {same}")
EOF
# shellcheck disable=SC2046 # one argument per id
$BIN/nebula-tokenize -m "$G" --decode $(cat "$WORK/tok-nebula.txt") >"$WORK/tok-decoded.txt"
cmp -s "$WORK/tok-decoded.txt" "$WORK/tok-sample.txt" && echo "round trip: the ids decode to the text byte for byte" >>"$WORK/tokcheck.txt" ||
    echo "round trip: FAILS (the decoded text differs)" >>"$WORK/tokcheck.txt"
cat "$WORK/tokcheck.txt"
# The held-out chat questions (their answers were never trained on) and a few of our own.
$PY -c 'import re, sys; print("\n".join(re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", open(sys.argv[1]).read())[:60]))' \
    "$DATA/heldout.txt" >"$WORK/prompts.txt"
printf '%s\n' "What is a man page?" "How do I list the files in a directory?" "What is Python?" \
    "How do I copy a file?" "Which command can I use to search text in files?" "What does the tar command do?" \
    "How do I change the permissions of a file?" "What does the ssh command do?" "How do I run make?" \
    "Which command can I use to show disk usage?" "What does the kill command do?" "How do I run git?" \
    "What is a shell?" "Which command can I use to compress a file?" "What does the cron daemon do?" >>"$WORK/prompts.txt"
$BIN/nebula hotlist -m "$G" --prompts "$WORK/prompts.txt" --gen 32 --out "$WORK/hotlist.tsv" --threads "$(nproc)"
# The synthetic model of the same shapes (random weights, the converter's calibrated router skew)
# on the same prompts as ids, for the routing concentration side by side.
$BIN/nebula-convert --synthetic "$WORK/hf/config.json" "$WORK/synthetic.gguf" --type "$TYPE" -q
while read -r q; do
    $BIN/nebula-tokenize -m "$G" "$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$q")"
done <"$WORK/prompts.txt" >"$WORK/prompt-ids.txt"
$BIN/nebula hotlist -m "$WORK/synthetic.gguf" --ids --prompts "$WORK/prompt-ids.txt" --gen 32 \
    --out "$WORK/hotlist-synthetic.tsv" --threads "$(nproc)"
$PY tools/train/routing_share.py "$WORK/hotlist.tsv" "$WORK/hotlist-synthetic.tsv" | tee "$WORK/routing-nebula.txt"
: >"$WORK/samples.txt"
for q in "What does the ls command do?" "What does the grep command do?" "What is a man page?" "How do I copy a file?"; do
    { echo "### $q"; $BIN/nebula generate -m "$G" --chat "$q" --think off -n 96 --seed 1 --threads "$(nproc)" 2>/dev/null; echo; } >>"$WORK/samples.txt"
done
cat "$WORK/samples.txt"
# MTP: greedy speculative decoding at fixed windows (its output equals plain decoding's);
# accepted/pass at window N minus that at N-1 estimates P(the first N drafts are all accepted).
: >"$WORK/spec.txt"
head -8 "$WORK/prompts.txt" | while read -r q; do
    for n in 1 2 3 4; do
        echo "draft $n: $q: $($BIN/nebula generate -m "$G" --chat "$q" --think off -n 128 --greedy --spec mtp --draft $n \
            --threads "$(nproc)" 2>&1 >/dev/null | grep 'speculative:' | sed 's/; windows.*//')" >>"$WORK/spec.txt"
    done
done
cat "$WORK/spec.txt"
cp "$WORK/hf/config.json" "$WORK/config.json"
tar -C "$WORK" -czf "$OUT/report.tar.gz" results.json train.log routing.tsv routing-nebula.txt hotlist.tsv hotlist-synthetic.tsv samples.txt spec.txt \
    tokcheck.txt config.json
split -b 15M -d "$G" "$OUT/demo.gguf.part-"
ls -la "$OUT"
echo "DONE: $OUT (cat demo.gguf.part-* > demo.gguf; sha256 $(sha256sum "$G" | cut -c1-16))"
