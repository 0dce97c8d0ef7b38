/* A protocol-checking stand-in for the HIP runtime (libamdhip64.so), over host memory, for
 * offload-hip's tests. It answers device discovery (tests/fake_driver.rs) and the memory,
 * stream, event and module subset offload-hip uses (tests/fake_backend.rs), and records
 * every violation of the runtime's rules it sees (fake_common.h keeps the log):
 *   - a call with a device ordinal that does not exist, a call before hipInit;
 *   - hipFree of memory hipFree does not own (hipHostMalloc memory, a pointer never
 *     allocated, one already freed: a double free) and the same for hipHostFree;
 *   - hipMemcpy whose ranges are not inside live memory of the kind it names (device
 *     memory as the host side of hipMemcpyHostToDevice/DeviceToHost, host memory as a
 *     device side, out of bounds, already freed: a use after free), hipMemset likewise;
 *   - a stream, event, module or function used after it was destroyed (or never made), a
 *     fill at an address not aligned to its word, a HIP call from inside a host function;
 *   - IPC: a handle of this process opened, one opened twice, a close of anything but an
 *     open mapping, mappings still open at exit;
 *   - a code object that is not one reaching hipModuleLoadData, a launch on another
 *     device than the module's, outside the device's limits or over dead memory;
 *   - allocations, streams and events still alive at hipDeviceReset (of that device) and
 *     at process exit (a leak).
 * Queued work runs at once, in the call that queues it, or (FAKE_HIP_DEFER=1) only when
 * something waits for it, which checks offload's ordering (see "streams" below).
 *
 * Two devices by default (handles 10 and 11, so a test sees whether the handle or the
 * ordinal is passed on: hipDeviceGetAttribute and hipSetDevice take the ordinal,
 * hipDeviceGetName and hipDeviceTotalMem the handle). Device memory is limited to the
 * device's hipDeviceTotalMem; a larger request is hipErrorOutOfMemory (2).
 *
 * Environment variables change what it answers:
 *   FAKE_HIP_INIT=<code>          hipInit returns <code>
 *   FAKE_HIP_COUNT=<n>            hipGetDeviceCount reports <n> devices
 *   FAKE_HIP_COUNT_RESULT=<code>  hipGetDeviceCount returns <code>
 *   FAKE_HIP_NAME_RESULT=<code>   hipDeviceGetName returns <code>
 *   FAKE_HIP_ARCH=<name>          every device's gcnArchName (default gfx90a:sramecc+:xnack-)
 *   FAKE_HIP_DEFER=1              queued work runs only when something waits for it
 *   FAKE_FAIL=entry:nth:code,...  the nth call of entry returns code (fake_common.h)
 * Built with -DNO_ERROR_NAMES it lacks hipGetErrorName/hipGetErrorString; with
 * -DNO_TOTAL_MEM it lacks hipDeviceTotalMem (a required symbol); with -DNO_MANAGED it lacks
 * hipMallocManaged (an optional one); with -DNO_PROPERTIES it lacks hipGetDeviceProperties.
 * hipGetDeviceProperties writes only `name` (offset 0) and `gcnArchName` (offset 396) of
 * ROCm 5's hipDeviceProp_t; a code object whose EF_AMDGPU_MACH is not the device's
 * processor reaching hipModuleLoadData is a violation (hipErrorNoBinaryForGpu).
 *
 * Test hooks (offload_driver::testing::FakeHooks, prefix "fake_hip"):
 *   int fake_hip_violations(char *buf, size_t cap)
 *   void fake_hip_clear_violations(void)
 *   void fake_hip_fail(const char *entry, int nth, int code)
 *   unsigned long fake_hip_calls(const char *entry)
 *   int fake_hip_entries(char *buf, size_t cap)   (these five: fake_common.h's FAKE_TEST_HOOKS)
 *   int fake_hip_live(const char *kind)   "alloc" (hipMalloc), "host" (hipHostMalloc),
 *                                         "managed" (hipMallocManaged), "stream", "event",
 *                                         "module", "function", "global", "ipc" (open
 *                                         mappings of another process's memory)
 * At process exit it records the allocations still alive, then prints
 * `FAKE-HIP-VIOLATIONS: <n>` and the messages to stderr if there are any. */
#define FAKE_NAME "HIP"
#include "fake_common.h"

#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HIP_SUCCESS 0
#define HIP_ERROR_INVALID_VALUE 1
#define HIP_ERROR_OUT_OF_MEMORY 2
#define HIP_ERROR_NOT_INITIALIZED 3
#define HIP_ERROR_INVALID_DEVICE 101
#define HIP_ERROR_NOT_READY 600

static int count(void) { return fake_env_int("FAKE_HIP_COUNT", 2); }

static int initialised;
static __thread int current_device;

/* Counts the call and answers an injected failure; returns with the lock held. */
#define BEGIN() FAKE_BEGIN()
#define END(code) FAKE_END(code)
/* A call that needs hipInit first. */
#define NEED_INIT() FAKE_NEED_INIT(initialised, "hipInit", HIP_ERROR_NOT_INITIALIZED)

/* ---- discovery ------------------------------------------------------------------------- */

int hipInit(unsigned int flags) {
    BEGIN();
    if (flags) END(HIP_ERROR_INVALID_VALUE);
    int code = fake_env_int("FAKE_HIP_INIT", 0);
    if (!code) initialised = 1;
    END(code);
}

int hipGetDeviceCount(int *n) {
    BEGIN();
    int result = fake_env_int("FAKE_HIP_COUNT_RESULT", 0);
    if (result) END(result);
    *n = count();
    END(HIP_SUCCESS);
}

int hipDeviceGet(int *device, int ordinal) {
    BEGIN();
    if (ordinal < 0 || ordinal >= count()) END(HIP_ERROR_INVALID_DEVICE);
    *device = 10 + ordinal;
    END(HIP_SUCCESS);
}

int hipDeviceGetName(char *name, int len, int device) {
    BEGIN();
    int result = fake_env_int("FAKE_HIP_NAME_RESULT", 0);
    if (result) END(result);
    if (device < 10 || device >= 10 + count()) END(HIP_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "Fake Instinct %d", device - 10);
    END(HIP_SUCCESS);
}

/* The devices' gcnArchName. */
static const char *arch_name(void) {
    const char *arch = getenv("FAKE_HIP_ARCH");
    return arch ? arch : "gfx90a:sramecc+:xnack-";
}

#ifndef NO_PROPERTIES
/* ROCm 5's hipDeviceProp_t: name[256] at 0, ..., gcnArchName[256] at 396, 792 bytes in all
 * (hip_runtime_api.h of ROCm 5.2); the fake fills in those two names. */
