# WordNet import -> enqueue -> serve + work -> recall with the real model, on
# SQLite (wordnet_recall) and on a throwaway PostgreSQL (wordnet_recall_pg):
# paraphrased queries must find their synset's claims (tests/wordnet_recall.sh).
# Labelled e2e: the sanitizer build skips it (thousands of real-model embeddings).
add_test(NAME wordnet_recall
         COMMAND ${PROJECT_SOURCE_DIR}/tests/wordnet_recall.sh ${PROJECT_BINARY_DIR}
                 ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2)
add_test(NAME wordnet_recall_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server sh -c
                 "exec ${PROJECT_SOURCE_DIR}/tests/wordnet_recall.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2 \"$DONTO_TEST_PG_URL\"")
set_tests_properties(wordnet_recall wordnet_recall_pg PROPERTIES
  TIMEOUT 900
  LABELS "substrate;recall;e2e"
  ENVIRONMENT "PG_TEST_TIMEOUT=840")
