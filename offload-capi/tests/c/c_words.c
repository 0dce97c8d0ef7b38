/*
 * Messages in the caller's words: for every status a C program can provoke on the host
 * backend, the message offload_last_error() holds names the offload_* function that was
 * called (it starts with "offload_xxx: ") and carries no Rust syntax: no `::` (no
 * `Buffer::read`, no `Offload::init()`), its advice in C (`offload_init()`).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* The last error starts with `call` and a colon (after the backend's name, "host: ", where
 * it has one), and names nothing of Rust. */
#define NAMES(call_name)                                                                   \
    do {                                                                                   \
        const char *m_ = offload_last_error();                                             \
        const char *at_ = strstr(m_, call_name ": ");                                      \
        bool first_ = at_ == m_ || (at_ != NULL && strchr(m_, ':') + 2 == at_);            \
        if (!first_ || strstr(m_, "::") || strstr(m_, "Offload::init")) {                  \
            fprintf(stderr, "%s:%d: last error \"%s\" does not name %s in C's words\n",    \
                    __FILE__, __LINE__, m_, call_name);                                    \
            check_failures++;                                                              \
        }                                                                                  \
    } while (0)

/* `call` answers `status`, and its message names `name` in C's words. */
#define WORDS(call, status, name)                                                          \
    do {                                                                                   \
        EXPECT(call, status);                                                              \
        NAMES(name);                                                                       \
    } while (0)

static const char *KERNELS =
    "#include \"offload_host.h\"\n"
    "OFFLOAD_KERNEL(noop, \"\") { (void)launch; }\n";