int hipGetDeviceProperties(unsigned char *prop, int ordinal) {
    BEGIN();
    if (!prop) END(HIP_ERROR_INVALID_VALUE);
    if (ordinal < 0 || ordinal >= count()) END(HIP_ERROR_INVALID_DEVICE);
    memset(prop, 0, 792);
    snprintf((char *)prop, 256, "Fake Instinct %d", ordinal);
    snprintf((char *)prop + 396, 256, "%s", arch_name());
    END(HIP_SUCCESS);
}
#endif

/* 4 GiB, 8 GiB, ... */
static size_t total_memory(int ordinal) { return (size_t)(ordinal + 1) << 32; }

#ifndef NO_TOTAL_MEM
int hipDeviceTotalMem(size_t *bytes, int device) {
    BEGIN();
    if (device < 10 || device >= 10 + count()) END(HIP_ERROR_INVALID_DEVICE);
    *bytes = total_memory(device - 10);
    END(HIP_SUCCESS);
}
#endif

int hipDeviceGetAttribute(int *value, int attribute, int ordinal) {
    BEGIN();
    if (ordinal < 0 || ordinal >= count()) END(HIP_ERROR_INVALID_DEVICE);
    switch (attribute) {
    case 5: *value = 1700000; break;               /* ClockRate, kHz */
    case 26: case 27: *value = 1024; break;        /* MaxBlockDimX, Y */
    case 28: *value = 1024; break;                 /* MaxBlockDimZ */
    case 29: *value = 2147483647; break;           /* MaxGridDimX */
    case 30: case 31: *value = 65536; break;       /* MaxGridDimY, Z */
    case 56: *value = 1024; break;                 /* MaxThreadsPerBlock */
    case 63: *value = 60 + ordinal; break;         /* MultiprocessorCount */
    case 74: *value = 65536; break;                /* MaxSharedMemoryPerBlock */
    default: END(HIP_ERROR_INVALID_VALUE);
    }
    END(HIP_SUCCESS);
}

int hipDeviceGetUuid(unsigned char uuid[16], int device) {
    BEGIN();
    if (device < 10 || device >= 10 + count()) END(HIP_ERROR_INVALID_DEVICE);
    memcpy(uuid, "fake-hip-uuid-0", 15); /* then the ordinal's digit: ...-00, ...-01 */
    uuid[15] = (unsigned char)('0' + device - 10);
    END(HIP_SUCCESS);
}

int hipRuntimeGetVersion(int *version) {
    BEGIN();
    *version = 60241133; /* 6.2.41133 */
    END(HIP_SUCCESS);
}

#ifndef NO_ERROR_NAMES
const char *hipGetErrorName(int code) {
    switch (code) {
    case 1: return "hipErrorInvalidValue";
    case 2: return "hipErrorOutOfMemory";
    case 3: return "hipErrorNotInitialized";
    case 100: return "hipErrorNoDevice";
    case 101: return "hipErrorInvalidDevice";
    case 999: return "hipErrorUnknown";
    default: return NULL;
    }
}

/* Like ROCm 6 for 2, 100 and 101; like ROCm 5 (the name again) for 999. */
const char *hipGetErrorString(int code) {
    switch (code) {
    case 2: return "out of memory";
    case 100: return "no ROCm-capable device is detected";
    case 101: return "invalid device ordinal";
    case 999: return "hipErrorUnknown";
    default: return NULL;
    }
}
#endif

/* ---- devices --------------------------------------------------------------------------- */

int hipSetDevice(int ordinal) {
    BEGIN();
    NEED_INIT();
    if (ordinal < 0 || ordinal >= count()) {
        fake_violation("hipSetDevice(%d): no such device", ordinal);
        END(HIP_ERROR_INVALID_DEVICE);
    }
    current_device = ordinal;
    END(HIP_SUCCESS);
}

/* The owner of an allocation: its device, as a non-null pointer. */
static void *device_owner(int ordinal) { return (void *)(uintptr_t)(ordinal + 1); }

/* Device memory (hipMalloc) lives in a memfd, so that another process can map it (IPC);
 * "ipc" objects are such memory mapped from another process. */
struct fake_mem {
    int fd; /* -1 for a mapping of another process's memory */
    void *mem;
    size_t size;
    int pid;                 /* for a mapping: the exporter ... */
    unsigned long long id;   /* ... and its allocation */
};

/* Frees what a registry object holds. */
static void free_data(struct fake_obj *obj) {
    if (!strcmp(obj->kind, "alloc") || !strcmp(obj->kind, "ipc")) {
        struct fake_mem *m = obj->data;
        munmap(m->mem, m->size);
        if (m->fd >= 0) close(m->fd);
        free(m);
    } else {
        free(obj->data);
    }
}

/* Records a leak violation for every allocation of `owner` (NULL: all) and frees them. */
static void reap(void *owner, const char *when) {
    for (size_t i = fake_live_len; i-- > 0;) {
        struct fake_obj *obj = &fake_live[i];
        if (owner && obj->owner != owner) continue;
        fake_violation("leak: %s %#lx (%zu bytes, device %d) still allocated at %s", obj->kind,
                       (unsigned long)obj->handle, obj->size,
                       (int)(uintptr_t)obj->owner - 1, when);
        free_data(obj);
        fake_obj_remove(obj, when);
    }
}

int hipDeviceReset(void) {
    BEGIN();
    NEED_INIT();
    reap(device_owner(current_device), "hipDeviceReset");
    END(HIP_SUCCESS);
}

/* ---- memory ---------------------------------------------------------------------------- */

static const char *const DEVICE_KINDS[] = {"alloc", "host", "managed", "global", "ipc", NULL};
static const char *const DEVICE_ONLY[] = {"alloc", "global", "ipc", NULL};

static void check_not_pending(const char *entry, const void *base, size_t size);
static int pending_on(uintptr_t base, size_t size, void *module, void **on);

/* A new allocation of `kind` on the current device. */
static int allocate(const char *entry, const char *kind, void **ptr, size_t size) {
    if (!ptr) {
        fake_violation("%s: null result pointer", entry);
        return HIP_ERROR_INVALID_VALUE;
    }
    if (size == 0) {
        *ptr = NULL;
        return HIP_SUCCESS;
    }
    if (size > total_memory(current_device)) return HIP_ERROR_OUT_OF_MEMORY;
    if (!strcmp(kind, "alloc")) {
        struct fake_mem *m = calloc(1, sizeof *m);
        int fd = memfd_create("fake-hip", MFD_CLOEXEC);
        void *mem = MAP_FAILED;
        if (m && fd >= 0 && ftruncate(fd, (off_t)size) == 0)
            mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED) {
            if (fd >= 0) close(fd);
            free(m);
            return HIP_ERROR_OUT_OF_MEMORY;
        }
        m->fd = fd, m->mem = mem, m->size = size;
        fake_obj_add(kind, (uintptr_t)mem, size, device_owner(current_device), m);
        *ptr = mem;
        return HIP_SUCCESS;
    }
    void *memory = calloc(1, size);
    if (!memory) return HIP_ERROR_OUT_OF_MEMORY;
    fake_obj_add(kind, (uintptr_t)memory, size, device_owner(current_device), memory);
    *ptr = memory;
    return HIP_SUCCESS;
}

