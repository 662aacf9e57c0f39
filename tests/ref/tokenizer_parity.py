#!/usr/bin/env python3
"""Token-id parity between donto's tokenizer (through tests/tok_dump) and
Hugging Face `tokenizers` (Tokenizer.from_file(tokenizer.json), truncation
at max_length, no padding).

String sets compared (every one must match exactly):
  corpus   the "text" of every line of the JSONL files given as arguments
  edge     hand-written edge cases (accents, CJK, emoji, controls, all kinds
           of whitespace, scripts, punctuation, URLs, special tokens, ...)
  long     word-length limit (100 characters) and truncation (600+ tokens)
  fuzz     seeded random strings over code points of all planes, plus
           random-cased vocabulary words glued with marks and separators
  sweep    "a<c>b" for every Unicode scalar value c (skip with --no-sweep)
  bytes    random byte strings, many not valid UTF-8; the reference sees
           them decoded with errors="replace" (the header's definition)
  maxlen   a sample again at small max_len values (2, 3, 16)

Exit status 0 only if every id list is identical. Mismatches are printed
(text repr, both id lists), the first few per set.
"""
import argparse
import json
import os
import random
import subprocess
import sys

from tokenizers import Tokenizer


def edge_cases():
    e = [
        "", " ", "   ", "\t\n\r", "a", "A", "hello world", "Hello, World!",
        # accents and combining sequences
        "café", "naïve", "Ångström", "résumé façade jalapeño", "cafe\u0301", "A\u030a",
        "e\u0301\u0302\u0303\u0304x", "\u0301leading mark", "trailing mark\u0301",
        "Zürich Straße ŒUVRE Æsir", "İstanbul ıi", "ǅemal ǈ", "ΆΈΉΊΌΎΏ ΐ ΰ", "ﬁnance ﬀ",
        "Ⅻ ⅻ ℃ ™ ℡ Ω K Å", "x\u0345y", "q\U0001D16D\U0001D165", "\u1e9e\u00df",
        "a\u034fb", "\u0344\u0958\u2adc",
        # CJK and neighbours
        "中文字符", "我爱北京天安门 and London", "日本語のテキストです。カタカナ",
        "한국어 텍스트 입니다", "漢字かなカナ한글latin", "𠀀𪛖𫝀𫠠𫠝𫡂𬺰", "豈更車賈", "丽丸乁",
        "\u3400\u4dbf\u4e00\u9fff\U00020000\U0002a6df\U0002a700\U0002b73f\U0002b740\U0002b81f",
        "\U0002b820\U0002b91f\U0002b920\U0002ceaf\U0002ceb0\U0002f800\U0002fa1f",
        # emoji
        "😀", "I ❤️ NY", "👍🏽", "👨‍👩‍👧‍👦 family", "🇺🇸🇯🇵 flags", "🏳️‍🌈", "#️⃣ keycap",
        "emoji😀inside", "🤷🏾‍♀️", "\U0001f9d1\u200d\U0001f4bb",
        # control and format characters
        "a\x00b", "a\x07b", "a\x1bb", "esc\x1b[31mred\x1b[0m", "a\u200bb", "\ufeffBOM",
        "soft\u00adhyphen", "a\ufffdb", "\ufffd", "\x00", "a\x7fb", "a\x85b", "a\x0bb\x0cc",
        "a\x1cb\x1dc\x1ed\x1fe", "rtl\u200fmark\u200e", "word\u2060joiner", "\U000e0001tag\U000e007f",
        "pua\ue000\U000f0000\U0010fffd", "\u2066iso\u2069", "a\u180eb", "a\u061cb",
        # whitespace kinds
        "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2029b", "a\u1680b", "a\u2000b\u2001c\u200ad",
        "a\u202fb\u205fc", "tab\there", "line\nbreak", "cr\rlf\r\n", "  leading and trailing  ",
        # scripts
        "Ελληνικά κείμενα", "Русский текст Ёё", "العربية نص", "עברית טקסט", "हिन्दी पाठ",
        "ภาษาไทย", "ქართული", "Հայերեն", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ", "ᚠᚢᚦᚨᚱᚲ", "Tiếng Việt có dấu",
        # punctuation
        "!!!", "...", "?!?!", "$+<=>^`|~", "\"'#%&()*,-./:;@[\\]_{}", "¿Qué? ¡Hola!",
        "«guillemets» — em-dash … ellipsis", "“smart” ‘quotes’", "„German‟", "a·b•c‧d",
        "【brackets】「」『』〈〉", "、。・", "§¶†‡", "⁂⁑※", "2 + 2 = 4", "a→b⇒c",
        # numbers
        "0", "123456789", "3.14159", "1,000,000", "-42", "1e-10", "٠١٢٣٤٥", "१२३", "①②③", "½¾",
        "2024-01-15T10:30:00Z", "+1 (555) 123-4567", "$1,234.56 €99 £5 ¥100",
        # URLs, emails, code
        "https://www.example.com/path?q=1&r=2#frag", "mailto:someone@example.org",
        "user.name+tag@sub.domain.co.uk", "C:\\Windows\\System32", "int main(void) { return 0; }",
        "SELECT * FROM t WHERE x <> 'y';", "<html><body class=\"x\">hi</body></html>",
        "snake_case camelCase PascalCase kebab-case", "#hashtag @mention",
        # special tokens in the text (matched in the raw text, case-sensitively)
        "[CLS]", "[SEP]", "[PAD] [UNK] [MASK]", "a[SEP]b", "[cls] [Sep]", "[[CLS]]", "[CLS",
        "[SEP][SEP]", "x [MASK] y", "[unused0] [unused1]", "[CL\x00S]", "[MASK]\u0301",
        # wordpiece behaviour
        "unaffable", "tokenization", "supercalifragilisticexpialidocious", "##ing", "##",
        "#", "un##able", "xxxxxxxxqqqqqzzzz", "HUGGINGFACE", "MiXeD CaSe WoRdS",
    ]
    return e


