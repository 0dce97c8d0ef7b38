/*
 * offload's C API beside LLVM's liboffload 22 (Debian liboffload-22-dev), from C, paired
 * in one run: for each operation, every sample times the same number of iterations of
 * both sides back to back, alternating which goes first, so both see the same machine
 * load; the figures are medians over the samples and the median of the per-sample ratios.
 *
 * liboffload is opened with dlopen, never linked (so the bench builds without it): where it
 * or an entry point is missing the bench prints "peer benchmark skipped: <why>" and exits 0.
 * Its only device on a machine without a GPU is a virtual host device whose olMemAlloc,
 * olCreateQueue and olCreateProgram crash, so only these operations are compared:
 *   init_shutdown  offload_init + offload_shutdown (0->1->0)  vs  olInit + olShutDown
 *   device_list    offload_devices into an array  vs  olIterateDevices into an array (device
 *                  handles belong to their runtime on both sides: nothing to give back)
 *   copy64         offload_buffer_copy of 64 bytes between two host-device buffers
 *                  vs  olMemcpy(NULL queue, host array, host device, host array, host device, 64)
 *
 * usage: peer [LIBLLVMOFFLOAD]   (default /usr/lib/llvm-22/lib/libLLVMOffload.so)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offload.h"

/* From /usr/lib/llvm-22/include/offload/OffloadAPI.h (LLVM 22.1.8), by hand. */
typedef const struct ol_error_struct_t { uint32_t code; const char *details; } *ol_result_t;
typedef struct ol_device_impl_t *ol_device_handle_t;
typedef struct ol_platform_impl_t *ol_platform_handle_t;
typedef struct ol_queue_impl_t *ol_queue_handle_t;
typedef bool (*ol_device_iterate_cb_t)(ol_device_handle_t, void *);
enum { OL_DEVICE_INFO_PLATFORM = 1, OL_PLATFORM_INFO_BACKEND = 3, OL_PLATFORM_BACKEND_HOST = 4 };

static ol_result_t (*olInit)(void);
static ol_result_t (*olShutDown)(void);
static ol_result_t (*olIterateDevices)(ol_device_iterate_cb_t, void *);
static ol_result_t (*olGetDeviceInfo)(ol_device_handle_t, uint32_t, size_t, void *);
static ol_result_t (*olGetPlatformInfo)(ol_platform_handle_t, uint32_t, size_t, void *);
static ol_result_t (*olMemcpy)(ol_queue_handle_t, void *, ol_device_handle_t, const void *,
                               ol_device_handle_t, size_t);

