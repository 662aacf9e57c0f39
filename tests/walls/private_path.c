/* Wall probe: the same leak spelled with the module's folder. src/ is on no
 * include path, so this must not compile either. */
#include "store/store_int.h"
int walls_probe;
