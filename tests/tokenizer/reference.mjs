// reference.mjs — encodes the parity corpus with an independent tokenizer
// (@huggingface/tokenizers, the pure-JS tokenizer.json runner) and writes one
// line of space-separated ids per string, like `nebula-tokenize --lines`.
//
//   node reference.mjs TOKENIZER_DIR CORPUS.jsonl OUT_DIR
//
// Three variants of the same tokenizer.json, each written to OUT_DIR:
//   ref-qwen2-nfc.txt  the file as shipped (NFC normalizer); strings that NFC
//                      would change are written as "-" (llama.cpp and Nebula
//                      do not normalize, so they are not comparable there)
//   ref-qwen2.txt      normalizer removed: the Qwen2 split regex on raw text
//   ref-qwen35.txt     normalizer removed and the split regex swapped for the
//                      qwen35 one (letters [\p{L}\p{M}]+, marks out of the
//                      punctuation class), as llama.cpp's qwen35 pre-tokenizer
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

const shipped = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const corpus = fs.readFileSync(corpus_path, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));

// The split regex must be the one we think it is, or the variants mean nothing.
const split = shipped.pre_tokenizer.pretokenizers[0];
if (split.type !== "Split" || split.pattern.Regex !== QWEN2) {
  console.error("reference.mjs: the shipped tokenizer.json does not use the Qwen2 split regex");
  process.exit(1);
}

function variant(regex, keep_normalizer) {
  const json = structuredClone(shipped);
  if (!keep_normalizer) json.normalizer = null;
  json.pre_tokenizer.pretokenizers[0].pattern.Regex = regex;
  return new Tokenizer(json, config);
}

function run(name, tokenizer, skip) {
  const lines = corpus.map((s) => (skip(s) ? "-" : tokenizer.encode(s, { add_special_tokens: false }).ids.join(" ")));
  fs.writeFileSync(path.join(out_dir, name), lines.join("\n") + "\n");
}

run("ref-qwen2-nfc.txt", variant(QWEN2, true), (s) => s.normalize("NFC") !== s);
run("ref-qwen2.txt", variant(QWEN2, false), () => false);
run("ref-qwen35.txt", variant(QWEN35, false), () => false);
