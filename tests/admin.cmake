# The coordinator's admin page (GET /embed/admin) in headless Chromium against
# a live `donto-embed serve` (127.0.0.1, free port, temp SQLite db), checked
# against /embed/stats and /embed/metrics. Needs Debian's chromium and PyPI
# playwright in .venv (scripts/bootstrap); no browser is downloaded.
# Screenshot: ${DONTO_TESTDATA}/admin/admin.png.
add_test(NAME admin_page
         COMMAND ${DONTO_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/admin_page_test.py
                 --bin $<TARGET_FILE:donto-embed> --out-dir ${DONTO_TESTDATA}/admin --timeout 150)
set_tests_properties(admin_page PROPERTIES TIMEOUT 180)
