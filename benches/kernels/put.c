/* The host kernel of the compile-cache and fresh-process benchmarks: buf[i] = 7 for i < n. */
#include "offload_host.h"
OFFLOAD_KERNEL(put, "bI") {
    uint32_t *buf = OFFLOAD_BUFFER(uint32_t, 0);
    uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);
    for (uint32_t t = 0; t < launch->block[0]; t++) {
        uint64_t i = OFFLOAD_INDEX_X(t);
        if (i < n) buf[i] = 7;
    }
}
