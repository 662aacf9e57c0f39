# donto_model_fetch against a loopback stand-in for the hub
# (tests/fetch_server.py, stdlib only, 127.0.0.1 on an ephemeral port).
# One executable, one CTest per scenario, so a failure names what broke.
# Nothing here reaches beyond 127.0.0.1.
add_executable(fetch_test ${CMAKE_CURRENT_SOURCE_DIR}/fetch_test.c)
target_include_directories(fetch_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(fetch_test PRIVATE donto)

# The server needs only the standard library: any python3 will do when the
# project venv has not been made yet.
set(DONTO_FETCH_PYTHON "${DONTO_PYTHON}")
if(NOT EXISTS "${DONTO_FETCH_PYTHON}")
  find_program(DONTO_FETCH_PYTHON_FALLBACK python3)
  if(DONTO_FETCH_PYTHON_FALLBACK)
    set(DONTO_FETCH_PYTHON "${DONTO_FETCH_PYTHON_FALLBACK}")
  endif()
endif()

set(DONTO_FETCH_SCENARIOS
  pins full resume range_ignored digest_mismatch size_mismatch http_404
  present_skipped present_corrupt interrupted part_locked stall_timeout write_error
  unpinned pinned_default cli)
foreach(s ${DONTO_FETCH_SCENARIOS})
  add_test(NAME fetch_${s}
           COMMAND fetch_test ${s} ${DONTO_FETCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/fetch_server.py)
  set_tests_properties(fetch_${s} PROPERTIES
    TIMEOUT 60
    LABELS fetch
    ENVIRONMENT "DONTO_SOURCE_DIR=${PROJECT_SOURCE_DIR};DONTO_BUILD_DIR=${PROJECT_BINARY_DIR}")
endforeach()
