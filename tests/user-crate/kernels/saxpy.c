/* SAXPY on the host backend: y[i] = a * x[i] + y[i] for i < n.
 * Parameters (offload_params_saxpy): buffer x, buffer y, float a, uint32_t n. */
#include "offload_host.h"

OFFLOAD_KERNEL(saxpy, "bbfI") {
    const float *x = OFFLOAD_BUFFER(const float, 0);
    float *y = OFFLOAD_BUFFER(float, 1);
    float a = OFFLOAD_SCALAR(float, 2);
    uint32_t n = OFFLOAD_SCALAR(uint32_t, 3);
    for (uint32_t t = 0; t < launch->block[0]; t++) {
        uint64_t i = OFFLOAD_INDEX_X(t);
        if (i < n) y[i] = a * x[i] + y[i];
    }
}
