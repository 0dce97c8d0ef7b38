/*
 * Handles raced from many threads: every thread copies, reads and writes buffers whose
 * handles other threads free and replace meanwhile, and uses handles it knows are stale;
 * then the runtime is shut down while the threads keep going. Every call must answer
 * OFFLOAD_OK or the typed status of a dead handle (INVALID_HANDLE, or SHUT_DOWN once the
 * runtime is gone) — never crash or touch freed memory (run under valgrind too) — and no
 * handle may be left once every thread stopped.
 *
 * usage: races [THREADS] [ROUNDS]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offload.h"

enum { CELLS = 8, SIZE = 64 };

static offload_device_t dev;
static _Atomic uint64_t cells[CELLS];
static atomic_long progress;
static int rounds = 20000;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long errors, ok_calls, dead_calls;
static char first_error[512];

static void fail(const char *what, offload_status_t s) {
    pthread_mutex_lock(&lock);
    if (errors++ == 0)
        snprintf(first_error, sizeof first_error, "%s: %s: %s", what,
                 offload_status_name((int)s), offload_last_error());
    pthread_mutex_unlock(&lock);
}

/* A call's status is fine if it succeeded or said the handle is dead. */
static void judge(const char *what, offload_status_t s, long *ok, long *dead) {
    if (s == OFFLOAD_OK)
        (*ok)++;
    else if (s == OFFLOAD_ERROR_INVALID_HANDLE || s == OFFLOAD_ERROR_SHUT_DOWN)
        (*dead)++;
    else
        fail(what, s);
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(size_t)arg * 2654435761u + 1;
    long ok = 0, dead = 0;
    uint64_t stale = 0;
    uint8_t bytes[SIZE];
    for (int r = 0; r < rounds; r++) {
        atomic_fetch_add(&progress, 1);
        seed = seed * 1103515245u + 12345u;
        int a = (int)(seed >> 8) % CELLS, b = (int)(seed >> 16) % CELLS;
        uint64_t ha = atomic_load(&cells[a]), hb = atomic_load(&cells[b]);
        switch ((seed >> 24) % 6) {
        case 0:
        case 1:
            judge("offload_buffer_copy", offload_buffer_copy(ha, 0, hb, 0, SIZE), &ok, &dead);
            break;
        case 2:
            judge("offload_buffer_write", offload_buffer_write(ha, 0, bytes, SIZE), &ok, &dead);
            break;
        case 3:
            judge("offload_buffer_read", offload_buffer_read(hb, 0, bytes, SIZE), &ok, &dead);
            break;
        case 4: {
            /* Replace the buffer of cell a: free the old one (others may be using it). */
            offload_buffer_t fresh = 0;
            offload_status_t s = offload_buffer_alloc(dev, SIZE, OFFLOAD_MEM_DEVICE, &fresh);
            judge("offload_buffer_alloc", s, &ok, &dead);
            if (s != OFFLOAD_OK) break;
            uint64_t old = atomic_exchange(&cells[a], fresh);
            judge("offload_buffer_free", offload_buffer_free(old), &ok, &dead);
            stale = old;
            break;
        }
        default:
            /* A handle this thread freed itself: always dead. */
            if (stale) {
                offload_status_t s = offload_buffer_read(stale, 0, bytes, 1);
                if (s == OFFLOAD_OK) fail("a freed handle still reads", s);
                judge("offload_buffer_read (stale)", s, &ok, &dead);
            }
            break;
        }
    }
    pthread_mutex_lock(&lock);
    ok_calls += ok;
    dead_calls += dead;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    rounds = argc > 2 ? atoi(argv[2]) : 20000;
    pthread_t t[64];
    if (threads < 1 || threads > 64) return 2;
    offload_runtime_t rt = 0;
    if (offload_init(NULL, &rt) != OFFLOAD_OK ||
        offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev) != OFFLOAD_OK)
        return 3;
    for (int i = 0; i < CELLS; i++) {
        offload_buffer_t b = 0;
        if (offload_buffer_alloc(dev, SIZE, OFFLOAD_MEM_DEVICE, &b) != OFFLOAD_OK) return 3;
        atomic_store(&cells[i], b);
    }
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(size_t)i);
    /* Halfway, shut down while the threads are still racing: their calls turn to
     * SHUT_DOWN. */
    while (atomic_load(&progress) < (long)threads * rounds / 2) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    offload_status_t s = offload_shutdown(rt, NULL);
    if (s != OFFLOAD_OK) fail("offload_shutdown", s);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    if (offload_live_handles() != 0) {
        fprintf(stderr, "%zu handles left after every thread stopped\n", offload_live_handles());
        return 1;
    }
    printf("races: %d threads x %d rounds, %ld calls ok, %ld on dead handles, %ld errors\n",
           threads, rounds, ok_calls, dead_calls, errors);
    if (errors) {
        fprintf(stderr, "first error: %s\n", first_error);
        return 1;
    }
    return 0;
}
