/* A test of liboffload 22's C API, written from OffloadAPI.h's documentation (issue 47).
 * One binary, linked once against libLLVMOffload.so.22.1, run against offload's library
 * and LLVM's by LD_LIBRARY_PATH.
 *
 *   api cpu   — what real liboffload can run on a machine without a GPU: init/shutdown
 *               cycles, device iteration, device and platform info, a host-to-host memcpy.
 *   api full  — also: allocations on a compute device, copies through them, fills, memory
 *               info, olIsValidBinary; queues, events and host functions; programs,
 *               symbols and kernel launches (the host image OL_TEST_HOST_IMAGE on CPU
 *               devices, OL_TEST_GPU_IMAGE on GPU devices — SPIR-V for Vulkan, PTX,
 *               an AMD code object or a Level Zero image for the fakes: each holds
 *               `add_one(buf u32[], n u32)`); handles of finished generations refused with
 *               an error in all 35 functions, never a crash.
 *   api threads — 4 threads each initialising, copying (with and without a queue) and
 *               shutting down OL_TEST_ROUNDS (default 200) times at once.
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

/* A CPU device: one of offload's host devices (they load host images). */
static ol_device_handle_t cpu_device(void) {
    ol_device_handle_t cpu = NULL;
    for (int i = 0; i < n_devices; i++)
        if (type_of(devices[i]) == OL_DEVICE_TYPE_CPU)
            cpu = devices[i];
    CHECK(cpu != NULL, "no CPU device");
    return cpu;
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

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "no %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n);
    CHECK(fread(data, 1, (size_t)n, f) == (size_t)n, "short read of %s", path);
    fclose(f);
    *size = (size_t)n;
    return data;
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
    size_t size = 0;
    char *image = read_file(path, &size);
    int cpus = 0;
    for (int i = 0; i < n_devices; i++) {
        bool valid = false;
        OK(olIsValidBinary(devices[i], image, size, &valid));
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

/* ---- queues, events, host functions ---- */

static void wait_ms(int ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

struct order {
    int first, second_saw_first, calls;
    ol_result_t inside; /* what a call of the library from inside a callback answered */
};

static void slow_first(void *data) {
    struct order *o = data;
    wait_ms(20);
    o->first = 1;
    o->calls++;
}

static void then_second(void *data) {
    struct order *o = data;
    o->second_saw_first = o->first;
    o->calls++;
    /* OffloadAPI.h: a callback must not call liboffload. offload refuses it at once. */
    o->inside = olMemFree(NULL);
}

static void queues(void) {
    ol_device_handle_t host = host_endpoint();
    ol_queue_handle_t q = NULL;
    ERR(olCreateQueue(NULL, &q), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olCreateQueue(compute_device(), NULL), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olCreateQueue(host, &q), OL_ERRC_UNSUPPORTED);
    for (int i = 0; i < n_devices; i++) {
        ol_device_handle_t dev = devices[i];
        if (type_of(dev) == OL_DEVICE_TYPE_HOST)
            continue;
        ol_queue_handle_t q2 = NULL;
        OK(olCreateQueue(dev, &q));
        OK(olCreateQueue(dev, &q2));
        CHECK(q != NULL && q2 != NULL && q != q2, "queues");
        ol_device_handle_t owner = NULL;
        size_t size = 0;
        OK(olGetQueueInfoSize(q, OL_QUEUE_INFO_DEVICE, &size));
        CHECK(size == sizeof owner, "queue device size %zu", size);
        OK(olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, sizeof owner, &owner));
        CHECK(owner == dev, "queue device");
        OK(olGetQueueInfoSize(q, OL_QUEUE_INFO_EMPTY, &size));
        CHECK(size == sizeof(bool), "queue empty size %zu", size);
        bool empty = false;
        OK(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof empty, &empty));
        ERR(olGetQueueInfo(q, OL_QUEUE_INFO_DEVICE, 1, &owner), OL_ERRC_INVALID_SIZE);
        ERR(olGetQueueInfo(q, (ol_queue_info_t)99, sizeof owner, &owner),
            OL_ERRC_INVALID_ENUMERATION);
        /* Copies and a fill on the queue, in order. */
        void *a = NULL, *b = NULL;
        OK(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 1024, &a));
        OK(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, 1024, &b));
        unsigned char in[1024], out[1024];
        for (int j = 0; j < 1024; j++)
            in[j] = (unsigned char)(j * 13 + i), out[j] = 0;
        OK(olMemcpy(q, a, dev, in, host, sizeof in));
        memset(in, 0, sizeof in); /* the queued copy took the bytes at the call */
        OK(olMemcpy(q, b, dev, a, dev, 1024));
        unsigned char pattern[2] = {0xAB, 0xCD};
        OK(olMemFill(q, (char *)b + 512, 2, pattern, 256));
        ol_event_handle_t ev = NULL;
        OK(olCreateEvent(q, &ev));
        OK(olSyncEvent(ev));
        bool complete = false;
        OK(olGetEventInfoSize(ev, OL_EVENT_INFO_IS_COMPLETE, &size));
        CHECK(size == sizeof(bool), "event complete size %zu", size);
        OK(olGetEventInfo(ev, OL_EVENT_INFO_IS_COMPLETE, sizeof complete, &complete));
        CHECK(complete, "a synced event is not complete");
        ol_queue_handle_t of = NULL;
        OK(olGetEventInfo(ev, OL_EVENT_INFO_QUEUE, sizeof of, &of));
        CHECK(of == q, "event queue");
        /* q2 waits for q's event, then reads b. */
        OK(olWaitEvents(q2, &ev, 1));
        OK(olMemcpy(q2, out, host, b, dev, sizeof out));
        OK(olSyncQueue(q2));
        for (int j = 0; j < 1024; j++) {
            unsigned char want = j >= 512 && j < 768 ? pattern[(j - 512) % 2]
                                                     : (unsigned char)(j * 13 + i);
            CHECK(out[j] == want, "queued copies on device %d: byte %d is %d, not %d", i, j,
                  out[j], want);
        }
        ERR(olWaitEvents(q2, NULL, 1), OL_ERRC_INVALID_NULL_POINTER);
        ol_event_handle_t none[2] = {ev, NULL};
        ERR(olWaitEvents(q2, none, 2), OL_ERRC_INVALID_NULL_HANDLE);
        ERR(olCreateEvent(q, NULL), OL_ERRC_INVALID_NULL_POINTER);
        /* Host functions run in order, after the work before them. */
        struct order o = {0, 0, 0, NULL};
        OK(olLaunchHostFunction(q, slow_first, &o));
        OK(olLaunchHostFunction(q, then_second, &o));
        ERR(olLaunchHostFunction(q, NULL, &o), OL_ERRC_INVALID_NULL_POINTER);
        OK(olSyncQueue(q));
        CHECK(o.calls == 2 && o.second_saw_first, "host functions out of order (%d calls)",
              o.calls);
        CHECK(o.inside != OL_SUCCESS && o.inside->Code == OL_ERRC_INVALID_ARGUMENT,
              "a library call inside a host function was not refused");
        OK(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof empty, &empty));
        CHECK(empty, "a synced queue is not empty");
        /* Destroyed: refused, with the type's code. */
        OK(olDestroyEvent(ev));
        ERR(olSyncEvent(ev), OL_ERRC_INVALID_EVENT);
        ERR(olDestroyEvent(ev), OL_ERRC_INVALID_EVENT);
        ERR(olDestroyEvent(NULL), OL_ERRC_INVALID_NULL_HANDLE);
        OK(olDestroyQueue(q2));
        ERR(olSyncQueue(q2), OL_ERRC_INVALID_QUEUE);
        ERR(olMemcpy(q2, out, host, b, dev, 4), OL_ERRC_INVALID_QUEUE);
        ERR(olSyncQueue((ol_queue_handle_t)ev), OL_ERRC_INVALID_QUEUE);
        /* q is left alive with work done: the last olShutDown destroys it. */
        OK(olMemFree(a));
        OK(olMemFree(b));
        printf("ok queues, events and host functions on device %d\n", i);
    }
}

