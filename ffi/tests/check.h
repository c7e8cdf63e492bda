/* The C tests' checks, shared by the C tests in ffi/tests and edge/: CHECK counts and
 * reports a failed condition and goes on; main() prints `checks` and `failures` and fails when
 * any check did. Included after loadctl.h, it also gives CHECK_RESULT (reports the result's
 * text) and the lc_str helpers str(), NONE and str_is(). */
#ifndef LOADCTL_TESTS_CHECK_H
#define LOADCTL_TESTS_CHECK_H

#include <stdio.h>
#include <string.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#ifdef LOADCTL_H
#define CHECK_RESULT(call, expected)                                                            \
    do {                                                                                        \
        lc_result got_ = (call);                                                                \
        checks++;                                                                               \
        if (got_ != (expected)) {                                                               \
            failures++;                                                                         \
            fprintf(stderr, "%s:%d: %s returned %u (%s), expected %u\n", __FILE__, __LINE__, #call, \
                    (unsigned)got_, lc_result_text(got_), (unsigned)(expected));                \
        }                                                                                       \
    } while (0)

/* A NUL-terminated string (or NULL) as an lc_str. */
static inline lc_str str(const char *s) {
    lc_str out;
    out.ptr = (const uint8_t *)s;
    out.len = s ? strlen(s) : 0;
    return out;
}

/* The absent string. */
#define NONE ((lc_str){NULL, 0})

/* Whether `s` is present and holds exactly `expected`. */
static inline int str_is(lc_str s, const char *expected) {
    return s.ptr != NULL && s.len == strlen(expected) && memcmp(s.ptr, expected, s.len) == 0;
}
#endif

#endif
