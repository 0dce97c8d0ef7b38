/* A test of liboffload 22's C API, written from OffloadAPI.h's documentation (issue 47).
 * One binary, linked once against libLLVMOffload.so.22.1, run against offload's library
 * and LLVM's by LD_LIBRARY_PATH.
 *
 *   api cpu   — what real liboffload can run on a machine without a GPU: init/shutdown
 *               cycles, device iteration, device and platform info, a host-to-host memcpy.
 *   api full  — also: allocations on a compute device, copies through them, fills, memory
 *               info, olIsValidBinary, handles of finished generations (refused with an
 *               error, never a crash).
 *   api threads — 4 threads each initialising, copying and shutting down OL_TEST_ROUNDS
 *               (default 200) times at once.
 *   api initfail — run where olInit must fail (offload told to use a backend it cannot
 *               open): each failure says why and leaves nothing initialised.
 *
 * OL_TEST_CYCLES (default 1000) sets the number of olInit/olShutDown cycles. Prints one
 * line per check; exits non-zero at the first failure. */
#define _POSIX_C_SOURCE 199309L
#include <stdbool.h> /* OffloadAPI.h uses bool without it */
#include <stdint.h>
#include <offload/OffloadAPI.h>
#include "check.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;

/* A call that must fail with `code` (and say why). */
#define ERR(call, code)                                                                   \
    do {                                                                                  \
        ol_result_t r_ = (call);                                                          \
        CHECK(r_ != OL_SUCCESS, "%s succeeded; expected %s", #call, #code);               \
        CHECK(r_->Code == (code), "%s -> code %d; expected %s (%s)", #call, (int)r_->Code, \
              #code, r_->Details ? r_->Details : "no details");                           \
        CHECK(r_->Details != NULL && r_->Details[0] != 0, "%s: no details", #call);       \
    } while (0)

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define MAX_DEVICES 16
static ol_device_handle_t devices[MAX_DEVICES];
static int n_devices;

static bool collect(ol_device_handle_t device, void *user) {
    int *calls = user;
    ++*calls;
    if (n_devices < MAX_DEVICES)
        devices[n_devices++] = device;
    return true;
}

static bool stop_at_first(ol_device_handle_t device, void *user) {
    (void)device;
    ++*(int *)user;
    return false;
}

static void list_devices(void) {
    int calls = 0;
    n_devices = 0;
    OK(olIterateDevices(collect, &calls));
    CHECK(calls == n_devices && n_devices > 0, "%d devices, %d calls", n_devices, calls);
}

static ol_platform_backend_t backend_of(ol_device_handle_t d) {
    ol_platform_handle_t platform = NULL;
    ol_platform_backend_t backend = OL_PLATFORM_BACKEND_UNKNOWN;
    OK(olGetDeviceInfo(d, OL_DEVICE_INFO_PLATFORM, sizeof platform, &platform));
    OK(olGetPlatformInfo(platform, OL_PLATFORM_INFO_BACKEND, sizeof backend, &backend));
    return backend;
}

static ol_device_type_t type_of(ol_device_handle_t d) {
    ol_device_type_t type;
    OK(olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof type, &type));
    return type;
}

/* The device the header names for host pointers: the HOST platform's HOST device. */
static ol_device_handle_t host_endpoint(void) {
    for (int i = 0; i < n_devices; i++)
        if (backend_of(devices[i]) == OL_PLATFORM_BACKEND_HOST &&
            type_of(devices[i]) == OL_DEVICE_TYPE_HOST)
            return devices[i];
    CHECK(0, "no HOST device");
    return NULL;
}

static void cycles(void) {
    const char *env = getenv("OL_TEST_CYCLES");
    int n = env ? atoi(env) : 1000;
    double start = now_us();
    for (int i = 0; i < n; i++) {
        OK(olInit());
        OK(olShutDown());
    }
    double us = now_us() - start;
    printf("ok %d olInit/olShutDown cycles: %.1f us each\n", n, n ? us / n : 0.0);
    /* Nested references: only the last olShutDown deinitialises. */
    OK(olInit());
    OK(olInit());
    OK(olShutDown());
    list_devices();
    OK(olShutDown());
    printf("ok nested init\n");
}

static void info(void) {
    for (int i = 0; i < n_devices; i++) {
        size_t size = 0;
        OK(olGetDeviceInfoSize(devices[i], OL_DEVICE_INFO_NAME, &size));
        CHECK(size > 1 && size < 4096, "name size %zu", size);
        char *name = malloc(size);
        OK(olGetDeviceInfo(devices[i], OL_DEVICE_INFO_NAME, size, name));
        CHECK(strlen(name) == size - 1, "name '%s' vs size %zu", name, size);
        ERR(olGetDeviceInfo(devices[i], OL_DEVICE_INFO_NAME, size - 1, name),
            OL_ERRC_INVALID_SIZE);
        ERR(olGetDeviceInfo(devices[i], OL_DEVICE_INFO_NAME, size, NULL),
            OL_ERRC_INVALID_NULL_POINTER);
        ERR(olGetDeviceInfoSize(devices[i], OL_DEVICE_INFO_NAME, NULL),
            OL_ERRC_INVALID_NULL_POINTER);
        OK(olGetDeviceInfoSize(devices[i], OL_DEVICE_INFO_TYPE, &size));
        CHECK(size == sizeof(ol_device_type_t), "type size %zu", size);
        ol_platform_handle_t platform;
        OK(olGetDeviceInfo(devices[i], OL_DEVICE_INFO_PLATFORM, sizeof platform, &platform));
        OK(olGetPlatformInfoSize(platform, OL_PLATFORM_INFO_NAME, &size));
        char *pname = malloc(size);
        OK(olGetPlatformInfo(platform, OL_PLATFORM_INFO_NAME, size, pname));
        printf("ok device %d: %s (platform %s, backend %d, type %d)\n", i, name, pname,
               (int)backend_of(devices[i]), (int)type_of(devices[i]));
        free(name);
        free(pname);
    }
    ERR(olGetDeviceInfo(NULL, OL_DEVICE_INFO_TYPE, 4, &(int){0}), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetPlatformInfo(NULL, OL_PLATFORM_INFO_NAME, 4, &(int){0}),
        OL_ERRC_INVALID_NULL_HANDLE);
    int calls = 0;
    OK(olIterateDevices(stop_at_first, &calls));
    CHECK(calls == 1, "iteration went on after false: %d calls", calls);
    ERR(olIterateDevices(NULL, NULL), OL_ERRC_INVALID_NULL_POINTER);
}

static void host_memcpy(void) {
    ol_device_handle_t host = host_endpoint();
    unsigned char a[64], b[64];
    for (int i = 0; i < 64; i++)
        a[i] = (unsigned char)i, b[i] = 0;
    OK(olMemcpy(NULL, b, host, a, host, sizeof a));
    CHECK(memcmp(a, b, 64) == 0, "host memcpy copied wrong bytes");
    printf("ok host memcpy\n");
}

/* A compute device: the first that is not the HOST platform's HOST device. */
static ol_device_handle_t compute_device(void) {
    for (int i = 0; i < n_devices; i++)
        if (type_of(devices[i]) != OL_DEVICE_TYPE_HOST)
            return devices[i];
    CHECK(0, "no compute device");
    return NULL;
}

static void memory(void) {
    ol_device_handle_t host = host_endpoint();
    for (int i = 0; i < n_devices; i++) {
        ol_device_handle_t dev = devices[i];
        if (type_of(dev) == OL_DEVICE_TYPE_HOST)
            continue;
        void *p = NULL;
        ERR(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 0, &p), OL_ERRC_INVALID_SIZE);
        ERR(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 64, NULL), OL_ERRC_INVALID_NULL_POINTER);
        OK(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 256, &p));
        CHECK(p != NULL, "no allocation");
        unsigned char in[256], out[256];
        for (int j = 0; j < 256; j++)
            in[j] = (unsigned char)(j * 7), out[j] = 0;
        OK(olMemcpy(NULL, p, dev, in, host, sizeof in));
        OK(olMemcpy(NULL, out, host, p, dev, sizeof out));
        CHECK(memcmp(in, out, 256) == 0, "round trip through device %d changed bytes", i);
        void *q = NULL;
        OK(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 256, &q));
        OK(olMemcpy(NULL, q, dev, p, dev, 256));
        memset(out, 0, sizeof out);
        OK(olMemcpy(NULL, out, host, (char *)q + 16, dev, 64));
        CHECK(memcmp(in + 16, out, 64) == 0, "device-to-device copy on device %d", i);
        ERR(olMemcpy(NULL, out, host, (char *)q + 200, dev, 64), OL_ERRC_INVALID_SIZE);
        size_t size = 0;
        OK(olGetMemInfo((char *)q + 10, OL_MEM_INFO_SIZE, sizeof size, &size));
        CHECK(size == 256, "mem info size %zu", size);
        void *base = NULL;
        OK(olGetMemInfo((char *)q + 10, OL_MEM_INFO_BASE, sizeof base, &base));
        CHECK(base == q, "mem info base");
        ol_device_handle_t owner = NULL;
        OK(olGetMemInfo(q, OL_MEM_INFO_DEVICE, sizeof owner, &owner));
        CHECK(owner == dev, "mem info device");
        OK(olMemFree(q));
        ERR(olMemFree(q), OL_ERRC_NOT_FOUND);
        ERR(olGetMemInfo(q, OL_MEM_INFO_SIZE, sizeof size, &size), OL_ERRC_NOT_FOUND);
        /* p is left allocated: the last olShutDown frees it. */
        printf("ok memory on device %d\n", i);
    }
    void *p = NULL;
    ERR(olMemAlloc(host, OL_ALLOC_TYPE_HOST, 64, &p), OL_ERRC_UNSUPPORTED);
    /* Fills, with a one-byte and a four-byte pattern. */
    ol_device_handle_t dev = compute_device();
    OK(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 64, &p));
    unsigned char byte = 0x5A, word[4] = {1, 2, 3, 4}, out[64];
    OK(olMemFill(NULL, p, 1, &byte, 64));
    OK(olMemFill(NULL, (char *)p + 8, 4, word, 16));
    OK(olMemcpy(NULL, out, host, p, dev, 64));
    for (int j = 0; j < 64; j++) {
        unsigned char want = j >= 8 && j < 24 ? word[(j - 8) % 4] : byte;
        CHECK(out[j] == want, "fill: byte %d is %d, not %d", j, out[j], want);
    }
    ERR(olMemFill(NULL, p, 4, word, 6), OL_ERRC_INVALID_SIZE);
    ERR(olMemFill(NULL, (char *)p + 60, 4, word, 8), OL_ERRC_INVALID_SIZE);
    ERR(olMemFill(NULL, out, 1, &byte, 1), OL_ERRC_NOT_FOUND);
    ERR(olMemFill(NULL, NULL, 1, &byte, 1), OL_ERRC_INVALID_NULL_POINTER);
    OK(olMemFree(p));
    printf("ok fill\n");
    ERR(olMemFree(NULL), OL_ERRC_INVALID_NULL_POINTER);
}

