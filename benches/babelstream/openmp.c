/*
 * The baseline: BabelStream's kernels as its OpenMP model runs them on a CPU (one
 * `#pragma omp parallel for` loop per kernel over `int` indices, a `reduction(+:sum)` for
 * dot, arrays aligned to 2 MiB and first touched by a parallel initialisation), compiled
 * by the same C compiler as the host backend with `-O3 -march=native -fopenmp`.
 *
 * triad_nt is the practical ceiling: the same triad with non-temporal (streaming) stores,
 * each thread on its own contiguous, vector-aligned range.
 */
#include <stdint.h>
#include <stdlib.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

double *babel_alloc(long n) {
    size_t bytes = ((size_t)n * sizeof(double) + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    return aligned_alloc(2u << 20, bytes);
}

void babel_free(double *p) { free(p); }

void babel_init(double *a, double *b, double *c, double ia, double ib, double ic, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) {
        a[i] = ia;
        b[i] = ib;
        c[i] = ic;
    }
}

void babel_copy(const double *a, double *c, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) c[i] = a[i];
}

void babel_mul(double *b, const double *c, double scalar, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) b[i] = scalar * c[i];
}

void babel_add(const double *a, const double *b, double *c, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
}

void babel_triad(double *a, const double *b, const double *c, double scalar, int n) {
#pragma omp parallel for
    for (int i = 0; i < n; i++) a[i] = b[i] + scalar * c[i];
}

double babel_dot(const double *a, const double *b, int n) {
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum)
    for (int i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

#include <omp.h>

void babel_triad_nt(double *a, const double *b, const double *c, double scalar, int n) {
#pragma omp parallel
    {
        int threads = omp_get_num_threads(), me = omp_get_thread_num();
        /* Ranges cut at multiples of 8 elements (64 bytes), so every store is aligned. */
        long chunk = ((long)n / threads + 7) & ~7L;
        long lo = chunk * me, hi = lo + chunk;
        if (hi > n) hi = n;
        if (lo > n) lo = n;
        long i = lo;
#if defined(__AVX__)
        __m256d s = _mm256_set1_pd(scalar);
        for (; i + 4 <= hi; i += 4) {
            __m256d v = _mm256_add_pd(_mm256_loadu_pd(b + i), _mm256_mul_pd(s, _mm256_loadu_pd(c + i)));
            _mm256_stream_pd(a + i, v);
        }
        _mm_sfence();
#endif
        for (; i < hi; i++) a[i] = b[i] + scalar * c[i];
    }
}