def long_cases():
    L = []
    for n in (98, 99, 100, 101, 102, 150, 1000):
        L.append("a" * n)
        L.append("x " + "ab" * (n // 2) + " y")
    L.append("é" * 100)            # 100 chars after accent stripping
    L.append("é" * 101)
    L.append("e\u0301" * 100)      # 200 chars in, 100 after stripping
    L.append("e\u0301" * 101)
    L.append("İ" * 100)            # stripping removes the dot: 100 i
    L.append("ß" * 100 + " ok")
    L.append("中" * 300)           # each ideograph is its own word
    L.append("a" * 99 + "\u0301" * 500)
    L.append("a" * 100 + "\x00" * 50)  # removed characters do not count
    L.append("q" + "\U0001D165" * 150)  # a long run of combining characters
    L.append("the " * 700)
    L.append("The quick brown fox jumps over the lazy dog. " * 80)
    L.append(" ".join(str(i) for i in range(1000)))
    L.append("!" * 1000)
    L.append("tokenization " * 300 + "[SEP] end")
    L.append("日本語と English が混ざった文章。" * 60)
    L.append("word" * 30 + " " + "x" * 5000)
    return L


# Code point pools for the fuzz: (weight, list of ranges).
POOLS = [
    (30, [(0x20, 0x7E)]),
    (4, [(0x00, 0x1F), (0x7F, 0x9F)]),
    (6, [(0xA0, 0x24F)]),
    (5, [(0x300, 0x36F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF)]),
    (4, [(0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF)]),
    (4, [(0x900, 0x97F), (0xE00, 0xE7F), (0x1780, 0x17FF), (0x1000, 0x109F)]),
    (3, [(0x1E00, 0x1FFF)]),
    (4, [(0x2000, 0x206F), (0x2E00, 0x2E7F), (0x3000, 0x303F)]),
    (3, [(0x2070, 0x2BFF)]),
    (4, [(0x3040, 0x30FF), (0xAC00, 0xD7A3), (0x1100, 0x11FF)]),
    (6, [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)]),
    (3, [(0xA000, 0xD7FF), (0xE000, 0xF8FF), (0xFB00, 0xFFFF)]),
    (6, [(0x1F300, 0x1FAFF), (0x1F1E6, 0x1F1FF), (0x1F3FB, 0x1F3FF), (0xFE0F, 0xFE0F), (0x200D, 0x200D)]),
    (4, [(0x10000, 0x1FFFF)]),
    (3, [(0x20000, 0x3FFFF)]),
    (2, [(0x40000, 0xDFFFF)]),
    (2, [(0xE0000, 0xE01EF), (0xF0000, 0x10FFFF)]),
]


def random_char(rng, cum, total):
    x = rng.random() * total
    for w, ranges in cum:
        if x < w:
            break
    lo, hi = rng.choice(ranges)
    while True:
        c = rng.randint(lo, hi)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def fuzz_cases(rng, n_chars, n_words, vocab):
    cum, acc = [], 0
    for w, r in POOLS:
        acc += w
        cum.append((acc, r))
    out = []
    for _ in range(n_chars):
        k = rng.choice((1, 2, 3, 5, 8, 13, 30, 80))
        out.append("".join(random_char(rng, cum, acc) for _ in range(k)))
    words = [w for w in vocab if not w.startswith("[")]
    seps = [" ", "  ", "\t", "\n", "-", ".", ",", "'", "\u00a0", "\u3000", "", "", "\u0301", "\u200b",
            "\x00", "中", "😀", "İ", "ß", "é", "[SEP]", "#", "##"]
    for _ in range(n_words):
        parts = []
        for _ in range(rng.randint(1, 40)):
            w = rng.choice(words)
            if w.startswith("##"):
                w = w[2:] if rng.random() < 0.8 else w
            r = rng.random()
            if r < 0.2:
                w = w.upper()
            elif r < 0.4:
                w = w.capitalize()
            parts.append(w)
            parts.append(rng.choice(seps))
        out.append("".join(parts))
    return out


def byte_cases(rng, n):
    frags = [b"a", b"Z", b" ", b"caf\xc3\xa9", b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80", b"\xcc\x81",
             b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2", b"\xe0\x80\x80", b"\xe0\xa0",
             b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5",
             b"\xff", b"\xfe", b"\xf0\x9f\x98", b"\xe2\x82", b"[CLS]", b"[SE\xffP]", b"\xef\xbf\xbd",
             b"\x00", b"\t", b"!", b"the", b"ing"]
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            b = b"".join(rng.choice(frags) for _ in range(rng.randint(1, 20)))
        else:
            b = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 40)))
        out.append(b.replace(b"\n", b" "))
    return out


