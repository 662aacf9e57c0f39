# A newcomer's first hour (issue 16) through the real binary
# (tests/first_hour.sh): a wrong --db or an unmigrated database is said so and
# nothing is created (first_hour_db; first_hour_db_pg on a throwaway
# PostgreSQL), retract of an unknown id fails (first_hour_retract, first_hour_retract_pg), recall
# finds the stored vectors' model or says to pass --model and GET /recall
# answers a client's bad query with 4xx (first_hour_recall), and the worker
# stops on permanent setup errors with their cause (first_hour_worker);
# `make run` keeps its data where the README looks, installs no test-only
# packages and prints no "Entering directory" lines (first_hour_make, dry runs).
set(_fh_model ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2)
foreach(section db retract recall worker)
  add_test(NAME first_hour_${section}
           COMMAND sh ${PROJECT_SOURCE_DIR}/tests/first_hour.sh ${section} $<TARGET_FILE:donto-embed>
                   ${DONTO_TESTDATA}/first_hour_${section} ${_fh_model})
  set_tests_properties(first_hour_${section} PROPERTIES TIMEOUT 240 LABELS first_hour)
endforeach()
add_test(NAME first_hour_make
         COMMAND sh ${PROJECT_SOURCE_DIR}/tests/first_hour.sh make $<TARGET_FILE:donto-embed>
                 ${DONTO_TESTDATA}/first_hour_make ${PROJECT_SOURCE_DIR})
set_tests_properties(first_hour_make PROPERTIES TIMEOUT 60 LABELS first_hour)
foreach(section db_pg retract_pg)
  add_test(NAME first_hour_${section}
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server sh ${PROJECT_SOURCE_DIR}/tests/first_hour.sh ${section}
                   $<TARGET_FILE:donto-embed> ${DONTO_TESTDATA}/first_hour_${section} ${_fh_model})
  set_tests_properties(first_hour_${section} PROPERTIES TIMEOUT 240 LABELS first_hour
    ENVIRONMENT "PG_TEST_TIMEOUT=200")
endforeach()
# README.md's "Your first hour" block, line by line, against the demo database
# of `make run` (skipped, exit 77, until there is one).
add_test(NAME readme_first_hour COMMAND sh ${PROJECT_SOURCE_DIR}/tests/readme_first_hour.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(readme_first_hour PROPERTIES TIMEOUT 900 LABELS first_hour SKIP_RETURN_CODE 77)
