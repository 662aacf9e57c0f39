#!/usr/bin/env python3
"""Write a BERT model dir with bge-small-en-v1.5's exact architecture and seeded random weights.

Test-only. Offline we have no bge weights, so parity for the 12-layer / CLS-pooled
production shape is checked on a random model with the same config and file layout:

  DIR/config.json              bge-small-en-v1.5's config (BertModel, 30522 vocab, 512 pos, ...)
  DIR/model.safetensors        BertModel(config).state_dict() incl. pooler, names WITHOUT a
                               "bert." prefix (as bge ships them; --prefix bert. to add one),
                               plus embeddings.position_ids (int64 [1, 512]) as older HF
                               checkpoints carry it (--no-position-ids to omit)
  DIR/vocab.txt                copied from --vocab
  DIR/tokenizer_config.json, special_tokens_map.json, tokenizer.json (if one sits next to
                               --vocab; its truncation is reset to 512 and padding to none)
  DIR/1_Pooling/config.json    --pooling cls (default, as bge) or mean
  DIR/sentence_bert_config.json, modules.json

Default HF init (std 0.02, LayerNorm gain 1) gives almost the same vector for every text,
which would make a parity test weak. Matrices here use --std (default 0.08), embeddings
--emb-std (default 0.6), biases 0.02, LayerNorm gains ~ N(1, 0.15) and betas ~ N(0, 0.05).
The script prints the mean pairwise cosine of CLS/mean vectors over a few sample texts.

--dtype f16|bf16 rounds the weights to that type and stores them so (position_ids stay
int64): the fp32 reference then uses exactly the rounded values.
"""
import argparse
import json
import os
import shutil
import sys

BGE_SMALL_CONFIG = {
    "_name_or_path": "donto-accel/bge-small-en-v1.5-random",
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "classifier_dropout": None,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 384,
    "id2label": {"0": "LABEL_0"},
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "label2id": {"LABEL_0": 0},
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
    "transformers_version": "4.30.0",
    "type_vocab_size": 2,
    "use_cache": True,
    "vocab_size": 30522,
}

STAMP_VERSION = 1

SAMPLE_TEXTS = [
    "dog, domestic dog, Canis familiaris - is a kind of - canine, canid",
    "What is the capital of France?",
    "The quick brown fox jumps over the lazy dog.",
    "photosynthesis: synthesis of compounds with the aid of radiant energy (especially in plants)",
    "I can breathe better when the air is clean",
    "megabyte, M, MB - is a part of - gigabyte, G, GB",
    "a member of the genus Canis that has been domesticated by man since prehistoric times",
    "stock market prices fell sharply on Monday",
]


def default_vocab():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "models", "all-MiniLM-L6-v2", "vocab.txt"))


def randomize(model, seed, std, emb_std):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # named_parameters() order is fixed by the module structure -> deterministic
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.15 * torch.randn(p.shape, generator=g))
            elif "LayerNorm.bias" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "embeddings" in name:
                p.copy_(emb_std * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))


