/* A protocol-checking stand-in for the Level Zero loader (libze_loader.so.1), over host
 * memory, for offload-ze's tests. It answers discovery (offload-ze/tests/fake_driver.rs) and
 * the context, memory, immediate command list, event, module, kernel and IPC subset
 * offload-ze uses (offload-ze/tests/fake_backend.rs), and records every violation of the
 * specification's rules it sees (fake_common.h keeps the log):
 *   - a call before zeInit; a handle used after it was destroyed (or never made), an object
 *     of one context used with another;
 *   - zeMemFree of a pointer that is not the base of a live allocation of that context
 *     (never allocated, already freed: a double free), memory freed while queued work that
 *     uses it has not run; copies, fills and launches over memory that is not live (a use
 *     after free), out of bounds, or of another context;
 *   - an event pool destroyed with events alive, an event index used twice, an event
 *     destroyed or reset while queued work still waits on or signals it, an event signalled
 *     again without a reset, kernel timestamps asked of a pool made without them;
 *   - a command list destroyed with queued work on it;
 *   - a module destroyed with kernels alive, a kernel destroyed after its module (already
 *     destroyed with it), zeKernelSetArgumentValue with an index or size other than the
 *     kernel's parameters (known for the fixture's kernels), a launch with an argument never
 *     set, a launch over memory that is not live;
 *   - zeModuleCreate given an image that is not SPIR-V (for ZE_MODULE_FORMAT_IL_SPIRV) or
 *     not an Intel GPU ELF (for ZE_MODULE_FORMAT_NATIVE): offload validates images first,
 *     so such an image reaching the loader is a violation (and a build failure with a log);
 *   - build logs never destroyed; IPC handles got and never put (zeMemPutIpcHandle), opened
 *     and never closed (zeMemCloseIpcHandle), a close of a pointer that is no open mapping;
 *   - objects still alive at zeContextDestroy (of that context) and at process exit (leaks).
 *
 * Queued work: an operation appended to an immediate command list runs as soon as every
 * event it waits for is signalled — at once, in the append, or later, when a host signal or
 * another operation signals the last of them. With FAKE_ZE_DEFER=1 queued work runs only
 * when something waits for it (zeEventHostSynchronize), newest ready operation first: a
 * host access that did not wait for the work before it sees stale memory, a free is
 * reported, and commands that no event orders run in reverse. Operations are NOT run in the order they were
 * appended (Level Zero promises no order without events or barriers): work whose waits are
 * met runs before earlier work that still waits, so a missing dependency shows. A list made
 * ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS returns from an append only once the work has run.
 *
 * Memory lives in memfds (every kind), so that device memory can be shared with another
 * process: the IPC handle's first four bytes are a file descriptor (a dup of the memfd, as
 * Intel's driver puts a dma-buf fd there), which offload sends with SCM_RIGHTS; the importer
 * writes the fd it received into the handle before zeMemOpenIpcHandle, which maps it.
 *
 * One driver with two devices by default. Device 0 has 4 GiB (1 + 3), device 1 2 GiB; an
 * allocation larger than its device's memory is ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY (host
 * memory: ..._OUT_OF_HOST_MEMORY). Environment variables change what it answers:
 *   FAKE_ZE_INIT=<code>          zeInit returns <code>
 *   FAKE_ZE_DRIVERS=<n>          zeDriverGet reports <n> drivers
 *   FAKE_ZE_DEVICES=<n>          zeDeviceGet reports <n> devices per driver
 *   FAKE_ZE_PROPS_RESULT=<code>  zeDeviceGetProperties returns <code>
 *   FAKE_ZE_BUILD_FAIL=1         zeModuleCreate fails the build, with a log
 *   FAKE_ZE_DEFER=1              queued work runs only when something waits for it
 *   FAKE_FAIL=entry:nth:code,... the nth call of entry returns code (fake_common.h)
 * Built with -DNO_MEMORY_PROPERTIES it lacks zeDeviceGetMemoryProperties (a required
 * symbol); with -DNO_API_VERSION it lacks zeDriverGetApiVersion (an optional one).
 *
 * Test hooks (offload_driver::testing::FakeHooks, prefix "fake_ze"):
 *   int fake_ze_violations(char *buf, size_t cap)
 *   void fake_ze_clear_violations(void)
 *   void fake_ze_fail(const char *entry, int nth, int code)
 *   unsigned long fake_ze_calls(const char *entry)
 *   int fake_ze_entries(char *buf, size_t cap)   (these five: fake_common.h's FAKE_TEST_HOOKS)
 *   int fake_ze_live(const char *kind)    "context", "device-mem", "host-mem", "shared-mem",
 *                                         "list", "pool", "event", "module", "kernel",
 *                                         "log", "ipc" (open mappings), "ipc-handle" (got,
 *                                         not yet put)
 * At process exit it records the objects still alive, then prints
 * `FAKE-ZE-VIOLATIONS: <n>` and the messages to stderr if there are any. */
#define FAKE_NAME "ZE"
#include "fake_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef uint32_t ze_result_t;

#define ZE_SUCCESS 0u
#define ZE_NOT_READY 1u
#define ZE_OUT_OF_HOST_MEMORY 0x70000002u
#define ZE_OUT_OF_DEVICE_MEMORY 0x70000003u
#define ZE_MODULE_BUILD_FAILURE 0x70000004u
#define ZE_UNINITIALIZED 0x78000001u
#define ZE_INVALID_ARGUMENT 0x78000004u
#define ZE_INVALID_NULL_HANDLE 0x78000005u
#define ZE_HANDLE_OBJECT_IN_USE 0x78000006u
#define ZE_INVALID_NULL_POINTER 0x78000007u
#define ZE_INVALID_SIZE 0x78000008u
#define ZE_INVALID_NATIVE_BINARY 0x7800000fu
#define ZE_INVALID_GLOBAL_NAME 0x78000010u
#define ZE_INVALID_KERNEL_NAME 0x78000011u
#define ZE_INVALID_GROUP_SIZE 0x78000013u
#define ZE_INVALID_ARG_INDEX 0x78000015u
#define ZE_INVALID_ARG_SIZE 0x78000016u

/* ---- the specification's structures (ze_api.h 1.x) ------------------------------------- */

typedef struct {
    uint32_t stype;
    void *pNext;
    uint32_t type, vendorId, deviceId, flags, subdeviceId, coreClockRate;
    uint64_t maxMemAllocSize;
    uint32_t maxHardwareContexts, maxCommandQueuePriority, numThreadsPerEU,
        physicalEUSimdWidth, numEUsPerSubslice, numSubslicesPerSlice, numSlices;
    uint64_t timerResolution;
    uint32_t timestampValidBits, kernelTimestampValidBits;
    uint8_t uuid[16];
    char name[256];
} ze_device_properties_t;

typedef struct {
    uint32_t stype;
    void *pNext;
    uint32_t flags, maxClockRate, maxBusWidth;
    uint64_t totalSize;
    char name[256];
} ze_device_memory_properties_t;

typedef struct {
    uint32_t stype;
    void *pNext;
    uint32_t maxTotalGroupSize, maxGroupSizeX, maxGroupSizeY, maxGroupSizeZ, maxGroupCountX,
        maxGroupCountY, maxGroupCountZ, maxSharedLocalMemory, numSubGroupSizes,
        subGroupSizes[8];
} ze_device_compute_properties_t;

typedef struct { uint32_t stype; const void *pNext; uint32_t flags; } ze_context_desc_t;
typedef struct {
    uint32_t stype;
    const void *pNext;
    uint32_t flags, ordinal;
} ze_device_mem_alloc_desc_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; } ze_host_mem_alloc_desc_t;
typedef struct {
    uint32_t stype;
    void *pNext;
    uint32_t type;
    uint64_t id, pageSize;
} ze_memory_allocation_properties_t;
typedef struct {
    uint32_t stype;
    const void *pNext;
    uint32_t ordinal, index, flags, mode, priority;
} ze_command_queue_desc_t;
typedef struct {
    uint32_t stype;
    const void *pNext;
    uint32_t flags, count;
} ze_event_pool_desc_t;
typedef struct {
    uint32_t stype;
    const void *pNext;
    uint32_t index, signal, wait;
} ze_event_desc_t;
typedef struct { uint64_t kernelStart, kernelEnd; } ze_kernel_timestamp_data_t;
typedef struct { ze_kernel_timestamp_data_t global, context; } ze_kernel_timestamp_result_t;
typedef struct {
    uint32_t stype;
    const void *pNext;
    uint32_t format;
    size_t inputSize;
    const uint8_t *pInputModule;
    const char *pBuildFlags;
    const void *pConstants;
} ze_module_desc_t;
typedef struct {
    uint32_t stype;
    const void *pNext;
    uint32_t flags;
    const char *pKernelName;
} ze_kernel_desc_t;
typedef struct { uint32_t x, y, z; } ze_group_count_t;
typedef struct { char data[64]; } ze_ipc_mem_handle_t;

