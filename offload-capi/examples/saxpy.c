/*
 * SAXPY from C: y = a*x + y, with the kernel compiled from C source on the host backend,
 * then from WGSL on a Vulkan device (Mesa's lavapipe on a machine without a GPU) when
 * there is one.
 *
 *   cc -std=c99 saxpy.c $(pkg-config --cflags --libs offload) -o saxpy && ./saxpy
 */
#include <stdio.h>

#include "offload.h"

/* Stops at the first failure with the runtime's own words. */
#define TRY(call)                                                                          \
    do {                                                                                   \
        offload_status_t s_ = (call);                                                      \
        if (s_ != OFFLOAD_OK) {                                                            \
            fprintf(stderr, "%s: %s\n", offload_status_name((int)s_), offload_last_error()); \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

#include "saxpy_kernels.h"

enum { N = 10000 };
static float xs[N], ys[N];

static int saxpy(offload_device_t dev, uint32_t language, const char *source, uint32_t block) {
    offload_program_t program;
    offload_module_t module;
    offload_kernel_t kernel;
    offload_buffer_t x, y;
    offload_queue_t queue;
    for (int i = 0; i < N; i++) {
        xs[i] = (float)i;
        ys[i] = 0.0f;
    }
    TRY(offload_program_from_source(language, source, &program));
    TRY(offload_program_load(program, dev, &module));
    TRY(offload_module_kernel(module, "saxpy", &kernel));
    TRY(offload_buffer_alloc(dev, sizeof xs, OFFLOAD_MEM_DEVICE, &x));
    TRY(offload_buffer_alloc(dev, sizeof ys, OFFLOAD_MEM_DEVICE, &y));
    TRY(offload_queue_create(dev, &queue));
    TRY(offload_queue_write(queue, x, 0, (const uint8_t *)xs, sizeof xs));
    TRY(offload_queue_write(queue, y, 0, (const uint8_t *)ys, sizeof ys));

    /* Arguments: a pointer to each one and its size; buffers by their handle. */
    float a = 2.0f;
    uint32_t n = N;
    const void *args[] = {&x, &y, &a, &n};
    size_t sizes[] = {sizeof x, sizeof y, sizeof a, sizeof n};
    offload_dims_t dims = {{(N + block - 1) / block, 1, 1}, {block, 1, 1}, 0};
    TRY(offload_queue_launch(queue, kernel, &dims, args, sizes, 4));
    TRY(offload_queue_read(queue, y, 0, (uint8_t *)ys, sizeof ys));
    printf("y[3] = %g (expected 6)\n", ys[3]);

    /* Arguments are checked against what the kernel declares before it runs. */
    offload_status_t wrong = offload_queue_launch(queue, kernel, &dims, args, sizes, 3);
    printf("three arguments: %s: %s\n", offload_status_name((int)wrong), offload_last_error());

    TRY(offload_queue_destroy(queue));
    TRY(offload_buffer_free(x));
    TRY(offload_buffer_free(y));
    TRY(offload_kernel_release(kernel));
    TRY(offload_module_release(module));
    TRY(offload_program_destroy(program));
    return ys[3] == 6.0f ? 0 : 1;
}

int main(void) {
    offload_runtime_t rt;
    offload_device_t host, gpu;
    TRY(offload_init(NULL, &rt)); /* reference counted, thread-safe */
    TRY(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &host));
    if (saxpy(host, OFFLOAD_LANGUAGE_C, SAXPY_C, 256)) return 1;

    if (offload_device_of(rt, OFFLOAD_BACKEND_VULKAN, &gpu) == OFFLOAD_OK) {
        offload_device_info_t info;
        TRY(offload_device_info(gpu, &info));
        printf("on %s:\n", info.name);
        if (saxpy(gpu, OFFLOAD_LANGUAGE_WGSL, SAXPY_WGSL, 64)) return 1;
    } else {
        printf("no Vulkan device: %s\n", offload_last_error());
    }

    offload_buffer_t late;
    TRY(offload_buffer_alloc(host, 64, OFFLOAD_MEM_DEVICE, &late));
    bool last;
    TRY(offload_shutdown(rt, &last)); /* the last shutdown deinitialises */
    /* Handles outlive their runtime safely, and say so in words. */
    offload_status_t s = offload_buffer_fill(late, 0, 64, 0);
    printf("after shutdown: %s: %s\n", offload_status_name((int)s), offload_last_error());
    return s == OFFLOAD_ERROR_SHUT_DOWN ? 0 : 1;
}
