/*
 * L3 by exhaustion, from C: one handle of every kind is made, the last offload_shutdown
 * runs, and every function of offload.h that takes a handle is called on them — once right
 * after the shutdown, once more while a new runtime is live. Each answers
 * OFFLOAD_ERROR_SHUT_DOWN (the handle's runtime is finished), never OFFLOAD_OK, another
 * status, a crash or a hang. The functions that take no handle of a runtime are called too
 * (they must still work). The Rust side (tests/c_suite.rs) checks that every function the
 * header declares is called here, so a new one cannot skip L3.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static const char *KERNELS =
    "#include \"offload_host.h\"\n"
    "OFFLOAD_KERNEL(noop, \"\") { (void)launch; }\n";

static int32_t callback(offload_module_t module, void *user_data) {
    (void)module;
    (void)user_data;
    return 0;
}

static void host_fn(void *user_data) { (void)user_data; }

struct handles {
    offload_runtime_t rt;
    offload_device_t dev;
    offload_buffer_t buf, other, exportable, received;
    offload_queue_t queue;
    offload_event_t event, later;
    offload_program_t program;
    offload_module_t module;
    offload_kernel_t kernel;
    offload_endpoint_t sender, receiver;
    uint64_t peer;
    uint8_t exported[128];
    size_t exported_len;
    int32_t exported_fd;
};

static int make(struct handles *h) {
    REQUIRE(offload_init(NULL, &h->rt));
    REQUIRE(offload_device_of(h->rt, OFFLOAD_BACKEND_HOST, &h->dev));
    REQUIRE(offload_buffer_alloc(h->dev, 64, OFFLOAD_MEM_DEVICE, &h->buf));
    REQUIRE(offload_buffer_alloc(h->dev, 64, OFFLOAD_MEM_DEVICE, &h->other));
    REQUIRE(offload_buffer_alloc_exportable(h->dev, 64, OFFLOAD_MEM_DEVICE, &h->exportable));
    REQUIRE(offload_ipc_export(h->exportable, h->exported, sizeof h->exported, &h->exported_len,
                               &h->exported_fd));
    REQUIRE(offload_queue_create(h->dev, &h->queue));
    REQUIRE(offload_queue_record(h->queue, &h->event));
    REQUIRE(offload_queue_record(h->queue, &h->later));
    REQUIRE(offload_program_from_source(OFFLOAD_LANGUAGE_C, KERNELS, &h->program));
    REQUIRE(offload_program_load(h->program, h->dev, &h->module));
    REQUIRE(offload_module_kernel(h->module, "noop", &h->kernel));
    REQUIRE(offload_endpoint_create(h->rt, &h->sender));
    REQUIRE(offload_endpoint_create(h->rt, &h->receiver));
    char name[256];
    REQUIRE(offload_endpoint_name(h->receiver, name, sizeof name, NULL));
    REQUIRE(offload_endpoint_connect(h->sender, name, &h->peer));
    REQUIRE(offload_endpoint_send(h->sender, h->peer, h->exportable, 0, 16, 7));
    uint64_t tag = 0, from = 0;
    bool got = false;
    REQUIRE(offload_endpoint_recv(h->receiver, 5000, &h->received, &tag, &from, &got));
    if (!got) {
        fprintf(stderr, "make: the receiver got nothing\n");
        return 1;
    }
    REQUIRE(offload_queue_sync(h->queue));
    return 0;
}

#define SHUT(call) EXPECT(call, OFFLOAD_ERROR_SHUT_DOWN)

/* Every function of offload.h on the handles of a finished runtime. */
static void call_all(const char *when, struct handles *h) {
    int before = check_failures;
    uint8_t bytes[16] = {0};
    size_t size = 0, count = 0, needed = 0;
    uint64_t value = 0;
    bool flag = false;
    char text[64];
    offload_buffer_t buffer = 0;
    offload_queue_t queue = 0;
    offload_event_t event = 0;
    offload_module_t module = 0;
    offload_kernel_t kernel = 0;
    offload_endpoint_t endpoint = 0;
    offload_runtime_t runtime = 0;
    offload_device_t device = 0;
    offload_mem_kind_t kind;
    offload_param_t param;
    offload_config_t config;
    offload_platform_info_t platform;
    offload_device_info_t info;
    offload_dims_t dims = {{1, 1, 1}, {1, 1, 1}, 0};

    /* The runtime, its platforms and devices. */
    SHUT(offload_runtime_retain(h->rt, &runtime));
    SHUT(offload_runtime_generation(h->rt, &value));
    SHUT(offload_runtime_config(h->rt, &config));
    SHUT(offload_platform_count(h->rt, &count));
    SHUT(offload_platform_info(h->rt, 0, &platform));
    SHUT(offload_devices(h->rt, &device, 1, &count));
    SHUT(offload_device_of(h->rt, OFFLOAD_BACKEND_HOST, &device));
    SHUT(offload_device_info(h->dev, &info));
    SHUT(offload_device_validate(h->dev, bytes, sizeof bytes));
    SHUT(offload_endpoint_create(h->rt, &endpoint));

    /* Memory. */
    SHUT(offload_buffer_alloc(h->dev, 16, OFFLOAD_MEM_DEVICE, &buffer));
    SHUT(offload_buffer_alloc_exportable(h->dev, 16, OFFLOAD_MEM_DEVICE, &buffer));
    SHUT(offload_buffer_info(h->buf, &size, &kind));
    SHUT(offload_buffer_read(h->buf, 0, bytes, 4));
    SHUT(offload_buffer_write(h->buf, 0, bytes, 4));
    SHUT(offload_buffer_fill(h->buf, 0, 4, 1));
    SHUT(offload_buffer_copy(h->other, 0, h->buf, 0, 4));
    SHUT(offload_buffer_read(h->received, 0, bytes, 4));
    int32_t fd = -1;
    SHUT(offload_ipc_export(h->exportable, bytes, sizeof bytes, &size, &fd));
    SHUT(offload_ipc_import(h->dev, h->exported, h->exported_len, h->exported_fd, &buffer));

    /* Programs, modules, kernels. */
    SHUT(offload_program_load(h->program, h->dev, &module));
    SHUT(offload_module_kernel_count(h->module, &count));
    SHUT(offload_module_kernel_name(h->module, 0, text, sizeof text, &needed));
    SHUT(offload_module_kernel(h->module, "noop", &kernel));
    SHUT(offload_module_read_global(h->module, "counter", 0, bytes, 4));
    SHUT(offload_module_write_global(h->module, "counter", 0, bytes, 4));
    SHUT(offload_kernel_param_count(h->kernel, &count));
    SHUT(offload_kernel_param(h->kernel, 0, &param));

    /* Queues and events. */
    SHUT(offload_queue_create(h->dev, &queue));
    SHUT(offload_queue_launch(h->queue, h->kernel, &dims, NULL, NULL, 0));
    SHUT(offload_queue_sync(h->queue));
    SHUT(offload_queue_is_idle(h->queue, &flag));
    SHUT(offload_queue_write(h->queue, h->buf, 0, bytes, 4));
    SHUT(offload_queue_read(h->queue, h->buf, 0, bytes, 4));
    SHUT(offload_queue_fill(h->queue, h->buf, 0, 4, bytes, 1));
    SHUT(offload_queue_copy(h->queue, h->buf, 0, h->other, 0, 4));
    SHUT(offload_queue_host_fn(h->queue, host_fn, NULL));
    SHUT(offload_queue_record(h->queue, &event));
    SHUT(offload_queue_wait_event(h->queue, h->event));
    SHUT(offload_event_sync(h->event));
    SHUT(offload_event_is_complete(h->event, &flag));
    SHUT(offload_event_elapsed(h->event, h->later, &value));

    /* IPC endpoints. */
    SHUT(offload_endpoint_name(h->sender, text, sizeof text, &needed));
    SHUT(offload_endpoint_connect(h->sender, "nobody", &value));
    SHUT(offload_endpoint_send(h->sender, h->peer, h->exportable, 0, 4, 1));
    SHUT(offload_endpoint_recv(h->receiver, 10, &buffer, &value, &value, &flag));
    SHUT(offload_endpoint_wait_answered(h->sender, h->peer, 10));

    /* What takes no handle of a runtime still works. */
    offload_program_t spare = 0;
    OK(offload_config_default(&config));
    OK(offload_program_from_image(bytes, sizeof bytes, &spare));
    OK(offload_program_on_setup(spare, callback, NULL));
    OK(offload_program_on_teardown(spare, callback, NULL));
    OK(offload_program_destroy(spare));
    CHECK(strcmp(offload_status_name(OFFLOAD_ERROR_SHUT_DOWN), "OFFLOAD_ERROR_SHUT_DOWN") == 0);
    CHECK(offload_last_error() != NULL);
    CHECK(offload_live_handles() < 1000);
    if (check_failures != before) fprintf(stderr, "  (those were %s)\n", when);
}

