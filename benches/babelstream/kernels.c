/*
 * BabelStream's five kernels (plus the parallel initialisation) as offload host C kernels,
 * written as a user would write them: one call per block, each block a contiguous range
 * of `launch->block[0]` elements, the last block cut at n. Dot writes one partial sum per
 * block; the host adds them up.
 */
#include "offload_host.h"

/* This block's elements: [lo, hi). */
#define RANGE(n)                                                        \
    uint64_t lo = (uint64_t)launch->block_id[0] * launch->block[0];     \
    uint64_t hi = lo + launch->block[0];                                \
    if (hi > (n)) hi = (n)

OFFLOAD_KERNEL(init, "bbbdddQ") {
    double *restrict a = OFFLOAD_BUFFER(double, 0);
    double *restrict b = OFFLOAD_BUFFER(double, 1);
    double *restrict c = OFFLOAD_BUFFER(double, 2);
    double ia = OFFLOAD_SCALAR(double, 3), ib = OFFLOAD_SCALAR(double, 4),
           ic = OFFLOAD_SCALAR(double, 5);
    RANGE(OFFLOAD_SCALAR(uint64_t, 6));
    for (uint64_t i = lo; i < hi; i++) {
        a[i] = ia;
        b[i] = ib;
        c[i] = ic;
    }
}

OFFLOAD_KERNEL(copy, "bbQ") {
    const double *restrict a = OFFLOAD_BUFFER(const double, 0);
    double *restrict c = OFFLOAD_BUFFER(double, 1);
    RANGE(OFFLOAD_SCALAR(uint64_t, 2));
    for (uint64_t i = lo; i < hi; i++) c[i] = a[i];
}

OFFLOAD_KERNEL(mul, "bbdQ") {
    double *restrict b = OFFLOAD_BUFFER(double, 0);
    const double *restrict c = OFFLOAD_BUFFER(const double, 1);
    double scalar = OFFLOAD_SCALAR(double, 2);
    RANGE(OFFLOAD_SCALAR(uint64_t, 3));
    for (uint64_t i = lo; i < hi; i++) b[i] = scalar * c[i];
}

OFFLOAD_KERNEL(add, "bbbQ") {
    const double *restrict a = OFFLOAD_BUFFER(const double, 0);
    const double *restrict b = OFFLOAD_BUFFER(const double, 1);
    double *restrict c = OFFLOAD_BUFFER(double, 2);
    RANGE(OFFLOAD_SCALAR(uint64_t, 3));
    for (uint64_t i = lo; i < hi; i++) c[i] = a[i] + b[i];
}

OFFLOAD_KERNEL(triad, "bbbdQ") {
    double *restrict a = OFFLOAD_BUFFER(double, 0);
    const double *restrict b = OFFLOAD_BUFFER(const double, 1);
    const double *restrict c = OFFLOAD_BUFFER(const double, 2);
    double scalar = OFFLOAD_SCALAR(double, 3);
    RANGE(OFFLOAD_SCALAR(uint64_t, 4));
    for (uint64_t i = lo; i < hi; i++) a[i] = b[i] + scalar * c[i];
}

OFFLOAD_KERNEL(dot, "bbbQ") {
    const double *restrict a = OFFLOAD_BUFFER(const double, 0);
    const double *restrict b = OFFLOAD_BUFFER(const double, 1);
    double *restrict sums = OFFLOAD_BUFFER(double, 2);
    RANGE(OFFLOAD_SCALAR(uint64_t, 3));
    double sum = 0.0;
    for (uint64_t i = lo; i < hi; i++) sum += a[i] * b[i];
    sums[launch->block_id[0]] = sum;
}

/* Triad with non-temporal (streaming) stores, as a user who wants them writes it: AVX
 * intrinsics (the host backend compiles with -march=native), the block's first elements
 * up to a 32-byte boundary and its tail stored plainly. Not one of BabelStream's kernels:
 * the counterpart of openmp.c's triad_nt. */
#if defined(__AVX__)
#include <immintrin.h>
#endif

OFFLOAD_KERNEL(triad_nt, "bbbdQ") {
    double *restrict a = OFFLOAD_BUFFER(double, 0);
    const double *restrict b = OFFLOAD_BUFFER(const double, 1);
    const double *restrict c = OFFLOAD_BUFFER(const double, 2);
    double scalar = OFFLOAD_SCALAR(double, 3);
    RANGE(OFFLOAD_SCALAR(uint64_t, 4));
    uint64_t i = lo;
#if defined(__AVX__)
    for (; i < hi && ((uintptr_t)(a + i) & 31); i++) a[i] = b[i] + scalar * c[i];
    __m256d s = _mm256_set1_pd(scalar);
    for (; i + 4 <= hi; i += 4)
        _mm256_stream_pd(a + i, _mm256_add_pd(_mm256_loadu_pd(b + i),
                                              _mm256_mul_pd(s, _mm256_loadu_pd(c + i))));
    _mm_sfence();
#endif
    for (; i < hi; i++) a[i] = b[i] + scalar * c[i];
}