_Static_assert(sizeof(ze_device_properties_t) == 368, "ze_device_properties_t");
_Static_assert(offsetof(ze_device_properties_t, name) == 112, "ze_device_properties_t");
_Static_assert(sizeof(ze_device_memory_properties_t) == 296, "ze_device_memory_properties_t");
_Static_assert(sizeof(ze_device_compute_properties_t) == 88, "ze_device_compute_properties_t");
_Static_assert(sizeof(ze_memory_allocation_properties_t) == 40, "allocation properties");
_Static_assert(sizeof(ze_command_queue_desc_t) == 40, "ze_command_queue_desc_t");
_Static_assert(sizeof(ze_module_desc_t) == 56, "ze_module_desc_t");

/* ---- entry and exit -------------------------------------------------------------------- */

static int initialised;
static int defer_mode;

#define BEGIN() FAKE_BEGIN()
#define END(code) FAKE_END(code)
#define NEED_INIT() FAKE_NEED_INIT(initialised, "zeInit", ZE_UNINITIALIZED)

/* ---- discovery ------------------------------------------------------------------------- */

#define MAX 8

typedef struct {
    int driver, index;
} device_t;
static int drivers[MAX];
static device_t devices[MAX][MAX];

static int driver_count(void) {
    int n = fake_env_int("FAKE_ZE_DRIVERS", 1);
    return n < 0 ? 0 : n > MAX ? MAX : n;
}
static int device_count(void) {
    int n = fake_env_int("FAKE_ZE_DEVICES", 2);
    return n < 0 ? 0 : n > MAX ? MAX : n;
}

/* The device record of a handle, or NULL (with a violation) for anything else. */
static device_t *need_device(const char *entry, void *handle) {
    for (int d = 0; d < driver_count(); d++)
        for (int i = 0; i < device_count(); i++)
            if (handle == &devices[d][i]) return &devices[d][i];
    fake_violation("%s: %p is not a device handle", entry, handle);
    return NULL;
}

static int need_driver(const char *entry, void *handle) {
    for (int d = 0; d < driver_count(); d++)
        if (handle == &drivers[d]) return d;
    fake_violation("%s: %p is not a driver handle", entry, handle);
    return -1;
}

static uint64_t device_memory(const device_t *dev) {
    return (uint64_t)(dev->index == 0 ? 4 : 2) << 30;
}

/* Count-then-fill, as the specification describes it. */
static ze_result_t fill_handles(uint32_t *count, void **out, int available, void *base,
                                size_t stride) {
    if (!count) return ZE_INVALID_NULL_POINTER;
    if (!out || *count == 0) {
        *count = (uint32_t)available;
        return ZE_SUCCESS;
    }
    if (*count > (uint32_t)available) *count = (uint32_t)available;
    for (uint32_t i = 0; i < *count; i++) out[i] = (char *)base + i * stride;
    return ZE_SUCCESS;
}

ze_result_t zeInit(uint32_t flags) {
    BEGIN();
    if (flags) END(ZE_INVALID_ARGUMENT);
    ze_result_t code = (ze_result_t)fake_env_int("FAKE_ZE_INIT", 0);
    if (!code) initialised = 1;
    END(code);
}

ze_result_t zeDriverGet(uint32_t *count, void **out) {
    BEGIN();
    NEED_INIT();
    END(fill_handles(count, out, driver_count(), drivers, sizeof drivers[0]));
}

ze_result_t zeDeviceGet(void *driver, uint32_t *count, void **out) {
    BEGIN();
    NEED_INIT();
    int d = need_driver(__func__, driver);
    if (d < 0) END(ZE_INVALID_NULL_HANDLE);
    for (int i = 0; i < MAX; i++) devices[d][i] = (device_t){d, i};
    END(fill_handles(count, out, device_count(), devices[d], sizeof devices[d][0]));
}

ze_result_t zeDeviceGetProperties(void *handle, ze_device_properties_t *p) {
    BEGIN();
    NEED_INIT();
    const device_t *dev = need_device(__func__, handle);
    if (!dev) END(ZE_INVALID_NULL_HANDLE);
    ze_result_t result = (ze_result_t)fake_env_int("FAKE_ZE_PROPS_RESULT", 0);
    if (result) END(result);
    if (!p || p->stype != 0x3 || p->pNext) END(ZE_INVALID_ARGUMENT);
    p->type = 1; /* GPU */
    p->vendorId = dev->index == 0 ? 0x8086 : 0x1234;
    p->deviceId = 0x56a0;
    p->coreClockRate = 2100;
    p->maxMemAllocSize = device_memory(dev);
    p->numSlices = dev->index == 0 ? 2 : 1;
    p->numSubslicesPerSlice = dev->index == 0 ? 4 : 2;
    p->numEUsPerSubslice = 8;
    p->timerResolution = 1; /* ns per tick (ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES) */
    p->kernelTimestampValidBits = 64;
    memset(p->uuid, 0, sizeof p->uuid);
    snprintf((char *)p->uuid, sizeof p->uuid, "fake-ze-%d.%d", dev->driver, dev->index);
    snprintf(p->name, sizeof p->name, "Fake Arc %d.%d", dev->driver, dev->index);
    END(ZE_SUCCESS);
}

ze_result_t zeDeviceGetComputeProperties(void *handle, ze_device_compute_properties_t *p) {
    BEGIN();
    NEED_INIT();
    if (!need_device(__func__, handle)) END(ZE_INVALID_NULL_HANDLE);
    if (!p || p->stype != 0x4 || p->pNext) END(ZE_INVALID_ARGUMENT);
    p->maxTotalGroupSize = 1024;
    p->maxGroupSizeX = p->maxGroupSizeY = p->maxGroupSizeZ = 1024;
    p->maxGroupCountX = p->maxGroupCountY = p->maxGroupCountZ = 0xffffffffu;
    p->maxSharedLocalMemory = 64 << 10;
    p->numSubGroupSizes = 1;
    p->subGroupSizes[0] = 16;
    END(ZE_SUCCESS);
}

#ifndef NO_MEMORY_PROPERTIES
ze_result_t zeDeviceGetMemoryProperties(void *handle, uint32_t *count,
                                        ze_device_memory_properties_t *out) {
    BEGIN();
    NEED_INIT();
    const device_t *dev = need_device(__func__, handle);
    if (!dev) END(ZE_INVALID_NULL_HANDLE);
    int available = dev->index == 0 ? 2 : 1;
    if (!count) END(ZE_INVALID_NULL_POINTER);
    if (!out || *count == 0) {
        *count = (uint32_t)available;
        END(ZE_SUCCESS);
    }
    if (*count > (uint32_t)available) *count = (uint32_t)available;
    for (uint32_t i = 0; i < *count; i++) {
        if (out[i].stype != 0x7 || out[i].pNext) END(ZE_INVALID_ARGUMENT);
        /* device 0: 1 GiB + 3 GiB; device 1: 2 GiB */
        out[i].totalSize = (uint64_t)(dev->index == 0 ? 1 + 2 * i : 2) << 30;
        snprintf(out[i].name, sizeof out[i].name, "HBM%u", i);
    }
    END(ZE_SUCCESS);
}
#endif

#ifndef NO_API_VERSION
ze_result_t zeDriverGetApiVersion(void *driver, uint32_t *version) {
    BEGIN();
    NEED_INIT();
    if (need_driver(__func__, driver) < 0) END(ZE_INVALID_NULL_HANDLE);
    *version = (1u << 16) | 3u; /* 1.3 */
    END(ZE_SUCCESS);
}
#endif

/* ---- the registry's records ------------------------------------------------------------ */

struct fake_context {
    int driver;
};

