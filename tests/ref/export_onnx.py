#!/usr/bin/env python3
"""Export a BERT model dir to fp32 ONNX (for the ONNX Runtime baseline in bench/embed-vs-ort).

Test/bench-only.

  export_onnx.py --model DIR --out model.onnx [--opset 14] [--no-verify]

Graph: inputs input_ids, attention_mask, token_type_ids (int64 [batch, sequence]);
output last_hidden_state (float32 [batch, sequence, hidden]). Dynamic axes: batch and
sequence. GELU is HF's "gelu" (exact erf form; exported as Erf). Attention is the eager
implementation. After export the script runs the same batch (padded, mixed lengths)
through torch and onnxruntime and prints the max abs difference of last_hidden_state
over non-padding positions (exit 1 if above --tol).
"""
import argparse
import os
import sys
import time

import numpy as np

VERIFY_TEXTS = [
    "dog, domestic dog, Canis familiaris - is a kind of - canine, canid",
    "short",
    "photosynthesis: synthesis of compounds with the aid of radiant energy (especially in plants). "
    "chlorophyll: any of a group of green pigments found in photosynthetic organisms",
    "The quick brown fox jumps over the lazy dog; \"an example\" with punctuation, numbers 1920 and names.",
]




def export(model_dir, out, opset=14):
    import torch
    import transformers
    from transformers import AutoTokenizer, BertModel
    transformers.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(model_dir, use_fast=True)
    kw = {"add_pooling_layer": False, "torch_dtype": torch.float32}
    try:
        bert = BertModel.from_pretrained(model_dir, attn_implementation="eager", **kw)
    except TypeError:
        bert = BertModel.from_pretrained(model_dir, **kw)
    bert.eval()
    if bert.config.hidden_act != "gelu":
        print("export_onnx: note: hidden_act=%s" % bert.config.hidden_act, file=sys.stderr)

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids, return_dict=False)[0]

    w = Wrapper(bert).eval()
    enc = tok(VERIFY_TEXTS[:2], padding=True, truncation=True, max_length=512, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with torch.no_grad():
        torch.onnx.export(
            w, args, tmp, opset_version=opset, do_constant_folding=True,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                          "attention_mask": {0: "batch", 1: "sequence"},
                          "token_type_ids": {0: "batch", 1: "sequence"},
                          "last_hidden_state": {0: "batch", 1: "sequence"}})
    os.replace(tmp, out)
    return tok, w


def verify(model_dir, onnx_path, tok=None, wrapper=None, threads=2):
    import onnxruntime as ort
    import torch
    if tok is None:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model_dir, use_fast=True)
    enc = tok(VERIFY_TEXTS, padding=True, truncation=True, max_length=512, return_tensors="np")
    feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    got = sess.run(["last_hidden_state"], feeds)[0]
    if wrapper is None:
        return got, None
    with torch.no_grad():
        ref = wrapper(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))).numpy()
    m = feeds["attention_mask"].astype(bool)
    diff = float(np.abs(got - ref)[m].max())
    return got, diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="BERT model dir")
    ap.add_argument("--out", required=True, help="output .onnx path")
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--tol", type=float, default=1e-3, help="max abs diff allowed vs torch (default 1e-3)")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(2)
    t0 = time.time()
    tok, w = export(args.model, args.out, args.opset)
    print("export_onnx: wrote %s (%.1f MB, opset %d) in %.1fs"
          % (args.out, os.path.getsize(args.out) / 1e6, args.opset, time.time() - t0))
    if args.no_verify:
        return 0
    _, diff = verify(args.model, args.out, tok, w)
    print("export_onnx: onnxruntime vs torch last_hidden_state max abs diff %.3g (%d texts)"
          % (diff, len(VERIFY_TEXTS)))
    if diff > args.tol:
        print("export_onnx: FAIL: diff above %g" % args.tol, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
