# The embedding worker (tests/test_worker.c): `donto-embed work` against a
# real `donto-embed serve` with a tiny generated model: 3 workers, one
# SIGKILLed, the coordinator restarted, exactly-once and vector parity with
# `donto-embed embed`; SIGINT releases at once; other models' items are
# refused; batches that outlive their lease kept by heartbeats, and workers
# that never extend rescued by the coordinator's smaller batches. On SQLite
# (test_worker, from test_*.c) and on a throwaway PostgreSQL (worker_pg).
# Bounded (every wait has a deadline).
set_tests_properties(test_worker PROPERTIES TIMEOUT 300 LABELS worker)
add_test(NAME worker_pg
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_worker> pg)
set_tests_properties(worker_pg PROPERTIES
  TIMEOUT 300
  LABELS worker
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=240")
# The whole fabric at full size with the real model (issue 4's end-to-end
# acceptance): corpus/fabric.jsonl (24,000 claims) through a coordinator and
# 3 workers, one SIGKILLed and the coordinator restarted mid run; exactly
# once; every stored vector equals `donto-embed embed` (cosine >= 0.99999).
# Labelled e2e: the sanitizer build skips it (minutes of real-model work).
foreach(backend sqlite pg)
  if(backend STREQUAL "pg")
    set(_cmd ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_worker> pg)
    set(_name fabric_e2e_pg)
  else()
    set(_cmd $<TARGET_FILE:test_worker>)
    set(_name fabric_e2e)
  endif()
  add_test(NAME ${_name}
           COMMAND ${_cmd} fabric ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2
                   ${PROJECT_SOURCE_DIR}/corpus/fabric.jsonl)
  set_tests_properties(${_name} PROPERTIES
    TIMEOUT 900
    LABELS "worker;e2e"
    ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=840")
endforeach()
# The same on PostgreSQL with --vectors donto (issue 20): migrate and serve
# keep claims' embeddings in donto's table donto_vector; on the first 3,000
# texts of corpus/fabric.jsonl (the full run's kill, restart, exactly-once
# and parity with `donto-embed embed`, in a fraction of its time), plus a
# plain SQL check that every item has its donto_vector row with dimensions
# 384 and a unit-norm float4[].
add_test(NAME fabric_e2e_pg_donto
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_worker> pg fabric
                 ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2 ${PROJECT_SOURCE_DIR}/corpus/fabric.jsonl donto 3000)
set_tests_properties(fabric_e2e_pg_donto PROPERTIES
  TIMEOUT 600
  LABELS "worker;e2e"
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=540")
