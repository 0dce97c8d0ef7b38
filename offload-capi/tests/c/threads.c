/*
 * 16 threads, each running 1,000 cycles of init, use (allocate, write, read back, check,
 * free) and shutdown at once (L1): every call must succeed and every readback match.
 *
 * usage: threads [THREADS] [CYCLES]
 */
#include <pthread.h>
#include <stdlib.h>

#include <stdio.h>
#include <string.h>

#include "offload.h"

static int cycles = 1000;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long errors;
static char first_error[512];

static void fail(const char *what, offload_status_t s) {
    pthread_mutex_lock(&lock);
    if (errors++ == 0)
        snprintf(first_error, sizeof first_error, "%s: %s: %s", what,
                 offload_status_name((int)s), s == OFFLOAD_OK ? "" : offload_last_error());
    pthread_mutex_unlock(&lock);
}

#define TRY(call)                                                                          \
    do {                                                                                   \
        offload_status_t s_ = (call);                                                      \
        if (s_ != OFFLOAD_OK) {                                                            \
            fail(#call, s_);                                                               \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

static void *worker(void *arg) {
    unsigned seed = (unsigned)(size_t)arg;
    for (int c = 0; c < cycles; c++) {
        offload_runtime_t rt = 0;
        offload_device_t dev = 0;
        offload_buffer_t b = 0;
        uint8_t in[64], back[64];
        for (int i = 0; i < 64; i++) in[i] = (uint8_t)(seed + (unsigned)c + (unsigned)i);
        TRY(offload_init(NULL, &rt));
        TRY(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));
        TRY(offload_buffer_alloc(dev, sizeof in, OFFLOAD_MEM_DEVICE, &b));
        TRY(offload_buffer_write(b, 0, in, sizeof in));
        TRY(offload_buffer_read(b, 0, back, sizeof back));
        if (memcmp(in, back, sizeof in) != 0) fail("readback", OFFLOAD_OK);
        TRY(offload_buffer_free(b));
        b = 0;
        TRY(offload_device_release(dev));
        dev = 0;
    out:
        if (b) offload_buffer_free(b);
        if (dev) offload_device_release(dev);
        if (rt) {
            offload_status_t s = offload_shutdown(rt, NULL);
            if (s != OFFLOAD_OK) fail("offload_shutdown", s);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 16;
    cycles = argc > 2 ? atoi(argv[2]) : 1000;
    pthread_t t[64];
    if (threads < 1 || threads > 64) return 2;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(size_t)i);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    if (offload_live_handles() != 0) {
        fprintf(stderr, "%zu handles left after every shutdown\n", offload_live_handles());
        return 1;
    }
    printf("threads: %d x %d cycles, %ld errors\n", threads, cycles, errors);
    if (errors) {
        fprintf(stderr, "first error: %s\n", first_error);
        return 1;
    }
    return 0;
}