/* Memory: every kind in a memfd; an "ipc" object maps another allocation's fd. */
struct fake_mem {
    int fd; /* -1 for an IPC mapping (the caller owns the fd it opened from) */
    void *mem;
    size_t size;
    device_t *device; /* NULL for host memory */
};

struct fake_pool {
    uint32_t flags, count;
    unsigned char *used; /* per index */
};

struct fake_event {
    void *pool;
    uint32_t index;
    int signalled;
    uint64_t start, end;
};

struct fake_list {
    void *context;
    device_t *device;
    uint32_t mode; /* 1: synchronous */
};

struct fake_global {
    char name[64];
    void *mem;
    size_t size;
};

struct fake_module {
    void *context;
    int format;
    char **names; /* the entry points */
    int nnames;
    struct fake_global globals[8];
    int nglobals;
};

struct fake_kernel {
    void *module;
    char name[128];
    int known;   /* index in fake_fixture, or -1 */
    int nparams; /* -1: unknown */
    uint64_t args[8];
    unsigned set; /* bit i: argument i was set */
    uint32_t group[3];
};

struct fake_log {
    char *text;
};

struct fake_ipc_handle {
    int fd; /* a dup of the memfd, closed by zeMemPutIpcHandle */
    void *context;
};

static const char *const MEM_KINDS[] = {"device-mem", "host-mem", "shared-mem", "ipc", "global",
                                        NULL};

/* Releases freed memory but keeps its addresses reserved (inaccessible), so that no later
 * allocation of the process (a Rust Vec) gets them and a use after free is told apart. */
static void reserve(void *mem, size_t size) {
    mmap(mem, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

/* Fresh zeroed memory that no heap allocation shares pages with. */
static void *fresh(size_t size) {
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mem == MAP_FAILED ? NULL : mem;
}

static void free_data(struct fake_obj *obj) {
    if (!obj->data) return;
    if (!strcmp(obj->kind, "device-mem") || !strcmp(obj->kind, "host-mem") ||
        !strcmp(obj->kind, "shared-mem") || !strcmp(obj->kind, "ipc")) {
        struct fake_mem *m = obj->data;
        reserve(m->mem, m->size);
        if (m->fd >= 0) close(m->fd);
    } else if (!strcmp(obj->kind, "pool")) {
        free(((struct fake_pool *)obj->data)->used);
    } else if (!strcmp(obj->kind, "module")) {
        struct fake_module *m = obj->data;
        for (int i = 0; i < m->nnames; i++) free(m->names[i]);
        free(m->names);
    } else if (!strcmp(obj->kind, "log")) {
        free(((struct fake_log *)obj->data)->text);
    } else if (!strcmp(obj->kind, "ipc-handle")) {
        close(((struct fake_ipc_handle *)obj->data)->fd);
    } else if (!strcmp(obj->kind, "global")) {
        struct fake_global *g = obj->data;
        reserve(g->mem, g->size);
    }
    free(obj->data);
}

/* The live object of `kind` with handle `h`; a violation naming what it was otherwise. */
static struct fake_obj *need(const char *entry, const char *kind, const void *h) {
    struct fake_obj *obj = fake_obj_find(kind, (uintptr_t)h);
    if (obj) return obj;
    const struct fake_dead *dead = fake_obj_find_dead(kind, (uintptr_t)h, 0);
    if (dead)
        fake_violation("use after destroy: %s of %s %p (%s)", entry, kind, h, dead->why);
    else
        fake_violation("%s: %p is no live %s", entry, h, kind);
    return NULL;
}

static struct fake_obj *need_context(const char *entry, void *ctx) {
    return need(entry, "context", ctx);
}

/* Removes every object owned by `owner` (and what they own), recording each as a leak of
 * `when` when `leak`. */
static void reap(void *owner, const char *when, int leak) {
    for (size_t i = fake_live_len; i-- > 0;) {
        if (i >= fake_live_len) continue;
        struct fake_obj *obj = &fake_live[i];
        if (owner && obj->owner != owner) continue;
        if (!owner && !strcmp(obj->kind, "global")) continue; /* with its module */
        uintptr_t handle = obj->handle;
        if (leak)
            fake_violation("leak: %s %#lx (%zu bytes) still alive at %s", obj->kind,
                           (unsigned long)handle, obj->size, when);
        free_data(obj);
        fake_obj_remove(obj, when);
        reap((void *)handle, when, 0); /* what it owned goes with it */
        i = fake_live_len;             /* the registry moved: start over */
    }
}

/* ---- contexts -------------------------------------------------------------------------- */

ze_result_t zeContextCreate(void *driver, const ze_context_desc_t *desc, void **out) {
    BEGIN();
    NEED_INIT();
    int d = need_driver(__func__, driver);
    if (d < 0) END(ZE_INVALID_NULL_HANDLE);
    if (!desc || desc->stype != 0xd || !out) END(ZE_INVALID_ARGUMENT);
    struct fake_context *c = calloc(1, sizeof *c);
    if (!c) END(ZE_OUT_OF_HOST_MEMORY);
    c->driver = d;
    fake_obj_add("context", (uintptr_t)c, 0, &drivers[d], c);
    *out = c;
    END(ZE_SUCCESS);
}

ze_result_t zeContextDestroy(void *ctx) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need_context(__func__, ctx);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    reap(ctx, "zeContextDestroy", 1);
    obj = fake_obj_find("context", (uintptr_t)ctx);
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

/* ---- memory ---------------------------------------------------------------------------- */

static ze_result_t allocate(const char *entry, const char *kind, void *ctx, device_t *dev,
                            size_t size, void **out) {
    if (!out) {
        fake_violation("%s: null result pointer", entry);
        return ZE_INVALID_NULL_POINTER;
    }
    if (size == 0) return ZE_INVALID_SIZE;
    uint64_t limit = dev ? device_memory(dev) : (uint64_t)4 << 30;
    if (size > limit) return dev ? ZE_OUT_OF_DEVICE_MEMORY : ZE_OUT_OF_HOST_MEMORY;
    struct fake_mem *m = calloc(1, sizeof *m);
    int fd = memfd_create("fake-ze", MFD_CLOEXEC);
    void *mem = MAP_FAILED;
    if (m && fd >= 0 && ftruncate(fd, (off_t)size) == 0)
        mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        if (fd >= 0) close(fd);
        free(m);
        return dev ? ZE_OUT_OF_DEVICE_MEMORY : ZE_OUT_OF_HOST_MEMORY;
    }
    m->fd = fd, m->mem = mem, m->size = size, m->device = dev;
    fake_obj_add(kind, (uintptr_t)mem, size, ctx, m);
    *out = mem;
    return ZE_SUCCESS;
}

ze_result_t zeMemAllocDevice(void *ctx, const ze_device_mem_alloc_desc_t *desc, size_t size,
                             size_t alignment, void *device, void **out) {
    BEGIN();
    NEED_INIT();
    (void)alignment;
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    device_t *dev = need_device(__func__, device);
    if (!dev) END(ZE_INVALID_NULL_HANDLE);
    if (!desc || desc->stype != 0x15) END(ZE_INVALID_ARGUMENT);
    END(allocate(__func__, "device-mem", ctx, dev, size, out));
}

ze_result_t zeMemAllocHost(void *ctx, const ze_host_mem_alloc_desc_t *desc, size_t size,
                           size_t alignment, void **out) {
    BEGIN();
    NEED_INIT();
    (void)alignment;
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    if (!desc || desc->stype != 0x16) END(ZE_INVALID_ARGUMENT);
    END(allocate(__func__, "host-mem", ctx, NULL, size, out));
}

ze_result_t zeMemAllocShared(void *ctx, const ze_device_mem_alloc_desc_t *ddesc,
                             const ze_host_mem_alloc_desc_t *hdesc, size_t size,
                             size_t alignment, void *device, void **out) {
    BEGIN();
    NEED_INIT();
    (void)alignment;
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    device_t *dev = device ? need_device(__func__, device) : NULL;
    if (device && !dev) END(ZE_INVALID_NULL_HANDLE);
    if (!ddesc || ddesc->stype != 0x15 || !hdesc || hdesc->stype != 0x16)
        END(ZE_INVALID_ARGUMENT);
    END(allocate(__func__, "shared-mem", ctx, dev, size, out));
}

struct fake_op;
static struct fake_op *pending_using(uintptr_t base, size_t size);

ze_result_t zeMemFree(void *ctx, void *ptr) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    static const char *const OWNED[] = {"device-mem", "host-mem", "shared-mem", NULL};
    struct fake_obj *obj = fake_obj_find_range(OWNED, (uintptr_t)ptr, 0);
    if (!obj || obj->handle != (uintptr_t)ptr) {
        const struct fake_dead *dead = fake_obj_find_dead(NULL, (uintptr_t)ptr, 0);
        if (dead)
            fake_violation("double free: zeMemFree(%p), %s %s", ptr, dead->kind, dead->why);
        else if (obj)
            fake_violation("zeMemFree(%p): not the base of its allocation", ptr);
        else
            fake_violation("zeMemFree(%p): never allocated", ptr);
        END(ZE_INVALID_ARGUMENT);
    }
    if (obj->owner != ctx) {
        fake_violation("wrong context: zeMemFree(%p) with context %p, allocated in %p", ptr,
                       ctx, obj->owner);
        END(ZE_INVALID_ARGUMENT);
    }
    if (pending_using(obj->handle, obj->size))
        fake_violation("zeMemFree(%p) while queued work that uses it has not run", ptr);
    free_data(obj);
    fake_obj_remove(obj, "freed");
    END(ZE_SUCCESS);
}

