# donto-sheaf score (src/sheafscore/, docs/sheaf-serving.md "Scores"): plant, export, train
# tiny claim_score and arg_link models, register (parity against tests/ref/sheaf_ref.py),
# activate, score; incremental reruns, proposed arguments kept out of the export. On SQLite
# (sheafscore_cli) and on a throwaway PostgreSQL (sheafscore_pg, scripts/pg-test-server).
add_test(NAME sheafscore_cli
         COMMAND sh ${PROJECT_SOURCE_DIR}/tests/sheafscore_cli.sh $<TARGET_FILE:donto-sheaf> ${DONTO_PYTHON}
                 ${PROJECT_SOURCE_DIR}/tests/ref/sheaf_ref.py ${DONTO_TESTDATA}/sheafscore_cli)
add_test(NAME sheafscore_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server sh ${PROJECT_SOURCE_DIR}/tests/sheafscore_cli.sh
                 $<TARGET_FILE:donto-sheaf> ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/sheaf_ref.py
                 ${DONTO_TESTDATA}/sheafscore_pg pg)
set_tests_properties(sheafscore_cli sheafscore_pg PROPERTIES TIMEOUT 600 LABELS "sheafscore;sheaf;ref"
                     RESOURCE_LOCK donto_ref_cpu ENVIRONMENT "OMP_NUM_THREADS=1;PG_TEST_TIMEOUT=500")
