#!/usr/bin/env python3
"""Write the tokenizer's edge cases (tests/ref/tokenizer_parity.py: accents, CJK,
emoji, controls, whitespace, scripts, URLs, special tokens, over-long words
and texts) as JSONL {"id": "edge-N", "text": ...}, so the vector parity
tests gate every precision on them as well as on the corpus.

  edge_texts.py OUT.jsonl
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_parity  # noqa: E402


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    texts = tokenizer_parity.edge_cases() + tokenizer_parity.long_cases()
    tmp = argv[1] + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(argv[1])), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": "edge-%d" % i, "text": t}, ensure_ascii=False) + "\n")
    os.replace(tmp, argv[1])
    print("edge_texts: %d texts -> %s" % (len(texts), argv[1]))


if __name__ == "__main__":
    main(sys.argv)