def run_tool(tool, vocab, inputs_path, lines_mode, max_len):
    cmd = [tool, "--vocab", vocab, "--max-len", str(max_len)]
    if lines_mode:
        cmd.append("--lines")
    cmd.append(inputs_path)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit("tok_dump failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")))
    return [json.loads(x) for x in r.stdout.decode().splitlines()]


def compare(name, texts, ours, ref, shown=5):
    if len(ours) != len(texts):
        print("%s: tok_dump returned %d lines for %d texts" % (name, len(ours), len(texts)))
        return len(texts)
    bad = 0
    for t, a, b in zip(texts, ours, ref):
        if a != b:
            bad += 1
            if bad <= shown:
                print("MISMATCH [%s] text=%r\n  donto=%s\n  hf   =%s" % (name, t[:300], a[:80], b[:80]))
    print("%-7s %8d strings  %s" % (name, len(texts), "identical" if not bad else "%d MISMATCHES" % bad))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="*", help="JSONL files with a \"text\" field")
    ap.add_argument("--tok-dump", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--fuzz", type=int, default=4000, help="random code point strings")
    ap.add_argument("--no-sweep", action="store_true", help="skip the all-code-points sweep")
    ap.add_argument("--allow-missing-corpus", action="store_true",
                    help="development only: run without corpus files that do not exist")
    a = ap.parse_args()

    vocab = os.path.join(a.model_dir, "vocab.txt")
    tj = os.path.join(a.model_dir, "tokenizer.json")
    for p in (vocab, tj, a.tok_dump):
        if not os.path.exists(p):
            sys.exit("tokenizer_parity: missing %s" % p)
    os.makedirs(a.work_dir, exist_ok=True)

    hf = Tokenizer.from_file(tj)
    hf.no_padding()

    def ref_ids(texts, max_len):
        hf.enable_truncation(max_length=max_len)
        return [e.ids for e in hf.encode_batch(texts)]

    sets = []
    corpus = []
    for path in a.corpus:
        if not os.path.exists(path):
            if a.allow_missing_corpus:
                print("note: corpus file %s does not exist, skipped (--allow-missing-corpus)" % path)
                continue
            sys.exit("tokenizer_parity: corpus file %s does not exist (run scripts/make-corpus)" % path)
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.strip():
                    corpus.append(json.loads(line)["text"])
    if a.corpus and not corpus and not a.allow_missing_corpus:
        sys.exit("tokenizer_parity: the corpus files hold no texts")
    rng = random.Random(a.seed)
    with open(vocab, encoding="utf-8") as f:
        words = [w.rstrip("\n") for w in f]
    sets.append(("corpus", corpus))
    sets.append(("edge", edge_cases()))
    sets.append(("long", long_cases()))
    sets.append(("fuzz", fuzz_cases(rng, a.fuzz, a.fuzz // 2, words)))
    if not a.no_sweep:
        sets.append(("sweep", ["a%sb" % chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]))

    total = bad = 0
    for name, texts in sets:
        if not texts:
            continue
        path = os.path.join(a.work_dir, name + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                f.write(json.dumps({"id": i, "text": t}) + "\n")
        bad += compare(name, texts, run_tool(a.tok_dump, vocab, path, False, a.max_len),
                       ref_ids(texts, a.max_len))
        total += len(texts)

    # Invalid UTF-8: raw lines; the reference gets errors="replace" text.
    raw = byte_cases(rng, 3000)
    path = os.path.join(a.work_dir, "bytes.txt")
    with open(path, "wb") as f:
        for b in raw:
            f.write(b + b"\n")
    decoded = [b.decode("utf-8", errors="replace") for b in raw]
    bad += compare("bytes", [repr(b) for b in raw], run_tool(a.tok_dump, vocab, path, True, a.max_len),
                   ref_ids(decoded, a.max_len))
    total += len(raw)

    # Small max_len values on a sample of everything above.
    sample = edge_cases() + long_cases() + fuzz_cases(random.Random(a.seed + 1), 300, 300, words)
    path = os.path.join(a.work_dir, "maxlen.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(sample):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    for ml in (2, 3, 16):
        bad += compare("maxlen%d" % ml, sample, run_tool(a.tok_dump, vocab, path, False, ml),
                       ref_ids(sample, ml))
        total += len(sample)

    print("tokenizer_parity: %d strings compared, %d mismatches -> %s"
          % (total, bad, "100% identical" if bad == 0 else "FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
