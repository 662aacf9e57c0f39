# The embedding worker (tests/test_worker.c): `donto-embed work` against a
# real `donto-embed serve` with a tiny generated model: 3 workers, one
# SIGKILLed, the coordinator restarted, exactly-once and vector parity with
# `donto-embed embed`; SIGINT releases at once; other models' items are
# refused. On SQLite (test_worker, from test_*.c) and on a throwaway
# PostgreSQL (worker_pg). Bounded (every wait has a deadline).
set_tests_properties(test_worker PROPERTIES TIMEOUT 300 LABELS worker)
add_test(NAME worker_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_worker> pg)
set_tests_properties(worker_pg PROPERTIES
  TIMEOUT 300
  LABELS worker
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=240")
