# The coordinator (src/coord/): test_protocol and test_coord come from
# tests/CMakeLists.txt (test_*.c); test_coord runs its end-to-end scenario
# over a fake store and SQLite, and drives the donto-embed binary (serve,
# migrate, token). coord_pg runs the same scenario over a throwaway
# PostgreSQL (scripts/pg-test-server, 127.0.0.1 only).
set_tests_properties(test_coord PROPERTIES TIMEOUT 300 LABELS coord)
set_tests_properties(test_protocol PROPERTIES TIMEOUT 120 LABELS coord)
add_test(NAME coord_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_coord> pg)
set_tests_properties(coord_pg PROPERTIES
  TIMEOUT 300
  LABELS coord
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=240")
