/* Wall probe: the sheaf export (module sheaf_export) writes its JSON itself
 * and does not depend on the learner, so the learner's header is not on its
 * include path (tests/walls.cmake expects this to fail to compile). */
#include "donto/sheaf.h"

int wall_probe_sheafx_no_learner(void) { return 0; }
