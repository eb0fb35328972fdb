// reference.mjs — encodes the parity corpus with an independent tokenizer
// (@huggingface/tokenizers, the pure-JS tokenizer.json runner) and writes one
// line of space-separated ids per string, like `nebula-tokenize --lines`.
//
//   node reference.mjs TOKENIZER_DIR CORPUS.jsonl OUT_DIR
//
// Four variants of the same tokenizer.json, each written to OUT_DIR:
//   ref-qwen2-nfc.txt    the file as shipped (NFC normalizer, Qwen2 split regex)
//   ref-qwen35-nfc.txt   as shipped but with the qwen35 split regex (letters
//                        [\p{L}\p{M}]+, marks out of the punctuation class), as
//                        llama.cpp's qwen35 pre-tokenizer: what the model runs
//   ref-qwen2-none.txt   normalizer removed: the Qwen2 regex on raw text
//   ref-qwen35-none.txt  normalizer removed, qwen35 regex
// and, for the round-trip checks:
//   none/                a tokenizer folder whose tokenizer.json has
//                        "normalizer": null (nebula-tokenize --make-gguf input)
//   normalized.jsonl     each string as the shipped tokenizer normalizes it
//                        before the split: added tokens cut out of the raw text,
//                        every other section put in NFC on its own
//   normalized-count.txt how many strings that changes
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const [dir, corpus_path, out_dir] = process.argv.slice(2);
if (!out_dir) {
  console.error("usage: node reference.mjs TOKENIZER_DIR CORPUS.jsonl OUT_DIR");
  process.exit(2);
}
const fail = (msg) => {
  console.error(`reference.mjs: ${msg}`);
  process.exit(1);
};

const shipped = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const config_text = fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8");
const config = JSON.parse(config_text);
const corpus = fs.readFileSync(corpus_path, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));

// The variants mean something only if the shipped file is what we think it is.
const split = shipped.pre_tokenizer.pretokenizers[0];
if (split.type !== "Split" || split.pattern.Regex !== QWEN2) fail("the shipped tokenizer.json does not use the Qwen2 split regex");
if (shipped.normalizer?.type !== "NFC") fail("the shipped tokenizer.json does not declare the NFC normalizer");
if (shipped.added_tokens.some((t) => t.normalized)) fail("an added token is matched after normalization (normalized: true)");

function variant(regex, keep_normalizer) {
  const json = structuredClone(shipped);
  if (!keep_normalizer) json.normalizer = null;
  json.pre_tokenizer.pretokenizers[0].pattern.Regex = regex;
  return new Tokenizer(json, config);
}

function run(name, tokenizer) {
  const lines = corpus.map((s) => tokenizer.encode(s, { add_special_tokens: false }).ids.join(" "));
  fs.writeFileSync(path.join(out_dir, name), lines.join("\n") + "\n");
}

const as_shipped = variant(QWEN2, true);
run("ref-qwen2-nfc.txt", as_shipped);
run("ref-qwen35-nfc.txt", variant(QWEN35, true));
run("ref-qwen2-none.txt", variant(QWEN2, false));
run("ref-qwen35-none.txt", variant(QWEN35, false));

const none_dir = path.join(out_dir, "none");
fs.mkdirSync(none_dir, { recursive: true });
fs.writeFileSync(path.join(none_dir, "tokenizer.json"), JSON.stringify({ ...shipped, normalizer: null }));
fs.writeFileSync(path.join(none_dir, "tokenizer_config.json"), config_text);

// The normalized text, through the library's own added-token splitter and
// normalizer (what its encode does before the pre-tokenizer).
const splitter = as_shipped.splitter_unnormalized, normalizer = as_shipped.normalizer;
if (typeof splitter?.split !== "function" || typeof normalizer !== "function") fail("the tokenizer's splitter or normalizer moved");
const normalized = corpus.map((s) =>
  splitter.split(s).map((section) => (as_shipped.added_tokens_map.has(section) ? section : normalizer(section))).join(""),
);
fs.writeFileSync(path.join(out_dir, "normalized.jsonl"), normalized.map((s) => JSON.stringify(s)).join("\n") + "\n");
fs.writeFileSync(path.join(out_dir, "normalized-count.txt"), `${normalized.filter((s, i) => s !== corpus[i]).length}\n`);
