#!/usr/bin/env python3
"""make-seeds.py — writes the fuzzers' seed corpora (small valid files).

    python3 tests/fuzz/make-seeds.py [OUT_DIR]   (default: tests/fuzz/corpus)

GGUF seeds go to OUT_DIR/gguf/, safetensors seeds to OUT_DIR/safetensors/,
tokenizer texts to OUT_DIR/tokenizer/ (first byte: fuzz_tokenizer.c's
configuration), tokenizer.json files to OUT_DIR/hf_tokenizer_json/ and JSON
schemas to OUT_DIR/schema/.
The layouts are written here from the format descriptions, independently of
core/gguf's writer, so the seeds also check that the reader accepts files it
did not write.  Standard library only; the output is deterministic, so the
committed corpus can be regenerated and compared.
"""
import json
import os
import struct
import sys

# The GPT-2 byte alphabet, from the tokenizer fixture's generator (standard
# library only, like this script).
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_tiny_tokenizer import byte_alphabet  # noqa: E402

# GGUF value types (gguf.h / gguf-py constants).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
PACK = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
        BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# Tensor types: ggml number -> (block size, bytes per block).
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q8_0": (8, 32, 34), "q4_K": (12, 256, 144),
        "bf16": (30, 1, 2), "i8": (24, 1, 1)}


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == STR:
        return gguf_str(value)
    if vtype == ARR:
        elem, items = value
        out = struct.pack("<IQ", elem, len(items))
        return out + b"".join(gguf_value(elem, v) for v in items)
    return struct.pack(PACK[vtype], value)


def pad(n, alignment):
    return (n + alignment - 1) // alignment * alignment


def gguf(kvs, tensors, version=3):
    """kvs: [(key, type, value)]; tensors: [(name, type name, shape)]."""
    alignment = next((v for k, t, v in kvs if k == "general.alignment"), 32)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        head += gguf_str(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    data, offset = b"", 0
    for i, (name, tname, shape) in enumerate(tensors):
        tid, blck, size = GGML[tname]
        n = 1
        for d in shape:
            n *= d
        nbytes = n // blck * size
        head += gguf_str(name) + struct.pack("<I", len(shape))
        head += b"".join(struct.pack("<q", d) for d in shape)
        head += struct.pack("<IQ", tid, offset)
        body = bytes((j * 37 + i * 11 + 5) & 0xFF for j in range(nbytes))
        data += body + bytes(pad(nbytes, alignment) - nbytes)
        offset += pad(nbytes, alignment)
    return head + bytes(pad(len(head), alignment) - len(head)) + data


def every_type_kvs():
    return [
        ("general.architecture", STR, "nebula-seed"),
        ("general.name", STR, "tiny \"quoted\"\nmodel"),
        ("v.u8", U8, 200), ("v.i8", I8, -100), ("v.u16", U16, 60000), ("v.i16", I16, -30000),
        ("v.u32", U32, 4000000000), ("v.i32", I32, -2000000000), ("v.f32", F32, 0.25),
        ("v.bool", BOOL, True), ("v.u64", U64, 2**64 - 1), ("v.i64", I64, -2**63), ("v.f64", F64, 1e300),
        ("a.u8", ARR, (U8, [0, 1, 255])), ("a.i8", ARR, (I8, [-1, 1])),
        ("a.u16", ARR, (U16, [1, 2])), ("a.i16", ARR, (I16, [-2, 2])),
        ("a.u32", ARR, (U32, list(range(12)))), ("a.i32", ARR, (I32, [-3, 3])),
        ("a.f32", ARR, (F32, [0.5, -1.5])), ("a.bool", ARR, (BOOL, [True, False])),
        ("a.u64", ARR, (U64, [2**64 - 1])), ("a.i64", ARR, (I64, [-2**63, 5])),
        ("a.f64", ARR, (F64, [0.1, 2.0])), ("a.empty", ARR, (I32, [])),
        ("tokenizer.ggml.tokens", ARR, (STR, ["<|endoftext|>", "a", "b", "ab", "Ġthe", ""])),
    ]


def gguf_seeds():
    small = [("token_embd.weight", "f32", [8, 6]), ("blk.0.attn_norm.weight", "f16", [16]),
             ("blk.0.attn_q.weight", "q8_0", [32, 2]), ("blk.0.ffn_down.weight", "q4_K", [256]),
             ("output.weight", "bf16", [4, 2, 2, 1])]
    split_keys = [("split.no", U16, 1), ("split.count", U16, 3), ("split.tensors.count", I32, 5)]
    return {
        "every-type.gguf": gguf(every_type_kvs(), small),
        "alignment-64.gguf": gguf([("general.alignment", U32, 64), ("general.architecture", STR, "x")],
                                  [("a", "f32", [3]), ("b", "i8", [5, 3])]),
        "no-tensors.gguf": gguf([("general.architecture", STR, "kv-only"), ("v.bool", BOOL, False)], []),
        "empty.gguf": gguf([], []),
        "shard-2-of-3.gguf": gguf(split_keys, [("blk.1.ffn_up.weight", "q8_0", [64])]),
        "version-2.gguf": gguf([("general.architecture", STR, "v2")], [("t", "f32", [2, 2])], version=2),
    }


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)]."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (pad(len(text), 8) - len(text))
    return struct.pack("<Q", len(text)) + text + data


