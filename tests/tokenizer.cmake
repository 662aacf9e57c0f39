# Tokenizer: the tok_dump tool and the Hugging Face parity test.
add_executable(tok_dump ${CMAKE_CURRENT_SOURCE_DIR}/tok_dump.c)
target_link_libraries(tok_dump PRIVATE donto)

# Compares donto's ids with `tokenizers` on the corpus plus generated edge
# cases and a seeded fuzz; any mismatch fails. Needs scripts/get-model and
# scripts/make-corpus (run by `make test`).
add_test(NAME tokenizer_parity
  COMMAND ${DONTO_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ref/tokenizer_parity.py
          --tok-dump $<TARGET_FILE:tok_dump>
          --model-dir ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2
          --work-dir ${DONTO_TESTDATA}/tokenizer
          ${PROJECT_SOURCE_DIR}/corpus/claims.jsonl ${PROJECT_SOURCE_DIR}/corpus/chunks.jsonl)
set_tests_properties(tokenizer_parity PROPERTIES LABELS ref TIMEOUT 900)
