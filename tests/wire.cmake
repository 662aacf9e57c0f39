# The wire protocol's client side (src/wire/client.c, used by the worker and
# bench/coord_client.c): test_protocol_client (round trips through the
# server's parsers and writers, malformed answers) and test_fuzz_client (the
# client fuzz harness over tests/fuzz/corpus_client, see tests/fuzz.cmake),
# both from test_*.c. The server side's tests (test_protocol,
# test_fuzz_protocol) keep the coord label.
set_tests_properties(test_protocol_client PROPERTIES TIMEOUT 120 LABELS "wire;worker")
set_tests_properties(test_fuzz_client PROPERTIES TIMEOUT 120 LABELS "wire;worker")