ze_result_t zeMemGetAllocProperties(void *ctx, const void *ptr,
                                    ze_memory_allocation_properties_t *props, void **device) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    if (!props || props->stype != 0x17) END(ZE_INVALID_ARGUMENT);
    struct fake_obj *obj = fake_obj_find_range(MEM_KINDS, (uintptr_t)ptr, 0);
    props->type = 0; /* ZE_MEMORY_TYPE_UNKNOWN */
    props->id = 0;
    props->pageSize = 0;
    if (device) *device = NULL;
    if (obj && obj->owner == ctx && strcmp(obj->kind, "global")) {
        struct fake_mem *m = obj->data;
        props->type = !strcmp(obj->kind, "host-mem")     ? 1
                      : !strcmp(obj->kind, "shared-mem") ? 3
                                                         : 2;
        props->id = obj->id;
        props->pageSize = 4096;
        if (device) *device = m->device;
    }
    END(ZE_SUCCESS);
}

ze_result_t zeMemGetAddressRange(void *ctx, const void *ptr, void **base, size_t *size) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    struct fake_obj *obj = fake_obj_find_range(MEM_KINDS, (uintptr_t)ptr, 0);
    if (!obj || obj->owner != ctx) END(ZE_INVALID_ARGUMENT);
    if (base) *base = (void *)obj->handle;
    if (size) *size = obj->size;
    END(ZE_SUCCESS);
}

/* ---- IPC ------------------------------------------------------------------------------- */

#define IPC_MAGIC "FAKEZEIP"

ze_result_t zeMemGetIpcHandle(void *ctx, const void *ptr, ze_ipc_mem_handle_t *handle) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    static const char *const DEVICE[] = {"device-mem", NULL};
    struct fake_obj *obj = fake_obj_find_range(DEVICE, (uintptr_t)ptr, 0);
    if (!obj || obj->handle != (uintptr_t)ptr || obj->owner != ctx || !handle) {
        fake_violation("zeMemGetIpcHandle(%p): not the base of a live device allocation of "
                       "context %p", ptr, ctx);
        END(ZE_INVALID_ARGUMENT);
    }
    struct fake_mem *m = obj->data;
    struct fake_ipc_handle *h = calloc(1, sizeof *h);
    int fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
    if (!h || fd < 0) {
        free(h);
        if (fd >= 0) close(fd);
        END(ZE_OUT_OF_HOST_MEMORY);
    }
    h->fd = fd, h->context = ctx;
    uint64_t size = obj->size, id = obj->id;
    memset(handle->data, 0, sizeof handle->data);
    memcpy(handle->data, &fd, sizeof fd);
    memcpy(handle->data + 8, &size, 8);
    memcpy(handle->data + 16, &id, 8);
    memcpy(handle->data + 24, IPC_MAGIC, 8);
    fake_obj_add("ipc-handle", (uintptr_t)fd, 0, ctx, h);
    END(ZE_SUCCESS);
}

ze_result_t zeMemPutIpcHandle(void *ctx, ze_ipc_mem_handle_t handle) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    int fd;
    memcpy(&fd, handle.data, sizeof fd);
    struct fake_obj *obj = fake_obj_find("ipc-handle", (uintptr_t)fd);
    if (!obj || memcmp(handle.data + 24, IPC_MAGIC, 8)) {
        fake_violation("zeMemPutIpcHandle: no handle got by zeMemGetIpcHandle has fd %d", fd);
        END(ZE_INVALID_ARGUMENT);
    }
    free_data(obj);
    fake_obj_remove(obj, "put");
    END(ZE_SUCCESS);
}

ze_result_t zeMemOpenIpcHandle(void *ctx, void *device, ze_ipc_mem_handle_t handle,
                               uint32_t flags, void **out) {
    BEGIN();
    NEED_INIT();
    (void)flags;
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    device_t *dev = need_device(__func__, device);
    if (!dev) END(ZE_INVALID_NULL_HANDLE);
    if (!out) END(ZE_INVALID_NULL_POINTER);
    if (memcmp(handle.data + 24, IPC_MAGIC, 8)) END(ZE_INVALID_ARGUMENT);
    int fd;
    uint64_t size;
    memcpy(&fd, handle.data, sizeof fd);
    memcpy(&size, handle.data + 8, 8);
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != size || size == 0)
        END(ZE_INVALID_ARGUMENT);
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    struct fake_mem *m = calloc(1, sizeof *m);
    if (mem == MAP_FAILED || !m) {
        if (mem != MAP_FAILED) munmap(mem, size);
        free(m);
        END(ZE_OUT_OF_DEVICE_MEMORY);
    }
    m->fd = -1, m->mem = mem, m->size = size, m->device = dev;
    fake_obj_add("ipc", (uintptr_t)mem, size, ctx, m);
    *out = mem;
    END(ZE_SUCCESS);
}

ze_result_t zeMemCloseIpcHandle(void *ctx, const void *ptr) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    struct fake_obj *obj = fake_obj_find("ipc", (uintptr_t)ptr);
    if (!obj) {
        fake_violation("zeMemCloseIpcHandle(%p): no open IPC mapping", ptr);
        END(ZE_INVALID_ARGUMENT);
    }
    if (obj->owner != ctx) {
        fake_violation("wrong context: zeMemCloseIpcHandle(%p) with context %p", ptr, ctx);
        END(ZE_INVALID_ARGUMENT);
    }
    if (pending_using(obj->handle, obj->size))
        fake_violation("zeMemCloseIpcHandle(%p) while queued work that uses it has not run",
                       ptr);
    free_data(obj);
    fake_obj_remove(obj, "closed");
    END(ZE_SUCCESS);
}

/* ---- event pools and events ------------------------------------------------------------ */

ze_result_t zeEventPoolCreate(void *ctx, const ze_event_pool_desc_t *desc, uint32_t ndevices,
                              void **devs, void **out) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    if (!desc || desc->stype != 0x10 || desc->count == 0 || !out) END(ZE_INVALID_ARGUMENT);
    for (uint32_t i = 0; i < ndevices; i++)
        if (!need_device(__func__, devs ? devs[i] : NULL)) END(ZE_INVALID_NULL_HANDLE);
    struct fake_pool *p = calloc(1, sizeof *p);
    unsigned char *used = calloc(desc->count, 1);
    if (!p || !used) {
        free(p);
        free(used);
        END(ZE_OUT_OF_HOST_MEMORY);
    }
    p->flags = desc->flags, p->count = desc->count, p->used = used;
    fake_obj_add("pool", (uintptr_t)p, 0, ctx, p);
    *out = p;
    END(ZE_SUCCESS);
}

ze_result_t zeEventPoolDestroy(void *pool) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "pool", pool);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    if (fake_obj_owned(pool)) {
        fake_violation("zeEventPoolDestroy(%p) with events of it alive", pool);
        END(ZE_HANDLE_OBJECT_IN_USE);
    }
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