/* olIsValidBinary: junk is refused by every device; OL_TEST_HOST_IMAGE (a host program of
 * offload's host kernel ABI) is valid for a CPU device of offload's host platform. */
static void valid_binary(void) {
    static const char junk[] = "not a program";
    for (int i = 0; i < n_devices; i++) {
        bool valid = true;
        OK(olIsValidBinary(devices[i], junk, sizeof junk, &valid));
        CHECK(!valid, "junk is valid for device %d", i);
    }
    ERR(olIsValidBinary(compute_device(), NULL, 4, &(bool){0}), OL_ERRC_INVALID_NULL_POINTER);
    const char *path = getenv("OL_TEST_HOST_IMAGE");
    if (!path)
        return;
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "no %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *image = malloc((size_t)size);
    CHECK(fread(image, 1, (size_t)size, f) == (size_t)size, "short read of %s", path);
    fclose(f);
    int cpus = 0;
    for (int i = 0; i < n_devices; i++) {
        bool valid = false;
        OK(olIsValidBinary(devices[i], image, (size_t)size, &valid));
        if (type_of(devices[i]) == OL_DEVICE_TYPE_CPU) {
            CHECK(valid, "the host image is not valid for CPU device %d", i);
            cpus++;
        } else {
            CHECK(!valid, "the host image is valid for device %d", i);
        }
    }
    CHECK(cpus > 0, "no CPU device");
    free(image);
    printf("ok olIsValidBinary\n");
}

