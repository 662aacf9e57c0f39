# The store suite against a real PostgreSQL: scripts/pg-test-server makes a
# throwaway cluster (temp dir, 127.0.0.1, free port), runs `test_store pg`
# with DONTO_TEST_PG_URL, then stops and deletes it. No server: the test
# fails (it does not skip). test_store itself (from test_*.c) runs the same
# suite on SQLite.
#
# The concurrency case leases the issue's acceptance size, 100,000 items, in
# the release build; the sanitizer build (several times slower, and there to
# find memory errors, not to measure) uses 20,000.
if(DONTO_SANITIZE)
  set(DONTO_STORE_ITEMS 20000)
else()
  set(DONTO_STORE_ITEMS 100000)
endif()
set(DONTO_STORE_ENV
  "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};DONTO_TEST_STORE_ITEMS=${DONTO_STORE_ITEMS}")

add_test(NAME store_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_store> pg)
set_tests_properties(store_pg PROPERTIES
  TIMEOUT 900
  LABELS store
  ENVIRONMENT "${DONTO_STORE_ENV};PG_TEST_TIMEOUT=800")
# test_store (SQLite) is made by tests/CMakeLists.txt; only its settings here.
set_tests_properties(test_store PROPERTIES
  TIMEOUT 600
  LABELS store
  ENVIRONMENT "${DONTO_STORE_ENV}")
# Vectors in donto's table (store.h DONTO_VECTORS_DONTO, docs/substrate.md):
# `test_store donto` runs only that case, on SQLite (refused) and on a
# throwaway PostgreSQL (seconds).
add_test(NAME store_pg_donto
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_store> donto)
set_tests_properties(store_pg_donto PROPERTIES
  TIMEOUT 120
  LABELS store
  ENVIRONMENT "${DONTO_STORE_ENV};PG_TEST_TIMEOUT=100")