ze_result_t zeEventCreate(void *pool, const ze_event_desc_t *desc, void **out) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "pool", pool);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    struct fake_pool *p = obj->data;
    if (!desc || desc->stype != 0x11 || !out) END(ZE_INVALID_ARGUMENT);
    if (desc->index >= p->count) {
        fake_violation("zeEventCreate: index %u of a pool of %u", desc->index, p->count);
        END(ZE_INVALID_ARGUMENT);
    }
    if (p->used[desc->index]) {
        fake_violation("zeEventCreate: index %u of pool %p is in use", desc->index, pool);
        END(ZE_INVALID_ARGUMENT);
    }
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e) END(ZE_OUT_OF_HOST_MEMORY);
    e->pool = pool, e->index = desc->index;
    p->used[desc->index] = 1;
    fake_obj_add("event", (uintptr_t)e, 0, pool, e);
    *out = e;
    END(ZE_SUCCESS);
}

/* ---- queued work ----------------------------------------------------------------------- */

enum { OP_COPY, OP_FILL, OP_BARRIER, OP_LAUNCH };

struct fake_op {
    int type;
    unsigned long long seq;
    void *list;
    void *signal;
    uint32_t nwait;
    void **waits;
    void *dst;
    const void *src;
    size_t len;
    unsigned char pattern[128];
    size_t pattern_len;
    /* launches: a snapshot of the kernel */
    void *kernel, *module;
    int known;
    uint64_t args[8];
    uint32_t group[3], count[3];
    struct fake_op *next;
};

static struct fake_op *pending_head;
static unsigned long long next_seq = 1;

/* The bytes of its buffer argument a launch touches: [*base, *base + return). */
static size_t launch_extent(const struct fake_op *op, uintptr_t *base) {
    *base = (uintptr_t)op->args[0];
    uint64_t threads = (uint64_t)op->count[0] * op->group[0];
    uint64_t n = op->known == FAKE_ADD_ONE ? (uint32_t)op->args[1]
                 : op->known == FAKE_FILL  ? (uint32_t)op->args[2]
                                           : 1;
    return 4 * (size_t)fake_fixture_words(op->known, n, threads);
}

static int overlaps(uintptr_t a, size_t alen, uintptr_t b, size_t blen) {
    return alen && blen && a < b + blen && b < a + alen;
}

/* The first queued operation not yet run that uses [base, base + size). */
static struct fake_op *pending_using(uintptr_t base, size_t size) {
    for (struct fake_op *op = pending_head; op; op = op->next) {
        uintptr_t lo = 0;
        size_t len = 0;
        if (op->type == OP_COPY) {
            if (overlaps((uintptr_t)op->src, op->len, base, size)) return op;
            lo = (uintptr_t)op->dst, len = op->len;
        } else if (op->type == OP_FILL) {
            lo = (uintptr_t)op->dst, len = op->len;
        } else if (op->type == OP_LAUNCH) {
            len = launch_extent(op, &lo);
        }
        if (overlaps(lo, len, base, size)) return op;
    }
    return NULL;
}

/* Whether a queued operation waits on, signals, runs or is queued on `handle`. */
static struct fake_op *pending_with(const void *handle) {
    for (struct fake_op *op = pending_head; op; op = op->next) {
        if (op->list == handle || op->signal == handle || op->kernel == handle ||
            op->module == handle)
            return op;
        for (uint32_t i = 0; i < op->nwait; i++)
            if (op->waits[i] == handle) return op;
    }
    return NULL;
}

/* Checks that [addr, addr + len) is memory a command may use in context `ctx`: inside live
 * memory of that context, or host memory the fake did not allocate (not inside freed
 * memory). Returns 0 with a violation otherwise. */
static int usable(const char *entry, const char *what, void *ctx, const void *addr,
                  size_t len, int device_only) {
    if (!len) return 1;
    struct fake_obj *obj = fake_obj_find_range(MEM_KINDS, (uintptr_t)addr, 0);
    if (obj) {
        if (obj->owner != ctx && strcmp(obj->kind, "global")) {
            fake_violation("wrong context: %s %s %p is memory of context %p, not %p", entry,
                           what, addr, obj->owner, ctx);
            return 0;
        }
        if (len > obj->size - ((uintptr_t)addr - obj->handle)) {
            fake_violation("out of bounds: %s %s %p + %zu is outside the %s of %zu bytes",
                           entry, what, addr, len, obj->kind, obj->size);
            return 0;
        }
        return 1;
    }
    const struct fake_dead *dead = fake_obj_find_dead(NULL, (uintptr_t)addr, 1);
    if (dead && dead->size) {
        fake_violation("use after free: %s %s %p is in %s memory %s", entry, what, addr,
                       dead->kind, dead->why);
        return 0;
    }
    if (device_only) {
        fake_violation("%s %s %p is not device-accessible memory", entry, what, addr);
        return 0;
    }
    return 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void signal_event(const char *by, void *handle, uint64_t start) {
    struct fake_obj *obj = fake_obj_find("event", (uintptr_t)handle);
    if (!obj) {
        fake_violation("%s signals event %p, which is gone", by, handle);
        return;
    }
    struct fake_event *e = obj->data;
    if (e->signalled)
        fake_violation("%s signals event %p again without a zeEventHostReset", by, handle);
    e->signalled = 1;
    e->start = start;
    e->end = now_ns();
}

static int event_signalled(void *handle) {
    struct fake_obj *obj = fake_obj_find("event", (uintptr_t)handle);
    return obj && ((struct fake_event *)obj->data)->signalled;
}

static void run_launch(const struct fake_op *op) {
    uintptr_t base;
    size_t bytes = launch_extent(op, &base);
    if (op->known < 0 || op->known == 2) return;
    struct fake_obj *lo = fake_obj_find("list", (uintptr_t)op->list);
    void *ctx = lo ? ((struct fake_list *)lo->data)->context : NULL;
    if (!usable("queued zeCommandListAppendLaunchKernel", "buffer argument", ctx,
                (void *)base, bytes ? bytes : 1, 1))
        return;
    uint64_t repeats =
        (uint64_t)op->count[1] * op->count[2] * op->group[1] * op->group[2];
    const void *g = NULL;
    struct fake_obj *mo = fake_obj_find("module", (uintptr_t)op->module);
    if (mo) {
        struct fake_module *m = mo->data;
        for (int i = 0; i < m->nglobals; i++)
            if (!strcmp(m->globals[i].name, "g")) g = m->globals[i].mem;
    }
    fake_fixture_run(op->known, (uint32_t *)base, bytes / 4, (uint32_t)repeats,
                     (uint32_t)op->args[1], g);
}

static void run_op(struct fake_op *op) {
    uint64_t start = now_ns();
    struct fake_obj *lo = fake_obj_find("list", (uintptr_t)op->list);
    void *ctx = lo ? ((struct fake_list *)lo->data)->context : NULL;
    switch (op->type) {
    case OP_COPY:
        if (usable("queued zeCommandListAppendMemoryCopy", "source", ctx, op->src, op->len, 0) &&
            usable("queued zeCommandListAppendMemoryCopy", "destination", ctx, op->dst,
                   op->len, 0))
            memmove(op->dst, op->src, op->len);
        break;
    case OP_FILL:
        if (usable("queued zeCommandListAppendMemoryFill", "destination", ctx, op->dst,
                   op->len, 0))
            for (size_t i = 0; i < op->len; i += op->pattern_len)
                memcpy((char *)op->dst + i, op->pattern, op->pattern_len);
        break;
    case OP_LAUNCH:
        run_launch(op);
        break;
    default:
        break;
    }
    if (op->signal) signal_event("queued work", op->signal, start);
}

static void run_ready(void);

/* Runs what is ready unless work is deferred until something waits for it. */
static void progress(void) {
    if (!defer_mode) run_ready();
    fake_wake();
}

/* Runs every queued operation whose events are signalled, until none is left that can.
 * Deferred (FAKE_ZE_DEFER=1), the newest ready operation runs first: Level Zero promises no
 * order between commands that no event orders, and a missing dependency shows. */
static void run_ready(void) {
    for (;;) {
        struct fake_op **chosen = NULL;
        for (struct fake_op **at = &pending_head; *at; at = &(*at)->next) {
            struct fake_op *op = *at;
            int ready = 1;
            for (uint32_t i = 0; i < op->nwait && ready; i++) ready = event_signalled(op->waits[i]);
            if (!ready) continue;
            chosen = at;
            if (!defer_mode) break; /* the oldest ready one */
        }
        if (!chosen) break;
        struct fake_op *op = *chosen;
        *chosen = op->next;
        run_op(op);
        free(op->waits);
        free(op);
    }
    fake_wake();
}

/* Runs the queued operation `seq` if its events are signalled. */
static void run_one(unsigned long long seq) {
    for (struct fake_op **at = &pending_head; *at; at = &(*at)->next) {
        struct fake_op *op = *at;
        if (op->seq != seq) continue;
        for (uint32_t i = 0; i < op->nwait; i++)
            if (!event_signalled(op->waits[i])) return;
        *at = op->next;
        run_op(op);
        free(op->waits);
        free(op);
        fake_wake();
        return;
    }
}

static int seq_pending(unsigned long long seq) {
    for (struct fake_op *op = pending_head; op; op = op->next)
        if (op->seq == seq) return 1;
    return 0;
}

/* Waits (the lock held) up to `ns` for `done(arg)`; 1 if it became true. */
static int wait_until(int (*done)(const void *), const void *arg, uint64_t ns) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    uint64_t cap = ns > 30000000000ull ? 30000000000ull : ns;
    deadline.tv_sec += (time_t)(cap / 1000000000u);
    deadline.tv_nsec += (long)(cap % 1000000000u);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    for (;;) {
        run_ready(); /* the caller waits: deferred work runs now */
        if (done(arg)) return 1;
        if (pthread_cond_timedwait(&fake_cond, &fake_mutex, &deadline) == ETIMEDOUT) {
            run_ready();
            return done(arg);
        }
    }
}

