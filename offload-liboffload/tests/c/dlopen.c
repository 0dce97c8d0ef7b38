/* dlopen/dlclose cycles of a libLLVMOffload.so.22.1 with work inside (issue 47): each cycle
 * loads the library, initialises it, lists the devices, allocates on every compute device
 * and copies through the allocation (left for olShutDown to free), does the same through a
 * queue with a host function and an event (left for olShutDown to destroy), shuts down and
 * closes the library, which must then be unmapped (/proc/self/maps). Written from OffloadAPI.h's
 * documentation.
 *
 *   dlopen PATH CYCLES */
#define _GNU_SOURCE
#include <stdbool.h> /* OffloadAPI.h uses bool without it */
#include <stdint.h>
#include <offload/OffloadAPI.h>
#include "check.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
    ol_result_t (*init)(void);
    ol_result_t (*shut_down)(void);
    ol_result_t (*iterate)(ol_device_iterate_cb_t, void *);
    ol_result_t (*device_info)(ol_device_handle_t, ol_device_info_t, size_t, void *);
    ol_result_t (*alloc)(ol_device_handle_t, ol_alloc_type_t, size_t, void **);
    ol_result_t (*memcpy)(ol_queue_handle_t, void *, ol_device_handle_t, const void *,
                          ol_device_handle_t, size_t);
    ol_result_t (*create_queue)(ol_device_handle_t, ol_queue_handle_t *);
    ol_result_t (*host_function)(ol_queue_handle_t, ol_host_function_cb_t, void *);
    ol_result_t (*create_event)(ol_queue_handle_t, ol_event_handle_t *);
    ol_result_t (*sync_event)(ol_event_handle_t);
} ol;

static void count(void *calls) {
    ++*(int *)calls;
}

#define MAX_DEVICES 16
static ol_device_handle_t devices[MAX_DEVICES];
static int n_devices;

static bool collect(ol_device_handle_t device, void *user) {
    (void)user;
    if (n_devices < MAX_DEVICES)
        devices[n_devices++] = device;
    return true;
}

static int mapped(const char *path) {
    FILE *maps = fopen("/proc/self/maps", "r");
    CHECK(maps != NULL, "no /proc/self/maps");
    char line[PATH_MAX + 128];
    int found = 0;
    while (fgets(line, sizeof line, maps))
        if (strstr(line, path))
            found = 1;
    fclose(maps);
    return found;
}

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    CHECK(f != NULL, "no %s: %s", name, dlerror());
    return f;
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: dlopen PATH CYCLES");
    char path[PATH_MAX];
    CHECK(realpath(argv[1], path) != NULL, "no %s", argv[1]);
    int cycles = atoi(argv[2]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int c = 0; c < cycles; c++) {
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        CHECK(lib != NULL, "dlopen: %s", dlerror());
        *(void **)&ol.init = sym(lib, "olInit");
        *(void **)&ol.shut_down = sym(lib, "olShutDown");
        *(void **)&ol.iterate = sym(lib, "olIterateDevices");
        *(void **)&ol.device_info = sym(lib, "olGetDeviceInfo");
        *(void **)&ol.alloc = sym(lib, "olMemAlloc");
        *(void **)&ol.memcpy = sym(lib, "olMemcpy");
        *(void **)&ol.create_queue = sym(lib, "olCreateQueue");
        *(void **)&ol.host_function = sym(lib, "olLaunchHostFunction");
        *(void **)&ol.create_event = sym(lib, "olCreateEvent");
        *(void **)&ol.sync_event = sym(lib, "olSyncEvent");
        OK(ol.init());
        n_devices = 0;
        OK(ol.iterate(collect, NULL));
        ol_device_handle_t host = NULL;
        for (int i = 0; i < n_devices; i++) {
            ol_device_type_t type;
            OK(ol.device_info(devices[i], OL_DEVICE_INFO_TYPE, sizeof type, &type));
            if (type == OL_DEVICE_TYPE_HOST) {
                host = devices[i];
                continue;
            }
            CHECK(host != NULL, "the HOST device is not listed first");
            void *p = NULL;
            OK(ol.alloc(devices[i], OL_ALLOC_TYPE_DEVICE, 64, &p));
            unsigned char in[64], out[64] = {0};
            for (int j = 0; j < 64; j++)
                in[j] = (unsigned char)(c + j);
            OK(ol.memcpy(NULL, p, devices[i], in, host, 64));
            OK(ol.memcpy(NULL, out, host, p, devices[i], 64));
            CHECK(memcmp(in, out, 64) == 0, "cycle %d, device %d: wrong bytes", c, i);
            ol_queue_handle_t q = NULL;
            ol_event_handle_t e = NULL;
            int calls = 0;
            OK(ol.create_queue(devices[i], &q));
            OK(ol.memcpy(q, p, devices[i], out, host, 64));
            OK(ol.host_function(q, count, &calls));
            OK(ol.create_event(q, &e));
            OK(ol.sync_event(e));
            CHECK(calls == 1, "cycle %d, device %d: the host function ran %d times", c, i, calls);
        }
        OK(ol.shut_down());
        CHECK(dlclose(lib) == 0, "dlclose: %s", dlerror());
        CHECK(!mapped(path), "cycle %d: %s is still mapped after dlclose", c, path);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("ok %d dlopen/dlclose cycles with work inside, unmapped after each: %.2f ms each\n",
           cycles, cycles ? ms / cycles : 0.0);
    return 0;
}
