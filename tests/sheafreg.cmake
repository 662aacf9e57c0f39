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
# sheaf_serve: POST /sheaf/infer and GET /sheaf/models through `donto-embed serve` (roles, the
# active model's outputs equal `donto-sheaf infer`'s, activation and rollback under concurrent
# requests, bad input; tests/sheaf_serve.py).
add_test(NAME sheaf_serve
         COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/tests/sheaf_serve.py --build ${PROJECT_BINARY_DIR}
                 --python ${DONTO_PYTHON} --ref ${PROJECT_SOURCE_DIR}/tests/ref/sheaf_ref.py
                 --work ${DONTO_TESTDATA}/sheaf_serve)
set_tests_properties(sheaf_serve PROPERTIES TIMEOUT 600 LABELS "sheafreg;sheaf;ref;e2e" RESOURCE_LOCK donto_ref_cpu
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# sheaf_demo: scripts/sheaf-demo end to end (WordNet 3,000 synsets -> the fabric's vectors with
# the real model -> export -> train NSD -> register through the gate -> activate -> POST
# /sheaf/infer -> score -> rows in donto_sheaf_score); exit 0 only when the gate passed and rows
# were written.
add_test(NAME sheaf_demo
         COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/sheaf-demo --build ${PROJECT_BINARY_DIR}
                 --python ${DONTO_PYTHON} --model-dir ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2
                 --work ${DONTO_TESTDATA}/sheaf_demo)
set_tests_properties(sheaf_demo PROPERTIES TIMEOUT 900 LABELS "sheafreg;sheaf;ref;e2e" RESOURCE_LOCK donto_ref_cpu)
