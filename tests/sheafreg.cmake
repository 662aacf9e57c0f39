# The sheaf model registry (src/sheafreg/, docs/sheaf-serving.md). test_sheafreg runs
# the C suite on SQLite (from test_*.c); sheafreg_pg the same on a throwaway
# PostgreSQL (scripts/pg-test-server: no server, the test fails, it does not skip).
# sheafreg_cli: register (parity gate against tests/ref/sheaf_ref.py, tampered
# checkpoints refused), models list/show/activate/retire through the real binary.
add_test(NAME sheafreg_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_sheafreg> pg)
set_tests_properties(sheafreg_pg PROPERTIES
  TIMEOUT 300
  LABELS "sheafreg;sheaf"
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};PG_TEST_TIMEOUT=250")
set_tests_properties(test_sheafreg PROPERTIES TIMEOUT 300 LABELS "sheafreg;sheaf")
add_test(NAME sheafreg_cli
         COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheafreg_cli.sh $<TARGET_FILE:donto-sheaf> ${DONTO_PYTHON}
                 ${PROJECT_SOURCE_DIR}/tests/ref/sheaf_ref.py ${DONTO_TESTDATA}/sheafreg_cli)
set_tests_properties(sheafreg_cli PROPERTIES TIMEOUT 600 LABELS "sheafreg;sheaf;ref" RESOURCE_LOCK donto_ref_cpu
                     ENVIRONMENT "DONTO_GEOM_GCN_DIR=${DONTO_GEOM_GCN_DIR};OMP_NUM_THREADS=1")