static int op_done(const void *seq) { return !seq_pending(*(const unsigned long long *)seq); }

/* Checks the list, the signal event and the wait events of an append; NULL on a violation. */
static struct fake_list *check_append(const char *entry, void *list, void *signal,
                                      uint32_t nwait, void **waits) {
    struct fake_obj *lo = need(entry, "list", list);
    if (!lo) return NULL;
    if (signal) {
        struct fake_obj *eo = need(entry, "event", signal);
        if (!eo) return NULL;
        if (((struct fake_event *)eo->data)->signalled)
            fake_violation("%s signals event %p, which is signalled and was not reset", entry,
                           signal);
        for (struct fake_op *op = pending_head; op; op = op->next)
            if (op->signal == signal)
                fake_violation("%s signals event %p, which queued work signals already", entry,
                               signal);
    }
    if (nwait && !waits) {
        fake_violation("%s: %u wait events and a null array", entry, nwait);
        return NULL;
    }
    for (uint32_t i = 0; i < nwait; i++)
        if (!need(entry, "event", waits[i])) return NULL;
    return lo->data;
}

/* Queues `op` (made by the caller) on its list, runs what is ready, and for a synchronous
 * list waits until it ran. */
static ze_result_t submit(const char *entry, struct fake_list *l, struct fake_op *op,
                          uint32_t nwait, void **waits) {
    op->seq = next_seq++;
    op->nwait = nwait;
    op->waits = nwait ? malloc(nwait * sizeof *waits) : NULL;
    if (nwait && !op->waits) {
        free(op);
        return ZE_OUT_OF_HOST_MEMORY;
    }
    if (nwait) memcpy(op->waits, waits, nwait * sizeof *waits);
    struct fake_op **tail = &pending_head;
    while (*tail) tail = &(*tail)->next;
    *tail = op;
    unsigned long long seq = op->seq;
    if (l->mode == 1 && defer_mode) run_one(seq); /* a synchronous list runs its own work */
    progress();
    if (l->mode == 1 && seq_pending(seq) && !wait_until(op_done, &seq, UINT64_MAX)) {
        fake_violation("%s on a synchronous list waited 30 s for events nothing signals",
                       entry);
        return ZE_NOT_READY;
    }
    return ZE_SUCCESS;
}

static struct fake_op *new_op(int type, void *list, void *signal) {
    struct fake_op *op = calloc(1, sizeof *op);
    if (op) op->type = type, op->list = list, op->signal = signal, op->known = -1;
    return op;
}

ze_result_t zeEventDestroy(void *event) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "event", event);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    if (pending_with(event))
        fake_violation("zeEventDestroy(%p) while queued work waits on or signals it", event);
    struct fake_event *e = obj->data;
    struct fake_obj *po = fake_obj_find("pool", (uintptr_t)e->pool);
    if (po) ((struct fake_pool *)po->data)->used[e->index] = 0;
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

ze_result_t zeEventHostSignal(void *event) {
    BEGIN();
    NEED_INIT();
    if (!need(__func__, "event", event)) END(ZE_INVALID_NULL_HANDLE);
    signal_event(__func__, event, now_ns());
    progress();
    END(ZE_SUCCESS);
}

static int signalled_or_gone(const void *event) {
    struct fake_obj *obj = fake_obj_find("event", (uintptr_t)event);
    return !obj || ((struct fake_event *)obj->data)->signalled;
}

ze_result_t zeEventHostSynchronize(void *event, uint64_t timeout) {
    BEGIN();
    NEED_INIT();
    if (!need(__func__, "event", event)) END(ZE_INVALID_NULL_HANDLE);
    run_ready(); /* waiting for it: deferred work runs now */
    if (event_signalled(event)) END(ZE_SUCCESS);
    if (timeout == 0) END(ZE_NOT_READY);
    if (!wait_until(signalled_or_gone, event, timeout)) {
        if (timeout == UINT64_MAX)
            fake_violation("zeEventHostSynchronize(%p) waited 30 s for an event nothing "
                           "signals", event);
        END(ZE_NOT_READY);
    }
    if (!fake_obj_find("event", (uintptr_t)event)) {
        fake_violation("zeEventHostSynchronize(%p): destroyed while waited for", event);
        END(ZE_INVALID_NULL_HANDLE);
    }
    END(ZE_SUCCESS);
}

ze_result_t zeEventQueryStatus(void *event) {
    BEGIN();
    NEED_INIT();
    if (!need(__func__, "event", event)) END(ZE_INVALID_NULL_HANDLE);
    progress();
    END(event_signalled(event) ? ZE_SUCCESS : ZE_NOT_READY);
}

ze_result_t zeEventHostReset(void *event) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "event", event);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    if (pending_with(event))
        fake_violation("zeEventHostReset(%p) while queued work waits on or signals it", event);
    ((struct fake_event *)obj->data)->signalled = 0;
    END(ZE_SUCCESS);
}

ze_result_t zeEventQueryKernelTimestamp(void *event, ze_kernel_timestamp_result_t *out) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "event", event);
    if (!obj || !out) END(ZE_INVALID_NULL_HANDLE);
    struct fake_event *e = obj->data;
    struct fake_obj *po = fake_obj_find("pool", (uintptr_t)e->pool);
    if (!po || !(((struct fake_pool *)po->data)->flags & 4)) {
        fake_violation("zeEventQueryKernelTimestamp(%p): its pool has no "
                       "ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP", event);
        END(ZE_INVALID_ARGUMENT);
    }
    progress();
    if (!e->signalled) END(ZE_NOT_READY);
    out->global.kernelStart = out->context.kernelStart = e->start;
    out->global.kernelEnd = out->context.kernelEnd = e->end;
    END(ZE_SUCCESS);
}

/* ---- command lists --------------------------------------------------------------------- */

ze_result_t zeCommandListCreateImmediate(void *ctx, void *device,
                                         const ze_command_queue_desc_t *desc, void **out) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *co = need_context(__func__, ctx);
    if (!co) END(ZE_INVALID_NULL_HANDLE);
    device_t *dev = need_device(__func__, device);
    if (!dev) END(ZE_INVALID_NULL_HANDLE);
    if (dev->driver != ((struct fake_context *)co->data)->driver) {
        fake_violation("wrong context: a device of driver %d with a context of driver %d",
                       dev->driver, ((struct fake_context *)co->data)->driver);
        END(ZE_INVALID_ARGUMENT);
    }
    if (!desc || desc->stype != 0xe || !out || desc->mode > 2) END(ZE_INVALID_ARGUMENT);
    struct fake_list *l = calloc(1, sizeof *l);
    if (!l) END(ZE_OUT_OF_HOST_MEMORY);
    l->context = ctx, l->device = dev, l->mode = desc->mode;
    fake_obj_add("list", (uintptr_t)l, 0, ctx, l);
    *out = l;
    END(ZE_SUCCESS);
}

