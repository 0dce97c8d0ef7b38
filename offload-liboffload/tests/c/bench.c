/* A paired benchmark (issue 47): the same binary, run against offload's libLLVMOffload and
 * LLVM's by LD_LIBRARY_PATH (benches/peer.rs runs both). Written from OffloadAPI.h.
 * Prints "<operation> <nanoseconds per call>", the fastest of 7 batches:
 *   init_shutdown  an olInit/olShutDown pair (nothing listed in between)
 *   iterate        olIterateDevices over every device, with a callback that counts
 *   memcpy64       a 64-byte host-to-host olMemcpy through the HOST device */
#define _POSIX_C_SOURCE 199309L
#include <stdbool.h> /* OffloadAPI.h uses bool without it */
#include <stdint.h>
#include <offload/OffloadAPI.h>
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static ol_device_handle_t host;

static bool count(ol_device_handle_t d, void *user) {
    (void)d;
    ++*(long *)user;
    return true;
}

static bool find_host(ol_device_handle_t d, void *user) {
    (void)user;
    ol_device_type_t type;
    OK(olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof type, &type));
    if (type == OL_DEVICE_TYPE_HOST) {
        host = d;
        return false;
    }
    return true;
}

/* The fastest of 7 batches of n calls of `op`, in ns per call. */
#define BEST(n, op)                                                                       \
    ({                                                                                    \
        double best_ = 1e300;                                                             \
        for (int b_ = 0; b_ < 7; b_++) {                                                  \
            double t0_ = now_ns();                                                        \
            for (long i_ = 0; i_ < (n); i_++) {                                           \
                op;                                                                       \
            }                                                                             \
            double per_ = (now_ns() - t0_) / (n);                                         \
            if (per_ < best_)                                                             \
                best_ = per_;                                                             \
        }                                                                                 \
        best_;                                                                            \
    })

int main(void) {
    printf("init_shutdown %.1f\n", BEST(200, OK(olInit()); OK(olShutDown())));
    OK(olInit());
    OK(olIterateDevices(find_host, NULL));
    long seen = 0;
    printf("iterate %.1f\n", BEST(100000, OK(olIterateDevices(count, &seen))));
    static unsigned char a[64], b[64];
    printf("memcpy64 %.1f\n", BEST(100000, OK(olMemcpy(NULL, b, host, a, host, 64))));
    OK(olShutDown());
    return seen > 0 ? 0 : 1;
}
