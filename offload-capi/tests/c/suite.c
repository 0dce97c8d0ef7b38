/*
 * The C API, function by function: success on the host backend (and on Vulkan where a
 * device is found), every documented error path, zero, garbage, foreign and stale handles,
 * null pointers, wrong argument counts and sizes, handles after shutdown and in a later
 * generation.
 *
 * usage: suite IMAGE [vulkan|novulkan|requirevulkan]
 *   IMAGE: a host kernel image with add_one(b, u32) and noop() (offload-host's fixtures).
 * Exit status 0 when every check held; each failure is printed with the call and message.
 */
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static const char *self_path;

#include "check.h"

#include "../../examples/saxpy_kernels.h"

#include "read_file.h"

/* Setup and teardown counters, passed as user data. */
typedef struct {
    int setups;
    int teardowns;
    int fail_setup;
    offload_status_t inner; /* what a call made from the callback answered */
} callbacks_t;

static int32_t on_setup(offload_module_t module, void *user) {
    callbacks_t *c = user;
    size_t n = 0;
    c->inner = offload_module_kernel_count(module, &n); /* the lent handle works (L6) */
    c->setups++;
    return c->fail_setup ? 7 : 0;
}

static int32_t on_teardown(offload_module_t module, void *user) {
    (void)module;
    ((callbacks_t *)user)->teardowns++;
    return 0;
}

typedef struct {
    int runs;
    offload_queue_t queue;
    offload_status_t own_sync; /* a host function syncing its own queue (L6) */
} host_fn_t;

static void host_fn(void *user) {
    host_fn_t *h = user;
    h->runs++;
    if (h->queue) h->own_sync = offload_queue_sync(h->queue);
}

/* A host function that gives back the handle of its own queue. */
typedef struct {
    int runs;
    offload_queue_t queue;
    offload_status_t destroyed;
} self_destroy_t;

static void destroying_host_fn(void *user) {
    self_destroy_t *d = user;
    d->destroyed = offload_queue_destroy(d->queue);
    __atomic_store_n(&d->runs, d->runs + 1, __ATOMIC_RELEASE);
}