/* Handles of a finished generation: refused, never a crash. */
static void stale(void) {
    ol_device_handle_t old = compute_device();
    ol_platform_handle_t old_platform;
    OK(olGetDeviceInfo(old, OL_DEVICE_INFO_PLATFORM, sizeof old_platform, &old_platform));
    void *old_mem = NULL;
    OK(olMemAlloc(old, OL_ALLOC_TYPE_DEVICE, 64, &old_mem));
    OK(olShutDown());
    ol_device_type_t type;
    size_t size;
    ERR(olGetDeviceInfo(old, OL_DEVICE_INFO_TYPE, sizeof type, &type), OL_ERRC_UNINITIALIZED);
    ERR(olIterateDevices(collect, &(int){0}), OL_ERRC_UNINITIALIZED);
    ERR(olMemFree(old_mem), OL_ERRC_UNINITIALIZED);
    ERR(olShutDown(), OL_ERRC_UNINITIALIZED);
    OK(olInit());
    ERR(olGetDeviceInfo(old, OL_DEVICE_INFO_TYPE, sizeof type, &type), OL_ERRC_INVALID_DEVICE);
    ERR(olGetDeviceInfoSize(old, OL_DEVICE_INFO_NAME, &size), OL_ERRC_INVALID_DEVICE);
    ERR(olGetPlatformInfo(old_platform, OL_PLATFORM_INFO_BACKEND, 4, &type),
        OL_ERRC_INVALID_PLATFORM);
    ERR(olMemAlloc(old, OL_ALLOC_TYPE_DEVICE, 64, &old_mem), OL_ERRC_INVALID_DEVICE);
    ERR(olMemFree(old_mem), OL_ERRC_NOT_FOUND);
    ERR(olMemcpy(NULL, &size, old, &type, old, 4), OL_ERRC_INVALID_DEVICE);
    /* Garbage is refused as well. */
    ERR(olGetDeviceInfo((ol_device_handle_t)(uintptr_t)0x1234, OL_DEVICE_INFO_TYPE,
                        sizeof type, &type),
        OL_ERRC_INVALID_DEVICE);
    list_devices();
    printf("ok stale handles refused\n");
}