/* ---- programs, symbols, launches ---- */


/* add_one's parameters as C packs them: sizeof is 16. */
struct add_one_args {
    void *buf;
    uint32_t n;
};

static void programs(void) {
    const char *host_path = getenv("OL_TEST_HOST_IMAGE");
    const char *spirv_path = getenv("OL_TEST_GPU_IMAGE");
    CHECK(host_path != NULL, "OL_TEST_HOST_IMAGE is not set");
    size_t host_size = 0, spirv_size = 0;
    char *host_image = read_file(host_path, &host_size);
    char *spirv_image = spirv_path ? read_file(spirv_path, &spirv_size) : NULL;
    ol_device_handle_t host = host_endpoint();
    ol_program_handle_t prog = NULL;
    ERR(olCreateProgram(host, host_image, host_size, &prog), OL_ERRC_INVALID_DEVICE);
    ERR(olCreateProgram(NULL, host_image, host_size, &prog), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olCreateProgram(compute_device(), NULL, 4, &prog), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olCreateProgram(compute_device(), "junk", 4, &prog), OL_ERRC_INVALID_BINARY);
    int launched = 0;
    for (int i = 0; i < n_devices; i++) {
        ol_device_handle_t dev = devices[i];
        ol_device_type_t type = type_of(dev);
        if (type == OL_DEVICE_TYPE_HOST || (type == OL_DEVICE_TYPE_GPU && !spirv_image))
            continue;
        int cpu = type == OL_DEVICE_TYPE_CPU;
        OK(olCreateProgram(dev, cpu ? host_image : spirv_image, cpu ? host_size : spirv_size,
                           &prog));
        ol_symbol_handle_t k = NULL, again = NULL, g = NULL;
        OK(olGetSymbol(prog, "add_one", OL_SYMBOL_KIND_KERNEL, &k));
        OK(olGetSymbol(prog, "add_one", OL_SYMBOL_KIND_KERNEL, &again));
        CHECK(k == again, "the same symbol twice gave two handles");
        ERR(olGetSymbol(prog, "no_such_kernel", OL_SYMBOL_KIND_KERNEL, &again),
            OL_ERRC_NOT_FOUND);
        ERR(olGetSymbol(prog, NULL, OL_SYMBOL_KIND_KERNEL, &again), OL_ERRC_INVALID_NULL_POINTER);
        ERR(olGetSymbol(prog, "add_one", (ol_symbol_kind_t)7, &again),
            OL_ERRC_INVALID_ENUMERATION);
        ol_symbol_kind_t kind = OL_SYMBOL_KIND_GLOBAL_VARIABLE;
        OK(olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind, &kind));
        CHECK(kind == OL_SYMBOL_KIND_KERNEL, "kind %d", (int)kind);
        size_t size = 0;
        OK(olGetSymbolInfoSize(k, OL_SYMBOL_INFO_KIND, &size));
        CHECK(size == sizeof kind, "kind size %zu", size);
        void *addr = NULL;
        ERR(olGetSymbolInfo(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, sizeof addr, &addr),
            OL_ERRC_SYMBOL_KIND);
        size_t group = 0;
        OK(olCalculateOptimalOccupancy(dev, k, 0, &group));
        CHECK(group > 0, "occupancy 0");
        /* add_one over 256 elements: on a queue, then without one (synchronous). */
        enum { N = 256 };
        uint32_t in[N], out[N];
        for (int j = 0; j < N; j++)
            in[j] = (uint32_t)(j * 3), out[j] = 0;
        void *buf = NULL;
        OK(olMemAlloc(dev, OL_ALLOC_TYPE_DEVICE, sizeof in, &buf));
        OK(olMemcpy(NULL, buf, dev, in, host, sizeof in));
        ol_queue_handle_t q = NULL;
        OK(olCreateQueue(dev, &q));
        struct add_one_args args = {buf, N};
        ol_kernel_launch_size_args_t dims = {1, {N / 64, 1, 1}, {64, 1, 1}, 0};
        OK(olLaunchKernel(q, dev, k, &args, sizeof args, &dims));
        OK(olLaunchKernel(NULL, dev, k, &args, 12, &dims)); /* unpadded: also accepted */
        OK(olSyncQueue(q));
        OK(olMemcpy(NULL, out, host, buf, dev, sizeof out));
        for (int j = 0; j < N; j++)
            CHECK(out[j] == in[j] + 2, "add_one on device %d: element %d is %u, not %u", i, j,
                  out[j], in[j] + 2);
        /* The packed arguments are checked against the kernel's parameters. */
        ERR(olLaunchKernel(q, dev, k, &args, 8, &dims), OL_ERRC_INVALID_ARGUMENT);
        ERR(olLaunchKernel(q, dev, k, NULL, sizeof args, &dims), OL_ERRC_INVALID_ARGUMENT);
        struct add_one_args wild = {in, N}; /* host memory, not an allocation */
        ERR(olLaunchKernel(q, dev, k, &wild, sizeof wild, &dims), OL_ERRC_INVALID_ARGUMENT);
        ERR(olLaunchKernel(q, dev, k, &args, sizeof args, NULL), OL_ERRC_INVALID_NULL_POINTER);
        ERR(olLaunchKernel(q, NULL, k, &args, sizeof args, &dims), OL_ERRC_INVALID_NULL_HANDLE);
        ERR(olLaunchKernel(q, dev, NULL, &args, sizeof args, &dims), OL_ERRC_INVALID_NULL_HANDLE);
        ERR(olLaunchKernel(q, host, k, &args, sizeof args, &dims), OL_ERRC_INVALID_DEVICE);
        ol_kernel_launch_size_args_t bad = {4, {1, 1, 1}, {64, 1, 1}, 0};
        ERR(olLaunchKernel(q, dev, k, &args, sizeof args, &bad), OL_ERRC_INVALID_ARGUMENT);
        OK(olSyncQueue(q));
        OK(olMemcpy(NULL, out, host, buf, dev, sizeof out));
        CHECK(out[0] == in[0] + 2, "a refused launch ran");
        if (cpu) {
            /* Registered host memory is used in place by offload's host devices. */
            static uint32_t mine[N];
            for (int j = 0; j < N; j++)
                mine[j] = (uint32_t)j;
            void *pinned = NULL;
            ERR(olMemRegister(dev, mine, 0, 0, &pinned), OL_ERRC_INVALID_SIZE);
            ERR(olMemRegister(dev, NULL, sizeof mine, 0, &pinned), OL_ERRC_INVALID_NULL_POINTER);
            ERR(olMemRegister(host, mine, sizeof mine, 0, &pinned), OL_ERRC_UNSUPPORTED);
            OK(olMemRegister(dev, mine, sizeof mine, 0, &pinned));
            CHECK(pinned == (void *)mine, "the pinned pointer is not the memory");
            ERR(olMemRegister(dev, mine + 4, 16, 0, &pinned), OL_ERRC_INVALID_ARGUMENT);
            ERR(olMemFree(mine), OL_ERRC_INVALID_ARGUMENT);
            struct add_one_args on_mine = {mine, N};
            OK(olLaunchKernel(q, dev, k, &on_mine, sizeof on_mine, &dims));
            OK(olSyncQueue(q));
            for (int j = 0; j < N; j++)
                CHECK(mine[j] == (uint32_t)j + 1, "add_one on registered memory: %u at %d",
                      mine[j], j);
            OK(olMemUnregister(dev, mine));
            ERR(olMemUnregister(dev, mine), OL_ERRC_NOT_FOUND);
            ERR(olMemUnregister(dev, NULL), OL_ERRC_INVALID_NULL_POINTER);
            /* A global variable: its address is host memory on offload's host device. */
            OK(olGetSymbol(prog, "g", OL_SYMBOL_KIND_GLOBAL_VARIABLE, &g));
            ERR(olLaunchKernel(q, dev, g, &args, sizeof args, &dims), OL_ERRC_SYMBOL_KIND);
            size_t gsize = 0;
            OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, sizeof gsize, &gsize));
            CHECK(gsize == 4, "g's size %zu", gsize);
            OK(olGetSymbolInfo(g, OL_SYMBOL_INFO_GLOBAL_VARIABLE_ADDRESS, sizeof addr, &addr));
            uint32_t value = 0xC0FFEE;
            OK(olMemcpy(NULL, addr, host, &value, host, 4));
            ol_symbol_handle_t rg = NULL;
            OK(olGetSymbol(prog, "read_global", OL_SYMBOL_KIND_KERNEL, &rg));
            ol_kernel_launch_size_args_t one = {1, {1, 1, 1}, {1, 1, 1}, 0};
            OK(olLaunchKernel(q, dev, rg, &buf, sizeof buf, &one));
            OK(olSyncQueue(q));
            OK(olMemcpy(NULL, out, host, buf, dev, 4));
            CHECK(out[0] == 0xC0FFEE, "read_global read %u", out[0]);
        }
        /* A program's symbols go with it. */
        OK(olDestroyProgram(prog));
        ERR(olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind, &kind), OL_ERRC_INVALID_ARGUMENT);
        ERR(olLaunchKernel(q, dev, k, &args, sizeof args, &dims), OL_ERRC_INVALID_ARGUMENT);
        ERR(olGetSymbol(prog, "add_one", OL_SYMBOL_KIND_KERNEL, &k), OL_ERRC_INVALID_ARGUMENT);
        ERR(olDestroyProgram(prog), OL_ERRC_INVALID_ARGUMENT);
        ERR(olDestroyProgram(NULL), OL_ERRC_INVALID_NULL_HANDLE);
        OK(olDestroyQueue(q));
        OK(olMemFree(buf));
        launched++;
        printf("ok programs, symbols and launches on device %d (%s image)\n", i,
               cpu ? "host" : "GPU");
    }
    CHECK(launched > 0, "no device ran a kernel");
    free(host_image);
    free(spirv_image);
}

