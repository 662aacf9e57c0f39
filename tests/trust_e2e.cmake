# Contributor trust, adversarial and end to end (issue 15's acceptance,
# tests/test_trust_e2e.c): a real `donto-embed serve --verify on` with
# models/all-MiniLM-L6-v2 on 5,000 claims of corpus/claims.jsonl; honest
# workers (`work` fp32 and int16, tests/legacy_worker.py on the legacy wire)
# and one attacker per attack (tests/trust_attacker.c: random, shift,
# othermodel, noise, turncoat, spoof), each with its own token. Every
# attacker suspended, no honest token flagged, nothing unverified left of
# the attackers, exactly one vector per item, every vector equal to fp32's.
# On SQLite (trust_e2e) and a throwaway PostgreSQL (trust_e2e_pg). Labelled
# e2e: the sanitizer build skips it (minutes of real-model work). Exit 77
# (skipped) when the model or corpus is missing.
add_executable(test_trust_e2e ${CMAKE_CURRENT_SOURCE_DIR}/test_trust_e2e.c)
target_include_directories(test_trust_e2e PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_trust_e2e PRIVATE donto)
add_executable(trust_attacker ${CMAKE_CURRENT_SOURCE_DIR}/trust_attacker.c)
target_include_directories(trust_attacker PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(trust_attacker PRIVATE donto)
if(EXISTS "${DONTO_PYTHON}")
  set(_trust_py "${DONTO_PYTHON}")
else()
  set(_trust_py python3) # the legacy worker needs the standard library only
endif()
foreach(backend sqlite pg)
  set(_args ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2 ${PROJECT_SOURCE_DIR}/corpus/claims.jsonl
            --attacker $<TARGET_FILE:trust_attacker> --legacy ${CMAKE_CURRENT_SOURCE_DIR}/legacy_worker.py
            --python ${_trust_py})
  if(backend STREQUAL "pg")
    set(_cmd ${PROJECT_SOURCE_DIR}/scripts/pg-test-server $<TARGET_FILE:test_trust_e2e> pg ${_args})
    set(_name trust_e2e_pg)
  else()
    set(_cmd $<TARGET_FILE:test_trust_e2e> ${_args})
    set(_name trust_e2e)
  endif()
  add_test(NAME ${_name} COMMAND ${_cmd})
  set_tests_properties(${_name} PROPERTIES
    TIMEOUT 900
    LABELS "coord;e2e"
    SKIP_RETURN_CODE 77
    ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR};PG_TEST_TIMEOUT=870")
endforeach()
# The same on SQLite with replication on (serve --replicate 2): an untrusted
# token's items are checked by other tokens' votes, not the verifier.
add_test(NAME trust_e2e_replicate COMMAND $<TARGET_FILE:test_trust_e2e> ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2
         ${PROJECT_SOURCE_DIR}/corpus/claims.jsonl --attacker $<TARGET_FILE:trust_attacker>
         --legacy ${CMAKE_CURRENT_SOURCE_DIR}/legacy_worker.py --python ${_trust_py} --replicate 2)
set_tests_properties(trust_e2e_replicate PROPERTIES
  TIMEOUT 900
  LABELS "coord;e2e"
  SKIP_RETURN_CODE 77
  ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR}")
