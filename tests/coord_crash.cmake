# Crash safety of the coordinator (tests/test_coord_crash.c): clients
# SIGKILLed mid lease/submit, the coordinator restarted (SIGTERM and SIGKILL)
# mid run, on SQLite (test_coord_crash, from test_*.c) and on a throwaway
# PostgreSQL (coord_crash_pg). Drives the real donto-embed serve binary with
# a 2 s lease TTL; bounded (each case has deadlines).
set_tests_properties(test_coord_crash PROPERTIES TIMEOUT 300 LABELS coord)
add_test(NAME coord_crash_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_coord_crash> pg)
set_tests_properties(coord_crash_pg PROPERTIES
  TIMEOUT 300
  LABELS coord
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=240")
