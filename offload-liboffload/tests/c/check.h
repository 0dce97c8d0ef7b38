/* The checks the liboffload C programs share (api.c, dlopen.c, bench.c): a failed check
 * prints where and why and ends the program with status 1. Include after OffloadAPI.h. */
#ifndef OFFLOAD_LIBOFFLOAD_TEST_CHECK_H
#define OFFLOAD_LIBOFFLOAD_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* A call that must succeed. */
#define OK(call)                                                                          \
    do {                                                                                  \
        ol_result_t r_ = (call);                                                          \
        CHECK(r_ == OL_SUCCESS, "%s -> code %d (%s)", #call, (int)r_->Code,               \
              r_->Details ? r_->Details : "no details");                                  \
    } while (0)

#endif