int hipMalloc(void **ptr, size_t size) {
    BEGIN();
    NEED_INIT();
    END(allocate(__func__, "alloc", ptr, size));
}

int hipHostMalloc(void **ptr, size_t size, unsigned int flags) {
    BEGIN();
    NEED_INIT();
    if (flags & ~0x3fu) {
        fake_violation("hipHostMalloc: unknown flags %#x", flags);
        END(HIP_ERROR_INVALID_VALUE);
    }
    END(allocate(__func__, "host", ptr, size));
}

#ifndef NO_MANAGED
int hipMallocManaged(void **ptr, size_t size, unsigned int flags) {
    BEGIN();
    NEED_INIT();
    if (flags != 1 && flags != 2) { /* hipMemAttachGlobal, hipMemAttachHost */
        fake_violation("hipMallocManaged: flags %#x are neither hipMemAttachGlobal nor Host",
                       flags);
        END(HIP_ERROR_INVALID_VALUE);
    }
    END(allocate(__func__, "managed", ptr, size));
}
#endif

/* Frees `ptr` if it is a live allocation of one of `kinds`; a violation otherwise. */
static int release(const char *entry, const char *const *kinds, void *ptr) {
    if (!ptr) return HIP_SUCCESS;
    struct fake_obj *obj = fake_obj_find(NULL, (uintptr_t)ptr);
    if (obj) {
        for (const char *const *k = kinds; *k; k++) {
            if (!strcmp(obj->kind, *k)) {
                check_not_pending(entry, (void *)obj->handle, obj->size);
                obj = fake_obj_find(NULL, (uintptr_t)ptr);
                free_data(obj);
                fake_obj_remove(obj, entry);
                return HIP_SUCCESS;
            }
        }
        fake_violation("%s(%p): that is %s memory, not freed by %s", entry, ptr, obj->kind,
                       entry);
        return HIP_ERROR_INVALID_VALUE;
    }
    const struct fake_dead *dead = fake_obj_find_dead(NULL, (uintptr_t)ptr, 0);
    if (dead) {
        fake_violation("double free: %s(%p) of %s memory already freed by %s", entry, ptr,
                       dead->kind, dead->why);
    } else {
        fake_violation("%s(%p): not an allocation", entry, ptr);
    }
    return HIP_ERROR_INVALID_VALUE;
}

int hipFree(void *ptr) {
    static const char *const kinds[] = {"alloc", "managed", NULL};
    BEGIN();
    NEED_INIT();
    END(release(__func__, kinds, ptr));
}

int hipHostFree(void *ptr) {
    static const char *const kinds[] = {"host", NULL};
    BEGIN();
    NEED_INIT();
    END(release(__func__, kinds, ptr));
}

/* Checks that [addr, addr + len) is inside live memory of `kinds`, for `what`. */
static int check_range(const char *entry, const char *what, const char *const *kinds,
                       const void *addr, size_t len) {
    if (fake_obj_find_range(kinds, (uintptr_t)addr, len)) return 1;
    struct fake_obj *any = fake_obj_find_range(DEVICE_KINDS, (uintptr_t)addr, 0);
    const struct fake_dead *dead = fake_obj_find_dead(NULL, (uintptr_t)addr, 1);
    if (any && fake_obj_find_range(kinds, (uintptr_t)addr, 0)) {
        fake_violation("%s: %s %p + %zu runs past its %zu-byte allocation", entry, what, addr,
                       len, any->size);
    } else if (any) {
        fake_violation("wrong memcpy kind: %s: %s %p is %s memory", entry, what, addr,
                       any->kind);
    } else if (dead) {
        fake_violation("use after free: %s: %s %p (%s memory freed by %s)", entry, what, addr,
                       dead->kind, dead->why);
    } else {
        fake_violation("%s: %s %p + %zu is not device memory", entry, what, addr, len);
    }
    return 0;
}

/* Host memory for a copy: not device memory (hipMalloc), and inside its allocation where
 * it is pinned or managed. */
static int check_host(const char *entry, const char *what, const void *addr, size_t len) {
    static const char *const host_kinds[] = {"host", "managed", NULL};
    if (fake_obj_find_range(DEVICE_ONLY, (uintptr_t)addr, 0)) {
        fake_violation("wrong memcpy kind: %s: %s %p is hipMalloc device memory", entry, what,
                       addr);
        return 0;
    }
    if (fake_obj_find_range(host_kinds, (uintptr_t)addr, 0))
        return check_range(entry, what, host_kinds, addr, len);
    /* Any other host address is the caller's memory (freed pinned memory cannot be told
     * apart from the host heap reusing its pages, so it is not checked). */
    return 1;
}

/* A copy of `kind` (the lock held); `entry` names the call. */
static int copy(const char *entry, void *dst, const void *src, size_t len, int kind) {
    if (len == 0) return HIP_SUCCESS;
    int ok;
    switch (kind) {
    case 0: /* hipMemcpyHostToHost */
        ok = check_host(entry, "destination", dst, len) &&
             check_host(entry, "source", src, len);
        break;
    case 1: /* hipMemcpyHostToDevice */
        ok = check_range(entry, "destination", DEVICE_KINDS, dst, len) &&
             check_host(entry, "source", src, len);
        break;
    case 2: /* hipMemcpyDeviceToHost */
        ok = check_host(entry, "destination", dst, len) &&
             check_range(entry, "source", DEVICE_KINDS, src, len);
        break;
    case 3: /* hipMemcpyDeviceToDevice */
        ok = check_range(entry, "destination", DEVICE_KINDS, dst, len) &&
             check_range(entry, "source", DEVICE_KINDS, src, len);
        break;
    case 4: /* hipMemcpyDefault */
        ok = 1;
        break;
    default:
        fake_violation("%s: unknown kind %d", entry, kind);
        return HIP_ERROR_INVALID_VALUE;
    }
    if (!ok) return HIP_ERROR_INVALID_VALUE;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if ((d < s && s - d < len) || (s <= d && d - s < len)) {
        fake_violation("%s: overlapping ranges %p and %p (%zu bytes)", entry, dst, src, len);
        return HIP_ERROR_INVALID_VALUE;
    }
    memcpy(dst, src, len);
    return HIP_SUCCESS;
}

int hipMemcpy(void *dst, const void *src, size_t len, int kind) {
    BEGIN();
    NEED_INIT();
    check_not_pending(__func__, dst, len);
    check_not_pending(__func__, src, len);
    END(copy(__func__, dst, src, len, kind));
}