/* Each function's documented NULL and size errors (OffloadAPI.h's @returns lists), for the
 * functions on queues, events, programs and symbols, on live objects. */
static void documented_errors(void) {
    ol_device_handle_t dev = compute_device();
    ol_queue_handle_t q = NULL;
    ol_event_handle_t e = NULL;
    OK(olCreateQueue(dev, &q));
    OK(olCreateEvent(q, &e));
    size_t size = 0;
    bool flag = false;
    ERR(olDestroyQueue(NULL), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olSyncQueue(NULL), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetQueueInfo(NULL, OL_QUEUE_INFO_EMPTY, sizeof flag, &flag), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, 0, &flag), OL_ERRC_INVALID_SIZE);
    ERR(olGetQueueInfo(q, OL_QUEUE_INFO_EMPTY, sizeof flag, NULL), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olGetQueueInfoSize(NULL, OL_QUEUE_INFO_EMPTY, &size), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetQueueInfoSize(q, OL_QUEUE_INFO_EMPTY, NULL), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olCreateEvent(NULL, &e), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olSyncEvent(NULL), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olWaitEvents(NULL, &e, 1), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetEventInfo(NULL, OL_EVENT_INFO_IS_COMPLETE, sizeof flag, &flag),
        OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, 0, &flag), OL_ERRC_INVALID_SIZE);
    ERR(olGetEventInfo(e, OL_EVENT_INFO_QUEUE, 4, &size), OL_ERRC_INVALID_SIZE);
    ERR(olGetEventInfo(e, OL_EVENT_INFO_IS_COMPLETE, sizeof flag, NULL),
        OL_ERRC_INVALID_NULL_POINTER);
    ERR(olGetEventInfoSize(NULL, OL_EVENT_INFO_QUEUE, &size), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetEventInfoSize(e, OL_EVENT_INFO_QUEUE, NULL), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olLaunchHostFunction(NULL, slow_first, NULL), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetSymbol(NULL, "add_one", OL_SYMBOL_KIND_KERNEL, &(ol_symbol_handle_t){0}),
        OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetSymbolInfo(NULL, OL_SYMBOL_INFO_KIND, sizeof size, &size),
        OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olGetSymbolInfoSize(NULL, OL_SYMBOL_INFO_KIND, &size), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olCalculateOptimalOccupancy(NULL, NULL, 0, &size), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olCalculateOptimalOccupancy(dev, NULL, 0, &size), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olMemRegister(NULL, &size, sizeof size, 0, &(void *){0}), OL_ERRC_INVALID_NULL_HANDLE);
    ERR(olMemUnregister(NULL, &size), OL_ERRC_INVALID_NULL_HANDLE);
    /* With a program: the symbol queries' own errors. */
    size_t image_size = 0;
    char *image = read_file(getenv("OL_TEST_HOST_IMAGE"), &image_size);
    ol_device_handle_t cpu = cpu_device();
    ol_program_handle_t p = NULL;
    ol_symbol_handle_t k = NULL;
    ERR(olCreateProgram(cpu, image, image_size, NULL), OL_ERRC_INVALID_NULL_POINTER);
    OK(olCreateProgram(cpu, image, image_size, &p));
    ERR(olGetSymbol(p, "add_one", OL_SYMBOL_KIND_KERNEL, NULL), OL_ERRC_INVALID_NULL_POINTER);
    OK(olGetSymbol(p, "add_one", OL_SYMBOL_KIND_KERNEL, &k));
    ol_symbol_kind_t kind;
    ERR(olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, 0, &kind), OL_ERRC_INVALID_SIZE);
    ERR(olGetSymbolInfo(k, OL_SYMBOL_INFO_KIND, sizeof kind, NULL), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olGetSymbolInfoSize(k, OL_SYMBOL_INFO_KIND, NULL), OL_ERRC_INVALID_NULL_POINTER);
    ERR(olGetSymbolInfoSize(k, OL_SYMBOL_INFO_GLOBAL_VARIABLE_SIZE, &size), OL_ERRC_SYMBOL_KIND);
    ERR(olCalculateOptimalOccupancy(cpu, k, 0, NULL), OL_ERRC_INVALID_NULL_POINTER);
    OK(olDestroyProgram(p));
    OK(olDestroyEvent(e));
    OK(olDestroyQueue(q));
    free(image);
    printf("ok documented errors of the queue, event, program and symbol functions\n");
}