int main(void) {
    offload_runtime_t rt = 0;
    offload_device_t dev = 0;
    offload_buffer_t buf = 0, spare = 0;
    uint8_t bytes[8] = {0};
    REQUIRE(offload_init(NULL, &rt));
    REQUIRE(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));
    REQUIRE(offload_buffer_alloc(dev, 4000, OFFLOAD_MEM_DEVICE, &buf));

    /* INVALID_ARGUMENT: a zero size (Device::alloc in Rust), a range outside the buffer
     * (Buffer::read in Rust). */
    WORDS(offload_buffer_alloc(dev, 0, OFFLOAD_MEM_DEVICE, &spare),
          OFFLOAD_ERROR_INVALID_ARGUMENT, "offload_buffer_alloc");
    WORDS(offload_buffer_read(buf, 3998, bytes, 4), OFFLOAD_ERROR_INVALID_ARGUMENT,
          "offload_buffer_read");
    WORDS(offload_buffer_write(buf, 3998, bytes, 4), OFFLOAD_ERROR_INVALID_ARGUMENT,
          "offload_buffer_write");

    /* OUT_OF_MEMORY: more than any machine has. */
    WORDS(offload_buffer_alloc(dev, (size_t)1 << 62, OFFLOAD_MEM_DEVICE, &spare),
          OFFLOAD_ERROR_OUT_OF_MEMORY, "offload_buffer_alloc");

    /* INVALID_HANDLE: a handle that names nothing. */
    WORDS(offload_buffer_read(0, 0, bytes, 4), OFFLOAD_ERROR_INVALID_HANDLE,
          "offload_buffer_read");

    /* INVALID_BINARY: an image that is no shared object. */
    offload_program_t garbage = 0;
    offload_module_t module = 0;
    REQUIRE(offload_program_from_image(bytes, sizeof bytes, &garbage));
    WORDS(offload_program_load(garbage, dev, &module), OFFLOAD_ERROR_INVALID_BINARY,
          "offload_program_load");
    OK(offload_program_destroy(garbage));

    /* COMPILE: C source that does not compile. */
    offload_program_t broken = 0;
    REQUIRE(offload_program_from_source(OFFLOAD_LANGUAGE_C, "int broken(void) { return }\n",
                                        &broken));
    WORDS(offload_program_load(broken, dev, &module), OFFLOAD_ERROR_COMPILE,
          "offload_program_load");
    OK(offload_program_destroy(broken));

    /* SYMBOL_NOT_FOUND: a kernel the module does not have. */
    offload_program_t program = 0;
    offload_kernel_t kernel = 0;
    REQUIRE(offload_program_from_source(OFFLOAD_LANGUAGE_C, KERNELS, &program));
    REQUIRE(offload_program_load(program, dev, &module));
    WORDS(offload_module_kernel(module, "missing", &kernel), OFFLOAD_ERROR_SYMBOL_NOT_FOUND,
          "offload_module_kernel");

    /* INVALID_ARGUMENT from the runtime's configuration, its advice in C's settings: an
     * init asking for another configuration than the live one's (L5), and an empty backend
     * list. */
    offload_config_t other_config;
    offload_runtime_t refused = 0;
    OK(offload_config_default(&other_config));
    other_config.host_devices = 7;
    WORDS(offload_init(&other_config, &refused), OFFLOAD_ERROR_INVALID_ARGUMENT, "offload_init");
    SAYS("every `offload_runtime_t` of it, each by its `offload_shutdown`");
    SAYS("(`offload_runtime_config` shows it)");
    CHECK(strstr(offload_last_error(), "Offload<Ready>") == NULL);
    OK(offload_config_default(&other_config));
    other_config.set_backends = true;
    other_config.backends = 0;
    WORDS(offload_init(&other_config, &refused), OFFLOAD_ERROR_INVALID_ARGUMENT, "offload_init");
    SAYS("`offload_config_t`'s `backends = 1u << OFFLOAD_BACKEND_HOST`");
    CHECK(strstr(offload_last_error(), "platform(..)") == NULL);

    /* SHUT_DOWN: every handle of a finished runtime; the advice is C's. */
    bool last = false;
    REQUIRE(offload_shutdown(rt, &last));
    WORDS(offload_buffer_alloc(dev, 16, OFFLOAD_MEM_DEVICE, &spare), OFFLOAD_ERROR_SHUT_DOWN,
          "offload_buffer_alloc");
    SAYS("a new offload_init()");
    WORDS(offload_buffer_read(buf, 0, bytes, 4), OFFLOAD_ERROR_SHUT_DOWN, "offload_buffer_read");
    WORDS(offload_module_kernel(module, "noop", &kernel), OFFLOAD_ERROR_SHUT_DOWN,
          "offload_module_kernel");
    (void)offload_buffer_free(buf);
    (void)offload_module_release(module);
    (void)offload_program_destroy(program);
    (void)offload_device_release(dev);

    /* UNSUPPORTED: a device of a backend compiled in but not in force names C's setting. */
    offload_config_t host_only;
    OK(offload_config_default(&host_only));
    host_only.set_backends = true;
    host_only.backends = 1u << OFFLOAD_BACKEND_HOST;
    offload_runtime_t host_rt = 0;
    offload_device_t not_there = 0;
    REQUIRE(offload_init(&host_only, &host_rt));
    WORDS(offload_device_of(host_rt, OFFLOAD_BACKEND_VULKAN, &not_there),
          OFFLOAD_ERROR_UNSUPPORTED, "offload_device_of");
    SAYS("(set by OFFLOAD_BACKENDS or `offload_config_t`'s `backends` at the first init)");
    /* A backend not compiled into the library (CUDA in the default build; a build with
     * every feature has it, and then answers otherwise): no cargo feature to enable. */
    offload_status_t cuda = offload_device_of(host_rt, OFFLOAD_BACKEND_CUDA, &not_there);
    if (cuda == OFFLOAD_ERROR_UNSUPPORTED && strstr(offload_last_error(), "not compiled")) {
        NAMES("offload_device_of");
        SAYS("cuda is not compiled into this build (liboffload_capi was built without it)");
        CHECK(strstr(offload_last_error(), "cargo feature") == NULL);
        printf("c_words: a backend not compiled in checked\n");
    }
    REQUIRE(offload_shutdown(host_rt, &last));

    /* DRIVER_NOT_FOUND, where this machine has no Vulkan loader: the advice names C's
     * setting, not the Rust builder. (With a Vulkan driver the init succeeds.) */
    offload_config_t vulkan;
    OK(offload_config_default(&vulkan));
    vulkan.set_backends = true;
    vulkan.backends = 1u << OFFLOAD_BACKEND_VULKAN;
    offload_runtime_t other = 0;
    offload_status_t s = offload_init(&vulkan, &other);
    printf("c_words: a Vulkan-only init answered %s\n", offload_status_name((int)s));
    if (s == OFFLOAD_OK) {
        OK(offload_shutdown(other, &last));
    } else if (s == OFFLOAD_ERROR_DRIVER_NOT_FOUND) {
        CHECK(strstr(offload_last_error(), "::") == NULL);
        SAYS("offload_config_t");
        printf("c_words: DRIVER_NOT_FOUND checked\n");
    } else {
        NAMES("offload_init");
    }

    if (check_failures) {
        fprintf(stderr, "c_words: %d checks failed\n", check_failures);
        return 1;
    }
    printf("c_words: every message names its C call in C's words\n");
    return 0;
}
