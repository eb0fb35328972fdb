// peer.mjs — runs a GGUF in llama.cpp (node-llama-cpp's prebuilt CPU build,
// version locked in package-lock.json) on token ids, no tokenizer involved.
//
//   node peer.mjs MODEL.gguf VOCAB TOKENS.txt PREFIX_LEN GREEDY_REF.txt OUTDIR
//
// Writes to OUTDIR, every row a float32 log-probability vector over the vocabulary
// (llama.cpp's softmax of its logits; node-llama-cpp hands out probabilities, not logits):
//   full.f32      row t: the next-token distribution after TOKENS[0..t] (one prefill)
//   forced.f32    row k: after TOKENS[0..PREFIX_LEN) + GREEDY_REF[0..k) (transformers'
//                 greedy continuation fed back, so each row meets transformers' row k)
//   greedy.txt    llama.cpp's own greedy continuation of TOKENS[0..PREFIX_LEN),
//                 as many ids as GREEDY_REF holds (temperature 0: argmax)
// tests/tools/llamacpp_parity.py compares them with the fixture's transformers outputs.
import fs from "fs";
import path from "path";
import {getLlama} from "node-llama-cpp";

const [model_path, vocab_arg, tokens_path, prefix_arg, greedy_path, out] = process.argv.slice(2);
const ids = (p) => fs.readFileSync(p, "utf8").trim().split(/\s+/).map(Number);
const tokens = ids(tokens_path), ref = ids(greedy_path), prefix = Number(prefix_arg), V = Number(vocab_arg);

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: model_path});
const n_ctx = tokens.length + ref.length + 8;

// One fresh context per run: the sequences share nothing.
async function distributions(seq_ids) {
    const ctx = await model.createContext({contextSize: n_ctx, batchSize: n_ctx, threads: 2});
    const res = await ctx.getSequence().controlledEvaluate(
        seq_ids.map((t) => [t, {generateNext: {probabilities: true}}]));
    const rows = new Float32Array(res.length * V).fill(-Infinity);
    res.forEach((r, i) => {
        for (const [tok, p] of r.next.probabilities) if (p > 0) rows[i * V + tok] = Math.log(p);
    });
    await ctx.dispose();
    return Buffer.from(rows.buffer);
}

fs.mkdirSync(out, {recursive: true});
fs.writeFileSync(path.join(out, "full.f32"), await distributions(tokens));
const forced = await distributions(tokens.slice(0, prefix).concat(ref.slice(0, ref.length - 1)));
fs.writeFileSync(path.join(out, "forced.f32"), forced.subarray((prefix - 1) * V * 4));

const ctx = await model.createContext({contextSize: n_ctx, batchSize: n_ctx, threads: 2});
const greedy = [];
for await (const t of ctx.getSequence().evaluate(tokens.slice(0, prefix), {temperature: 0})) {
    greedy.push(t);
    if (greedy.length >= ref.length) break;
}
fs.writeFileSync(path.join(out, "greedy.txt"), greedy.join(" ") + "\n");
await ctx.dispose();
await model.dispose();
