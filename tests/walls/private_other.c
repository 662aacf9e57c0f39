/* Wall probe (tests/walls.cmake): compiled as if it were part of the
 * substrate, it includes the store's private header. This must not compile:
 * a module's private headers are reachable from its own sources alone. */
#include "store_int.h"
int walls_probe;