static void init_fails(void) {
    for (int i = 0; i < 100; i++) {
        ol_result_t r = olInit();
        CHECK(r != OL_SUCCESS, "olInit succeeded");
        CHECK(r->Details != NULL && r->Details[0] != 0, "a failed olInit gave no details");
        if (i == 0)
            printf("ok olInit failed: code %d: %s\n", (int)r->Code, r->Details);
        ERR(olIterateDevices(collect, &(int){0}), OL_ERRC_UNINITIALIZED);
        ERR(olShutDown(), OL_ERRC_UNINITIALIZED);
    }
    printf("ok 100 failed olInit calls left nothing initialised\n");
}

/* Threads that each hold their own reference: while a thread's olInit is unmatched its
 * handles stay valid, whatever the other threads' olShutDown calls do; the last one out
 * ends the generation. */
static bool first_compute(ol_device_handle_t d, void *user) {
    ol_device_type_t type;
    OK(olGetDeviceInfo(d, OL_DEVICE_INFO_TYPE, sizeof type, &type));
    if (type == OL_DEVICE_TYPE_HOST) {
        ((ol_device_handle_t *)user)[0] = d;
        return true;
    }
    ((ol_device_handle_t *)user)[1] = d;
    return false;
}

static int rounds;

static void *worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < rounds; i++) {
        OK(olInit());
        ol_device_handle_t found[2] = {NULL, NULL};
        OK(olIterateDevices(first_compute, found));
        CHECK(found[0] && found[1], "thread %ld: no HOST or compute device", id);
        void *p = NULL;
        OK(olMemAlloc(found[1], OL_ALLOC_TYPE_DEVICE, 64, &p));
        unsigned char in[64], out[64];
        for (int j = 0; j < 64; j++)
            in[j] = (unsigned char)(id + i + j), out[j] = 0;
        OK(olMemcpy(NULL, p, found[1], in, found[0], 64));
        OK(olMemcpy(NULL, out, found[0], p, found[1], 64));
        CHECK(memcmp(in, out, 64) == 0, "thread %ld: wrong bytes", id);
        if (i % 2)
            OK(olMemFree(p)); /* else the last olShutDown frees it */
        OK(olShutDown());
    }
    return NULL;
}

static void threads(void) {
    const char *env = getenv("OL_TEST_ROUNDS");
    rounds = env ? atoi(env) : 200;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ERR(olShutDown(), OL_ERRC_UNINITIALIZED);
    printf("ok 4 threads x %d init/alloc/copy/shutdown rounds\n", rounds);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "initfail") == 0) {
        init_fails();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "threads") == 0) {
        threads();
        return 0;
    }
    int full = argc > 1 && strcmp(argv[1], "full") == 0;
    ERR(olShutDown(), OL_ERRC_UNINITIALIZED);
    cycles();
    OK(olInit());
    list_devices();
    info();
    host_memcpy();
    if (full) {
        memory();
        valid_binary();
        stale();
        ERR(olCreateQueue(compute_device(), &(ol_queue_handle_t){0}), OL_ERRC_UNSUPPORTED);
    }
    OK(olShutDown());
    printf("ok all (%s)\n", full ? "full" : "cpu subset");
    return failures;
}