enum { SAMPLES = 30, MAX_DEVICES = 64 };

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void die(const char *what, offload_status_t s) {
    fprintf(stderr, "%s: %s: %s\n", what, offload_status_name((int)s), offload_last_error());
    exit(1);
}
#define TRY(call)                                                                          \
    do {                                                                                   \
        offload_status_t s_ = (call);                                                      \
        if (s_ != OFFLOAD_OK) die(#call, s_);                                              \
    } while (0)
#define OL(call)                                                                           \
    do {                                                                                   \
        ol_result_t r_ = (call);                                                           \
        if (r_) {                                                                          \
            fprintf(stderr, "%s: %u %s\n", #call, r_->code, r_->details ? r_->details : ""); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* State the operations share. */
static offload_runtime_t rt;
static offload_buffer_t src_buf, dst_buf;
static ol_device_handle_t ol_host;
static ol_device_handle_t ol_list[MAX_DEVICES];
static size_t ol_count;
static volatile size_t ours_count;
static unsigned char host_src[64], host_dst[64];

static void ours_init_shutdown(void) {
    offload_runtime_t r;
    TRY(offload_init(NULL, &r));
    TRY(offload_shutdown(r, NULL));
}
static void theirs_init_shutdown(void) {
    OL(olInit());
    OL(olShutDown());
}
static void ours_device_list(void) {
    offload_device_t d[MAX_DEVICES];
    size_t n = 0;
    TRY(offload_devices(rt, d, MAX_DEVICES, &n));
    ours_count = n;
}
static bool collect(ol_device_handle_t d, void *user) {
    (void)user;
    if (ol_count < MAX_DEVICES) ol_list[ol_count++] = d;
    return true;
}
static void theirs_device_list(void) {
    ol_count = 0;
    OL(olIterateDevices(collect, NULL));
}
static void ours_copy64(void) { TRY(offload_buffer_copy(dst_buf, 0, src_buf, 0, 64)); }
static void theirs_copy64(void) {
    OL(olMemcpy(NULL, host_dst, ol_host, host_src, ol_host, 64));
}

/* Times `iters` iterations of each side per sample, SAMPLES samples, alternating order. */
static void paired(const char *id, void (*ours)(void), void (*theirs)(void), int iters) {
    double o[SAMPLES], t[SAMPLES], ratio[SAMPLES];
    for (int i = 0; i < iters; i++) { ours(); theirs(); } /* warm-up */
    for (int s = 0; s < SAMPLES; s++) {
        double a, b, c;
        if (s % 2 == 0) {
            a = now_ns();
            for (int i = 0; i < iters; i++) ours();
            b = now_ns();
            for (int i = 0; i < iters; i++) theirs();
            c = now_ns();
            o[s] = (b - a) / iters;
            t[s] = (c - b) / iters;
        } else {
            a = now_ns();
            for (int i = 0; i < iters; i++) theirs();
            b = now_ns();
            for (int i = 0; i < iters; i++) ours();
            c = now_ns();
            t[s] = (b - a) / iters;
            o[s] = (c - b) / iters;
        }
        ratio[s] = o[s] / t[s];
    }
    double mo = median(o, SAMPLES), mt = median(t, SAMPLES), mr = median(ratio, SAMPLES);
    printf("| %-13s | %12.1f ns | %12.1f ns | %6.3f |\n", id, mo, mt, mr);
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        printf("peer benchmark skipped: the library lacks %s\n", name);
        exit(0);
    }
    return p;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "/usr/lib/llvm-22/lib/libLLVMOffload.so";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("peer benchmark skipped: %s\n", dlerror());
        return 0;
    }
    *(void **)&olInit = sym(lib, "olInit");
    *(void **)&olShutDown = sym(lib, "olShutDown");
    *(void **)&olIterateDevices = sym(lib, "olIterateDevices");
    *(void **)&olGetDeviceInfo = sym(lib, "olGetDeviceInfo");
    *(void **)&olGetPlatformInfo = sym(lib, "olGetPlatformInfo");
    *(void **)&olMemcpy = sym(lib, "olMemcpy");

    printf("| operation     | offload C API   | liboffload 22   | ratio  |\n");
    printf("|---|---|---|---|\n");
    /* First, with neither runtime held: a real 0->1->0 every iteration on both sides. */
    paired("init_shutdown", ours_init_shutdown, theirs_init_shutdown, 20);

    TRY(offload_init(NULL, &rt));
    offload_device_t host;
    TRY(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &host));
    TRY(offload_buffer_alloc(host, 64, OFFLOAD_MEM_DEVICE, &src_buf));
    TRY(offload_buffer_alloc(host, 64, OFFLOAD_MEM_DEVICE, &dst_buf));
    OL(olInit());
    theirs_device_list();
    for (size_t i = 0; i < ol_count && !ol_host; i++) {
        ol_platform_handle_t platform = NULL;
        uint32_t backend = 0;
        OL(olGetDeviceInfo(ol_list[i], OL_DEVICE_INFO_PLATFORM, sizeof platform, &platform));
        OL(olGetPlatformInfo(platform, OL_PLATFORM_INFO_BACKEND, sizeof backend, &backend));
        if (backend == OL_PLATFORM_BACKEND_HOST) ol_host = ol_list[i];
    }
    if (!ol_host) {
        printf("peer benchmark skipped: liboffload reports no host device\n");
        return 0;
    }
    memset(host_src, 7, sizeof host_src);

    paired("device_list", ours_device_list, theirs_device_list, 2000);
    paired("copy64", ours_copy64, theirs_copy64, 20000);

    OL(olShutDown());
    TRY(offload_shutdown(rt, NULL));
    return 0;
}