def mean_pairwise_cos(model_dir, pooling):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    import bert_ref
    v = bert_ref.embed(model_dir, SAMPLE_TEXTS, pooling=pooling, threads=2)
    c = v @ v.T
    n = len(SAMPLE_TEXTS)
    return float((c.sum() - np.trace(c)) / (n * (n - 1))), float(c[~np.eye(n, dtype=bool)].max())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output model dir")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--pooling", choices=["cls", "mean"], default="cls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.08, help="std of weight matrices (default 0.08)")
    ap.add_argument("--emb-std", type=float, default=0.6, help="std of embedding tables (default 0.6)")
    ap.add_argument("--vocab", default=default_vocab(), help="vocab.txt to copy (default: MiniLM's)")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32",
                    help="storage dtype of the float tensors in model.safetensors")
    ap.add_argument("--prefix", default="", help='tensor-name prefix, e.g. "bert." (default: none, as bge)')
    ap.add_argument("--no-position-ids", action="store_true", help="omit embeddings.position_ids")
    ap.add_argument("--no-check", action="store_true", help="skip the mean pairwise cosine check")
    ap.add_argument("--if-missing", action="store_true",
                    help="do nothing if DIR was already made with the same options (stamp file)")
    args = ap.parse_args(argv)
    stamp_p = os.path.join(args.out, ".make_random_bert.json")
    stamp = {"version": STAMP_VERSION, "args": {k: v for k, v in sorted(vars(args).items())
                                               if k not in ("no_check", "if_missing")}}
    if args.if_missing and os.path.exists(stamp_p) and os.path.exists(os.path.join(args.out, "model.safetensors")):
        with open(stamp_p, encoding="utf-8") as fh:
            try:
                if json.load(fh) == stamp:
                    print("make_random_bert: %s is current, nothing to do" % args.out)
                    return 0
            except ValueError:
                pass

    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel
    transformers.logging.set_verbosity_error()
    torch.manual_seed(args.seed)

    cfg_dict = dict(BGE_SMALL_CONFIG)
    cfg_dict.update({"num_hidden_layers": args.layers, "hidden_size": args.hidden,
                     "num_attention_heads": args.heads, "intermediate_size": args.intermediate})
    if args.dtype != "f32":
        cfg_dict["torch_dtype"] = {"f16": "float16", "bf16": "bfloat16"}[args.dtype]
    with open(args.vocab, encoding="utf-8") as fh:
        vocab_lines = fh.read().splitlines()
    if len(vocab_lines) != cfg_dict["vocab_size"]:
        sys.exit("make_random_bert: %s has %d entries, config wants %d"
                 % (args.vocab, len(vocab_lines), cfg_dict["vocab_size"]))
    cfg = BertConfig(**{k: v for k, v in cfg_dict.items() if not k.startswith("_")})
    model = BertModel(cfg, add_pooling_layer=True)
    model.eval()
    randomize(model, args.seed, args.std, args.emb_std)

    sd = model.state_dict()
    tensors = {}
    tdtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    for k in sorted(sd):
        if k.endswith("position_ids"):
            continue
        tensors[args.prefix + k] = sd[k].detach().to(tdtype).contiguous()
    if not args.no_position_ids:
        tensors[args.prefix + "embeddings.position_ids"] = torch.arange(
            cfg.max_position_embeddings, dtype=torch.int64).unsqueeze(0).contiguous()

    os.makedirs(os.path.join(args.out, "1_Pooling"), exist_ok=True)
    st_path = os.path.join(args.out, "model.safetensors")
    save_file(tensors, st_path, metadata={"format": "pt"})
    os.chmod(st_path, 0o644)
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(cfg_dict, fh, indent=2, sort_keys=True)
        fh.write("\n")
    shutil.copyfile(args.vocab, os.path.join(args.out, "vocab.txt"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump({"clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "do_basic_tokenize": True,
                   "do_lower_case": True, "mask_token": "[MASK]", "model_max_length": 512,
                   "never_split": None, "pad_token": "[PAD]", "sep_token": "[SEP]",
                   "strip_accents": None, "tokenize_chinese_chars": True,
                   "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"}, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(args.out, "special_tokens_map.json"), "w", encoding="utf-8") as fh:
        json.dump({"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]",
                   "sep_token": "[SEP]", "unk_token": "[UNK]"}, fh, indent=2)
        fh.write("\n")
    tj = os.path.join(os.path.dirname(os.path.abspath(args.vocab)), "tokenizer.json")
    if os.path.exists(tj):
        with open(tj, encoding="utf-8") as fh:
            tjd = json.load(fh)
        tjd["truncation"] = {"direction": "Right", "max_length": 512, "strategy": "LongestFirst", "stride": 0}
        tjd["padding"] = None
        with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as fh:
            json.dump(tjd, fh, ensure_ascii=False)
    with open(os.path.join(args.out, "1_Pooling", "config.json"), "w", encoding="utf-8") as fh:
        json.dump({"word_embedding_dimension": args.hidden,
                   "pooling_mode_cls_token": args.pooling == "cls",
                   "pooling_mode_mean_tokens": args.pooling == "mean",
                   "pooling_mode_max_tokens": False,
                   "pooling_mode_mean_sqrt_len_tokens": False}, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(args.out, "sentence_bert_config.json"), "w", encoding="utf-8") as fh:
        json.dump({"max_seq_length": 512, "do_lower_case": True}, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(args.out, "modules.json"), "w", encoding="utf-8") as fh:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  fh, indent=2)
        fh.write("\n")
    with open(stamp_p, "w", encoding="utf-8") as fh:
        json.dump(stamp, fh, indent=1, sort_keys=True)
        fh.write("\n")
    nparam = sum(p.numel() for p in model.parameters())
    print("make_random_bert: wrote %s (%d layers, hidden %d, %d heads, ffn %d, %.1fM params, %s, prefix=%r, seed %d)"
          % (args.out, args.layers, args.hidden, args.heads, args.intermediate, nparam / 1e6,
             args.dtype, args.prefix, args.seed))
    if not args.no_check:
        mean_cos, max_cos = mean_pairwise_cos(args.out, args.pooling)
        print("make_random_bert: %d sample texts, %s pooling: mean pairwise cosine %.4f, max %.4f"
              % (len(SAMPLE_TEXTS), args.pooling, mean_cos, max_cos))
        if mean_cos > 0.95:
            print("make_random_bert: WARNING vectors are nearly identical; raise --std/--emb-std",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