/* The handles' releases: each answers SHUT_DOWN too (the shutdown released them). */
static void release_all(struct handles *h) {
    SHUT(offload_buffer_free(h->buf));
    SHUT(offload_buffer_free(h->other));
    SHUT(offload_buffer_free(h->exportable));
    SHUT(offload_buffer_free(h->received));
    SHUT(offload_event_destroy(h->event));
    SHUT(offload_event_destroy(h->later));
    SHUT(offload_queue_destroy(h->queue));
    SHUT(offload_kernel_release(h->kernel));
    SHUT(offload_module_unload(h->module));
    SHUT(offload_module_release(h->module));
    SHUT(offload_endpoint_close(h->sender));
    SHUT(offload_endpoint_close(h->receiver));
    SHUT(offload_device_release(h->dev));
    /* A C program handle lives in the runtime's handle table: the shutdown released it. */
    SHUT(offload_program_destroy(h->program));
    SHUT(offload_shutdown(h->rt, NULL));
}

int main(void) {
    struct handles h;
    memset(&h, 0, sizeof h);
    if (make(&h) != 0) return 1;
    bool last = false;
    REQUIRE(offload_shutdown(h.rt, &last));
    CHECK(last);
    call_all("after the last shutdown", &h);
    release_all(&h);

    memset(&h, 0, sizeof h);
    if (make(&h) != 0) return 1;
    REQUIRE(offload_shutdown(h.rt, &last));
    offload_runtime_t next = 0;
    REQUIRE(offload_init(NULL, &next));
    call_all("with the next runtime live", &h);
    release_all(&h);
    offload_device_t dev = 0;
    offload_buffer_t fresh = 0;
    OK(offload_device_of(next, OFFLOAD_BACKEND_HOST, &dev));
    OK(offload_buffer_alloc(dev, 16, OFFLOAD_MEM_DEVICE, &fresh));
    OK(offload_buffer_free(fresh));
    OK(offload_shutdown(next, &last));
    CHECK(last);
    CHECK(offload_live_handles() == 0);
    if (check_failures) {
        fprintf(stderr, "after_shutdown: %d checks failed\n", check_failures);
        return 1;
    }
    printf("after_shutdown: every call answered as L3 says\n");
    return 0;
}
