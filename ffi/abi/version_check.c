/* Built by `make symbols-check` against the shared library (target/libloadctl/libloadctl.so.MAJOR,
 * found through its SONAME): the header's compile-time version check as a C program would
 * write it, and the library it runs with reports the header's version. */
#include <stdio.h>
#include <string.h>
#include "loadctl.h"

#if LC_VERSION_MAJOR != 3 || LC_VERSION_NUMBER < 30100
#error "needs loadctl 3.x, 3.1.0 or later"
#endif

#if LC_VERSION_NUMBER != LC_VERSION_MAJOR * 10000 + LC_VERSION_MINOR * 100 + LC_VERSION_PATCH
#error "LC_VERSION_NUMBER does not follow LC_VERSION_MAJOR/MINOR/PATCH"
#endif

int main(void) {
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", LC_VERSION_MAJOR, LC_VERSION_MINOR, LC_VERSION_PATCH);
    if (strcmp(LC_VERSION, expected) != 0 || strcmp(lc_version(), LC_VERSION) != 0 ||
        lc_version_number() != LC_VERSION_NUMBER) {
        fprintf(stderr, "version mismatch: header %s (%s, %d), library %s (%u)\n", LC_VERSION, expected,
                LC_VERSION_NUMBER, lc_version(), (unsigned)lc_version_number());
        return 1;
    }
    printf("libloadctl %s (%u), header %s\n", lc_version(), (unsigned)lc_version_number(), LC_VERSION);
    return 0;
}
