# Slow and hostile clients (issue 15): test_slow_conn (tests/test_slow_conn.c)
# holds 2,000 slow connections against an in-process coordinator over
# loopback and probes it. It exits 77 (skipped, never passed) when the hard
# RLIMIT_NOFILE cannot hold 2,000 client and 2,000 server sockets.
set_tests_properties(test_slow_conn PROPERTIES TIMEOUT 120 LABELS coord SKIP_RETURN_CODE 77)
