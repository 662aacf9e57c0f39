#!/usr/bin/env python3
"""Generate src/text/unicode_compat.c: where Hugging Face `tokenizers`
classifies a code point differently from utf8proc.

Why this exists: the Rust tokenizers crate takes general categories from the
`unicode_categories` crate and NFD from `unicode-normalization-alignments`,
both frozen at an old Unicode version (about 8.0), while utf8proc follows
current Unicode. For characters assigned or re-categorized since, the two
disagree (e.g. U+2E4F is punctuation for utf8proc but unknown to HF, so HF
does not split on it). To stay id-for-id equal to HF, the C tokenizer uses
utf8proc for everything and consults this table only for those code points.

The table is not written by hand: this script probes the installed
`tokenizers` itself, character by character, and records HF's view wherever
it differs from utf8proc's. It fails loudly on a kind of difference that the
C code cannot express (e.g. a different decomposition, lowercase or
whitespace).

    .venv/bin/python tests/ref/gen_unicode_compat.py > src/text/unicode_compat.c
"""
import ctypes
import ctypes.util
import sys

import tokenizers
from tokenizers import normalizers as N
from tokenizers import pre_tokenizers as P

# Kinds, as in src/text/unicode_compat.h.
OTHER, CTRL, PUNCT, MN, WS = 0, 1, 2, 3, 4
KIND_NAMES = {OTHER: "DONTO_UK_OTHER", CTRL: "DONTO_UK_CONTROL", PUNCT: "DONTO_UK_PUNCT", MN: "DONTO_UK_MARK"}

CAT = "Cn Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co".split()


class Prop(ctypes.Structure):
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]


def load_utf8proc():
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
    lib.utf8proc_get_property.restype = ctypes.POINTER(Prop)
    lib.utf8proc_get_property.argtypes = [ctypes.c_int32]
    lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
    lib.utf8proc_decompose_char.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                            ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.utf8proc_tolower.restype = ctypes.c_int32
    lib.utf8proc_tolower.argtypes = [ctypes.c_int32]
    lib.utf8proc_version.restype = ctypes.c_char_p
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    return lib


UTF8PROC_DECOMPOSE = 1 << 4


def utf8proc_view(lib, c, buf):
    """(kind, ccc, decomposition) the C code derives from utf8proc alone."""
    p = lib.utf8proc_get_property(c).contents
    cat = CAT[p.category]
    n = lib.utf8proc_decompose_char(c, buf, 16, UTF8PROC_DECOMPOSE, None)
    dec = "".join(chr(buf[i]) for i in range(n))
    # Cleaning removes control characters before it maps whitespace, so
    # U+000B, U+000C and U+0085 (Cc and White_Space) are control here.
    if (cat in ("Cc", "Cf", "Co") and chr(c) not in "\t\n\r") or c == 0:
        kind = CTRL
    elif (9 <= c <= 13) or c in (0x20, 0x85) or cat in ("Zs", "Zl", "Zp"):
        kind = WS
    elif cat.startswith("P") or (c < 128 and chr(c) in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"):
        kind = PUNCT
    elif cat == "Mn":
        kind = MN
    else:
        kind = OTHER
    return kind, p.combining_class, dec


def main():
    lib = load_utf8proc()
    buf = (ctypes.c_int32 * 16)()
    clean = N.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    nfd = N.NFD()
    lower = N.Lowercase()
    pre = P.BertPreTokenizer()

    diffs = []  # (cp, kind, ccc, nodecomp)
    problems = []
    for c in range(1, 0x110000):
        if 0xD800 <= c <= 0xDFFF or c == 0xFFFD:
            continue
        ch = chr(c)
        ukind, uccc, udec = utf8proc_view(lib, c, buf)

        # HF's view, probed through the same components tokenizer.json uses.
        r = clean.normalize_str("a" + ch + "b")
        hd = nfd.normalize_str(ch)
        if r == "a b":
            kind = WS
        elif r == "ab":
            kind = CTRL
        elif len(pre.pre_tokenize_str("a" + ch + "b")) == 3:
            kind = PUNCT
        elif hd == ch:
            kind = MN if strip.normalize_str(ch) == "" else OTHER
        else:
            # Stripping looks at the parts of a decomposed character, never
            # at the character itself, so its own mark-ness is irrelevant.
            kind = ukind if ukind in (OTHER, MN) else OTHER
        if (kind == WS) != (ukind == WS):
            problems.append("U+%04X: whitespace differs" % c)
            continue
        if kind == WS:
            continue

        nodecomp = 0
        if hd != udec:
            if hd == ch:
                nodecomp = 1
            else:
                problems.append("U+%04X: decomposition differs: HF %r, utf8proc %r" % (c, hd, udec))
        ccc = uccc
        if hd == ch and uccc not in (0, 240):
            # A class in 1..239 moves a following U+0345 (class 240) in front.
            reorders = nfd.normalize_str("\u0345" + ch) == ch + "\u0345"
            if not reorders:
                ccc = 0
        elif hd == ch and uccc == 0:
            if nfd.normalize_str("\u0345" + ch) == ch + "\u0345":
                problems.append("U+%04X: HF knows a combining class utf8proc does not" % c)
        if c != 0x130 and lower.normalize_str(ch) != chr(lib.utf8proc_tolower(c)):
            problems.append("U+%04X: lowercase differs: HF %r" % (c, lower.normalize_str(ch)))

        if (kind, ccc, nodecomp) != (ukind, uccc, 0):
            diffs.append((c, kind, ccc, nodecomp))

    if problems:
        sys.stderr.write("gen_unicode_compat: differences the C code cannot express:\n  ")
        sys.stderr.write("\n  ".join(problems[:50]) + "\n")
        sys.exit(1)

    # Merge runs of consecutive code points that HF sees the same way.
    ranges = []
    for c, kind, ccc, nodecomp in diffs:
        if ranges and ranges[-1][1] == c - 1 and tuple(ranges[-1][2:]) == (kind, ccc, nodecomp):
            ranges[-1][1] = c
        else:
            ranges.append([c, c, kind, ccc, nodecomp])

    out = sys.stdout
    out.write("/*\n * GENERATED by tests/ref/gen_unicode_compat.py -- do not edit.\n")
    out.write(" * tokenizers %s vs utf8proc %s (Unicode %s): %d code points, %d ranges.\n"
              % (tokenizers.__version__, lib.utf8proc_version().decode(),
                 lib.utf8proc_unicode_version().decode(), len(diffs), len(ranges)))
    out.write(" * Each range: how HF's older Unicode tables see those code points.\n */\n")
    out.write('#include "unicode_compat.h"\n\n')
    out.write("const donto_ucompat donto_ucompat_table[] = {\n")
    for first, last, kind, ccc, nodecomp in ranges:
        out.write("    {0x%05X, 0x%05X, %s, %d, %d},\n" % (first, last, KIND_NAMES[kind], ccc, nodecomp))
    out.write("};\n")
    out.write("const size_t donto_ucompat_count = sizeof donto_ucompat_table / sizeof donto_ucompat_table[0];\n")


if __name__ == "__main__":
    main()
