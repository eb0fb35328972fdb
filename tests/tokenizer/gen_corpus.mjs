// gen_corpus.mjs — writes the tokenizer parity corpus: one JSON string per line.
//
// Deterministic (a fixed-seed PRNG, no clock, no environment): hand-written
// strings for every category the tokenizer must get right, the same strings
// with whitespace around them, an exhaustive contraction matrix, and random
// mixtures of the categories.  Random code points are drawn only from blocks
// assigned before Unicode 13.0, so libutf8proc (Unicode 13 to 15 depending
// on the distribution) and node's ICU agree on their categories, combining
// classes and decompositions.
//
//   node gen_corpus.mjs [COUNT] > corpus.jsonl      (COUNT random strings, default 10000)

const COUNT = Number(process.argv[2] ?? 10000);

// mulberry32: small, fast, and the same everywhere.
let seed = 0x5eed1234;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];
const cp = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
const repeat = (f, n) => Array.from({ length: n }, f).join("");

// ---------------------------------------------------------------- hand-written

const handwritten = {
  english: [
    "Hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged that a single man in possession of a good fortune must be in want of a wife.",
    "I'm sure you'll agree we'd've done it, but they're not here and it isn't clear who's to blame.",
    "Mr. O'Neil's cat—named \"Rocky\"—didn't eat; it's 3:45 p.m. (GMT+2).",
    "e.g. i.e. etc. vs. U.S.A. Ph.D.", "ALL CAPS SHOUTING DON'T WON'T CAN'T I'LL WE'VE THEY'RE I'D",
    "camelCaseIdentifier snake_case_name kebab-case-name SCREAMING_SNAKE", "a", "I", " ", "",
  ],
  contractions: [
    "don't", "Don't", "DON'T", "'s", "'S", "'t", "'re", "'RE", "'rE", "'Re", "'ve", "'m", "'ll", "'LL", "'lL", "'d",
    "''s", "'''", "'", "''", "x'sy", "'sabc", "abc's", "rock'n'roll", "O'Reilly's", "y'all'd've", "'ll'll",
    "it’s (typographic apostrophe)", "can`t", "'x", "' s", "'\ns", "1's", "ü's", "日本's",
  ],
  cjk: [
    "日本語テキスト", "你好，世界！今天是2026年8月13日 🎉", "東京タワーは333メートルです。", "中文标点：“引号”、《书名》……",
    "한국어 텍스트입니다. 안녕하세요!", "ひらがな カタカナ ｶﾀｶﾅ 漢字", "漢字かな交じり文", "我爱北京天安门", "Ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ",
    "第一章　はじめに", "中英mixed混合text文本", "一二三四五六七八九十百千万亿", "㊀㊁㊂ ① ② ③ ⑴ ⒈",
  ],
  emoji: [
    "🙂", "😀😃😄", "👍👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑🏿‍🤝‍🧑🏻", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤︎", "1️⃣ 2️⃣ #️⃣ *️⃣",
    "🇯🇵🇺🇸🇫🇷🇩🇪", "🇺🇳🇪🇺", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 🏴󠁧󠁢󠁥󠁮󠁧󠁿", "I ❤️ NY", "smile😀 end", "😀 😀  😀   😀", "👁️‍🗨️", "🤷‍♀️🤦🏼‍♂️",
    "©️®️™️", "🕴🏽‍♂️", "🫠🫡🫶", "emoji: 🎉🎊🎈.", "\u200d", "a\u200db", "\ufe0f", "x\ufe0f",
  ],
  marks: [
    "e\u0301", "Cafe\u0301 de\u0301ja\u0300 vu", "Café déjà vu", "a\u0308o\u0308u\u0308", "n\u0303", "\u0301", "\u0301\u0301abc",
    "Z\u0351\u036b\u0343\u036a\u0302a\u0360\u035al\u0352g\u0350o\u0350", "Tie\u0302\u0301ng Vie\u0323\u0302t", "Tiếng Việt có dấu",
    "שָׁלוֹם עֲלֵיכֶם", "हिन्दी भाषा", "क्षत्रिय", "ภาษาไทย", "ที่นี่", "ﷺ", "Å Å Å", "ﬁ ﬂ", "x\u20dd", "1\u20e3",
    " \u0301", "!\u0301", "\u0301!", "a \u0301 b", "\n\u0301", "\t\u0300x", "9\u0301", "\u0903", "ñ\u0303\u0303",
  ],
  digits: [
    "123abc", "abc123", "1234567890", "3.14159", "-42", "+1 (555) 123-4567", "1,000,000.00", "0x1F 0b1010 0o777",
    "2026-08-13T12:34:56Z", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳", "१२३४", "๑๒๓", "１２３", "²³¹", "½ ¼ ¾", "Ⅻ Ⅳ ⅷ", "①②", "𝟏𝟐𝟑",
    "v1.2.3-rc.4", "1e-10", "42nd 3rd 1st", "100%", "$9.99", "€5,00", "x²+y²=z²",
  ],
  whitespace: [
    "  \n\n  x", "a  b", "a   b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\r\nb", "a\r\n\r\nb", "a \n b", "a\n \nb",
    "trailing   ", "trailing\n", "trailing \n ", "   leading", "\n\nleading", "\t\tindented", " ", "  ", "\n", "\r\n",
    "\t", " \t \n \r ", "a\u00a0b", "a\u00a0\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b", "a\u0085b", "a\u2003\u2003b",
    "a\u200bb", "a\ufeffb", "\ufeff", "a\u000bb", "a\u000cb", "a\u202fb", "x \u00a0y", "\u00a0\u00a0", "  !", "  1",
    "   \u0301", "\n\n\n\n", " \n", "\n ", "line1\nline2\n\nline4\n", "a\r\rb", "a\rb", "para.\n\n\nNext",
  ],
  code: [
    "def f(x):\n    return x * 2\n",
    "def main() -> None:\n\tprint(f\"{x=}\")  # comment\n\n\nif __name__ == '__main__':\n    main()\n",
    "#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }",
    "const f = async (x) => { await fetch(`/api/${x}`); };\n",
    "if (a && b || !c) { x >>= 2; y <<= 3; z ^= ~w; }",
    "SELECT * FROM users WHERE id = 1 AND name LIKE '%o''brien%';",
    "<div class=\"x\"><p>Hello</p></div>", "{\"key\": [1, 2, {\"nested\": null}], \"b\": true}",
    "fn main() { let v: Vec<u32> = (0..10).collect(); println!(\"{:?}\", v); }",
    "x = lambda a, b: (a ** 2 + b ** 2) ** 0.5", "    \n    \n", "\t\t}\n\t}\n}", "/* block */ // line",
    "git commit -m \"fix: don't crash\" && make -j2", "$ ls -la ~/.config | grep '^d'", "a->b->c; p = &q; *r = **s;",
    "matrix[i][j] = matrix[j][i];;;", "print('''triple''')", "#!/usr/bin/env bash\nset -euo pipefail\n",
  ],
  punctuation: [
    "!!!", "???", "...", "…", "—", "–", "-- --- ----", "!?!?", "(((", ")))", "[]{}<>", "\"'`", "«guillemets»", "„Anführung“",
    "¿Qué? ¡Sí!", "a,b;c:d", "a.b.c", "~!@#$%^&*()_+", "==>", "<=>", "!=", "//", "\\\\", "\\n", "#", "@user #tag",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "...\n", "!\n\n", "?\r\n",
    " !", " !!", "! !", " ...", "§ ¶ † ‡ • ·", "°C ℃ ℉", "→ ← ↑ ↓ ⇒", "∀x∃y: x∈A ∧ y∉B", "♠♣♥♦", "⌘⌥⇧",
  ],
  scripts: [
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "नमस्ते दुनिया", "สวัสดีครับ ผมชื่ออเล็กซ์", "Привет, мир!", "Съешь же ещё этих мягких французских булок",
    "안녕하세요 세계", "Γειά σου Κόσμε", "שלום עולם", "Բարեւ աշխարհ", "გამარჯობა", "ሰላም ልዑል", "வணக்கம்", "ສະບາຍດີ",
    "Hello مرحبا नमस्ते สวัสดี Привет 안녕 你好", "English then العربية then English", "Kiểm tra tiếng Việt", "Türkçe ğüşıöç İı",
    "Ελληνικά και English 123", "ॐ मणि पद्मे हूँ", "ཀ་ཁ་ག", "ᠮᠣᠩᠭᠣᠯ", "ᚠᛇᚻ", "𐌰𐌱𐌲", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "Ⓐⓑⓒ",
  ],
  special: [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>", "<|endoftext|>", "<think>\nhmm\n</think>\n\nAnswer",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "text<|im_end|>text", "<|im_start|><|im_end|>", "<<|im_end|>>", "<|im_end",
    "im_end|>", "<|im_end|><|im_end|>", " <|im_end|> ", "\n<|im_end|>\n", "<think></think>", "< think>", "<think >", "<THINK>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<tool_response>ok</tool_response>", "x<think>y", "<|vision_start|><|image_pad|><|vision_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>", "</think>", "<|box_start|>(1,2)<|box_end|>", "<|<|im_end|>|>", "<|endoftext|><|endoftext|>",
  ],
  // What NFC changes (and what it must not): canonical reordering of marks,
  // composition (with its exclusions), Hangul jamo, singletons, two-part
  // vowels, kana voicing, marks next to special tokens, and compatibility
  // characters that only NFKC would fold.
  nfc: [
    "a\u0301\u0323", "a\u0323\u0301", "e\u0302\u0323", "e\u0323\u0302", "o\u031b\u0301", "o\u0301\u031b", "u\u0308\u0304",
    "u\u0304\u0308", "a\u0328\u0301", "\u1e9b\u0323", "A\u030a", "A\u0300\u0301\u0302\u0303\u0304", "a\u0301\u0301",
    "\u03b1\u0313\u0301\u0345", "\u03b1\u0345\u0313\u0301", "\u0399\u0308\u0301", "q\u0307\u0323", "d\u0307\u0323",
    "\u1e0b\u0323", "D\u0323\u0307", "\u0301\u0327", "\u0327\u0301x", " \u0323\u0301", "1\u0301", "\u{1F600}\u0301",
    "\u05e9\u05c1\u05bc", "\u05e9\u05bc\u05c1", "\u0915\u094d\u093c", "\u0301".repeat(40) + "\u0327",
    "\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1100\u1161\u11a7", "\uac00\u11a7", "\uc8e0\u11a7\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\u1100\u1100\u1161", "\u115f\u1161", "\u1100\u1160", "\u11a8", "\u1161", "\u1100 \u1161", "\uac00\u1161",
    "\uac01\u11a8", "\u1113\u1161", "\ud7b0", "\uffa1\uffc2", "\u3131\u314f", "\ud55c\uad6d\uc5b4\u11a8",
    "\u212b", "\u2126", "\u212a", "\u037e", "a\u0387b", "\u1fef", "a\u0340", "e\u0341", "\u0343", "\u0344", "a\u0344",
    "\u0374", "\u1f71", "a\u2000b\u2001c", "\u2329x\u232a", "\uf900\uf901\ufa10\ufa6c", "\u{2f800}\u{2f801}",
    "\u0958", "\u0915\u093c", "\u09dc\u0a33\u0b5c", "\u0f43\u0f73", "\ufb1d\ufb2a\ufb4e", "\u2adc", "\u{1d15e}\u{1d160}",
    "\u0b47\u0b3e", "\u0bc6\u0bbe", "\u0bc6\u0bd7", "\u0d46\u0d3e", "\u09c7\u09be", "\u09c7\u09d7", "\u0cc6\u0cc2",
    "\u0dd9\u0dcf", "\u1025\u102e", "\u1b05\u1b35", "\u304b\u3099", "\u30cf\u309a", "\u30a6\u3099", "\u3046\u3099",
    "\u309d\u3099", "\u30fd\u3099", "\u30ef\u3099", "\uff76\uff9e", "\u309b", "\u304b\u309b",
    "ﬁ", "ﬀ ﬃ ﬄ ﬅ ﬆ", "x²", "H₂O", "①", "㈱", "℃", "™", "Ⅻ", "ｶﾀｶﾅ", "Ａ", "µ", "ſ", "ǅ Ǆ", "ŉ", "…", "ℌℍ", "㍻", "¼",
    "<|im_end|>\u0338", ">\u0338", "=\u0338", "<\u0338", "<think>\u0338", "\u0338<|im_start|>", "<|im_start|>\u0301user",
    "x\u0301<|im_end|>\u0301", "<|endoftext|>\u0308a", "a<think>\u0301", "</think>\u0327", "<tool_call>\u0338\u0301",
    ...["Tiếng Việt có dấu", "Ελληνικά ἄγαθός ᾅδης", "한국어 텍스트입니다", "Café déjà vu", "Åström Ørsted Ñandú",
        "ご飯をパンにしますか", "ガギグゲゴ パピプペポ", "Ώς ἐν ᾍδου", "Crème brûlée à la française"].map((x) => x.normalize("NFD")),
  ],
  control: ["a\u0000b", "\u0000", "\u0001\u0002\u0003", "esc\u001b[31mred\u001b[0m", "del\u007f", "\u0080\u009f", "bell\u0007"],
};

