// compare.mjs — compares two files of id lines (reference vs Nebula) line by
// line and shows the first mismatches with the string that caused them.
//
//   node compare.mjs LABEL CORPUS.jsonl REFERENCE.txt OURS.txt
//
// Every line is compared (nothing is skipped).  Exit 1 on any mismatch or a
// differing line count.
import fs from "node:fs";

const [label, corpus_path, ref_path, ours_path] = process.argv.slice(2);
if (!ours_path) {
  console.error("usage: node compare.mjs LABEL CORPUS.jsonl REFERENCE.txt OURS.txt");
  process.exit(2);
}
const lines = (p) => fs.readFileSync(p, "utf8").replace(/\n$/, "").split("\n");
const corpus = lines(corpus_path);
const ref = lines(ref_path);
const ours = lines(ours_path);

if (ref.length !== corpus.length || ours.length !== corpus.length) {
  console.error(`${label}: line counts differ: corpus ${corpus.length}, reference ${ref.length}, nebula ${ours.length}`);
  process.exit(1);
}

let mismatches = 0;
for (let i = 0; i < corpus.length; i++) {
  if (ref[i] === ours[i]) continue;
  if (++mismatches <= 10) {
    console.log(`${label}: MISMATCH line ${i + 1}: ${corpus[i].slice(0, 300)}`);
    console.log(`  reference: ${ref[i].slice(0, 300)}`);
    console.log(`  nebula:    ${ours[i].slice(0, 300)}`);
  }
}
console.log(`${label}: ${corpus.length} strings compared, ${mismatches} mismatches`);
process.exit(mismatches ? 1 : 0);
