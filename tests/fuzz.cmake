# The protocol fuzz harness (tests/fuzz/fuzz_protocol.c). In CTest it runs
# as test_fuzz_protocol (from test_*.c): the seed corpus plus a few thousand
# seeded mutations, under gcc, in the release and ASan/UBSan builds. The
# open-ended libFuzzer run (clang, -fsanitize=fuzzer,address,undefined) is
# `scripts/fuzz [SECONDS]`.
set_tests_properties(test_fuzz_protocol PROPERTIES TIMEOUT 120 LABELS coord)
