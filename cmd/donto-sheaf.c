/* donto-sheaf: Neural Sheaf Diffusion training and inference. The commands live in
 * the library (src/cli/sheaf_cmd.c); this file only dispatches. */
#include "donto/cli.h"

int main(int argc, char **argv) { return donto_sheaf_main(argc, argv); }