int hipMemset(void *dst, int value, size_t len) {
    BEGIN();
    NEED_INIT();
    check_not_pending(__func__, dst, len);
    if (len == 0) END(HIP_SUCCESS);
    if (!check_range(__func__, "destination", DEVICE_KINDS, dst, len))
        END(HIP_ERROR_INVALID_VALUE);
    memset(dst, value, len);
    END(HIP_SUCCESS);
}

/* ---- streams, events, host functions, launches ------------------------------------------ */
/* Queued work (async copies and fills, host functions, launches, event records) is kept per
 * stream. By default it runs at once, in the enqueuing call; with FAKE_HIP_DEFER=1 it runs
 * only when something waits for it (hipStreamSynchronize, hipStreamQuery, an event's
 * synchronize, query or wait, hipStreamDestroy), so offload's ordering shows: a host copy
 * (hipMemcpy, hipMemset: the null stream, which non-blocking streams do not wait for), a
 * free or an unload while queued work still uses the memory or module is a violation, and
 * so is queued work that finds its memory or module gone when it runs. A host function
 * runs on the thread that drains its stream, outside the lock, and must make no HIP
 * call. */

static __thread int in_host_fn;
static int defer_mode;

/* A HIP call from inside a host function: forbidden by the runtime. */
#define NOT_FROM_HOST_FN()                                                                 \
    do {                                                                                   \
        if (in_host_fn) fake_violation("%s called from a host function", __func__);       \
    } while (0)

enum { OP_NONE, OP_COPY, OP_FILL, OP_HOST, OP_KERNEL, OP_EVENT };

struct fake_op {
    int type;
    struct fake_op *next;
    void *dst;            /* copy, fill */
    const void *src;      /* copy */
    size_t len;           /* copy: bytes; fill: words */
    int kind;             /* copy: hipMemcpyKind; fill: word size */
    uint32_t value;       /* fill */
    void (*fn)(void *);   /* host function */
    void *data;           /* host function's argument */
    void *function;       /* launch */
    unsigned grid[3], block[3];
    uint64_t args[3];
    void *event;          /* event record */
};

struct fake_stream {
    struct fake_op *head, *tail;
    int draining;
};

struct fake_event {
    int recorded;
    double ms; /* when it ran, in milliseconds of CLOCK_MONOTONIC */
    struct fake_stream *stream; /* where its record waits to run, or NULL */
    struct fake_op *op;
};

/* The null stream: its work always runs at once. */
static struct fake_stream null_stream;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* `stream` (null: the null stream) if live; NULL after recording a violation. */
static struct fake_stream *need_stream(const char *entry, void *stream) {
    if (!stream) return &null_stream;
    struct fake_obj *obj = fake_obj_find("stream", (uintptr_t)stream);
    if (obj) return obj->data;
    if (fake_obj_find_dead("stream", (uintptr_t)stream, 0)) {
        fake_violation("use after free: %s on destroyed stream %p", entry, stream);
    } else {
        fake_violation("%s: %p is not a stream", entry, stream);
    }
    return NULL;
}

/* The live event `event`, or NULL after recording a violation. */
static struct fake_event *need_event(const char *entry, void *event) {
    struct fake_obj *obj = fake_obj_find("event", (uintptr_t)event);
    if (obj) return obj->data;
    if (fake_obj_find_dead("event", (uintptr_t)event, 0)) {
        fake_violation("use after free: %s of destroyed event %p", entry, event);
    } else {
        fake_violation("%s: %p is not an event", entry, event);
    }
    return NULL;
}

/* ---- modules and kernels ---------------------------------------------------------------- */
/* hipModuleLoadData reads just enough of the code object: an ELF64 for EM_AMDGPU (else
 * hipErrorInvalidImage, and a violation: offload inspects images first, so none should
 * arrive), its dynamic symbols: FUNC ones are kernels, OBJECT ones (not `.kd` descriptors)
 * globals, each given zeroed memory of its size. Kernels run by name when their launch runs:
 *   add_one(u32 *buf, u32 n)          buf[i] += 1 for i < min(n, threads)
 *   fill(u32 *buf, u32 value, u32 n)  buf[i] = value for i < min(n, threads)
 *   noop()
 *   read_global(u32 *buf)             buf[0] = the module's global `g`
 * over threads = gridDimX * blockDimX (the y and z dimensions repeat the work, as kernels
 * that read only .x do); any other kernel runs as a no-op. Buffer arguments must lie in
 * live device-accessible memory for the bytes the kernel touches. */

#define HIP_ERROR_INVALID_IMAGE 200
#define HIP_ERROR_NO_BINARY_FOR_GPU 209
#define HIP_ERROR_NOT_FOUND 500
#define MAX_SYMBOLS 64

struct fake_global {
    char name[64];
    void *mem;
    size_t size;
};

struct fake_module {
    int ordinal;
    int nkernels, nglobals;
    char kernels[MAX_SYMBOLS][64];
    struct fake_global globals[MAX_SYMBOLS];
};

struct fake_function {
    struct fake_module *module;
    char name[64];
};

