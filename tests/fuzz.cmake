# The wire protocol's fuzz harnesses: tests/fuzz/fuzz_protocol.c (the
# server's request parsers) and tests/fuzz/fuzz_client.c (the client's answer
# parsers and request builders). In CTest they run as test_fuzz_protocol and
# test_fuzz_client (from test_*.c): the seed corpus (tests/fuzz/corpus,
# tests/fuzz/corpus_client) plus a few thousand seeded mutations
# (tests/fuzz/driver.h), under gcc, in the release and ASan/UBSan builds. The
# open-ended libFuzzer run (clang, -fsanitize=fuzzer,address,undefined) is
# `scripts/fuzz [protocol|client] [SECONDS]`. Labels: test_fuzz_protocol
# here, test_fuzz_client in tests/wire.cmake.
set_tests_properties(test_fuzz_protocol PROPERTIES TIMEOUT 120 LABELS coord)