// ---------------------------------------------------------------- random atoms

const words = [
  "the", "of", "and", "tokenizer", "inference", "Qwen", "model", "GPU", "expert", "Nebula", "hello", "World", "naïve",
  "Straße", "façade", "jalapeño", "résumé", "über", "日本", "東京", "北京", "世界", "こんにちは", "カタカナ", "서울", "한국어",
  "Москва", "привет", "القاهرة", "مرحبا", "हिन्दी", "नमस्ते", "ภาษาไทย", "กรุงเทพ", "Ελλάδα", "שלום", "don't", "it's",
  "WE'LL", "they've", "I'm", "she'd", "you're", "x", "y", "_", "__init__", "foo_bar", "fooBar", "HTTPServer", "v2",
];
const emojis = [
  "😀", "😂", "🥲", "🤖", "🚀", "🎉", "🔥", "💯", "✅", "❌", "⭐", "🌍", "🍕", "🐱", "🐶", "👍", "👍🏽", "👋🏿", "🙏🏻",
  "👨‍💻", "👩‍🔬", "👨‍👩‍👧", "🏳️‍🌈", "❤️‍🔥", "🇯🇵", "🇧🇷", "🇮🇳", "🇨🇦", "1️⃣", "☕", "☀️", "✈️", "🧑🏾‍🚀", "🏴󠁧󠁢󠁷󠁬󠁳󠁿",
];
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_pad|>"];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\n", "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028"];
const marks = () => cp(0x300, 0x36f);
// Marks of many combining classes (1 overlays, 7 nukta, 8 kana voicing, 9
// virama, 10-26 Hebrew points, 202 attached below, 216 horn, 220 below, 230
// above, 240 iota subscript), so that canonical reordering has work to do.
const nfc_marks = [
  0x300, 0x301, 0x302, 0x303, 0x304, 0x306, 0x307, 0x308, 0x30a, 0x30c, 0x313, 0x31b, 0x323, 0x327, 0x328, 0x331, 0x334,
  0x338, 0x342, 0x345, 0x5b0, 0x5b4, 0x5bc, 0x5c1, 0x5c2, 0x93c, 0x94d, 0x3099, 0x309a, 0x20d2, 0x1dc0,
].map((c) => String.fromCodePoint(c));
const nfc_bases = [
  "a", "e", "i", "o", "u", "A", "E", "O", "n", "c", "s", "z", "d", "q", "α", "ω", "ι", "Α", "и", "е", "ש", "א", "क", "ड",
  "か", "は", "ウ", "ひ", " ", "1", ">", "=", "<", "!", "\n", "é", "ü", "ạ", "ἀ",
];
const nfc_singletons = [
  "\u212b", "\u2126", "\u212a", "\u037e", "\u0387", "\u1fef", "\u0340", "\u0341", "\u0343", "\u0344", "\u0374",
  "\u1f71", "\u2000", "\u2001", "\u2329", "\u232a", "\uf900", "\ufa10", "\u0958", "\u0f73", "\ufb2a", "\u2adc",
];
const compat = ["ﬁ", "ﬂ", "²", "₂", "①", "㈱", "℃", "™", "Ⅻ", "ｶ", "ﾞ", "Ａ", "µ", "ſ", "ǅ", "ŉ", "…", "ℌ", "㍻", "¼", "ㄱ", "ﾡ"];
const jamo = () => {
  const L = cp(0x1100, 0x1112), V = cp(0x1161, 0x1175), T = cp(0x11a8, 0x11c2);
  return pick([L + V, L + V + T, L + L + V, V + T, T, L, cp(0xac00, 0xd7a3) + T, L + V + T + T, cp(0x1113, 0x115e) + V]);
};
const nfc_atoms = [
  () => pick(nfc_bases) + repeat(() => pick(nfc_marks), 1 + int(4)),
  jamo,
  () => pick(nfc_singletons),
  () => pick(compat),
  () => pick(words).normalize("NFD"),
  () => pick(specials) + repeat(() => pick(nfc_marks), 1 + int(2)),
];
const ranges = [
  [0x21, 0x7e], [0xc0, 0xff], [0x100, 0x17f], [0x391, 0x3c9], [0x400, 0x4ff], [0x5d0, 0x5ea], [0x621, 0x64a],
  [0x660, 0x669], [0x905, 0x939], [0x966, 0x96f], [0xe01, 0xe3a], [0xe40, 0xe4e], [0x3041, 0x3096], [0x30a1, 0x30fa],
  [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xff5e], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f],
  [0x1f600, 0x1f64f], [0x1f300, 0x1f5ff],
];