static int rd16(const unsigned char *p) { return p[0] | p[1] << 8; }
static uint32_t rd32(const unsigned char *p) {
    return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* Reads the kernels and globals of a code object into m; 0 if it is not an AMD GPU code
 * object. (Like the runtime, it is not told the image's length: it trusts the headers.) */
static int read_code_object(const unsigned char *elf, struct fake_module *m) {
    if (memcmp(elf, "\x7f" "ELF", 4) || elf[4] != 2 || elf[5] != 1 || rd16(elf + 18) != 224)
        return 0;
    uint64_t shoff = rd64(elf + 40);
    int shentsize = rd16(elf + 58), shnum = rd16(elf + 60);
    if (shentsize < 64 || shoff > (1u << 24)) return 0;
    for (int i = 0; i < shnum; i++) {
        const unsigned char *sh = elf + shoff + (uint64_t)i * shentsize;
        if (rd32(sh + 4) != 11) continue; /* SHT_DYNSYM */
        uint64_t off = rd64(sh + 24), size = rd64(sh + 32), ent = rd64(sh + 56);
        uint32_t link = rd32(sh + 40);
        if (ent < 24 || link >= (uint32_t)shnum) return 0;
        const unsigned char *strsh = elf + shoff + (uint64_t)link * shentsize;
        const char *strings = (const char *)elf + rd64(strsh + 24);
        for (uint64_t at = 0; at + ent <= size; at += ent) {
            const unsigned char *sym = elf + off + at;
            const char *name = strings + rd32(sym);
            int type = sym[4] & 0xf;
            size_t n = strlen(name);
            if (rd16(sym + 6) == 0 || n == 0 || n >= 64) continue;
            if (type == 2 && m->nkernels < MAX_SYMBOLS) { /* STT_FUNC */
                memcpy(m->kernels[m->nkernels++], name, n + 1);
            } else if (type == 1 && !(n > 3 && !strcmp(name + n - 3, ".kd")) &&
                       m->nglobals < MAX_SYMBOLS) {
                struct fake_global *g = &m->globals[m->nglobals++];
                memcpy(g->name, name, n + 1);
                g->size = rd64(sym + 16) ? rd64(sym + 16) : 1;
            }
        }
    }
    return 1;
}

int hipModuleLoadData(void **module, const void *image) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (!module || !image) END(HIP_ERROR_INVALID_VALUE);
    struct fake_module *m = calloc(1, sizeof *m);
    if (!m) END(HIP_ERROR_OUT_OF_MEMORY);
    if (!read_code_object(image, m)) {
        free(m);
        fake_violation("hipModuleLoadData: not an AMD GPU code object (offload should have "
                       "refused it first)");
        END(HIP_ERROR_INVALID_IMAGE);
    }
    /* EF_AMDGPU_MACH of the processor the device is (the fake knows three). */
    static const struct { unsigned mach; const char *name; } MACHS[] = {
        {0x2f, "gfx906"}, {0x3f, "gfx90a"}, {0x41, "gfx1100"}};
    unsigned mach = rd32((const unsigned char *)image + 48) & 0xff;
    const char *arch = arch_name();
    for (size_t i = 0; i < sizeof MACHS / sizeof MACHS[0]; i++) {
        size_t n = strlen(MACHS[i].name);
        if (!strncmp(arch, MACHS[i].name, n) && (arch[n] == 0 || arch[n] == ':') &&
            MACHS[i].mach != mach) {
            free(m);
            fake_violation("hipModuleLoadData: a code object for EF_AMDGPU_MACH %#x on a %s "
                           "device (offload should have refused it first)",
                           mach, arch);
            END(HIP_ERROR_NO_BINARY_FOR_GPU);
        }
    }
    m->ordinal = current_device;
    fake_obj_add("module", (uintptr_t)m, 0, device_owner(current_device), m);
    for (int i = 0; i < m->nglobals; i++) {
        struct fake_global *g = &m->globals[i];
        g->mem = calloc(1, g->size);
        fake_obj_add("global", (uintptr_t)g->mem, g->size, m, g->mem);
    }
    *module = m;
    END(HIP_SUCCESS);
}

static struct fake_module *need_module(const char *entry, void *module) {
    struct fake_obj *obj = fake_obj_find("module", (uintptr_t)module);
    if (obj) return obj->data;
    if (fake_obj_find_dead("module", (uintptr_t)module, 0)) {
        fake_violation("use after free: %s of unloaded module %p", entry, module);
    } else {
        fake_violation("%s: %p is not a module", entry, module);
    }
    return NULL;
}

int hipModuleUnload(void *module) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_module *m = need_module(__func__, module);
    if (!m) END(HIP_ERROR_INVALID_VALUE);
    void *on = NULL;
    if (defer_mode && pending_on(0, 0, m, &on))
        fake_violation("hipModuleUnload while a launch of it queued on stream %p has not run "
                       "(nothing waited for it)", on);
    for (struct fake_obj *o; (o = fake_obj_owned(m));) {
        free(o->data);
        fake_obj_remove(o, "hipModuleUnload");
    }
    fake_obj_remove(fake_obj_find("module", (uintptr_t)m), "hipModuleUnload");
    free(m);
    END(HIP_SUCCESS);
}

int hipModuleGetFunction(void **function, void *module, const char *name) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_module *m = need_module(__func__, module);
    if (!m || !function || !name) END(HIP_ERROR_INVALID_VALUE);
    for (int i = 0; i < m->nkernels; i++) {
        if (strcmp(m->kernels[i], name)) continue;
        struct fake_function *f = calloc(1, sizeof *f);
        if (!f) END(HIP_ERROR_OUT_OF_MEMORY);
        f->module = m;
        snprintf(f->name, sizeof f->name, "%s", name);
        fake_obj_add("function", (uintptr_t)f, 0, m, f);
        *function = f;
        END(HIP_SUCCESS);
    }
    END(HIP_ERROR_NOT_FOUND);
}

int hipModuleGetGlobal(void **ptr, size_t *bytes, void *module, const char *name) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_module *m = need_module(__func__, module);
    if (!m || !name) END(HIP_ERROR_INVALID_VALUE);
    for (int i = 0; i < m->nglobals; i++) {
        if (strcmp(m->globals[i].name, name)) continue;
        if (ptr) *ptr = m->globals[i].mem;
        if (bytes) *bytes = m->globals[i].size;
        END(HIP_SUCCESS);
    }
    END(HIP_ERROR_NOT_FOUND);
}


/* The bytes of its buffer argument a launch touches: [*base, *base + return). */
static size_t launch_extent(const struct fake_op *op, const struct fake_function *f,
                            uintptr_t *base) {
    int k = fake_fixture_index(f->name);
    *base = (uintptr_t)op->args[0];
    uint64_t threads = (uint64_t)op->grid[0] * op->block[0];
    uint64_t n = k == FAKE_ADD_ONE ? op->args[1] : k == FAKE_FILL ? op->args[2] : 1;
    return 4 * (size_t)fake_fixture_words(k, n, threads);
}

/* Whether queued work that has not run yet uses [base, base + size) (size 0: any of the
 * module `module`'s launches); the stream it is queued on goes to *on. */
static int pending_on(uintptr_t base, size_t size, void *module, void **on) {
    for (size_t i = 0; i < fake_live_len; i++) {
        if (strcmp(fake_live[i].kind, "stream")) continue;
        struct fake_stream *s = fake_live[i].data;
        for (struct fake_op *op = s->head; op; op = op->next) {
            uintptr_t lo[2] = {0, 0};
            size_t len[2] = {0, 0};
            if (op->type == OP_COPY) {
                lo[0] = (uintptr_t)op->dst, len[0] = op->len;
                lo[1] = (uintptr_t)op->src, len[1] = op->len;
            } else if (op->type == OP_FILL) {
                lo[0] = (uintptr_t)op->dst, len[0] = op->len * (size_t)op->kind;
            } else if (op->type == OP_KERNEL) {
                struct fake_obj *fo = fake_obj_find("function", (uintptr_t)op->function);
                if (!fo) continue;
                struct fake_function *f = fo->data;
                if (module && f->module == module) {
                    *on = (void *)fake_live[i].handle;
                    return 1;
                }
                len[0] = launch_extent(op, f, &lo[0]);
            }
            for (int j = 0; j < 2 && !module; j++) {
                if (len[j] && lo[j] < base + size && base < lo[j] + len[j]) {
                    *on = (void *)fake_live[i].handle;
                    return 1;
                }
            }
        }
    }
    return 0;
}

