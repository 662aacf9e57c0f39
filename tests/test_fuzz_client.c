/* A short, deterministic run of the libFuzzer harness tests/fuzz/fuzz_client.c
 * (the client side of the wire protocol, src/wire/client.c: lease, submit
 * and release answers, and the builders fed from them, read back by the
 * server's parsers) inside the regular test suite: every file of
 * tests/fuzz/corpus_client, then seeded mutations (tests/fuzz/driver.h).
 * Plain C, so it runs under gcc in the release and the ASan/UBSan builds; a
 * broken invariant aborts inside the harness. The open-ended run is
 * `scripts/fuzz client`. DONTO_FUZZ_ITERS overrides the number of mutations. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz/fuzz_client.c"
#include "fuzz/driver.h"

int main(void) { return fuzz_drive("test_fuzz_client", "corpus_client"); }
