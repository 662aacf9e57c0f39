/* Wall probe, the control: compiled as the substrate, which depends on the
 * store, the store's public header is visible. This must compile, or the
 * failures of the other probes prove nothing. */
#include "donto/store.h"
int walls_probe;
