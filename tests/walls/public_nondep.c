/* Wall probe: compiled as the text module (which depends only on util), it
 * includes the store's public header. Layers point one way: this must not
 * compile. */
#include "donto/store.h"
int walls_probe;
