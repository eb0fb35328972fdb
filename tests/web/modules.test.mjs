// modules.test.mjs — the shape of web/js/ (node --test), read as text: every
// module starts with a comment naming it, none is over 400 lines, every name
// imported from a sibling is exported by it, and the imports between
// modules, static or dynamic, have no cycle (docs/WEBUI.md, "Modules").
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const JS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "web", "js");
const files = readdirSync(JS).filter((f) => f.endsWith(".js")).sort();
const src = Object.fromEntries(files.map((f) => [f, readFileSync(join(JS, f), "utf8")]));

// The siblings a module imports: {from: "x.js", names: [...] or null for `* as`/dynamic}.
function imports(text) {
  const out = [];
  for (const m of text.matchAll(/^import\s+([\s\S]*?)\s+from\s+"\.\/([\w-]+\.js)";/gm)) {
    const named = /^\{([\s\S]*)\}$/.exec(m[1].trim());
    const names = named ? named[1].split(",").map((n) => n.trim().split(/\s+as\s+/)[0]).filter(Boolean) : null;
    out.push({ from: m[2], names });
  }
  for (const m of text.matchAll(/import\(\s*"\.\/([\w-]+\.js)"\s*\)/g)) out.push({ from: m[1], names: null });
  return out;
}

function exported(text) {
  return new Set([...text.matchAll(/^export\s+(?:async\s+)?(?:function\*?|const|let|class)\s+([\w$]+)/gm)].map((m) => m[1]));
}

test("web/js: each module starts with a comment naming it and has at most 400 lines", () => {
  assert.ok(files.length > 0, `no modules in ${JS}`);
  for (const f of files) {
    assert.ok(src[f].startsWith(`// ${f} — `), `${f} does not start with "// ${f} — what it is for"`);
    const lines = src[f].split("\n").length - (src[f].endsWith("\n") ? 1 : 0);
    assert.ok(lines <= 400, `${f} has ${lines} lines (at most 400)`);
  }
});

test("web/js: every imported name is exported by its module", () => {
  for (const f of files) {
    for (const { from, names } of imports(src[f])) {
      assert.ok(from in src, `${f} imports ./${from}, which does not exist`);
      for (const n of names || []) assert.ok(exported(src[from]).has(n), `${f} imports ${n} from ${from}, which does not export it`);
    }
  }
});

test("web/js: no import cycles", () => {
  const graph = Object.fromEntries(files.map((f) => [f, [...new Set(imports(src[f]).map((i) => i.from))]]));
  const done = new Set();
  const visit = (f, path) => {
    const seen = path.indexOf(f);
    assert.ok(seen < 0, `import cycle: ${[...path.slice(seen), f].join(" → ")}`);
    if (done.has(f)) return;
    for (const g of graph[f] || []) visit(g, [...path, f]);
    done.add(f);
  };
  for (const f of files) visit(f, []);
});
