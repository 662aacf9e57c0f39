# The substrate suite against a real PostgreSQL (scripts/pg-test-server: a
# throwaway cluster, DONTO_TEST_PG_URL set). No server: the test fails, it
# does not skip. test_substrate itself (from test_*.c) runs the builders and
# the same suite on SQLite.
add_test(NAME substrate_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_substrate> pg)
set_tests_properties(substrate_pg PROPERTIES
  TIMEOUT 300
  LABELS substrate
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};PG_TEST_TIMEOUT=250")
set_tests_properties(test_substrate PROPERTIES TIMEOUT 300 LABELS substrate)
