# Contributor verification (issue 15, src/coord/verify.c and trust.c):
# test_verify runs the pool on a tiny generated model (no downloads);
# test_trust checks the sampling schedule and simulates attackers.
set_tests_properties(test_verify PROPERTIES TIMEOUT 120 LABELS coord)
set_tests_properties(test_trust PROPERTIES TIMEOUT 120 LABELS coord)
# test_canary: the canary items (src/coord/canary.c).
set_tests_properties(test_canary PROPERTIES TIMEOUT 60 LABELS coord)
# test_replica: replication (src/coord/replica.c, serve --replicate).
set_tests_properties(test_replica PROPERTIES TIMEOUT 60 LABELS coord)
