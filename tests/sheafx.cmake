# The sheaf export's leakage tests (tests/test_sheafx.c): test_sheafx runs
# the suite on SQLite (from test_*.c); sheafx_pg on a throwaway PostgreSQL
# (scripts/pg-test-server: no server, the test fails, it does not skip).
# sheafx_cli: bad input through the real binary (exit 2 usage, 1 runtime).
add_test(NAME sheafx_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_sheafx> pg)
set_tests_properties(sheafx_pg PROPERTIES
  TIMEOUT 300
  LABELS "sheafx;substrate"
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};PG_TEST_TIMEOUT=250")
set_tests_properties(test_sheafx PROPERTIES TIMEOUT 300 LABELS "sheafx;substrate")
add_test(NAME sheafx_cli
         COMMAND ${PROJECT_SOURCE_DIR}/tests/sheafx_cli.sh $<TARGET_FILE:donto-sheaf>)
set_tests_properties(sheafx_cli PROPERTIES TIMEOUT 120 LABELS sheafx)
# The export on the WordNet substrate with the fabric's vectors (the real
# model embeds ~9,000 texts): e2e, so the sanitizer build skips it.
add_test(NAME sheafx_wordnet
         COMMAND ${PROJECT_SOURCE_DIR}/tests/sheafx_wordnet.sh ${PROJECT_BINARY_DIR}
                 ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2)
set_tests_properties(sheafx_wordnet PROPERTIES TIMEOUT 900 LABELS "sheafx;e2e")
