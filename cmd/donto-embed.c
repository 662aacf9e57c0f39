/* donto-embed: command-line front end (placeholder until the encoder lands). */
#include <stdio.h>
int main(void) {
    puts("donto-embed " DONTO_VERSION);
    return 0;
}