ze_result_t zeCommandListDestroy(void *list) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "list", list);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    struct fake_op *op = pending_with(list);
    if (op && op->list == list)
        fake_violation("zeCommandListDestroy(%p) with queued work on it that has not run",
                       list);
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

ze_result_t zeCommandListAppendMemoryCopy(void *list, void *dst, const void *src, size_t len,
                                          void *signal, uint32_t nwait, void **waits) {
    BEGIN();
    NEED_INIT();
    struct fake_list *l = check_append(__func__, list, signal, nwait, waits);
    if (!l) END(ZE_INVALID_NULL_HANDLE);
    if (!usable(__func__, "source", l->context, src, len, 0) ||
        !usable(__func__, "destination", l->context, dst, len, 0))
        END(ZE_INVALID_ARGUMENT);
    if (len && overlaps((uintptr_t)src, len, (uintptr_t)dst, len))
        fake_violation("%s: the ranges overlap", __func__);
    struct fake_op *op = new_op(OP_COPY, list, signal);
    if (!op) END(ZE_OUT_OF_HOST_MEMORY);
    op->dst = dst, op->src = src, op->len = len;
    END(submit(__func__, l, op, nwait, waits));
}

ze_result_t zeCommandListAppendMemoryFill(void *list, void *dst, const void *pattern,
                                          size_t pattern_len, size_t len, void *signal,
                                          uint32_t nwait, void **waits) {
    BEGIN();
    NEED_INIT();
    struct fake_list *l = check_append(__func__, list, signal, nwait, waits);
    if (!l) END(ZE_INVALID_NULL_HANDLE);
    if (!pattern || pattern_len == 0 || pattern_len > 128 ||
        (pattern_len & (pattern_len - 1)) || len % pattern_len) {
        fake_violation("%s: pattern of %zu bytes for %zu bytes (a power of two up to 128 "
                       "that divides the size)", __func__, pattern_len, len);
        END(ZE_INVALID_SIZE);
    }
    if (!usable(__func__, "destination", l->context, dst, len, 1)) END(ZE_INVALID_ARGUMENT);
    struct fake_op *op = new_op(OP_FILL, list, signal);
    if (!op) END(ZE_OUT_OF_HOST_MEMORY);
    op->dst = dst, op->len = len, op->pattern_len = pattern_len;
    memcpy(op->pattern, pattern, pattern_len);
    END(submit(__func__, l, op, nwait, waits));
}

ze_result_t zeCommandListAppendBarrier(void *list, void *signal, uint32_t nwait, void **waits) {
    BEGIN();
    NEED_INIT();
    struct fake_list *l = check_append(__func__, list, signal, nwait, waits);
    if (!l) END(ZE_INVALID_NULL_HANDLE);
    struct fake_op *op = new_op(OP_BARRIER, list, signal);
    if (!op) END(ZE_OUT_OF_HOST_MEMORY);
    END(submit(__func__, l, op, nwait, waits));
}

/* ---- modules and kernels --------------------------------------------------------------- */

static uint32_t word_at(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* Reads the OpEntryPoint (15) and OpName (5) strings of a SPIR-V module: the kernels, and
 * the globals the fake knows (`g`). 0 if it is not a SPIR-V module the fake can read. */
static int read_spirv(const uint8_t *code, size_t len, struct fake_module *m) {
    if (len < 20 || len % 4 || word_at(code) != 0x07230203u) return 0;
    for (size_t at = 20; at < len;) {
        uint32_t word = word_at(code + at);
        size_t count = word >> 16;
        uint32_t opcode = word & 0xffff;
        if (count == 0 || at + 4 * count > len) return 0;
        const char *text = NULL;
        size_t room = 0;
        if (opcode == 15 && count > 3) {
            text = (const char *)code + at + 12, room = 4 * (count - 3);
        } else if (opcode == 5 && count > 2) {
            text = (const char *)code + at + 8, room = 4 * (count - 2);
        }
        if (text && memchr(text, 0, room)) {
            if (opcode == 15) {
                char **grown = realloc(m->names, (size_t)(m->nnames + 1) * sizeof *grown);
                if (!grown) return 0;
                m->names = grown;
                m->names[m->nnames] = strdup(text);
                if (!m->names[m->nnames]) return 0;
                m->nnames++;
            } else if (!strcmp(text, "g") && m->nglobals == 0) {
                snprintf(m->globals[0].name, sizeof m->globals[0].name, "g");
                m->globals[0].size = 4;
                m->nglobals = 1;
            }
        }
        at += 4 * count;
    }
    return 1;
}

/* A "native binary" the fake accepts: an ELF for Intel GPUs (EM_INTELGT, 205) whose
 * kernels are the fixture kernel names it contains (NUL-terminated). */
static int read_native(const uint8_t *code, size_t len, struct fake_module *m) {
    if (len < 64 || memcmp(code, "\177ELF", 4) || (code[18] | code[19] << 8) != 205) return 0;
    for (int k = 0; k < FAKE_FIXTURE_KERNELS; k++) {
        size_t n = strlen(fake_fixture[k].name) + 1;
        for (size_t at = 64; at + n <= len; at++) {
            if (memcmp(code + at, fake_fixture[k].name, n)) continue;
            char **grown = realloc(m->names, (size_t)(m->nnames + 1) * sizeof *grown);
            if (!grown) return 0;
            m->names = grown;
            m->names[m->nnames++] = strdup(fake_fixture[k].name);
            break;
        }
    }
    return 1;
}

static void make_log(void **out, const char *text) {
    if (!out) return;
    struct fake_log *log = calloc(1, sizeof *log);
    if (!log) {
        *out = NULL;
        return;
    }
    log->text = strdup(text);
    fake_obj_add("log", (uintptr_t)log, 0, NULL, log);
    *out = log;
}

ze_result_t zeModuleCreate(void *ctx, void *device, const ze_module_desc_t *desc, void **out,
                           void **build_log) {
    BEGIN();
    NEED_INIT();
    if (!need_context(__func__, ctx)) END(ZE_INVALID_NULL_HANDLE);
    if (!need_device(__func__, device)) END(ZE_INVALID_NULL_HANDLE);
    if (!desc || desc->stype != 0x1b || !out || !desc->pInputModule || desc->format > 1)
        END(ZE_INVALID_ARGUMENT);
    struct fake_module *m = calloc(1, sizeof *m);
    if (!m) END(ZE_OUT_OF_HOST_MEMORY);
    m->context = ctx, m->format = (int)desc->format;
    int read = desc->format == 0 ? read_spirv(desc->pInputModule, desc->inputSize, m)
                                 : read_native(desc->pInputModule, desc->inputSize, m);
    const char *failure = NULL;
    if (!read) {
        fake_violation("zeModuleCreate: a %zu-byte image that is not %s reached the loader "
                       "(offload validates images first)", desc->inputSize,
                       desc->format == 0 ? "SPIR-V" : "an Intel GPU ELF");
        failure = "fake-ze: the input is not a module this device can build";
    } else if (fake_env_int("FAKE_ZE_BUILD_FAIL", 0)) {
        failure = "fake-ze: error: FAKE_ZE_BUILD_FAIL is set (line 1: this build fails)";
    }
    if (failure) {
        for (int i = 0; i < m->nnames; i++) free(m->names[i]);
        free(m->names);
        free(m);
        make_log(build_log, failure);
        END(read ? ZE_MODULE_BUILD_FAILURE : ZE_INVALID_NATIVE_BINARY);
    }
    make_log(build_log, "");
    fake_obj_add("module", (uintptr_t)m, 0, ctx, m);
    for (int i = 0; i < m->nglobals; i++) {
        struct fake_global *g = calloc(1, sizeof *g);
        void *mem = fresh(m->globals[i].size);
        if (!g || !mem) {
            free(g);
            if (mem) munmap(mem, m->globals[i].size);
            continue;
        }
        m->globals[i].mem = mem;
        *g = m->globals[i];
        fake_obj_add("global", (uintptr_t)mem, g->size, m, g);
    }
    *out = m;
    END(ZE_SUCCESS);
}

ze_result_t zeModuleBuildLogGetString(void *log, size_t *size, char *text) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "log", log);
    if (!obj || !size) END(ZE_INVALID_NULL_HANDLE);
    struct fake_log *l = obj->data;
    size_t need_len = strlen(l->text) + 1;
    if (!text) {
        *size = need_len;
        END(ZE_SUCCESS);
    }
    if (*size < need_len) END(ZE_INVALID_SIZE);
    memcpy(text, l->text, need_len);
    END(ZE_SUCCESS);
}

