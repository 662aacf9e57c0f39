# The coordinator's admin page (GET /embed/admin) in headless Chromium against
# a live `donto-embed serve` (127.0.0.1, free port, temp SQLite db), checked
# against /embed/stats and /embed/metrics; with --model (the coordinator
# verifies) also the tokens table (one suspended by a failed check, one
# revoked) and the verifier's counters. Needs Debian's chromium and PyPI
# playwright in .venv (scripts/bootstrap); no browser is downloaded.
# Screenshot: ${DONTO_TESTDATA}/admin/admin.png.
add_test(NAME admin_page
         COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/admin_page_test.py
                 --bin $<TARGET_FILE:donto-embed> --out-dir ${DONTO_TESTDATA}/admin --timeout 150
                 --model ${PROJECT_SOURCE_DIR}/models/all-MiniLM-L6-v2)
set_tests_properties(admin_page PROPERTIES TIMEOUT 180)
