/* What the C tests share: checks that count failures and say where and why. */
#ifndef OFFLOAD_CHECK_H
#define OFFLOAD_CHECK_H

#include <stdio.h>
#include <string.h>

#include "offload.h"

static int check_failures __attribute__((unused));

#define EXPECT(call, want)                                                                 \
    do {                                                                                   \
        offload_status_t got_ = (call);                                                    \
        if (got_ != (want)) {                                                              \
            fprintf(stderr, "%s:%d: %s\n  gave %s (%s), expected %s\n", __FILE__, __LINE__, \
                    #call, offload_status_name((int)got_),                                 \
                    got_ == OFFLOAD_OK ? "" : offload_last_error(),                         \
                    offload_status_name((int)(want)));                                     \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)

#define OK(call) EXPECT(call, OFFLOAD_OK)

/* `call` must succeed, else the enclosing function returns 1 (for loops that stop at the
 * first failure). */
#define REQUIRE(call)                                                                      \
    do {                                                                                   \
        offload_status_t s_ = (call);                                                      \
        if (s_ != OFFLOAD_OK) {                                                            \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,              \
                    offload_status_name((int)s_), offload_last_error());                    \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)

/* The last error message contains `part`. */
#define SAYS(part)                                                                         \
    do {                                                                                   \
        if (!strstr(offload_last_error(), (part))) {                                       \
            fprintf(stderr, "%s:%d: last error \"%s\" does not say \"%s\"\n", __FILE__,    \
                    __LINE__, offload_last_error(), (part));                               \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)

#endif
