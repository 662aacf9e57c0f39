/* A short, deterministic run of the libFuzzer harness tests/fuzz/fuzz_protocol.c
 * (request parsers of src/wire/wire.c) inside the regular test suite:
 * every file of tests/fuzz/corpus, then seeded mutations of them (byte flips,
 * inserts, deletes, JSON-ish tokens, splices, truncations). Plain C, so it
 * runs under gcc in the release and the ASan/UBSan builds; a broken
 * invariant aborts inside the harness. The open-ended run is scripts/fuzz.
 * DONTO_FUZZ_ITERS overrides the number of mutations (default 20000). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz/fuzz_protocol.c"
#include "fuzz/driver.h"

int main(void) { return fuzz_drive("test_fuzz_protocol", "corpus"); }