const atoms = [
  [6, () => pick(words)],
  [3, () => repeat(() => cp(...pick(ranges)), 1 + int(6))],
  [2, () => pick(emojis)],
  [2, () => repeat(() => cp(0x30, 0x39), 1 + int(8))],
  [2, () => pick(spaces)],
  [1, () => repeat(() => pick(spaces), 1 + int(4))],
  [2, () => repeat(() => pick("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~…—«»¿¡"), 1 + int(4))],
  [1, () => pick(specials)],
  [1, () => pick(["a", "e", "o", "n", "k", "α", "и", "ا", "क", "ก", " ", "!", "1"]) + repeat(marks, 1 + int(3))],
  [1, () => "'" + pick(["s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "Ve", "M", "LL", "D", "x", ""])],
  [2, () => pick(nfc_atoms)()],
  [1, () => pick(Object.values(handwritten).flat())],
];
const atom_weight = atoms.reduce((s, [w]) => s + w, 0);

function random_atom() {
  let r = rand() * atom_weight;
  for (const [w, f] of atoms) if ((r -= w) < 0) return f();
  return atoms[0][1]();
}

function random_string() {
  const n = rand() < 0.05 ? 20 + int(80) : 1 + int(10);
  let s = "";
  for (let i = 0; i < n; i++) s += (i && rand() < 0.5 ? " " : "") + random_atom();
  return s;
}

// ---------------------------------------------------------------- assemble

const out = [];
for (const list of Object.values(handwritten)) {
  for (const s of list) {
    out.push(s);
    for (const pad of [" ", "  ", "\n", "\t", " \n "]) out.push(pad + s, s + pad, pad + s + pad);
  }
}
for (const c of ["s", "t", "re", "ve", "m", "ll", "d", "x"]) {
  for (const variant of [c, c.toUpperCase(), c[0].toUpperCase() + c.slice(1)]) {
    for (const before of ["", "a", "A", " ", "1", "!", "日", "é", "\n"]) {
      for (const after of ["", "a", " ", "'", "1", "\n"]) out.push(before + "'" + variant + after);
    }
  }
}
for (let c = 0x20; c < 0x7f; c++) {
  const ch = String.fromCharCode(c);
  out.push(ch, " " + ch, "  " + ch, ch + ch, "a" + ch + "b", ch + "\n");
}
// Every canonical composite (except most Hangul syllables: one in 50), alone
// and decomposed, so that NFC composes each one, exclusions included.  Left
// out: the composites of the scripts Unicode 16 added (Todhri, Tulu-Tigalari,
// Gurung Khema, Kirat Rai), which node's ICU may know and libutf8proc does
// not yet; Unicode 14 and 15 added none.
const unicode16_scripts = [[0x105c0, 0x105ff], [0x11380, 0x113ff], [0x16100, 0x1613f], [0x16d40, 0x16d7f]];
for (let c = 0xa0; c < 0x30000; c++) {
  if ((c >= 0xd800 && c <= 0xdfff) || (c >= 0xac00 && c <= 0xd7a3 && (c - 0xac00) % 50)) continue;
  if (unicode16_scripts.some(([lo, hi]) => c >= lo && c <= hi)) continue;
  const ch = String.fromCodePoint(c), nfd = ch.normalize("NFD");
  if (nfd !== ch) out.push(ch, nfd);
}
for (let i = 0; i < COUNT; i++) out.push(random_string());
out.push("word ".repeat(2000), "x".repeat(5000), "日本".repeat(1500), " ".repeat(3000) + "end", "\n".repeat(1000));

process.stdout.write(out.map((s) => JSON.stringify(s)).join("\n") + "\n");
