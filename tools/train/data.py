#!/usr/bin/env python3
"""Collect redistributable documentation text from this machine into train / held-out splits.

Sources (see tools/train/DATA.md for the licences): Debian packages' documentation under
/usr/share/doc (README, NEWS, *.txt, *.md, plain or gzipped; never the copyright files' legal
text twice), man pages rendered with `man -Tutf8 -l` (plain text, backspaces removed), and
Python's standard library sources (/usr/lib/python3.*, PSF licence).  Man pages also give
chat-format question/answer pairs (the NAME line and the DESCRIPTION's first paragraph), so the
model learns to answer in ChatML.

Deterministic: files are read in sorted order, each document goes to held-out when the first
byte of sha1(its source path) is < HELD (about 2 %), and the output is byte-identical between runs.
Output in OUT/: train.txt, heldout.txt (documents separated by "<|endoftext|>" lines),
sources.tsv (path, family, licence, bytes, split).
usage: data.py OUT [--max-mb 30] [--man-pages 1500]
"""
import argparse
import glob
import gzip
import hashlib
import os
import re
import subprocess

EOT = "<|endoftext|>"
HELD = 5  # of 256: ~2 %
DOC_NAMES = re.compile(r"(README|NEWS|FAQ|TODO|HOWTO|USAGE|INSTALL)[^/]*$|\.(txt|md|rst)(\.gz)?$", re.I)


def licence_of(pkg_dir):
    """The first License: field of a machine-readable Debian copyright file, else 'see copyright'."""
    try:
        with open(os.path.join(pkg_dir, "copyright"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("License:"):
                    return line.split(":", 1)[1].strip() or "see copyright"
    except OSError:
        return "none"
    return "see copyright"


def read_text(path):
    op = gzip.open if path.endswith(".gz") else open
    try:
        with op(path, "rb") as f:
            raw = f.read(2_000_000)
    except OSError:
        return None
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def clean(t):
    t = t.replace("\r\n", "\n").replace("\t", "    ")
    t = re.sub(r"[^\S\n]+\n", "\n", t)
    return re.sub(r"\n{3,}", "\n\n", t).strip()


def doc_files():
    for pkg in sorted(glob.glob("/usr/share/doc/*")):
        lic = licence_of(pkg)
        if lic == "none":
            continue
        for root, dirs, files in os.walk(pkg):
            dirs.sort()
            for fn in sorted(files):
                p = os.path.join(root, fn)
                if DOC_NAMES.search(fn) and not os.path.islink(p):
                    yield p, "debian-doc:" + os.path.basename(pkg), lic


def python_files():
    for base in sorted(glob.glob("/usr/lib/python3.[0-9]*")):
        for p in sorted(glob.glob(base + "/*.py")) + sorted(glob.glob(base + "/*/*.py")):
            if "/test" not in p and "site-packages" not in p:
                yield p, "python-stdlib", "PSF-2.0"


def man_pages(limit):
    pages = sorted(glob.glob("/usr/share/man/man1/*.1*")) + sorted(glob.glob("/usr/share/man/man8/*.8*"))
    for p in pages[:limit]:
        if os.path.islink(p):
            continue
        try:
            r = subprocess.run(["man", "--nh", "--nj", "-Tutf8", "-l", p], capture_output=True, timeout=20,
                               env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0"})
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode:
            continue
        text = re.sub(r".\x08", "", r.stdout.decode("utf-8", "replace"))
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
        yield p, text


def section(text, name):
    m = re.search(r"^%s\n(.*?)(?=^\S)" % name, text, re.M | re.S)
    return re.sub(r"\s+", " ", m.group(1)).strip() if m else ""


def chat(q, a):
    return f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{a}<|im_end|>"


def man_chat(text):
    """ChatML question/answer pairs from a rendered man page (NAME, DESCRIPTION, SYNOPSIS), or []."""
    name = section(text, "NAME")
    m = re.match(r"([\w.+-]+(?:, [\w.+-]+)*) [-\u2010\u2013\u2014]+ (.+)", name)
    if not m:
        return []
    cmd, what = m.group(1).split(",")[0], m.group(2).rstrip(".")
    desc = section(text, "DESCRIPTION")
    desc = " ".join(re.split(r"(?<=[.!?]) ", desc)[:3])[:600]
    out = [chat(f"What does the {cmd} command do?",
                f"`{cmd}` is a command that does this: {what}." + (f" {desc}" if desc else ""))]
    out.append(chat(f"Which command can I use to {what[0].lower() + what[1:]}?" if what else f"What is {cmd}?",
                    f"You can use `{cmd}`: {what}."))
    syn = section(text, "SYNOPSIS")[:300]
    if syn:
        out.append(chat(f"How do I run {cmd}?", f"The synopsis of `{cmd}` is: {syn}"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--max-mb", type=float, default=30)
    ap.add_argument("--man-pages", type=int, default=1500)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    budget = int(a.max_mb * 1e6)
    outs = {s: open(os.path.join(a.out, s + ".txt"), "w", encoding="utf-8") for s in ("train", "heldout")}
    log = open(os.path.join(a.out, "sources.tsv"), "w", encoding="utf-8")
    log.write("path\tfamily\tlicence\tbytes\tsplit\n")
    total = 0

    def emit(path, fam, lic, text):
        nonlocal total
        split = "heldout" if hashlib.sha1(path.encode()).digest()[0] < HELD else "train"
        outs[split].write(text + "\n" + EOT + "\n")
        log.write(f"{path}\t{fam}\t{lic}\t{len(text.encode())}\t{split}\n")
        total += len(text.encode())

    for path, text in man_pages(a.man_pages):
        t = clean(text)
        if len(t) > 200:
            emit(path, "man", "per package (/usr/share/doc/PKG/copyright)", t)
            for i, qa in enumerate(man_chat(t)):
                emit(f"{path}#qa{i}", "man-qa", "derived from the man page", qa)
    for path, fam, lic in list(doc_files()) + list(python_files()):
        if total >= budget:
            break
        t = read_text(path)
        if t and len(t) > 200:
            emit(path, fam, lic, clean(t))
    for f in outs.values():
        f.close()
    log.close()
    print(f"{a.out}: {total / 1e6:.1f} MB of text")


if __name__ == "__main__":
    main()
