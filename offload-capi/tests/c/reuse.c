/*
 * L9 in C: a released buffer handle is refused for good, however often its slot is reused.
 * One buffer is allocated, written and freed (its handle is kept); then a new buffer is
 * allocated and freed CYCLES times, taking the same slot again and again. Every time the
 * old handle must be refused (OFFLOAD_ERROR_INVALID_HANDLE, never OFFLOAD_OK with the new
 * buffer's bytes) and must differ from the new handle. Under the earlier 16-bit slot
 * generations the 65,535th reuse gave the old handle's exact value back.
 *
 * usage: reuse [CYCLES]   (default 2,000,000)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(int argc, char **argv) {
    long cycles = argc > 1 ? atol(argv[1]) : 2000000L;
    offload_runtime_t rt = 0;
    offload_device_t dev = 0;
    offload_buffer_t old = 0;
    REQUIRE(offload_init(NULL, &rt));
    REQUIRE(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));
    REQUIRE(offload_buffer_alloc(dev, 16, OFFLOAD_MEM_DEVICE, &old));
    uint8_t bytes[16];
    memset(bytes, 0x11, sizeof bytes);
    REQUIRE(offload_buffer_write(old, 0, bytes, sizeof bytes));
    REQUIRE(offload_buffer_free(old));
    long same_slot = 0;
    for (long i = 0; i < cycles; i++) {
        offload_buffer_t b = 0;
        REQUIRE(offload_buffer_alloc(dev, 16, OFFLOAD_MEM_DEVICE, &b));
        if (b == old) {
            fprintf(stderr, "cycle %ld: a new buffer got the released handle %#" PRIx64 "\n",
                    i, (uint64_t)old);
            return 1;
        }
        /* The slot index: bits 49-32 (docs/c-api.md). */
        if (((b >> 32) & 0x3ffff) == ((old >> 32) & 0x3ffff)) same_slot++;
        memset(bytes, 0x22, sizeof bytes);
        REQUIRE(offload_buffer_write(b, 0, bytes, sizeof bytes));
        uint8_t back[16] = {0};
        offload_status_t s = offload_buffer_read(old, 0, back, sizeof back);
        if (s != OFFLOAD_ERROR_INVALID_HANDLE) {
            fprintf(stderr, "cycle %ld: the released handle answered %s (%s), bytes %02x\n", i,
                    offload_status_name((int)s), s == OFFLOAD_OK ? "" : offload_last_error(),
                    back[0]);
            return 1;
        }
        REQUIRE(offload_buffer_free(b));
    }
    REQUIRE(offload_device_release(dev));
    REQUIRE(offload_shutdown(rt, NULL));
    printf("reuse: %ld cycles, %ld on the released handle's slot, the old handle refused every "
           "time\n",
           cycles, same_slot);
    return 0;
}