/* A violation when queued work that has not run yet uses [base, base + size). */
static void check_not_pending(const char *entry, const void *base, size_t size) {
    void *on = NULL;
    if (defer_mode && size && pending_on((uintptr_t)base, size, NULL, &on)) {
        fake_violation("%s at %p + %zu while queued work on stream %p that uses it has not "
                       "run (nothing waited for it)", entry, base, size, on);
    }
}

/* Runs a queued launch (the lock held). */
static void run_launch(const struct fake_op *op) {
    struct fake_obj *obj = fake_obj_find("function", (uintptr_t)op->function);
    if (!obj) {
        fake_violation("use after free: a queued hipModuleLaunchKernel ran after its module "
                       "was unloaded");
        return;
    }
    struct fake_function *f = obj->data;
    int k = fake_fixture_index(f->name);
    uintptr_t base;
    size_t bytes = launch_extent(op, f, &base);
    if (k < 0 || k == 2) return; /* another kernel, or noop */
    uint32_t *buf = (uint32_t *)base;
    if (bytes && !check_range("queued hipModuleLaunchKernel", "buffer argument", DEVICE_KINDS,
                              buf, bytes))
        return;
    uint64_t repeats = (uint64_t)op->grid[1] * op->grid[2] * op->block[1] * op->block[2];
    const void *g = NULL;
    for (int i = 0; i < f->module->nglobals; i++)
        if (!strcmp(f->module->globals[i].name, "g") && f->module->globals[i].size >= 4)
            g = f->module->globals[i].mem;
    fake_fixture_run(k, buf, bytes / 4, (uint32_t)repeats, (uint32_t)op->args[1], g);
}

/* Runs one queued operation other than a host function (the lock held). */
static void run_op(struct fake_op *op) {
    switch (op->type) {
    case OP_COPY:
        copy("queued hipMemcpyAsync", op->dst, op->src, op->len, op->kind);
        break;
    case OP_FILL: {
        size_t size = (size_t)op->kind;
        if (!check_range("queued hipMemset*Async", "destination", DEVICE_KINDS, op->dst,
                         op->len * size))
            break;
        for (size_t i = 0; i < op->len; i++) memcpy((char *)op->dst + i * size, &op->value, size);
        break;
    }
    case OP_KERNEL: run_launch(op); break;
    case OP_EVENT: {
        struct fake_event *e = op->event;
        e->recorded = 1;
        e->ms = now_ms();
        if (e->op == op) e->stream = NULL, e->op = NULL;
        break;
    }
    default: break;
    }
}

/* Whether `op` is still queued on `s`. */
static int queued(const struct fake_stream *s, const struct fake_op *op) {
    for (const struct fake_op *o = s->head; o; o = o->next)
        if (o == op) return 1;
    return 0;
}

/* Runs `s`'s queued work in order, up to and including `until` (NULL: all of it). The
 * lock is held, and released around host functions; one thread drains a stream at a
 * time. */
static void drain(struct fake_stream *s, const struct fake_op *until) {
    while (s->draining) fake_wait();
    if (until && !queued(s, until)) return; /* another thread ran it */
    s->draining = 1;
    for (struct fake_op *op; (op = s->head);) {
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        int last = op == until;
        if (op->type == OP_HOST) {
            fake_unlock();
            in_host_fn = 1;
            op->fn(op->data);
            in_host_fn = 0;
            fake_lock();
        } else {
            run_op(op);
        }
        free(op);
        if (last) break;
    }
    s->draining = 0;
    fake_wake();
}

/* Queues `op` (allocated by the caller) on `s`; runs it at once unless deferring. */
static void enqueue(struct fake_stream *s, struct fake_op *op) {
    op->next = NULL;
    if (s->tail) {
        s->tail->next = op;
    } else {
        s->head = op;
    }
    s->tail = op;
    /* A stream being drained (a host function of it running) runs this after it, on the
     * draining thread: the enqueue returns at once, as HIP's does. */
    if ((!defer_mode || s == &null_stream) && !s->draining) drain(s, NULL);
}

static struct fake_op *new_op(int type) {
    struct fake_op *op = calloc(1, sizeof *op);
    if (op) op->type = type;
    return op;
}

int hipStreamCreateWithFlags(void **stream, unsigned int flags) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (flags > 1) {
        fake_violation("hipStreamCreateWithFlags: unknown flags %#x", flags);
        END(HIP_ERROR_INVALID_VALUE);
    }
    struct fake_stream *s = calloc(1, sizeof *s);
    if (!s) END(HIP_ERROR_OUT_OF_MEMORY);
    fake_obj_add("stream", (uintptr_t)s, 0, device_owner(current_device), s);
    *stream = s;
    END(HIP_SUCCESS);
}

int hipStreamDestroy(void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (!stream) {
        fake_violation("hipStreamDestroy of the null stream");
        END(HIP_ERROR_INVALID_VALUE);
    }
    struct fake_stream *s = need_stream(__func__, stream);
    if (!s) END(HIP_ERROR_INVALID_VALUE);
    drain(s, NULL); /* the runtime finishes its work first */
    struct fake_obj *obj = fake_obj_find("stream", (uintptr_t)stream);
    if (obj) {
        fake_obj_remove(obj, "hipStreamDestroy");
        free(s);
    }
    END(HIP_SUCCESS);
}

int hipStreamSynchronize(void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_stream *s = need_stream(__func__, stream);
    if (!s) END(HIP_ERROR_INVALID_VALUE);
    drain(s, NULL);
    END(HIP_SUCCESS);
}

int hipStreamQuery(void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_stream *s = need_stream(__func__, stream);
    if (!s) END(HIP_ERROR_INVALID_VALUE);
    if (!s->head) END(HIP_SUCCESS);
    drain(s, NULL); /* work progresses when polled: idle at the next query */
    END(HIP_ERROR_NOT_READY);
}

int hipDeviceSynchronize(void) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    /* Drains the device's streams until none has work (the registry may change while a
     * host function runs, so the scan starts again after each). */
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < fake_live_len; i++) {
            struct fake_obj *o = &fake_live[i];
            if (strcmp(o->kind, "stream") || o->owner != device_owner(current_device)) continue;
            struct fake_stream *st = o->data;
            if (st->head) {
                drain(st, NULL);
                again = 1;
                break;
            }
        }
    }
    END(HIP_SUCCESS);
}

int hipStreamWaitEvent(void *stream, void *event, unsigned int flags) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (flags) fake_violation("hipStreamWaitEvent: flags %#x are not 0", flags);
    struct fake_stream *s = need_stream(__func__, stream);
    struct fake_event *e = need_event(__func__, event);
    if (!s || !e) END(HIP_ERROR_INVALID_VALUE);
    /* The waiting stream's later work needs the event: run its stream that far now. */
    if (e->stream && e->stream != s) drain(e->stream, e->op);
    END(HIP_SUCCESS);
}

int hipMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_stream *s = need_stream(__func__, stream);
    if (!s) END(HIP_ERROR_INVALID_VALUE);
    if (len == 0) END(HIP_SUCCESS);
    /* Checked now (the call's own errors) and again when it runs. */
    if (kind == 1 && !check_range(__func__, "destination", DEVICE_KINDS, dst, len))
        END(HIP_ERROR_INVALID_VALUE);
    if (kind == 3 && !(check_range(__func__, "destination", DEVICE_KINDS, dst, len) &&
                       check_range(__func__, "source", DEVICE_KINDS, src, len)))
        END(HIP_ERROR_INVALID_VALUE);
    struct fake_op *op = new_op(OP_COPY);
    if (!op) END(HIP_ERROR_OUT_OF_MEMORY);
    op->dst = dst, op->src = src, op->len = len, op->kind = kind;
    enqueue(s, op);
    END(HIP_SUCCESS);
}

/* Queues a fill of `count` words of `size` bytes at dst with `value` (its low bytes). */
static int fill_words(const char *entry, void *dst, uint32_t value, size_t size, size_t count,
                      void *stream) {
    struct fake_stream *s = need_stream(entry, stream);
    if (!s) return HIP_ERROR_INVALID_VALUE;
    if ((uintptr_t)dst % size) {
        fake_violation("%s: %p is not aligned to %zu bytes", entry, dst, size);
        return HIP_ERROR_INVALID_VALUE;
    }
    if (count == 0) return HIP_SUCCESS;
    if (count > SIZE_MAX / size) return HIP_ERROR_INVALID_VALUE;
    if (!check_range(entry, "destination", DEVICE_KINDS, dst, count * size))
        return HIP_ERROR_INVALID_VALUE;
    struct fake_op *op = new_op(OP_FILL);
    if (!op) return HIP_ERROR_OUT_OF_MEMORY;
    op->dst = dst, op->value = value, op->kind = (int)size, op->len = count;
    enqueue(s, op);
    return HIP_SUCCESS;
}

int hipMemsetAsync(void *dst, int value, size_t len, void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    END(fill_words(__func__, dst, (uint32_t)(unsigned char)value, 1, len, stream));
}

int hipMemsetD16Async(void *dst, unsigned short value, size_t count, void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    END(fill_words(__func__, dst, value, 2, count, stream));
}

int hipMemsetD32Async(void *dst, int value, size_t count, void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    END(fill_words(__func__, dst, (uint32_t)value, 4, count, stream));
}

int hipLaunchHostFunc(void *stream, void (*fn)(void *), void *data) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (!fn) {
        fake_violation("hipLaunchHostFunc: null function");
        END(HIP_ERROR_INVALID_VALUE);
    }
    struct fake_stream *s = need_stream(__func__, stream);
    if (!s) END(HIP_ERROR_INVALID_VALUE);
    struct fake_op *op = new_op(OP_HOST);
    if (!op) END(HIP_ERROR_OUT_OF_MEMORY);
    op->fn = fn, op->data = data;
    enqueue(s, op);
    END(HIP_SUCCESS);
}

int hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void *stream,
                          void **params, void **extra) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_obj *obj = fake_obj_find("function", (uintptr_t)function);
    if (!obj) {
        if (fake_obj_find_dead("function", (uintptr_t)function, 0)) {
            fake_violation("use after free: hipModuleLaunchKernel of a function of an "
                           "unloaded module");
        } else {
            fake_violation("hipModuleLaunchKernel: %p is not a function", function);
        }
        END(HIP_ERROR_INVALID_VALUE);
    }
    struct fake_function *f = obj->data;
    if (f->module->ordinal != current_device) {
        fake_violation("hipModuleLaunchKernel of %s, loaded on device %d, while device %d is "
                       "current", f->name, f->module->ordinal, current_device);
        END(HIP_ERROR_INVALID_VALUE);
    }
    struct fake_stream *s = need_stream(__func__, stream);
    if (!s) END(HIP_ERROR_INVALID_VALUE);
    if (extra) fake_violation("hipModuleLaunchKernel: offload passes kernelParams, not extra");
    if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024 ||
        shared > 65536) {
        fake_violation("hipModuleLaunchKernel of %s: grid %ux%ux%u, block %ux%ux%u, %u shared "
                       "bytes are beyond the device", f->name, gx, gy, gz, bx, by, bz, shared);
        END(HIP_ERROR_INVALID_VALUE);
    }
    int k = fake_fixture_index(f->name);
    struct fake_op *op = new_op(OP_KERNEL);
    if (!op) END(HIP_ERROR_OUT_OF_MEMORY);
    op->function = function;
    op->grid[0] = gx, op->grid[1] = gy, op->grid[2] = gz;
    op->block[0] = bx, op->block[1] = by, op->block[2] = bz;
    if (k >= 0) {
        if (fake_fixture[k].nparams && !params) {
            free(op);
            fake_violation("hipModuleLaunchKernel of %s without kernelParams", f->name);
            END(HIP_ERROR_INVALID_VALUE);
        }
        for (int i = 0; i < fake_fixture[k].nparams; i++)
            memcpy(&op->args[i], params[i], fake_fixture[k].sizes[i]);
        uintptr_t base;
        size_t bytes = launch_extent(op, f, &base);
        if (bytes && !check_range(__func__, "buffer argument", DEVICE_KINDS, (void *)base,
                                  bytes)) {
            free(op);
            END(HIP_ERROR_INVALID_VALUE);
        }
    }
    enqueue(s, op);
    END(HIP_SUCCESS);
}

int hipEventCreate(void **event) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_event *record = calloc(1, sizeof *record);
    if (!record) END(HIP_ERROR_OUT_OF_MEMORY);
    fake_obj_add("event", (uintptr_t)record, 0, device_owner(current_device), record);
    *event = record;
    END(HIP_SUCCESS);
}

int hipEventRecord(void *event, void *stream) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_event *e = need_event(__func__, event);
    struct fake_stream *s = need_stream(__func__, stream);
    if (!e || !s) END(HIP_ERROR_INVALID_VALUE);
    struct fake_op *op = new_op(OP_EVENT);
    if (!op) END(HIP_ERROR_OUT_OF_MEMORY);
    op->event = e;
    e->recorded = 0;
    e->stream = s;
    e->op = op;
    enqueue(s, op);
    END(HIP_SUCCESS);
}

int hipEventSynchronize(void *event) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_event *e = need_event(__func__, event);
    if (!e) END(HIP_ERROR_INVALID_VALUE);
    if (e->stream) drain(e->stream, e->op);
    END(HIP_SUCCESS);
}

int hipEventQuery(void *event) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_event *e = need_event(__func__, event);
    if (!e) END(HIP_ERROR_INVALID_VALUE);
    if (!e->stream) END(HIP_SUCCESS);
    drain(e->stream, e->op); /* work progresses when polled */
    END(HIP_ERROR_NOT_READY);
}