/* Runs y = 2x + y over n elements with `kernel` on `device`, checks, frees. */
static void saxpy_on(offload_device_t device, offload_kernel_t kernel, uint32_t block) {
    enum { N = 1000 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    offload_buffer_t bx = 0, by = 0;
    offload_queue_t q = 0;
    OK(offload_buffer_alloc(device, sizeof x, OFFLOAD_MEM_DEVICE, &bx));
    OK(offload_buffer_alloc(device, sizeof y, OFFLOAD_MEM_DEVICE, &by));
    OK(offload_buffer_write(bx, 0, (const uint8_t *)x, sizeof x));
    OK(offload_buffer_write(by, 0, (const uint8_t *)y, sizeof y));
    OK(offload_queue_create(device, &q));
    float a = 2.0f;
    uint32_t n = N;
    const void *args[] = {&bx, &by, &a, &n};
    size_t sizes[] = {sizeof bx, sizeof by, sizeof a, sizeof n};
    offload_dims_t dims = {{(N + block - 1) / block, 1, 1}, {block, 1, 1}, 0};
    OK(offload_queue_launch(q, kernel, &dims, args, sizes, 4));
    OK(offload_queue_sync(q));
    OK(offload_queue_read(q, by, 0, (uint8_t *)y, sizeof y));
    CHECK(y[0] == 1.0f && y[3] == 7.0f && y[N - 1] == 2.0f * (N - 1) + 1.0f);

    /* Arguments are checked against the declared parameters before the kernel runs. */
    EXPECT(offload_queue_launch(q, kernel, &dims, args, sizes, 3),
           OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("`saxpy` takes 4 arguments");
    size_t wrong[] = {sizeof bx, sizeof by, sizeof(double), sizeof n};
    EXPECT(offload_queue_launch(q, kernel, &dims, args, wrong, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("argument 3 of `saxpy` is an f32 (4 bytes); got 8 bytes");
    size_t small_handle[] = {4, sizeof by, sizeof a, sizeof n};
    EXPECT(offload_queue_launch(q, kernel, &dims, args, small_handle, 4),
           OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("argument 1 of `saxpy`");
    offload_buffer_t garbage = 0x1234;
    const void *bad_buf[] = {&garbage, &by, &a, &n};
    EXPECT(offload_queue_launch(q, kernel, &dims, bad_buf, sizes, 4), OFFLOAD_ERROR_INVALID_HANDLE);
    EXPECT(offload_queue_launch(q, kernel, NULL, args, sizes, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_queue_launch(q, kernel, &dims, NULL, sizes, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_queue_launch(q, bx, &dims, args, sizes, 4), OFFLOAD_ERROR_INVALID_HANDLE);
    SAYS("is a buffer handle, not a kernel handle");

    OK(offload_queue_destroy(q));
    OK(offload_buffer_free(bx));
    OK(offload_buffer_free(by));
}

static void test_statuses(void) {
    CHECK(strcmp(offload_status_name(OFFLOAD_ERROR_SHUT_DOWN), "OFFLOAD_ERROR_SHUT_DOWN") == 0);
    CHECK(strcmp(offload_status_name(9999), "?") == 0);
    CHECK(offload_last_error() != NULL);
    EXPECT(offload_config_default(NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("offload_config_default: invalid argument: `config` is a null pointer");
}

static void test_handles(offload_runtime_t rt, offload_device_t dev) {
    uint8_t byte = 0;
    /* Zero, garbage and another type's handles: typed statuses, never a crash. */
    EXPECT(offload_buffer_read(0, 0, &byte, 1), OFFLOAD_ERROR_INVALID_HANDLE);
    SAYS("the buffer handle is 0");
    EXPECT(offload_buffer_read(0xdeadbeefcafef00dull, 0, &byte, 1), OFFLOAD_ERROR_INVALID_HANDLE);
    SAYS("is not an offload handle");
    EXPECT(offload_buffer_read(dev, 0, &byte, 1), OFFLOAD_ERROR_INVALID_HANDLE);
    SAYS("is a device handle, not a buffer handle");
    EXPECT(offload_queue_sync(rt), OFFLOAD_ERROR_INVALID_HANDLE);
    EXPECT(offload_device_release(dev ^ 0xffff), OFFLOAD_ERROR_INVALID_HANDLE); /* wrong generation */
    EXPECT(offload_device_release(dev + (1ull << 30)), OFFLOAD_ERROR_INVALID_HANDLE); /* no such slot */
    for (uint64_t h = 1; h < 4000000000ull; h = h * 3 + 17) {
        offload_status_t s = offload_event_sync(h);
        CHECK(s == OFFLOAD_ERROR_INVALID_HANDLE || s == OFFLOAD_ERROR_SHUT_DOWN);
    }
}

static void test_runtime(offload_runtime_t rt) {
    offload_config_t c;
    OK(offload_runtime_config(rt, &c));
    CHECK(c.set_backends && c.backends == (1u << OFFLOAD_BACKEND_HOST) && c.host_devices == 2);
    EXPECT(offload_runtime_config(rt, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    uint64_t generation = 0;
    OK(offload_runtime_generation(rt, &generation));
    CHECK(generation > 0);

    /* A later init that asks for something else explicitly is refused (L5). */
    offload_config_t other;
    OK(offload_config_default(&other));
    other.set_backends = true;
    other.backends = 1u << OFFLOAD_BACKEND_VULKAN;
    offload_runtime_t second = 0;
    EXPECT(offload_init(&other, &second), OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("backends: asked [vulkan], in force [host]");
    other.backends = 1u << 20;
    EXPECT(offload_init(&other, &second), OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("has bits of no backend");
    EXPECT(offload_init(NULL, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);

    size_t platforms = 0;
    OK(offload_platform_count(rt, &platforms));
    CHECK(platforms == 1);
    offload_platform_info_t p;
    OK(offload_platform_info(rt, 0, &p));
    CHECK(p.backend == OFFLOAD_BACKEND_HOST && p.devices == 2 && p.name[0] != 0);
    EXPECT(offload_platform_info(rt, 5, &p), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_platform_count(rt, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);

    size_t n = 0;
    OK(offload_devices(rt, NULL, 0, &n));
    CHECK(n == 2);
    offload_device_t devs[4] = {0};
    OK(offload_devices(rt, devs, 1, &n)); /* fewer than there are: the first ones */
    CHECK(n == 2 && devs[0] != 0 && devs[1] == 0);
    OK(offload_devices(rt, devs, 4, &n));
    CHECK(n == 2 && devs[1] != 0 && devs[2] == 0);
    EXPECT(offload_devices(rt, NULL, 3, &n), OFFLOAD_ERROR_INVALID_ARGUMENT);
    offload_device_info_t info;
    OK(offload_device_info(devs[1], &info));
    CHECK(info.backend == OFFLOAD_BACKEND_HOST && info.name[0] && info.memory > 0 &&
          info.compute_units > 0);
    EXPECT(offload_device_info(devs[1], NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    /* A device has one handle for its runtime's life: listing again gives the same ones,
     * the first list's from the lock-free copy, and release only checks the handle. */
    offload_device_t again[4] = {0};
    OK(offload_devices(rt, again, 4, &n));
    CHECK(n == 2 && again[0] == devs[0] && again[1] == devs[1] && again[2] == 0);
    offload_device_t first = 0;
    OK(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &first));
    CHECK(first == devs[0]);
    OK(offload_device_release(devs[0]));
    OK(offload_device_release(devs[1]));
    OK(offload_device_info(devs[1], &info)); /* still the runtime's */
    EXPECT(offload_device_release(devs[1] ^ 0x1), OFFLOAD_ERROR_INVALID_HANDLE);
    SAYS("names no live device");

    offload_device_t d = 0;
    EXPECT(offload_device_of(rt, 99, &d), OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("99 is no offload_backend_t");
    EXPECT(offload_device_of(rt, OFFLOAD_BACKEND_CUDA, &d), OFFLOAD_ERROR_UNSUPPORTED);
    EXPECT(offload_device_of(rt, OFFLOAD_BACKEND_HOST, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
}

static void test_memory(offload_device_t dev) {
    offload_buffer_t b = 0, c = 0, s = 0;
    OK(offload_buffer_alloc(dev, 64, OFFLOAD_MEM_DEVICE, &b));
    OK(offload_buffer_alloc(dev, 64, OFFLOAD_MEM_HOST, &c));
    OK(offload_buffer_alloc(dev, 64, OFFLOAD_MEM_SHARED, &s));
    EXPECT(offload_buffer_alloc(dev, 64, 7, &b), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_buffer_alloc(dev, 64, OFFLOAD_MEM_DEVICE, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    offload_buffer_t huge = 0;
    offload_status_t st = offload_buffer_alloc(dev, SIZE_MAX / 2, OFFLOAD_MEM_DEVICE, &huge);
    CHECK(st == OFFLOAD_ERROR_OUT_OF_MEMORY || st == OFFLOAD_ERROR_INVALID_ARGUMENT);

    size_t size = 0;
    offload_mem_kind_t kind = OFFLOAD_MEM_DEVICE;
    OK(offload_buffer_info(c, &size, &kind));
    CHECK(size == 64 && kind == OFFLOAD_MEM_HOST);
    OK(offload_buffer_info(c, NULL, NULL));

    uint8_t in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (uint8_t)(i * 3 + 1);
    OK(offload_buffer_write(b, 0, in, 64));
    OK(offload_buffer_copy(c, 0, b, 0, 64));
    memset(out, 0, sizeof out);
    OK(offload_buffer_read(c, 0, out, 64));
    CHECK(memcmp(in, out, 64) == 0);
    OK(offload_buffer_fill(s, 8, 16, 0xAB));
    OK(offload_buffer_read(s, 0, out, 64));
    CHECK(out[7] == 0 && out[8] == 0xAB && out[23] == 0xAB && out[24] == 0);
    OK(offload_buffer_read(b, 64, NULL, 0)); /* empty, at the end: fine */

    EXPECT(offload_buffer_read(b, 60, out, 8), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_buffer_write(b, 0, NULL, 8), OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("`src` is a null pointer");
    EXPECT(offload_buffer_read(b, 0, NULL, 8), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_buffer_fill(b, 0, 65, 1), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_buffer_copy(c, 32, b, 0, 64), OFFLOAD_ERROR_INVALID_ARGUMENT);

    OK(offload_buffer_free(b));
    EXPECT(offload_buffer_free(b), OFFLOAD_ERROR_INVALID_HANDLE); /* double free */
    EXPECT(offload_buffer_read(b, 0, out, 1), OFFLOAD_ERROR_INVALID_HANDLE); /* use after free */
    OK(offload_buffer_free(c));
    /* s stays allocated: the last shutdown frees it (L4). */
}

static void test_programs(offload_device_t dev, const unsigned char *image, size_t image_len) {
    offload_program_t p = 0;
    EXPECT(offload_program_from_image(NULL, 10, &p), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_program_from_image(image, 0, &p), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_program_from_image(image, image_len, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);

    OK(offload_program_from_image((const uint8_t *)"garbage", 7, &p));
    offload_module_t m = 0;
    EXPECT(offload_program_load(p, dev, &m), OFFLOAD_ERROR_INVALID_BINARY);
    OK(offload_program_destroy(p));
    EXPECT(offload_program_destroy(p), OFFLOAD_ERROR_INVALID_HANDLE);

    callbacks_t cb = {0, 0, 0, OFFLOAD_ERROR_INTERNAL};
    OK(offload_program_from_image(image, image_len, &p));
    OK(offload_program_on_setup(p, on_setup, &cb));
    OK(offload_program_on_teardown(p, on_teardown, &cb));
    EXPECT(offload_program_on_setup(p, NULL, &cb), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_program_load(p, dev, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_program_load(p, dev, &m));
    offload_module_t again = 0;
    OK(offload_program_load(p, dev, &again)); /* the same module, set up once (P2) */
    CHECK(cb.setups == 1 && cb.inner == OFFLOAD_OK);
    OK(offload_module_release(again));

    size_t count = 0, needed = 0;
    OK(offload_module_kernel_count(m, &count));
    CHECK(count >= 2);
    OK(offload_module_kernel_name(m, 0, NULL, 0, &needed));
    CHECK(needed > 1);
    char name[64];
    char tiny[2];
    OK(offload_module_kernel_name(m, 0, name, sizeof name, NULL));
    CHECK(strlen(name) + 1 == needed);
    EXPECT(offload_module_kernel_name(m, 0, tiny, sizeof tiny, &needed), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_module_kernel_name(m, 1000, name, sizeof name, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);

    offload_kernel_t k = 0;
    EXPECT(offload_module_kernel(m, "no_such_kernel", &k), OFFLOAD_ERROR_SYMBOL_NOT_FOUND);
    SAYS("add_one");
    EXPECT(offload_module_kernel(m, NULL, &k), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_module_kernel(m, "add_one", &k));
    size_t params = 0;
    OK(offload_kernel_param_count(k, &params));
    CHECK(params == 2);
    offload_param_t param;
    OK(offload_kernel_param(k, 0, &param));
    CHECK(param.kind == OFFLOAD_PARAM_BUFFER && param.size == sizeof(offload_buffer_t));
    OK(offload_kernel_param(k, 1, &param));
    CHECK(param.kind == OFFLOAD_PARAM_TYPED && param.scalar == OFFLOAD_SCALAR_U32 && param.size == 4);
    EXPECT(offload_kernel_param(k, 2, &param), OFFLOAD_ERROR_INVALID_ARGUMENT);

    /* add_one over 64 u32s. */
    offload_buffer_t b = 0;
    offload_queue_t q = 0;
    OK(offload_buffer_alloc(dev, 256, OFFLOAD_MEM_DEVICE, &b));
    OK(offload_queue_create(dev, &q));
    uint32_t n = 64;
    const void *args[] = {&b, &n};
    size_t sizes[] = {sizeof b, sizeof n};
    offload_dims_t dims = {{4, 1, 1}, {16, 1, 1}, 0};
    OK(offload_queue_launch(q, k, &dims, args, sizes, 2));
    OK(offload_queue_launch(q, k, &dims, args, sizes, 2));
    uint32_t back[64];
    OK(offload_queue_read(q, b, 0, (uint8_t *)back, sizeof back));
    CHECK(back[0] == 2 && back[63] == 2);
    OK(offload_queue_destroy(q));
    OK(offload_buffer_free(b));
    OK(offload_kernel_release(k));

    /* Globals: the fixture's writable `g`. */
    uint32_t g = 41, g_back = 0;
    OK(offload_module_write_global(m, "g", 0, (const uint8_t *)&g, sizeof g));
    OK(offload_module_read_global(m, "g", 0, (uint8_t *)&g_back, sizeof g_back));
    CHECK(g_back == 41);
    EXPECT(offload_module_read_global(m, "no_such_global", 0, (uint8_t *)&g_back, 4),
           OFFLOAD_ERROR_SYMBOL_NOT_FOUND);
    EXPECT(offload_module_read_global(m, "g", 0, NULL, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_module_write_global(m, NULL, 0, (const uint8_t *)&g, 4),
           OFFLOAD_ERROR_INVALID_ARGUMENT);

    /* Validation without loading (olIsValidBinary). */
    OK(offload_device_validate(dev, image, image_len));
    EXPECT(offload_device_validate(dev, (const uint8_t *)"garbage", 7), OFFLOAD_ERROR_INVALID_BINARY);
    EXPECT(offload_device_validate(dev, NULL, 7), OFFLOAD_ERROR_INVALID_ARGUMENT);

    OK(offload_module_unload(m)); /* teardown runs once, now */
    CHECK(cb.teardowns == 1);
    EXPECT(offload_module_unload(m), OFFLOAD_ERROR_INVALID_HANDLE);
    OK(offload_program_destroy(p));

    /* A failing setup fails the load with OFFLOAD_ERROR_CALLBACK (P3). */
    callbacks_t failing = {0, 0, 1, OFFLOAD_OK};
    OK(offload_program_from_image(image, image_len, &p));
    OK(offload_program_on_setup(p, on_setup, &failing));
    EXPECT(offload_program_load(p, dev, &m), OFFLOAD_ERROR_CALLBACK);
    SAYS("the C callback returned 7");
    OK(offload_program_destroy(p));

    /* From source: C on the host. */
    EXPECT(offload_program_from_source(9, SAXPY_C, &p), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_program_from_source(OFFLOAD_LANGUAGE_C, NULL, &p), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_program_from_source(OFFLOAD_LANGUAGE_C, "this is not C", &p));
    EXPECT(offload_program_load(p, dev, &m), OFFLOAD_ERROR_COMPILE);
    OK(offload_program_destroy(p));
    OK(offload_program_from_source(OFFLOAD_LANGUAGE_C, SAXPY_C, &p));
    OK(offload_program_load(p, dev, &m));
    OK(offload_module_kernel(m, "saxpy", &k));
    OK(offload_kernel_param(k, 2, &param));
    CHECK(param.kind == OFFLOAD_PARAM_TYPED && param.scalar == OFFLOAD_SCALAR_F32);
    saxpy_on(dev, k, 128);
    OK(offload_kernel_release(k));
    OK(offload_module_release(m));
    /* p stays: the last shutdown unloads its module. */
}

static void test_queues(offload_device_t dev) {
    offload_queue_t q = 0, q2 = 0;
    EXPECT(offload_queue_create(dev, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_queue_create(dev, &q));
    OK(offload_queue_create(dev, &q2));
    offload_buffer_t a = 0, b = 0;
    OK(offload_buffer_alloc(dev, 32, OFFLOAD_MEM_DEVICE, &a));
    OK(offload_buffer_alloc(dev, 32, OFFLOAD_MEM_DEVICE, &b));

    offload_event_t start = 0, end = 0;
    OK(offload_queue_record(q, &start));
    uint8_t in[32];
    for (int i = 0; i < 32; i++) in[i] = (uint8_t)i;
    OK(offload_queue_write(q, a, 0, in, 32));
    uint16_t pattern = 0xA1B2;
    OK(offload_queue_fill(q, b, 0, 32, (const uint8_t *)&pattern, 2));
    OK(offload_queue_copy(q, a, 0, b, 8, 8));
    host_fn_t h = {0, 0, OFFLOAD_OK};
    OK(offload_queue_host_fn(q, host_fn, &h));
    EXPECT(offload_queue_host_fn(q, NULL, &h), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_queue_record(q, &end));
    OK(offload_queue_wait_event(q2, end));
    OK(offload_queue_sync(q2));
    OK(offload_event_sync(end));
    bool done = false;
    OK(offload_event_is_complete(end, &done));
    CHECK(done);
    uint64_t ns = 0;
    OK(offload_event_elapsed(start, end, &ns));
    EXPECT(offload_event_elapsed(start, end, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_queue_sync(q));
    CHECK(h.runs == 1);
    bool idle = false;
    OK(offload_queue_is_idle(q, &idle));
    CHECK(idle);
    uint8_t out[32];
    OK(offload_queue_read(q, b, 0, out, 32));
    CHECK(out[0] == 0xB2 && out[1] == 0xA1 && out[8] == 0 && out[15] == 7 && out[16] == 0xB2);
    EXPECT(offload_queue_fill(q, b, 0, 7, (const uint8_t *)&pattern, 2), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_queue_write(q, a, 30, in, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_queue_read(q, a, 0, NULL, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_queue_copy(q, a, 0, b, 30, 4), OFFLOAD_ERROR_INVALID_ARGUMENT);

    /* A host function that waits for its own queue is refused at once (L6). */
    host_fn_t own = {0, q, OFFLOAD_OK};
    OK(offload_queue_host_fn(q, host_fn, &own));
    OK(offload_queue_sync(q));
    CHECK(own.runs == 1 && own.own_sync == OFFLOAD_ERROR_INVALID_ARGUMENT);

    /* A host function that gives back its queue's handle, often while this thread's sync
     * holds that handle (a pin of the slot's owner: the queue must go when the sync
     * returns, not under it; valgrind checks), else before the sync starts (which then
     * finds the handle dead). Ten times: each a fresh queue in a fresh or reused slot. */
    for (int i = 0; i < 10; i++) {
        offload_queue_t q3 = 0;
        OK(offload_queue_create(dev, &q3));
        size_t live = offload_live_handles();
        self_destroy_t sd = {0, q3, OFFLOAD_ERROR_INTERNAL};
        OK(offload_queue_host_fn(q3, destroying_host_fn, &sd));
        offload_status_t synced = offload_queue_sync(q3);
        CHECK(synced == OFFLOAD_OK || synced == OFFLOAD_ERROR_INVALID_HANDLE);
        while (__atomic_load_n(&sd.runs, __ATOMIC_ACQUIRE) == 0) /* (if the sync found it dead) */
            sched_yield();
        CHECK(sd.runs == 1 && sd.destroyed == OFFLOAD_OK);
        EXPECT(offload_queue_sync(q3), OFFLOAD_ERROR_INVALID_HANDLE);
        CHECK(offload_live_handles() == live - 1);
    }

    OK(offload_event_destroy(start));
    EXPECT(offload_event_destroy(start), OFFLOAD_ERROR_INVALID_HANDLE);
    EXPECT(offload_event_sync(start), OFFLOAD_ERROR_INVALID_HANDLE);
    OK(offload_queue_destroy(q2));
    EXPECT(offload_queue_sync(q2), OFFLOAD_ERROR_INVALID_HANDLE);
    OK(offload_queue_destroy(q));
    OK(offload_buffer_free(a));
    OK(offload_buffer_free(b));
    /* `end` stays: the last shutdown destroys it. */
}

static void test_ipc(offload_runtime_t rt, offload_device_t dev) {
    offload_buffer_t b = 0;
    OK(offload_buffer_alloc_exportable(dev, 64, OFFLOAD_MEM_DEVICE, &b));
    OK(offload_buffer_fill(b, 0, 64, 0x5A));
    uint8_t bytes[OFFLOAD_IPC_HANDLE_MAX_BYTES];
    size_t len = 0;
    int fd = -1;
    OK(offload_ipc_export(b, bytes, sizeof bytes, &len, &fd));
    CHECK(len > 0 && len <= sizeof bytes);
    EXPECT(offload_ipc_export(b, bytes, 4, &len, &fd), OFFLOAD_ERROR_INVALID_ARGUMENT);
    EXPECT(offload_ipc_export(b, NULL, 0, &len, &fd), OFFLOAD_ERROR_INVALID_ARGUMENT);
    /* Another process maps it (I1): this program again, with the handle's bytes in hex and
     * the descriptor inherited (the child takes it over and closes it). */
    char hex[2 * OFFLOAD_IPC_HANDLE_MAX_BYTES + 1], fd_text[16];
    for (size_t i = 0; i < len; i++) sprintf(hex + 2 * i, "%02x", bytes[i]);
    snprintf(fd_text, sizeof fd_text, "%d", fd);
    if (fd >= 0) CHECK(fcntl(fd, F_SETFD, 0) == 0);
    char *child_argv[] = {(char *)self_path, "--import", hex, fd_text, NULL};
    pid_t pid;
    CHECK(posix_spawn(&pid, self_path, NULL, NULL, child_argv, environ) == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (fd >= 0) close(fd);
    offload_buffer_t view = 0;
    EXPECT(offload_ipc_import(dev, (const uint8_t *)"forged handle", 13, -1, &view),
           OFFLOAD_ERROR_INVALID_IPC_HANDLE);

    offload_endpoint_t e1 = 0, e2 = 0;
    EXPECT(offload_endpoint_create(rt, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_endpoint_create(rt, &e1));
    OK(offload_endpoint_create(rt, &e2));
    size_t needed = 0;
    OK(offload_endpoint_name(e2, NULL, 0, &needed));
    char name[512];
    CHECK(needed > 1 && needed <= sizeof name);
    OK(offload_endpoint_name(e2, name, sizeof name, NULL));
    uint64_t peer = 0;
    EXPECT(offload_endpoint_connect(e1, "/nonexistent/socket", &peer), OFFLOAD_ERROR_IPC);
    OK(offload_endpoint_connect(e1, name, &peer));
    CHECK(peer == 1);
    EXPECT(offload_endpoint_send(e1, 99, b, 0, 64, 1), OFFLOAD_ERROR_INVALID_ARGUMENT);
    OK(offload_endpoint_send(e1, peer, b, 16, 32, 42));
    bool got = false;
    uint64_t tag = 0, from = 0;
    OK(offload_endpoint_recv(e2, 5000, &view, &tag, &from, &got));
    CHECK(got && tag == 42 && from == 1);
    if (got) {
        size_t size = 0;
        uint8_t out[32];
        OK(offload_buffer_info(view, &size, NULL));
        CHECK(size == 32);
        OK(offload_buffer_read(view, 0, out, 32));
        CHECK(out[0] == 0x5A && out[31] == 0x5A);
        OK(offload_buffer_free(view)); /* answers the sender (I3) */
    }
    OK(offload_endpoint_wait_answered(e1, peer, 5000));
    OK(offload_endpoint_recv(e2, 1, &view, NULL, NULL, &got));
    CHECK(!got);
    OK(offload_buffer_free(b));
    OK(offload_endpoint_close(e1));
    EXPECT(offload_endpoint_close(e1), OFFLOAD_ERROR_INVALID_HANDLE);
    /* e2 stays: the last shutdown closes it. */
}

static void composite_is_one_argument(offload_device_t gpu);

static void test_vulkan(offload_runtime_t rt, int require) {
    offload_device_t gpu = 0;
    offload_status_t s = offload_device_of(rt, OFFLOAD_BACKEND_VULKAN, &gpu);
    if (s != OFFLOAD_OK) {
        if (require) {
            fprintf(stderr, "no Vulkan device, and one is required: %s\n", offload_last_error());
            check_failures++;
        } else {
            printf("skip vulkan: %s\n", offload_last_error());
        }
        return;
    }
    offload_device_info_t info;
    OK(offload_device_info(gpu, &info));
    CHECK(info.backend == OFFLOAD_BACKEND_VULKAN);
    printf("vulkan device: %s\n", info.name);
    offload_program_t p = 0;
    offload_module_t m = 0;
    offload_kernel_t k = 0;
    OK(offload_program_from_source(OFFLOAD_LANGUAGE_WGSL, SAXPY_WGSL, &p));
    offload_status_t loaded = offload_program_load(p, gpu, &m);
    if (loaded == OFFLOAD_ERROR_UNSUPPORTED) {
        printf("skip vulkan WGSL: %s\n", offload_last_error());
    } else {
        OK(loaded);
        OK(offload_module_kernel(m, "saxpy", &k));
        size_t params = 0;
        OK(offload_kernel_param_count(k, &params));
        CHECK(params == 4);
        saxpy_on(gpu, k, 64);
        OK(offload_kernel_release(k));
        OK(offload_module_release(m));
        composite_is_one_argument(gpu);
    }
    OK(offload_program_destroy(p));
    OK(offload_device_release(gpu));
}

/* A vec2<f32> push-constant member passed as its two floats: refused by the count, and the
 * fix is C's (a pointer to its bytes and their size), not Rust's `Arg::pod`. */
static void composite_is_one_argument(offload_device_t gpu) {
    static const char *OFFSET_WGSL =
        "struct P { n: u32, off: vec2<f32> }\n"
        "@group(0) @binding(0) var<storage, read_write> out: array<f32>;\n"
        "var<immediate> p: P;\n"
        "@compute @workgroup_size(64)\n"
        "fn shift(@builtin(global_invocation_id) id: vec3<u32>) {\n"
        "    if id.x < p.n { out[id.x] = p.off.x + p.off.y; }\n"
        "}\n";
    offload_program_t p = 0;
    offload_module_t m = 0;
    offload_kernel_t k = 0;
    offload_buffer_t out = 0;
    offload_queue_t q = 0;
    OK(offload_program_from_source(OFFLOAD_LANGUAGE_WGSL, OFFSET_WGSL, &p));
    OK(offload_program_load(p, gpu, &m));
    OK(offload_module_kernel(m, "shift", &k));
    OK(offload_buffer_alloc(gpu, 64 * sizeof(float), OFFLOAD_MEM_DEVICE, &out));
    OK(offload_queue_create(gpu, &q));
    uint32_t n = 64;
    float x = 1.0f, y = 2.0f;
    const void *split[] = {&out, &n, &x, &y};
    size_t split_sizes[] = {sizeof out, sizeof n, sizeof x, sizeof y};
    offload_dims_t dims = {{1, 1, 1}, {64, 1, 1}, 0};
    EXPECT(offload_queue_launch(q, k, &dims, split, split_sizes, 4),
           OFFLOAD_ERROR_INVALID_ARGUMENT);
    SAYS("offload_queue_launch: invalid argument: `shift` takes 3 arguments");
    SAYS("(a vector, matrix or struct parameter is one argument: a pointer to its bytes, and "
         "their size)");
    CHECK(strstr(offload_last_error(), "Arg::") == NULL);
    /* As one argument it runs. */
    float off[2] = {1.0f, 2.0f};
    const void *whole[] = {&out, &n, off};
    size_t whole_sizes[] = {sizeof out, sizeof n, sizeof off};
    OK(offload_queue_launch(q, k, &dims, whole, whole_sizes, 3));
    float got[64] = {0};
    OK(offload_queue_read(q, out, 0, (uint8_t *)got, sizeof got));
    OK(offload_queue_sync(q));
    CHECK(got[0] == 3.0f && got[63] == 3.0f);
    OK(offload_queue_destroy(q));
    OK(offload_buffer_free(out));
    OK(offload_kernel_release(k));
    OK(offload_module_release(m));
    OK(offload_program_destroy(p));
}

/* The child of test_ipc: imports the exported buffer and checks its bytes. */
static int import_child(const char *hex, int fd) {
    uint8_t bytes[OFFLOAD_IPC_HANDLE_MAX_BYTES];
    size_t len = strlen(hex) / 2;
    for (size_t i = 0; i < len && i < sizeof bytes; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        bytes[i] = (uint8_t)v;
    }
    offload_runtime_t rt = 0;
    offload_device_t dev = 0;
    offload_buffer_t view = 0;
    uint8_t out[64];
    OK(offload_init(NULL, &rt));
    OK(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));
    OK(offload_ipc_import(dev, bytes, len, fd, &view));
    OK(offload_buffer_read(view, 0, out, sizeof out));
    CHECK(out[0] == 0x5A && out[63] == 0x5A);
    OK(offload_buffer_free(view));
    OK(offload_shutdown(rt, NULL));
    return check_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc == 4 && strcmp(argv[1], "--import") == 0) return import_child(argv[2], atoi(argv[3]));
    if (argc < 2) {
        fprintf(stderr, "usage: suite IMAGE [vulkan|novulkan|requirevulkan]\n");
        return 2;
    }
    size_t image_len = 0;
    unsigned char *image = read_file(argv[1], &image_len);
    if (!image) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    const char *vk = argc > 2 ? argv[2] : "vulkan";

    test_statuses();

    offload_config_t config;
    OK(offload_config_default(&config));
    config.set_backends = true;
    config.backends = 1u << OFFLOAD_BACKEND_HOST;
    config.host_devices = 2;
    offload_runtime_t rt = 0, extra = 0;
    OK(offload_init(&config, &rt));
    OK(offload_runtime_retain(rt, &extra));
    EXPECT(offload_runtime_retain(rt, NULL), OFFLOAD_ERROR_INVALID_ARGUMENT);
    offload_device_t dev = 0;
    OK(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));

    test_runtime(rt);
    test_handles(rt, dev);
    test_memory(dev);
    test_programs(dev, image, image_len);
    test_queues(dev);
    test_ipc(rt, dev);

    /* Objects left for the shutdown: handles of the runtime answer SHUT_DOWN after it. */
    offload_buffer_t left = 0;
    offload_queue_t q = 0;
    offload_program_t p = 0;
    offload_module_t m = 0;
    offload_kernel_t k = 0;
    offload_event_t ev = 0;
    OK(offload_buffer_alloc(dev, 16, OFFLOAD_MEM_DEVICE, &left));
    OK(offload_queue_create(dev, &q));
    OK(offload_queue_record(q, &ev));
    OK(offload_program_from_image(image, image_len, &p));
    OK(offload_program_load(p, dev, &m));
    OK(offload_module_kernel(m, "noop", &k));
    CHECK(offload_live_handles() > 8);

    bool last = true;
    OK(offload_shutdown(extra, &last));
    CHECK(!last);
    OK(offload_buffer_fill(left, 0, 16, 1)); /* one reference left: still live */
    OK(offload_shutdown(rt, &last));
    CHECK(last);
    CHECK(offload_live_handles() == 0);
    uint8_t byte;
    EXPECT(offload_buffer_read(left, 0, &byte, 1), OFFLOAD_ERROR_SHUT_DOWN);
    SAYS("belongs to an offload runtime that has been shut down");
    EXPECT(offload_buffer_free(left), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_queue_sync(q), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_event_sync(ev), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_program_load(p, dev, &m), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_kernel_param_count(k, &image_len), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_module_release(m), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_device_info(dev, &(offload_device_info_t){0}), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_shutdown(rt, NULL), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_runtime_retain(rt, &extra), OFFLOAD_ERROR_SHUT_DOWN);

    /* A later generation: fresh handles work, the old ones still say SHUT_DOWN. */
    offload_runtime_t rt2 = 0;
    OK(offload_init(NULL, &rt2));
    uint64_t g2 = 0;
    OK(offload_runtime_generation(rt2, &g2));
    offload_device_t dev2 = 0;
    OK(offload_device_of(rt2, OFFLOAD_BACKEND_HOST, &dev2));
    offload_buffer_t fresh = 0;
    OK(offload_buffer_alloc(dev2, 16, OFFLOAD_MEM_DEVICE, &fresh));
    EXPECT(offload_buffer_read(left, 0, &byte, 1), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_queue_sync(q), OFFLOAD_ERROR_SHUT_DOWN);
    EXPECT(offload_buffer_alloc(dev, 16, OFFLOAD_MEM_DEVICE, &fresh), OFFLOAD_ERROR_SHUT_DOWN);
    OK(offload_buffer_read(fresh, 0, &byte, 1));

    if (strcmp(vk, "novulkan") != 0) test_vulkan(rt2, strcmp(vk, "requirevulkan") == 0);

    OK(offload_shutdown(rt2, &last));
    CHECK(last);
    CHECK(offload_live_handles() == 0);
    EXPECT(offload_buffer_read(fresh, 0, &byte, 1), OFFLOAD_ERROR_SHUT_DOWN);

    free(image);
    if (check_failures) {
        fprintf(stderr, "%d checks failed\n", check_failures);
        return 1;
    }
    printf("suite: all checks held\n");
    return 0;
}