def st_seeds():
    every = [
        ("u8", "U8", [3], bytes([0, 7, 255])),
        ("f32", "F32", [2, 2], struct.pack("<4f", 1, -2, 0.5, 3.25)),
        ("f16", "F16", [3], struct.pack("<3H", 0x3C00, 0xC000, 0x7BFF)),
        ("bf16", "BF16", [3], struct.pack("<3H", 0x3F80, 0xC060, 0x4049)),
        ("f64", "F64", [2], struct.pack("<2d", 0.1, -1e300)),
        ("i64", "I64", [2], struct.pack("<2q", -5, 2**40)),
        ("i32", "I32", [2], struct.pack("<2i", -7, 7)),
        ("i16", "I16", [2], struct.pack("<2h", -300, 300)),
        ("i8", "I8", [2], struct.pack("<2b", -128, 127)),
        ("bool", "BOOL", [2], bytes([1, 0])),
        ("scalar", "F32", [], struct.pack("<f", 1.5)),
        ("empty", "F32", [0, 4], b""),
    ]
    return {
        "every-dtype.safetensors": safetensors(every, {"format": "pt", "note": "seed"}),
        "one-tensor.safetensors": safetensors([("model.embed_tokens.weight", "BF16", [2, 4], bytes(range(16)))]),
        "metadata-only.safetensors": safetensors([], {"format": "pt"}),
    }


def tokenizer_seeds():
    # first byte: bit 0 qwen35 (else qwen2), bit 1 no normalizer (else NFC), bit 2 parse control tokens
    def seed(config, text):
        return bytes([config]) + (text.encode() if isinstance(text, str) else text)
    return {
        "ascii.txt": seed(0, "Hello world, the thing's ending!\n\n  and  the world"),
        "chat-marks.txt": seed(5, "<|im_start|>user\ne\u0301<|im_end|>\u0338 <think>a\u0323\u0301</think>"),
        "decomposed-nfc.txt": seed(1, "Cafe\u0301 a\u0323\u0301 \u1100\u1161\u11a8 \u304b\u3099 \u0301\u0327"),
        "decomposed-none.txt": seed(2, "Tie\u0302\u0301ng Vie\u0323\u0302t \u1100\u1161\u11a8 \u212b"),
        "jamo-invalid.txt": seed(7, b"\xea\xb0\x80\xe1\x86\xa7 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 e\xff\xcc\x81\xc3"),
        "emoji-compat.txt": seed(4, "\U0001F468\u200d\U0001F469 \U0001F600\ufe0f \ufb01 x\u00b2 \uff76\uff9e \u0958"),
        "invalid.txt": seed(1, b"\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xe6\x97 \x80 e\xcc"),
    }


