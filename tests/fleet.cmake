# Many coordinators, one database (tests/test_fleet.c; docs/fleet.md): 3
# real `donto-embed serve` on one throwaway PostgreSQL, 6 real workers
# (tiny generated model, --verify on) spread over them, one coordinator and
# its workers SIGKILLed mid run, new workers on the survivors; exactly once
# from the database, and /embed/stats on both survivors equal to each other
# and to the database (the fleet's figures). PostgreSQL only. Bounded.
add_executable(test_fleet ${CMAKE_CURRENT_SOURCE_DIR}/test_fleet.c)
target_include_directories(test_fleet PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_fleet PRIVATE donto PkgConfig::PQ)
add_test(NAME fleet_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_fleet> pg)
set_tests_properties(fleet_pg PROPERTIES
  TIMEOUT 300
  LABELS coord
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=240")