ze_result_t zeModuleBuildLogDestroy(void *log) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "log", log);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

ze_result_t zeModuleDestroy(void *module) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "module", module);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    for (size_t i = 0; i < fake_live_len; i++)
        if (fake_live[i].owner == module && !strcmp(fake_live[i].kind, "kernel")) {
            fake_violation("zeModuleDestroy(%p) with kernel %#lx of it alive", module,
                           (unsigned long)fake_live[i].handle);
            break;
        }
    if (pending_with(module))
        fake_violation("zeModuleDestroy(%p) while a queued launch of it has not run", module);
    reap(module, "destroyed with its module", 0);
    obj = fake_obj_find("module", (uintptr_t)module);
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

ze_result_t zeModuleGetGlobalPointer(void *module, const char *name, size_t *size, void **ptr) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "module", module);
    if (!obj || !name) END(ZE_INVALID_NULL_HANDLE);
    struct fake_module *m = obj->data;
    for (int i = 0; i < m->nglobals; i++) {
        if (strcmp(m->globals[i].name, name) || !m->globals[i].mem) continue;
        if (size) *size = m->globals[i].size;
        if (ptr) *ptr = m->globals[i].mem;
        END(ZE_SUCCESS);
    }
    END(ZE_INVALID_GLOBAL_NAME);
}

ze_result_t zeModuleGetKernelNames(void *module, uint32_t *count, const char **names) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "module", module);
    if (!obj || !count) END(ZE_INVALID_NULL_HANDLE);
    struct fake_module *m = obj->data;
    if (!names || *count == 0) {
        *count = (uint32_t)m->nnames;
        END(ZE_SUCCESS);
    }
    if (*count > (uint32_t)m->nnames) *count = (uint32_t)m->nnames;
    for (uint32_t i = 0; i < *count; i++) names[i] = m->names[i];
    END(ZE_SUCCESS);
}

ze_result_t zeKernelCreate(void *module, const ze_kernel_desc_t *desc, void **out) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "module", module);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    if (!desc || desc->stype != 0x1d || !desc->pKernelName || !out) END(ZE_INVALID_ARGUMENT);
    struct fake_module *m = obj->data;
    int found = 0;
    for (int i = 0; i < m->nnames && !found; i++) found = !strcmp(m->names[i], desc->pKernelName);
    if (!found || strlen(desc->pKernelName) >= 128) END(ZE_INVALID_KERNEL_NAME);
    struct fake_kernel *k = calloc(1, sizeof *k);
    if (!k) END(ZE_OUT_OF_HOST_MEMORY);
    k->module = module;
    snprintf(k->name, sizeof k->name, "%s", desc->pKernelName);
    k->known = fake_fixture_index(k->name);
    k->nparams = k->known >= 0 ? fake_fixture[k->known].nparams : -1;
    k->group[0] = k->group[1] = k->group[2] = 1;
    fake_obj_add("kernel", (uintptr_t)k, 0, module, k);
    *out = k;
    END(ZE_SUCCESS);
}

ze_result_t zeKernelDestroy(void *kernel) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "kernel", kernel);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    if (pending_with(kernel))
        fake_violation("zeKernelDestroy(%p) while a queued launch of it has not run", kernel);
    free_data(obj);
    fake_obj_remove(obj, "destroyed");
    END(ZE_SUCCESS);
}

ze_result_t zeKernelSetGroupSize(void *kernel, uint32_t x, uint32_t y, uint32_t z) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "kernel", kernel);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    if (!x || !y || !z || (uint64_t)x * y * z > 1024) {
        fake_violation("zeKernelSetGroupSize(%u, %u, %u): outside the device's limits", x, y, z);
        END(ZE_INVALID_GROUP_SIZE);
    }
    struct fake_kernel *k = obj->data;
    k->group[0] = x, k->group[1] = y, k->group[2] = z;
    END(ZE_SUCCESS);
}

ze_result_t zeKernelSetArgumentValue(void *kernel, uint32_t index, size_t size,
                                     const void *value) {
    BEGIN();
    NEED_INIT();
    struct fake_obj *obj = need(__func__, "kernel", kernel);
    if (!obj) END(ZE_INVALID_NULL_HANDLE);
    struct fake_kernel *k = obj->data;
    if (index >= 8 || (k->nparams >= 0 && (int)index >= k->nparams)) {
        fake_violation("zeKernelSetArgumentValue: kernel `%s` has no argument %u", k->name,
                       index);
        END(ZE_INVALID_ARG_INDEX);
    }
    if (k->known >= 0 && size != fake_fixture[k->known].sizes[index]) {
        fake_violation("zeKernelSetArgumentValue: argument %u of `%s` is %zu bytes, not %zu",
                       index, k->name, fake_fixture[k->known].sizes[index], size);
        END(ZE_INVALID_ARG_SIZE);
    }
    if (!value || size > 8) END(ZE_INVALID_ARG_SIZE);
    k->args[index] = 0;
    memcpy(&k->args[index], value, size);
    k->set |= 1u << index;
    END(ZE_SUCCESS);
}

ze_result_t zeCommandListAppendLaunchKernel(void *list, void *kernel,
                                            const ze_group_count_t *groups, void *signal,
                                            uint32_t nwait, void **waits) {
    BEGIN();
    NEED_INIT();
    struct fake_list *l = check_append(__func__, list, signal, nwait, waits);
    if (!l) END(ZE_INVALID_NULL_HANDLE);
    struct fake_obj *ko = need(__func__, "kernel", kernel);
    if (!ko || !groups) END(ZE_INVALID_NULL_HANDLE);
    struct fake_kernel *k = ko->data;
    struct fake_obj *mo = fake_obj_find("module", (uintptr_t)k->module);
    if (!mo || ((struct fake_module *)mo->data)->context != l->context) {
        fake_violation("wrong context: kernel `%s` launched on a list of another context",
                       k->name);
        END(ZE_INVALID_ARGUMENT);
    }
    for (int i = 0; i < k->nparams; i++)
        if (!(k->set & (1u << i))) {
            fake_violation("zeCommandListAppendLaunchKernel: argument %d of `%s` was never set",
                           i, k->name);
            END(ZE_INVALID_ARGUMENT);
        }
    struct fake_op *op = new_op(OP_LAUNCH, list, signal);
    if (!op) END(ZE_OUT_OF_HOST_MEMORY);
    op->kernel = kernel, op->module = k->module, op->known = k->known;
    memcpy(op->args, k->args, sizeof op->args);
    memcpy(op->group, k->group, sizeof op->group);
    op->count[0] = groups->x, op->count[1] = groups->y, op->count[2] = groups->z;
    uintptr_t base;
    size_t bytes = launch_extent(op, &base);
    if (bytes && !usable(__func__, "buffer argument", l->context, (void *)base, bytes, 1)) {
        free(op);
        END(ZE_INVALID_ARGUMENT);
    }
    END(submit(__func__, l, op, nwait, waits));
}

/* ---- exit and hooks -------------------------------------------------------------------- */

/* Runs before fake_common's destructor prints the log (atexit handlers run first). */
static void at_exit(void) {
    fake_lock();
    if (pending_head) fake_violation("queued work that never ran at process exit");
    for (size_t i = 0; i < fake_live_len; i++) {
        struct fake_obj *obj = &fake_live[i];
        if (!strcmp(obj->kind, "global")) continue; /* it goes with its module */
        fake_violation("leak: %s %#lx (%zu bytes) still alive at process exit", obj->kind,
                       (unsigned long)obj->handle, obj->size);
    }
    fake_unlock();
}

__attribute__((constructor)) static void fake_ze_load(void) {
    defer_mode = fake_env_int("FAKE_ZE_DEFER", 0);
    atexit(at_exit);
}

FAKE_TEST_HOOKS(fake_ze)
FAKE_LIVE_HOOK(fake_ze)
