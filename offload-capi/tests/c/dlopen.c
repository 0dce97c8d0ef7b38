/*
 * L2 from C: the shared library is dlopen'ed, used (init, allocate, write, read back, a
 * kernel launch over 64 blocks, shutdown) and dlclose'd again and again; after every
 * dlclose it must be gone from /proc/self/maps, and after every dlopen it must work.
 *
 * usage: dlopen LIBRARY IMAGE [CYCLES]
 */
#include <dlfcn.h>
#include <stdlib.h>

#include <stdio.h>
#include <string.h>

#include "offload.h"

/* Not linked with the library: every call goes through dlsym, so these checks use only
 * the looked-up `offload_last_error`. */
static int check_failures;
#define OK(call)                                                                           \
    do {                                                                                   \
        offload_status_t got_ = (call);                                                    \
        if (got_ != OFFLOAD_OK) {                                                          \
            fprintf(stderr, "%s:%d: %s gave %d: %s\n", __FILE__, __LINE__, #call, (int)got_, \
                    offload_last_error());                                                 \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)

typedef offload_status_t (*init_fn)(const offload_config_t *, offload_runtime_t *);
typedef offload_status_t (*shutdown_fn)(offload_runtime_t, bool *);
typedef offload_status_t (*device_of_fn)(offload_runtime_t, uint32_t, offload_device_t *);
typedef offload_status_t (*alloc_fn)(offload_device_t, size_t, uint32_t, offload_buffer_t *);
typedef offload_status_t (*rw_fn)(offload_buffer_t, size_t, uint8_t *, size_t);
typedef offload_status_t (*image_fn)(const uint8_t *, size_t, offload_program_t *);
typedef offload_status_t (*load_fn)(offload_program_t, offload_device_t, offload_module_t *);
typedef offload_status_t (*kernel_fn)(offload_module_t, const char *, offload_kernel_t *);
typedef offload_status_t (*queue_fn)(offload_device_t, offload_queue_t *);
typedef offload_status_t (*launch_fn)(offload_queue_t, offload_kernel_t, const offload_dims_t *,
                                      const void *const *, const size_t *, size_t);
typedef offload_status_t (*sync_fn)(offload_queue_t);
typedef const char *(*last_error_fn)(void);

static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, name)) found = 1;
    if (f) fclose(f);
    return found;
}

#define SYM(type, name) type name = (type)dlsym(lib, #name)

#include "read_file.h"

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *path = argv[1];
    int cycles = argc > 3 ? atoi(argv[3]) : 200;
    size_t image_len = 0;
    unsigned char *image = read_file(argv[2], &image_len);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!image) return 2;
    for (int c = 0; c < cycles; c++) {
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            fprintf(stderr, "cycle %d: dlopen: %s\n", c, dlerror());
            return 1;
        }
        SYM(init_fn, offload_init);
        SYM(shutdown_fn, offload_shutdown);
        SYM(device_of_fn, offload_device_of);
        SYM(alloc_fn, offload_buffer_alloc);
        SYM(rw_fn, offload_buffer_read);
        SYM(image_fn, offload_program_from_image);
        SYM(load_fn, offload_program_load);
        SYM(kernel_fn, offload_module_kernel);
        SYM(queue_fn, offload_queue_create);
        SYM(launch_fn, offload_queue_launch);
        SYM(sync_fn, offload_queue_sync);
        SYM(last_error_fn, offload_last_error);
        if (!offload_init || !offload_shutdown || !offload_queue_sync || !offload_last_error) {
            fprintf(stderr, "cycle %d: a symbol is missing\n", c);
            return 1;
        }
        offload_runtime_t rt = 0;
        offload_device_t dev = 0;
        offload_buffer_t b = 0;
        offload_program_t p = 0;
        offload_module_t m = 0;
        offload_kernel_t k = 0;
        offload_queue_t q = 0;
        uint32_t n = 64 * 64;
        OK(offload_init(NULL, &rt));
        OK(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));
        OK(offload_buffer_alloc(dev, 4 * n, OFFLOAD_MEM_DEVICE, &b));
        OK(offload_program_from_image(image, image_len, &p));
        OK(offload_program_load(p, dev, &m));
        OK(offload_module_kernel(m, "add_one", &k));
        OK(offload_queue_create(dev, &q));
        const void *args[] = {&b, &n};
        size_t sizes[] = {sizeof b, sizeof n};
        offload_dims_t dims = {{64, 1, 1}, {64, 1, 1}, 0};
        OK(offload_queue_launch(q, k, &dims, args, sizes, 2));
        OK(offload_queue_sync(q));
        uint32_t last = 0;
        OK(offload_buffer_read(b, 4 * (n - 1), (uint8_t *)&last, 4));
        CHECK(last == 1);
        bool was_last = false;
        /* Queue, program, module, kernel and buffer are left to the shutdown (L4). */
        OK(offload_shutdown(rt, &was_last));
        CHECK(was_last);
        if (check_failures) {
            fprintf(stderr, "cycle %d failed: %s\n", c, offload_last_error());
            return 1;
        }
        dlclose(lib);
        if (mapped(base)) {
            fprintf(stderr, "cycle %d: %s is still mapped after dlclose\n", c, base);
            return 1;
        }
    }
    free(image);
    printf("dlopen: %d cycles, unmapped after each\n", cycles);
    return 0;
}
