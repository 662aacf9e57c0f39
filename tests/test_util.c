/*
 * The growable string of include/donto/util.h (donto_buf): empty, pieces
 * with embedded NULs, growth across many reallocations with every byte
 * kept, take (the string, the buffer left empty and reusable), free, and
 * printf pieces shorter and longer than its first try.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "donto/util.h"

int main(void) {
    donto_buf b = {0};
    char *s = donto_buf_take(&b);
    CHECK(s && !strcmp(s, ""), "an empty buffer takes as \"\"");
    free(s);

    donto_buf_str(&b, "{");
    donto_buf_put(&b, "a\0b", 3);
    donto_buf_put(&b, "ignored", 0);
    donto_buf_str(&b, "}");
    CHECK(b.len == 5 && !memcmp(b.p, "{a\0b}", 6), "pieces: len %zu", b.len);
    CHECK(b.p[b.len] == 0 && b.cap > b.len, "NUL-terminated inside its capacity");

    /* 100,000 pieces of 1..9 bytes: every byte where it belongs. */
    donto_buf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0, "free leaves it empty");
    size_t want = 0;
    char piece[10];
    for (int i = 0; i < 100000; i++) {
        int n = 1 + i % 9;
        for (int j = 0; j < n; j++) piece[j] = (char)('0' + (i + j) % 10);
        donto_buf_put(&b, piece, (size_t)n);
        want += (size_t)n;
    }
    CHECK(b.len == want && strlen(b.p) == want, "grown to %zu bytes, want %zu", b.len, want);
    size_t at = 0;
    int bad = 0;
    for (int i = 0; i < 100000 && !bad; i++) {
        int n = 1 + i % 9;
        for (int j = 0; j < n; j++) bad |= b.p[at++] != (char)('0' + (i + j) % 10);
    }
    CHECK(!bad, "a byte moved while growing (at %zu)", at);
    s = donto_buf_take(&b);
    CHECK(s && strlen(s) == want && b.p == NULL && b.len == 0 && b.cap == 0, "take hands over the string");
    donto_buf_str(&b, "again");
    CHECK(b.len == 5 && !strcmp(b.p, "again"), "reusable after take");
    free(s);
    donto_buf_free(&b);
    donto_buf_free(&b); /* twice is harmless */

    /* printf: short and long pieces (past its 256-byte first try) appended. */
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    donto_buf_printf(&b, "%s=%d;", "k", 42);
    donto_buf_printf(&b, "[%s]", big);
    donto_buf_printf(&b, "%05.1f", 3.14159);
    CHECK(b.len == 5 + 1001 + 5 && !strncmp(b.p, "k=42;[x", 7) && !strcmp(b.p + b.len - 7, "x]003.1"),
          "printf: %zu bytes, ends '%s'", b.len, b.len > 7 ? b.p + b.len - 7 : "");
    donto_buf_free(&b);
    return check_report("test_util");
}