int hipEventElapsedTime(float *ms, void *start, void *stop) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_event *first = need_event(__func__, start);
    struct fake_event *second = need_event(__func__, stop);
    if (!first || !second) END(HIP_ERROR_INVALID_VALUE);
    if (!first->recorded || !second->recorded) {
        fake_violation("hipEventElapsedTime of an event that has not completed");
        END(HIP_ERROR_NOT_READY);
    }
    *ms = (float)(second->ms - first->ms);
    END(HIP_SUCCESS);
}

int hipEventDestroy(void *event) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_event *e = need_event(__func__, event);
    if (!e) END(HIP_ERROR_INVALID_VALUE);
    /* A record still queued forgets the event (the runtime defers the release). */
    if (e->stream)
        for (struct fake_op *op = e->stream->head; op; op = op->next)
            if (op->type == OP_EVENT && op->event == e) op->type = OP_NONE;
    fake_obj_remove(fake_obj_find("event", (uintptr_t)event), "hipEventDestroy");
    free(e);
    END(HIP_SUCCESS);
}

/* ---- IPC -------------------------------------------------------------------------------- */
/* The 64-byte hipIpcMemHandle_t carries a magic, the exporter's pid, its memfd's number,
 * the size and the allocation id; hipIpcOpenMemHandle maps /proc/<pid>/fd/<fd>. Opening a
 * handle of this same process, or one this process has open already, is a violation
 * (offload shares those), and so is a close of anything but an open mapping; mappings
 * still open at exit are leaks. */

#define HIP_IPC_MAGIC 0x50484b46u /* "FKHP" */
#define HIP_ERROR_INVALID_CONTEXT 201
#define HIP_ERROR_INVALID_HANDLE 400

typedef struct {
    char reserved[64];
} hipIpcMemHandle_t;

struct ipc_wire {
    uint32_t magic, version;
    int32_t pid, fd;
    uint64_t size, id;
    uint8_t reserved[32];
};
_Static_assert(sizeof(struct ipc_wire) == sizeof(hipIpcMemHandle_t), "the handle is 64 bytes");

int hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *ptr) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (!handle) END(HIP_ERROR_INVALID_VALUE);
    struct fake_obj *obj = fake_obj_find("alloc", (uintptr_t)ptr);
    if (!obj) {
        static const char *const ALLOC[] = {"alloc", NULL};
        check_range(__func__, "pointer", ALLOC, ptr, 1); /* records why */
        END(HIP_ERROR_INVALID_VALUE);
    }
    struct fake_mem *m = obj->data;
    struct ipc_wire wire;
    memset(&wire, 0, sizeof wire);
    wire.magic = HIP_IPC_MAGIC;
    wire.version = 1;
    wire.pid = (int32_t)getpid();
    wire.fd = m->fd;
    wire.size = obj->size;
    wire.id = obj->id;
    memcpy(handle, &wire, sizeof wire);
    END(HIP_SUCCESS);
}

int hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t handle, unsigned int flags) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    if (!ptr || flags > 1) END(HIP_ERROR_INVALID_VALUE); /* hipIpcMemLazyEnablePeerAccess */
    struct ipc_wire wire;
    memcpy(&wire, &handle, sizeof wire);
    if (wire.magic != HIP_IPC_MAGIC || wire.version != 1 || wire.size == 0 || wire.pid <= 0)
        END(HIP_ERROR_INVALID_HANDLE);
    if (wire.pid == (int32_t)getpid()) {
        fake_violation("hipIpcOpenMemHandle of a handle of this same process");
        END(HIP_ERROR_INVALID_CONTEXT);
    }
    for (size_t i = 0; i < fake_live_len; i++) {
        struct fake_obj *o = &fake_live[i];
        struct fake_mem *m = o->data;
        if (!strcmp(o->kind, "ipc") && m->pid == wire.pid && m->id == wire.id) {
            fake_violation("hipIpcOpenMemHandle of allocation %llu of process %d, which this "
                           "process has open already", (unsigned long long)wire.id, wire.pid);
            END(HIP_ERROR_INVALID_VALUE);
        }
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", wire.pid, wire.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) END(HIP_ERROR_INVALID_HANDLE);
    void *mem = mmap(NULL, wire.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    struct fake_mem *m = calloc(1, sizeof *m);
    if (mem == MAP_FAILED || !m) {
        if (mem != MAP_FAILED) munmap(mem, wire.size);
        free(m);
        END(HIP_ERROR_OUT_OF_MEMORY);
    }
    m->fd = -1, m->mem = mem, m->size = wire.size, m->pid = wire.pid, m->id = wire.id;
    fake_obj_add("ipc", (uintptr_t)mem, wire.size, device_owner(current_device), m);
    *ptr = mem;
    END(HIP_SUCCESS);
}

int hipIpcCloseMemHandle(void *ptr) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_obj *obj = fake_obj_find("ipc", (uintptr_t)ptr);
    if (!obj) {
        struct fake_obj *other = fake_obj_find(NULL, (uintptr_t)ptr);
        if (other) {
            fake_violation("hipIpcCloseMemHandle of %s memory %p, not an IPC mapping",
                           other->kind, ptr);
        } else if (fake_obj_find_dead("ipc", (uintptr_t)ptr, 0)) {
            fake_violation("double close: hipIpcCloseMemHandle of %p, closed already", ptr);
        } else {
            fake_violation("hipIpcCloseMemHandle of %p: not an IPC mapping", ptr);
        }
        END(HIP_ERROR_INVALID_VALUE);
    }
    check_not_pending(__func__, ptr, obj->size);
    obj = fake_obj_find("ipc", (uintptr_t)ptr);
    free_data(obj);
    fake_obj_remove(obj, "hipIpcCloseMemHandle");
    END(HIP_SUCCESS);
}

int hipMemGetAddressRange(void **base, size_t *size, void *ptr) {
    BEGIN();
    NEED_INIT();
    NOT_FROM_HOST_FN();
    struct fake_obj *obj = fake_obj_find_range(DEVICE_KINDS, (uintptr_t)ptr, 0);
    if (!obj) END(HIP_ERROR_INVALID_VALUE);
    if (base) *base = (void *)obj->handle;
    if (size) *size = obj->size;
    END(HIP_SUCCESS);
}

/* ---- exit and hooks -------------------------------------------------------------------- */

/* Runs before fake_common's destructor prints the log (atexit handlers run first). */
static void at_exit(void) {
    fake_lock();
    reap(NULL, "process exit");
    fake_unlock();
}

__attribute__((constructor)) static void fake_hip_load(void) {
    defer_mode = fake_env_int("FAKE_HIP_DEFER", 0);
    atexit(at_exit);
}

FAKE_TEST_HOOKS(fake_hip)
FAKE_LIVE_HOOK(fake_hip)