/* Handles of a finished generation: refused, never a crash. */
static void stale(void) {
    ol_device_handle_t old = compute_device();
    ol_platform_handle_t old_platform;
    OK(olGetDeviceInfo(old, OL_DEVICE_INFO_PLATFORM, sizeof old_platform, &old_platform));
    void *old_mem = NULL;
    OK(olMemAlloc(old, OL_ALLOC_TYPE_DEVICE, 64, &old_mem));
    ol_queue_handle_t oq = NULL;
    ol_event_handle_t oe = NULL;
    ol_program_handle_t op = NULL;
    ol_symbol_handle_t os = NULL;
    OK(olCreateQueue(old, &oq));
    OK(olCreateEvent(oq, &oe));
    size_t image_size = 0;
    char *image = read_file(getenv("OL_TEST_HOST_IMAGE"), &image_size);
    ol_device_handle_t cpu = cpu_device();
    OK(olCreateProgram(cpu, image, image_size, &op));
    OK(olGetSymbol(op, "add_one", OL_SYMBOL_KIND_KERNEL, &os));
    ol_kernel_launch_size_args_t dims = {1, {1, 1, 1}, {1, 1, 1}, 0};
    struct add_one_args args = {old_mem, 1};
    bool flag = false;
    /* Every function that takes a handle, called with handles of a finished generation:
     * while none runs, and while a later one does. */
#define EVERY_CALL(dev_code, queue_code, event_code, other_code)                           \
    do {                                                                                  \
        ERR(olGetDeviceInfo(old, OL_DEVICE_INFO_TYPE, sizeof type, &type), dev_code);     \
        ERR(olGetDeviceInfoSize(old, OL_DEVICE_INFO_NAME, &size), dev_code);              \
        ERR(olMemAlloc(old, OL_ALLOC_TYPE_DEVICE, 64, &(void *){0}), dev_code);          \
        ERR(olMemcpy(NULL, &size, old, &type, old, 4), dev_code);                         \
        ERR(olIsValidBinary(old, image, image_size, &flag), dev_code);                   \
        ERR(olCreateQueue(old, &oq), dev_code);                                           \
        ERR(olCreateProgram(old, image, image_size, &op), dev_code);                     \
        ERR(olMemRegister(old, &size, sizeof size, 0, &(void *){0}), dev_code);         \
        ERR(olMemUnregister(old, &size), dev_code);                                       \
        ERR(olDestroyQueue(oq), queue_code);                                              \
        ERR(olSyncQueue(oq), queue_code);                                                 \
        ERR(olGetQueueInfo(oq, OL_QUEUE_INFO_EMPTY, sizeof flag, &flag), queue_code);     \
        ERR(olGetQueueInfoSize(oq, OL_QUEUE_INFO_EMPTY, &size), queue_code);              \
        ERR(olCreateEvent(oq, &oe), queue_code);                                          \
        ERR(olWaitEvents(oq, &oe, 1), queue_code);                                        \
        ERR(olLaunchHostFunction(oq, slow_first, NULL), queue_code);                      \
        ERR(olDestroyEvent(oe), event_code);                                              \
        ERR(olSyncEvent(oe), event_code);                                                 \
        ERR(olGetEventInfo(oe, OL_EVENT_INFO_IS_COMPLETE, sizeof flag, &flag), event_code); \
        ERR(olGetEventInfoSize(oe, OL_EVENT_INFO_QUEUE, &size), event_code);              \
        ERR(olDestroyProgram(op), other_code);                                            \
        ERR(olGetSymbol(op, "add_one", OL_SYMBOL_KIND_KERNEL, &os), other_code);         \
        ERR(olGetSymbolInfo(os, OL_SYMBOL_INFO_KIND, sizeof type, &type), other_code);   \
        ERR(olGetSymbolInfoSize(os, OL_SYMBOL_INFO_KIND, &size), other_code);             \
        ERR(olLaunchKernel(NULL, cpu, os, &args, sizeof args, &dims), other_code);        \
        ERR(olCalculateOptimalOccupancy(cpu, os, 0, &size), other_code);                  \
    } while (0)
    OK(olShutDown());
    ol_device_type_t type;
    size_t size;
    EVERY_CALL(OL_ERRC_UNINITIALIZED, OL_ERRC_UNINITIALIZED, OL_ERRC_UNINITIALIZED,
               OL_ERRC_UNINITIALIZED);
    ERR(olIterateDevices(collect, &(int){0}), OL_ERRC_UNINITIALIZED);
    ERR(olGetPlatformInfo(old_platform, OL_PLATFORM_INFO_BACKEND, 4, &type),
        OL_ERRC_UNINITIALIZED);
    ERR(olGetPlatformInfoSize(old_platform, OL_PLATFORM_INFO_NAME, &size),
        OL_ERRC_UNINITIALIZED);
    ERR(olMemFree(old_mem), OL_ERRC_UNINITIALIZED);
    ERR(olMemFill(NULL, old_mem, 1, &type, 1), OL_ERRC_UNINITIALIZED);
    ERR(olGetMemInfo(old_mem, OL_MEM_INFO_SIZE, sizeof size, &size), OL_ERRC_UNINITIALIZED);
    ERR(olGetMemInfoSize(old_mem, OL_MEM_INFO_SIZE, &size), OL_ERRC_UNINITIALIZED);
    ERR(olShutDown(), OL_ERRC_UNINITIALIZED);
    OK(olInit());
    list_devices();
    /* The HOST device's index and the CPU device's stay the same in the new generation:
     * the old handles still carry the old generation. */
    cpu = old;
    EVERY_CALL(OL_ERRC_INVALID_DEVICE, OL_ERRC_INVALID_QUEUE, OL_ERRC_INVALID_EVENT,
               OL_ERRC_INVALID_ARGUMENT);
    ERR(olGetPlatformInfo(old_platform, OL_PLATFORM_INFO_BACKEND, 4, &type),
        OL_ERRC_INVALID_PLATFORM);
    ERR(olGetPlatformInfoSize(old_platform, OL_PLATFORM_INFO_NAME, &size),
        OL_ERRC_INVALID_PLATFORM);
    ERR(olMemFree(old_mem), OL_ERRC_NOT_FOUND);
    ERR(olMemFill(NULL, old_mem, 1, &type, 1), OL_ERRC_NOT_FOUND);
    ERR(olGetMemInfo(old_mem, OL_MEM_INFO_SIZE, sizeof size, &size), OL_ERRC_NOT_FOUND);
    ERR(olGetMemInfoSize(old_mem, OL_MEM_INFO_SIZE, &size), OL_ERRC_NOT_FOUND);
    free(image);
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
        /* The same through a queue of the thread's own, with an event. */
        ol_queue_handle_t q = NULL;
        ol_event_handle_t e = NULL;
        OK(olCreateQueue(found[1], &q));
        for (int j = 0; j < 64; j++)
            in[j] = (unsigned char)(id * 3 + i + j), out[j] = 0;
        OK(olMemcpy(q, p, found[1], in, found[0], 64));
        OK(olCreateEvent(q, &e));
        OK(olSyncEvent(e));
        OK(olMemcpy(q, out, found[0], p, found[1], 64));
        CHECK(memcmp(in, out, 64) == 0, "thread %ld: wrong bytes through a queue", id);
        OK(olDestroyEvent(e));
        if (i % 3)
            OK(olDestroyQueue(q)); /* else the last olShutDown destroys it */
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
        queues();
        programs();
        documented_errors();
        stale();
    }
    OK(olShutDown());
    printf("ok all (%s)\n", full ? "full" : "cpu subset");
    return failures;
}