def hf_json_seeds():
    # The GPT-2 byte alphabet: printable Latin-1 bytes stand for themselves,
    # the other 68 are shifted to U+0100.. in byte order.
    alphabet = byte_alphabet()

    def spell(data):  # bytes -> their byte-level spelling
        return "".join(alphabet[b] for b in data)

    vocab = {alphabet[b]: b for b in range(256)}
    merges = []
    for word in ("the", " the", " world", "\u00e9", "e\u0301"):
        data = word.encode()
        for k in range(2, len(data) + 1):  # every prefix, made from the one before and one byte
            merges.append(spell(data[:k - 1]) + " " + spell(data[k - 1:k]))
            vocab.setdefault(spell(data[:k]), len(vocab))
    added = [
        {"id": len(vocab), "content": "<|im_start|>", "special": True, "normalized": False},
        {"id": len(vocab) + 1, "content": "<|im_end|>", "special": True, "normalized": False},
        {"id": len(vocab) + 2, "content": "<think>", "special": False, "normalized": False},
        {"id": len(vocab) + 4, "content": "\u2581x\u2581", "special": False, "normalized": True},
    ]

    def tokenizer(normalizer, merges=merges, model_extra=None):
        model = {"type": "BPE", "vocab": vocab, "merges": merges}
        model.update(model_extra or {})
        return json.dumps({"version": "1.0", "added_tokens": added, "normalizer": normalizer,
                           "pre_tokenizer": {"type": "ByteLevel"}, "model": model}, ensure_ascii=False).encode()

    pairs = [m.split(" ") for m in merges]
    return {
        "bytes-nfc.json": tokenizer({"type": "NFC"}),
        "pairs-none.json": tokenizer(None, merges=pairs),
        "sequence.json": tokenizer({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Sequence", "normalizers": []}]}),
        "nfkc.json": tokenizer({"type": "NFKC"}),
        "byte-fallback.json": tokenizer(None, model_extra={"byte_fallback": True}),
        "bad-merge.json": tokenizer(None, merges=merges + ["x yz"]),
        "tiny.json": b'{"model": {"vocab": {"a": 0, "b": 1, "ab": 3}, "merges": [["a", "b"]]}, "normalizer": null}',
    }


def schema_seeds():
    """JSON schemas for fuzz_schema.c: every keyword the compiler implements, and a few it refuses."""
    seeds = {
        "object.json": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
                                                          "age": {"type": "integer"}, "ok": {"type": "boolean"}},
                        "required": ["name"], "additionalProperties": False},
        "array.json": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4},
        "enum-anyof.json": {"anyOf": [{"enum": ["a", 1, None, [True]]}, {"const": {"k": "v"}}, {"type": ["string", "null"]}]},
        "defs.json": {"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                      "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}},
                      "$ref": "#/$defs/n"},
        "any.json": {"type": "object"},
        "unsupported.json": {"type": "string", "pattern": "^a+$"},
        "cycle.json": {"definitions": {"a": {"anyOf": [{"$ref": "#/definitions/a"}]}}, "$ref": "#/definitions/a"},
    }
    return {name: json.dumps(s).encode() for name, s in seeds.items()}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    for sub, files in (("gguf", gguf_seeds()), ("safetensors", st_seeds()), ("tokenizer", tokenizer_seeds()),
                       ("hf_tokenizer_json", hf_json_seeds()), ("schema", schema_seeds())):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        for name, blob in files.items():
            with open(os.path.join(out, sub, name), "wb") as f:
                f.write(blob)
            print(f"{sub}/{name}: {len(blob)} bytes")


if __name__ == "__main__":
    main()
