// build-vendor.mjs — copies the browser builds of the page's npm packages
// from web/node_modules/ into web/vendor/ (make web runs it after npm ci).
//
// The page loads nothing from the internet: markdown (marked), sanitising
// (DOMPurify) and code highlighting (highlight.js) are served by nginx from
// web/vendor/, next to the page.  marked and DOMPurify ship ES modules that a
// browser imports as they are.  highlight.js ships its core only as CommonJS
// (lib/core.js, which requires nothing), so it is wrapped here into an ES
// module; its languages ship as ES modules (es/languages/*.js) and a chosen
// set of them is copied.  The licences travel with the code.
//
// Usage: node web/build-vendor.mjs   (from anywhere; paths are relative to this file)
import { mkdirSync, readFileSync, writeFileSync, copyFileSync, rmSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const nm = join(here, "node_modules");
const out = join(here, "vendor");

// Languages people paste into a chat most; others fall back to plain text.
const LANGUAGES = [
  "bash", "c", "cpp", "csharp", "css", "diff", "dockerfile", "go", "ini", "java",
  "javascript", "json", "kotlin", "lua", "makefile", "markdown", "nginx", "perl",
  "php", "plaintext", "python", "r", "ruby", "rust", "shell", "sql", "swift",
  "typescript", "xml", "yaml", "cmake", "latex", "haskell", "scala", "x86asm",
];

function need(path) {
  if (!existsSync(path)) {
    console.error(`build-vendor: ${path} is missing: run npm ci in web/ first (make web does)`);
    process.exit(1);
  }
  return path;
}

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "highlight", "languages"), { recursive: true });

// marked and DOMPurify: ES modules as shipped (their source maps are left
// behind, so the trailing sourceMappingURL comment goes too).
const stripMap = (s) => s.replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n");
writeFileSync(join(out, "marked.esm.js"), stripMap(readFileSync(need(join(nm, "marked/lib/marked.esm.js")), "utf8")));
writeFileSync(join(out, "purify.es.mjs"), stripMap(readFileSync(need(join(nm, "dompurify/dist/purify.es.mjs")), "utf8")));

// highlight.js core: CommonJS without requires → ES module.
const core = readFileSync(need(join(nm, "highlight.js/lib/core.js")), "utf8");
if (/\brequire\(/.test(core)) {
  console.error("build-vendor: highlight.js lib/core.js now requires other files; the wrapper must change");
  process.exit(1);
}
writeFileSync(join(out, "highlight", "core.js"),
  "// highlight.js core (lib/core.js of the npm package), wrapped as an ES module by web/build-vendor.mjs\n" +
  "const module = { exports: {} };\n" +
  core +
  "\nexport default module.exports;\n");
for (const lang of LANGUAGES) {
  copyFileSync(need(join(nm, `highlight.js/es/languages/${lang}.js`)), join(out, "highlight", "languages", `${lang}.js`));
}
writeFileSync(join(out, "highlight", "languages.js"),
  "// The languages web/build-vendor.mjs copied (generated).\n" +
  `export const LANGUAGES = ${JSON.stringify(LANGUAGES)};\n`);
for (const style of ["github.css", "github-dark.css"]) {
  copyFileSync(need(join(nm, `highlight.js/styles/${style}`)), join(out, "highlight", style));
}

// Licences.
copyFileSync(need(join(nm, "marked/LICENSE")), join(out, "LICENSE.marked"));
copyFileSync(need(join(nm, "dompurify/LICENSE")), join(out, "LICENSE.dompurify"));
copyFileSync(need(join(nm, "highlight.js/LICENSE")), join(out, "LICENSE.highlight.js"));

const versions = Object.fromEntries(["marked", "dompurify", "highlight.js"].map(
  (p) => [p, JSON.parse(readFileSync(join(nm, p, "package.json"), "utf8")).version]));
writeFileSync(join(out, "versions.json"), JSON.stringify(versions, null, 2) + "\n");
console.log(`build-vendor: web/vendor/ ← marked ${versions.marked}, dompurify ${versions.dompurify}, ` +
  `highlight.js ${versions["highlight.js"]} (${LANGUAGES.length} languages)`);
