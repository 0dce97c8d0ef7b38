/* A protocol-checking stand-in for libcuda.so.1 over HOST memory, for offload-cuda's tests
 * (and offload-driver's own, tests/fake_cuda.rs). It exports the real CUDA driver API entry
 * points, with their real signatures and symbol names, that the CUDA backend uses; it runs
 * them over host memory, and it RECORDS every protocol violation it sees (see "Rules").
 * No GPU or CUDA is needed: the tests build it with `cc -shared -fPIC` as libcuda.so.1.
 *
 * Devices. Two by default (handles 10 and 11, so a test sees whether the handle or the
 * ordinal is passed on), 1 GiB and 2 GiB, compute capability 8.6, unified addressing.
 * Environment variables change what it answers:
 *   FAKE_CU_INIT=<code>          cuInit returns <code>
 *   FAKE_CU_COUNT=<n>            cuDeviceGetCount reports <n> devices (at most 64)
 *   FAKE_CU_COUNT_RESULT=<code>  cuDeviceGetCount returns <code>
 *   FAKE_CU_NAME_RESULT=<code>   cuDeviceGetName returns <code>
 *   FAKE_CU_DEFER=1              queued work is deferred (see "Streams") instead of run
 *                                at enqueue
 *   FAKE_FAIL=entry:nth:code,... the nth call of `entry` (counted from load) returns `code`
 * Built with -DNO_ERROR_NAMES it lacks cuGetErrorName/cuGetErrorString; with
 * -DNO_TOTAL_MEM it lacks cuDeviceTotalMem_v2 (a required symbol).
 *
 * Test hooks (exported C functions; offload_driver::testing::FakeHooks wraps them):
 *   int fake_cuda_violations(char *buf, size_t cap)  the messages joined by "; " into buf
 *                                                    (NUL-terminated, truncated to cap);
 *                                                    returns how many there were
 *   void fake_cuda_clear_violations(void)
 *   void fake_cuda_fail(const char *entry, int nth, int code)
 *                                                    the nth call of `entry` from now
 *                                                    (1 = the next) returns `code`
 *   unsigned long fake_cuda_calls(const char *entry) calls of `entry` so far
 *   int fake_cuda_entries(char *buf, size_t cap)     every entry called, "name=calls,..."
 *   (these five from fake_common.h's FAKE_TEST_HOOKS)
 *   int fake_cuda_live(const char *kind)             live objects of a kind: "alloc"
 *                                                    (cuMemAlloc, cuMemAllocManaged),
 *                                                    "host" (cuMemAllocHost), "module",
 *                                                    "function", "global", "stream",
 *                                                    "event", "ipc" (open mappings),
 *                                                    "context" (retained primary contexts)
 * At process exit it prints `FAKE-CUDA-VIOLATIONS: <n>` and the messages to stderr if there
 * were any (fake_common.h).
 *
 * Rules (each message starts with the rule's name and names the object):
 *   call before cuInit            any call but cuInit, cuDriverGetVersion, cuGetError*
 *                                 before a successful cuInit (CUDA_ERROR_NOT_INITIALIZED)
 *   no current context            a context-dependent call (everything but cuInit,
 *                                 cuDriverGetVersion, cuDevice*, cuGetError*,
 *                                 cuDevicePrimaryCtx*, cuCtxSetCurrent/GetCurrent) on a
 *                                 thread without a current context (INVALID_CONTEXT)
 *   released context is current   ... or whose current context was released to 0
 *                                 (CONTEXT_IS_DESTROYED); cuCtxSetCurrent of one too
 *   leak at context release       an allocation, pinned host block, module, stream, event
 *                                 or open IPC mapping still alive when its device's
 *                                 primary context is released to 0 (the fake frees it)
 *   retain/release imbalance      cuDevicePrimaryCtxRelease_v2 with no retain outstanding
 *   double free / use after free  a handle or pointer used or freed after it was freed,
 *                                 destroyed, unloaded or closed (INVALID_VALUE for memory,
 *                                 INVALID_HANDLE for objects)
 *   context gone                  a handle used after its context was released
 *   unknown handle / memory       a handle or device pointer the fake never handed out
 *   out of bounds                 a copy, set or kernel access running past an allocation
 *   wrong free                    cuMemFree of an IPC mapping or pinned host memory,
 *                                 cuIpcCloseMemHandle of an allocation, ...
 *   stream of another context     a stream used while another context is current
 *   launch in another context     a kernel launched while another context is current
 *   launch arguments              kernelParams NULL (and no `extra`) while the entry has
 *                                 parameters, a NULL kernelParams[i], a short `extra` buffer
 *   launch out of bounds          a kernel's buffer argument not inside a live allocation,
 *                                 or its accesses running past one (CUDA_ERROR_ILLEGAL_
 *                                 ADDRESS at launch: real drivers report it at the next sync)
 *   kernel signature              a known kernel name with unexpected parameters
 *   call from a host function     any CUDA call from inside a cuLaunchHostFunc callback
 *                                 (CUDA_ERROR_NOT_PERMITTED)
 * Errors that real drivers return in normal use are returned WITHOUT a violation: bad
 * arguments, an invalid image, a missing symbol, a forged or stale IPC handle, an IPC handle
 * opened twice (ALREADY_MAPPED) or in its own process (INVALID_CONTEXT), out of memory.
 *
 * Memory. cuMemAlloc_v2 and cuMemAllocManaged are memfds mapped MAP_SHARED; the
 * CUdeviceptr is the host address, so a backend that dereferences one "works" here only.
 * A device's allocations are limited to its memory size (OUT_OF_MEMORY). cuMemAllocHost is
 * anonymous memory. Module globals are heap memory. CU_POINTER_ATTRIBUTE_BUFFER_ID is 7 in
 * cuda.h (15 is IS_GPU_DIRECT_RDMA_CAPABLE, not answered here): a process-unique id per
 * allocation, mapping or global.
 *
 * IPC. The 64-byte CUipcMemHandle carries a magic, the exporter's pid, the memfd's number,
 * the size and the allocation id; cuIpcOpenMemHandle_v2 opens /proc/<pid>/fd/<fd>, checks
 * that it is still that allocation's memfd (else INVALID_HANDLE: stale), and maps it. Like
 * real drivers it refuses a handle of its own process (INVALID_CONTEXT) and a second open of
 * an allocation already open in the current context (ALREADY_MAPPED). A handle exported
 * from inside an allocation names the whole allocation; the open maps its start.
 *
 * Streams, events, host functions. Every stream (the legacy NULL stream and
 * CU_STREAM_PER_THREAD of each context included) is an in-order queue of operations. By
 * default each operation runs when it is enqueued, in the caller's thread, so queries answer
 * CUDA_SUCCESS unless a host function of that stream is still running on another thread;
 * work enqueued while one of its host functions runs waits (the enqueue returns at once, as
 * CUDA's does) and runs after it, on the thread that ran the function.
 * With FAKE_CU_DEFER=1 work waits in its queue until something needs it: a synchronize
 * (stream, event, context), a synchronous copy or set (legacy-stream semantics: the
 * context's blocking streams first), a free, unload, IPC close or context release (which
 * drain every stream), cuStreamWaitEvent's event, an async copy to pageable host memory
 * (synchronous, as in CUDA), or a query, which answers CUDA_ERROR_NOT_READY and runs the
 * work so that the next query answers CUDA_SUCCESS. Async copies from pageable host memory
 * are staged at enqueue, from cuMemAllocHost memory they read it when they run. Host
 * functions run without the fake's lock held, and any CUDA call from one is a violation.
 *
 * Modules. cuModuleLoadDataEx (and cuModuleLoadData) take PTX text only: NUL-terminated,
 * starting (after comments and white space) with `.version`. The fake parses every
 * `.entry` with its `.param` list (sizes, alignments, `.ptr`; offsets as the driver lays
 * them out), and every module-scope `.global`/`.const` variable with its size and
 * initialiser; it skips function bodies. Anything else is CUDA_ERROR_INVALID_IMAGE, with a
 * message in the CU_JIT_ERROR_LOG_BUFFER when the caller passed one (its size option gets
 * the message's length back).
 *
 * Kernels run by name over host memory, with thread i = blockIdx.x * blockDim.x +
 * threadIdx.x over gridDimX * blockDimX threads (the y and z dimensions repeat the work, as
 * the PTX, which reads only .x, would):
 *   add_one(u32 *buf, u32 n)          buf[i] += STEP for i < n, where STEP is the literal of
 *                                     the first `add.u32`/`add.s32` in add_one's body whose
 *                                     last operand is one (1 when there is none), so images
 *                                     that differ only there are told apart
 *   fill(u32 *buf, u32 value, u32 n)  buf[i] = value for i < n
 *   noop()
 *   read_global(u32 *buf)             buf[0] = the module's global `g`
 *   shared_reverse(u32 *buf)          reverses each block's blockDim.x elements, given at
 *                                     least 4 * blockDim.x bytes of dynamic shared memory
 *                                     (sharedMemBytes); does nothing with less
 * Any other entry runs as a no-op (after its `.ptr` arguments are checked). */
#define FAKE_NAME "CUDA"
#include "fake_common.h"

#include <ctype.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the driver API's types --------------------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct fake_ctx *CUcontext;
typedef struct fake_module *CUmodule;
typedef struct fake_func *CUfunction;
typedef struct fake_stream *CUstream;
typedef struct fake_event *CUevent;
typedef int CUjit_option;
typedef void (*CUhostFn)(void *userData);
typedef struct {
    char bytes[16];
} CUuuid;
typedef struct {
    char reserved[64];
} CUipcMemHandle;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_MAP_FAILED = 205,
    CUDA_ERROR_ALREADY_MAPPED = 208,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_NOT_PERMITTED = 800,
};

#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_EVENT_INTERPROCESS 0x4u
#define CU_JIT_INFO_LOG_BUFFER 3
#define CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES 4
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* ---- the fake's state ---------------------------------------------------------------- */

#define MAX_DEVICES 64
#define NAME_LEN 128
#define PARAMS_MAX 64
#define RUN_ALL (~0ull)

enum stream_kind { STREAM_USER, STREAM_LEGACY, STREAM_PER_THREAD };

struct fake_op;

struct fake_stream {
    struct fake_ctx *ctx;
    unsigned flags;
    enum stream_kind kind;
    struct fake_op *head, *tail;
    int busy; /* a host function or a wait of this stream is running (without the lock) */
    unsigned long long running; /* while busy: the sequence number of that operation */
};

struct fake_ctx {
    int ordinal;
    int refs;
    size_t allocated;
    struct fake_stream legacy, per_thread;
};

enum mem_kind { MEM_DEVICE, MEM_MANAGED, MEM_HOST, MEM_IPC };

struct fake_mem {
    enum mem_kind kind;
    struct fake_ctx *ctx;
    int fd;         /* the memfd of device and managed memory, else -1 */
    size_t map_len; /* what was mmapped */
    int src_pid;    /* IPC: the exporter and its allocation id */
    unsigned long long src_id;
};

struct ptx_param {
    size_t size, align, offset;
    int is_ptr;
};

struct fake_func {
    struct fake_module *module;
    char name[NAME_LEN];
    int nparams;
    struct ptx_param params[PARAMS_MAX];
    size_t param_bytes;
    long long add_step;
};

struct fake_global {
    char name[NAME_LEN];
    size_t size, align;
    int is_const;
    unsigned char *mem;
};

struct fake_module {
    struct fake_ctx *ctx;
    struct fake_func *funcs;
    int nfuncs;
    struct fake_global *globals;
    int nglobals;
};

struct fake_event {
    struct fake_ctx *ctx;
    unsigned flags;
    int recorded;
    unsigned long long pending_seq, done_seq; /* the latest record enqueued / run */
    struct fake_stream *stream;               /* where the latest record was enqueued */
    struct timespec when;
};

enum op_kind { OP_COPY, OP_SET, OP_KERNEL, OP_HOST, OP_RECORD, OP_WAIT };

struct fake_op {
    struct fake_op *next;
    enum op_kind kind;
    unsigned long long seq;
    /* copy and set */
    void *dst;
    const void *src;
    size_t bytes;
    void *staging;
    unsigned value;
    int width;
    size_t count;
    /* kernel */
    struct fake_func *func;
    unsigned grid[3], block[3], shared;
    unsigned char *params;
    /* host function */
    CUhostFn host;
    void *user;
    /* record and wait */
    struct fake_event *event;
    struct fake_stream *wait_stream;
    unsigned long long wait_seq;
};

static struct fake_ctx contexts[MAX_DEVICES];
static __thread struct fake_ctx *current;
static __thread int in_host_fn;
static int initialised;
static int deferred;
static unsigned long long op_seq;

static const char WHY_CONTEXT[] = "destroyed with its context";
static const char *const DEVICE_MEMORY[] = {"alloc", "ipc", "global", "host", NULL};

__attribute__((constructor)) static void fake_cuda_load(void) {
    deferred = fake_env_int("FAKE_CU_DEFER", 0) != 0;
}

static int device_count(void) {
    int n = fake_env_int("FAKE_CU_COUNT", 2);
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* The ordinal of a CUdevice (10 + ordinal), or -1. */
static int ordinal_of(CUdevice device) {
    int ordinal = device - 10;
    return ordinal >= 0 && ordinal < device_count() ? ordinal : -1;
}

static size_t device_memory(int ordinal) { return (size_t)(ordinal + 1) << 30; }

/* ---- entry and exit of every entry point ----------------------------------------------- */

enum { NEEDS_NOTHING = 0, NEEDS_INIT = 1, NEEDS_CONTEXT = 3 };

static CUresult from_host_fn(const char *entry) {
    fake_lock();
    fake_count_call(entry);
    fake_violation("call from a host function: %s called inside a cuLaunchHostFunc callback",
                   entry);
    fake_unlock();
    return CUDA_ERROR_NOT_PERMITTED;
}

/* Counts the call and checks the protocol; returns the code to fail with, or 0. */
static CUresult begin(const char *entry, int needs) {
    int injected = fake_count_call(entry);
    if ((needs & NEEDS_INIT) && !initialised) {
        fake_violation("call before cuInit: %s", entry);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if ((needs & 2) && !current) {
        fake_violation("no current context: %s called on a thread with no current context",
                       entry);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if ((needs & 2) && current->refs == 0) {
        fake_violation("released context is current: %s called while device %d's primary "
                       "context, released, is current",
                       entry, current->ordinal);
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    return injected;
}

#define RETURN(code)                                                                       \
    do {                                                                                   \
        CUresult code_ = (code);                                                           \
        fake_unlock();                                                                     \
        return code_;                                                                      \
    } while (0)

#define BEGIN(needs)                                                                       \
    if (in_host_fn) return from_host_fn(__func__);                                         \
    fake_lock();                                                                           \
    do {                                                                                   \
        CUresult begun_ = begin(__func__, needs);                                          \
        if (begun_) RETURN(begun_);                                                        \
    } while (0)

/* ---- looking objects up ---------------------------------------------------------------- */

/* The live object of `kind` with that handle; otherwise records why not and returns NULL. */
static struct fake_obj *need(const char *entry, const char *kind, const void *handle,
                             int destroying) {
    uintptr_t h = (uintptr_t)handle;
    struct fake_obj *obj = fake_obj_find(kind, h);
    if (obj) return obj;
    const struct fake_dead *dead = fake_obj_find_dead(kind, h, 0);
    if (dead && dead->why == WHY_CONTEXT) {
        fake_violation("context gone: %s on %s %#lx (id %llu), destroyed when its context "
                       "was released",
                       entry, kind, (unsigned long)h, dead->id);
    } else if (dead) {
        fake_violation("%s: %s on %s %#lx (id %llu), already %s",
                       destroying ? "double free" : "use after free", entry, kind,
                       (unsigned long)h, dead->id, dead->why);
    } else {
        fake_violation("unknown handle: %s on %#lx, which is no %s", entry, (unsigned long)h,
                       kind);
    }
    return NULL;
}

static struct fake_ctx *obj_ctx(const struct fake_obj *obj) {
    if (strcmp(obj->kind, "global") == 0) return ((struct fake_module *)obj->owner)->ctx;
    if (strcmp(obj->kind, "function") == 0) return ((struct fake_module *)obj->owner)->ctx;
    return obj->owner;
}

/* Checks that [addr, addr + len) lies inside one live piece of device-accessible memory;
 * records the violation (under `rule`, or the rule of what is wrong when NULL) and returns
 * INVALID_VALUE otherwise. */
static CUresult check_memory(const char *rule, const char *entry, const char *what,
                             uintptr_t addr, size_t len) {
    if (fake_obj_find_range(DEVICE_MEMORY, addr, len)) return CUDA_SUCCESS;
    const struct fake_obj *start = fake_obj_find_range(DEVICE_MEMORY, addr, 0);
    if (start) {
        fake_violation("%s: %s %s [%#lx, +%zu) runs past the end of %s %#lx (id %llu, %zu "
                       "bytes)",
                       rule ? rule : "out of bounds", entry, what, (unsigned long)addr, len,
                       start->kind, (unsigned long)start->handle, start->id, start->size);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (const char *const *kind = DEVICE_MEMORY; *kind; kind++) {
        const struct fake_dead *dead = fake_obj_find_dead(*kind, addr, 1);
        if (dead) {
            fake_violation("%s: %s %s %#lx lies in %s %#lx (id %llu), already %s",
                           rule                       ? rule
                           : dead->why == WHY_CONTEXT ? "context gone"
                                                      : "use after free",
                           entry, what, (unsigned long)addr, dead->kind,
                           (unsigned long)dead->handle, dead->id, dead->why);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    fake_violation("%s: %s %s %#lx lies in no live allocation", rule ? rule : "unknown memory",
                   entry, what, (unsigned long)addr);
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- streams: queues of operations ------------------------------------------------------ */

static void run_kernel(const struct fake_op *op);

static void exec_op(struct fake_op *op) {
    switch (op->kind) {
    case OP_COPY:
        memmove(op->dst, op->staging ? op->staging : op->src, op->bytes);
        break;
    case OP_SET:
        for (size_t i = 0; i < op->count; i++) {
            unsigned char *at = (unsigned char *)op->dst + i * (size_t)op->width;
            if (op->width == 1) *at = (unsigned char)op->value;
            else if (op->width == 2) *(uint16_t *)at = (uint16_t)op->value;
            else *(uint32_t *)at = op->value;
        }
        break;
    case OP_KERNEL:
        run_kernel(op);
        break;
    case OP_RECORD:
        if (op->seq > op->event->done_seq) {
            op->event->done_seq = op->seq;
            clock_gettime(CLOCK_MONOTONIC, &op->event->when);
        }
        break;
    case OP_HOST:
    case OP_WAIT:
        break; /* stream_run does these */
    }
}

static void free_op(struct fake_op *op) {
    free(op->staging);
    free(op->params);
    free(op);
}

/* Runs the stream's operations up to sequence number `upto`, in order. */
static void stream_run(struct fake_stream *s, unsigned long long upto) {
    for (;;) {
        struct fake_op *op = s->head;
        /* Nothing up to `upto` left: done, even while a later operation runs elsewhere
         * (two streams waiting for each other's earlier events must not wait forever). */
        if ((!op || op->seq > upto) && (!s->busy || s->running > upto)) return;
        if (s->busy) {
            fake_wait();
            continue;
        }
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        if (op->kind == OP_HOST) {
            s->busy = 1;
            s->running = op->seq;
            fake_unlock();
            in_host_fn = 1;
            op->host(op->user);
            in_host_fn = 0;
            fake_lock();
            s->busy = 0;
            fake_wake();
            /* What was enqueued meanwhile was left for this thread (`enqueue`). */
            if (!deferred && s->tail && s->tail->seq > upto) upto = s->tail->seq;
        } else if (op->kind == OP_WAIT) {
            if (op->event->done_seq < op->wait_seq) {
                /* Busy while it waits: the other stream's run may release the lock (around
                 * its host functions), and this stream's later work must not start
                 * meanwhile on another thread (it did: a host function ran before one
                 * enqueued earlier on the stream waited for). */
                s->busy = 1;
                s->running = op->seq;
                stream_run(op->wait_stream, op->wait_seq);
                s->busy = 0;
                fake_wake();
                if (!deferred && s->tail && s->tail->seq > upto) upto = s->tail->seq;
            }
        } else {
            exec_op(op);
        }
        free_op(op);
    }
}

/* Runs the queued work of one context (NULL: of all), with its non-blocking and per-thread
 * streams or without. */
static void drain(struct fake_ctx *ctx, int nonblocking_too) {
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < fake_live_len && !again; i++) {
            if (strcmp(fake_live[i].kind, "stream") != 0) continue;
            struct fake_stream *s = fake_live[i].data;
            if (ctx && s->ctx != ctx) continue;
            if (!nonblocking_too && (s->flags & CU_STREAM_NON_BLOCKING)) continue;
            if (s->head || s->busy) {
                stream_run(s, RUN_ALL);
                again = 1; /* the registry may have changed meanwhile */
            }
        }
    }
    for (int i = 0; i < MAX_DEVICES; i++) {
        if (ctx && &contexts[i] != ctx) continue;
        stream_run(&contexts[i].legacy, RUN_ALL);
        if (nonblocking_too) stream_run(&contexts[i].per_thread, RUN_ALL);
    }
}

/* Queues an operation (legacy-stream semantics: the legacy stream waits for the context's
 * blocking streams and they wait for it); runs it at once unless FAKE_CU_DEFER. Returns its
 * sequence number (the op itself may be gone already). */
static unsigned long long enqueue(struct fake_stream *s, struct fake_op *op) {
    if (s->kind == STREAM_LEGACY) {
        drain(s->ctx, 0);
    } else if (s->kind == STREAM_USER && !(s->flags & CU_STREAM_NON_BLOCKING)) {
        stream_run(&s->ctx->legacy, RUN_ALL);
    }
    unsigned long long seq = op->seq = ++op_seq;
    op->next = NULL;
    if (op->kind == OP_RECORD) {
        op->event->recorded = 1;
        op->event->stream = s;
        op->event->pending_seq = seq;
    }
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    if (!deferred && !s->busy) stream_run(s, seq);
    return seq;
}

static struct fake_op *new_op(enum op_kind kind) {
    struct fake_op *op = calloc(1, sizeof *op);
    if (op) op->kind = kind;
    return op;
}

/* The stream a CUstream names for the current context: NULL and CU_STREAM_LEGACY (0x1) are
 * its legacy stream, CU_STREAM_PER_THREAD (0x2) its per-thread stream (one per context
 * here). */
static CUresult resolve_stream(const char *entry, CUstream handle, struct fake_stream **out) {
    uintptr_t h = (uintptr_t)handle;
    if (h == 0 || h == 1) {
        *out = &current->legacy;
        return CUDA_SUCCESS;
    }
    if (h == 2) {
        *out = &current->per_thread;
        return CUDA_SUCCESS;
    }
    struct fake_obj *obj = need(entry, "stream", handle, 0);
    if (!obj) return CUDA_ERROR_INVALID_HANDLE;
    struct fake_stream *s = obj->data;
    if (s->ctx != current) {
        fake_violation("stream of another context: %s on stream %#lx of device %d's context "
                       "while device %d's is current",
                       entry, (unsigned long)h, s->ctx->ordinal, current->ordinal);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- memory ------------------------------------------------------------------------------ */

static CUresult alloc_memfd(size_t size, enum mem_kind kind, CUdeviceptr *out) {
    if (!out || size == 0) return CUDA_ERROR_INVALID_VALUE;
    if (size > device_memory(current->ordinal) - current->allocated)
        return CUDA_ERROR_OUT_OF_MEMORY;
    char name[64];
    snprintf(name, sizeof name, "fake-cuda-%d-%llu", (int)getpid(), fake_next_id);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) == 0)
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    struct fake_mem *mem = p == MAP_FAILED ? NULL : calloc(1, sizeof *mem);
    if (!mem) {
        if (p != MAP_FAILED) munmap(p, size);
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mem->kind = kind;
    mem->ctx = current;
    mem->fd = fd;
    mem->map_len = size;
    mem->src_pid = -1;
    fake_obj_add("alloc", (uintptr_t)p, size, current, mem);
    current->allocated += size;
    *out = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static void release_mem(struct fake_obj *obj, const char *why) {
    struct fake_mem *mem = obj->data;
    munmap((void *)obj->handle, mem->map_len);
    if (mem->fd >= 0) close(mem->fd);
    if (mem->kind == MEM_DEVICE || mem->kind == MEM_MANAGED) mem->ctx->allocated -= obj->size;
    free(mem);
    fake_obj_remove(obj, why);
}

/* Unloads a module; `obj`, its registry entry, is not valid afterwards. */
static void unload_module(struct fake_obj *obj, const char *why) {
    struct fake_module *m = obj->data;
    const char *member_why = why == WHY_CONTEXT ? WHY_CONTEXT : "unloaded with its module";
    for (int i = 0; i < m->nfuncs; i++) {
        struct fake_obj *f = fake_obj_find("function", (uintptr_t)&m->funcs[i]);
        if (f) fake_obj_remove(f, member_why);
    }
    for (int i = 0; i < m->nglobals; i++) {
        struct fake_obj *g = fake_obj_find("global", (uintptr_t)m->globals[i].mem);
        if (g) fake_obj_remove(g, member_why);
        free(m->globals[i].mem);
        m->globals[i].mem = NULL;
    }
    /* The module and its functions stay allocated, so stale handles are never reused. The
     * removals above may have moved the module's own entry: find it again. */
    obj = fake_obj_find("module", (uintptr_t)m);
    if (obj) fake_obj_remove(obj, why);
}

static void destroy_obj(struct fake_obj *obj, const char *why) {
    if (!strcmp(obj->kind, "alloc") || !strcmp(obj->kind, "host") || !strcmp(obj->kind, "ipc"))
        release_mem(obj, why);
    else if (!strcmp(obj->kind, "module"))
        unload_module(obj, why);
    else
        fake_obj_remove(obj, why);
}

/* A device's primary context went from 1 to 0 retains: everything of it dies. */
static void destroy_context(struct fake_ctx *ctx) {
    drain(NULL, 1);
    struct fake_obj *obj;
    while ((obj = fake_obj_owned(ctx)) != NULL) {
        if (!strcmp(obj->kind, "ipc")) {
            fake_violation("leak at context release: IPC mapping %#lx (id %llu, %zu bytes) "
                           "opened and not closed when device %d's primary context was "
                           "released",
                           (unsigned long)obj->handle, obj->id, obj->size, ctx->ordinal);
        } else if (obj->size) {
            fake_violation("leak at context release: %s %#lx (id %llu, %zu bytes) still alive "
                           "when device %d's primary context was released",
                           obj->kind, (unsigned long)obj->handle, obj->id, obj->size,
                           ctx->ordinal);
        } else {
            fake_violation("leak at context release: %s %#lx (id %llu) still alive when "
                           "device %d's primary context was released",
                           obj->kind, (unsigned long)obj->handle, obj->id, ctx->ordinal);
        }
        destroy_obj(obj, WHY_CONTEXT);
    }
    ctx->allocated = 0;
}

/* ---- initialisation, devices, errors ---------------------------------------------------- */

CUresult cuInit(unsigned int flags) {
    BEGIN(NEEDS_NOTHING);
    if (flags) RETURN(CUDA_ERROR_INVALID_VALUE);
    int result = fake_env_int("FAKE_CU_INIT", 0);
    if (result == 0) initialised = 1;
    RETURN(result);
}

CUresult cuDriverGetVersion(int *version) {
    BEGIN(NEEDS_NOTHING);
    if (!version) RETURN(CUDA_ERROR_INVALID_VALUE);
    *version = 12040;
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceGetCount(int *count) {
    BEGIN(NEEDS_INIT);
    int result = fake_env_int("FAKE_CU_COUNT_RESULT", 0);
    if (result) RETURN(result);
    if (!count) RETURN(CUDA_ERROR_INVALID_VALUE);
    *count = device_count();
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    BEGIN(NEEDS_INIT);
    if (ordinal < 0 || ordinal >= device_count()) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!device) RETURN(CUDA_ERROR_INVALID_VALUE);
    *device = 10 + ordinal;
    RETURN(CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
    BEGIN(NEEDS_INIT);
    int result = fake_env_int("FAKE_CU_NAME_RESULT", 0);
    if (result) RETURN(result);
    if (ordinal_of(device) < 0) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!name || len <= 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    snprintf(name, (size_t)len, "Fake GPU %d", ordinal_of(device));
    RETURN(CUDA_SUCCESS);
}

#ifndef NO_TOTAL_MEM
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) {
    BEGIN(NEEDS_INIT);
    int ordinal = ordinal_of(device);
    if (ordinal < 0) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!bytes) RETURN(CUDA_ERROR_INVALID_VALUE);
    *bytes = device_memory(ordinal); /* 1 GiB, 2 GiB */
    RETURN(CUDA_SUCCESS);
}
#endif

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
    BEGIN(NEEDS_INIT);
    if (ordinal_of(device) < 0) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!value) RETURN(CUDA_ERROR_INVALID_VALUE);
    switch (attribute) {
    case 16: *value = 100 + device; break; /* MULTIPROCESSOR_COUNT */
    case 1: *value = 1024; break;          /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: *value = 1024; break;  /* MAX_BLOCK_DIM_X, _Y */
    case 4: *value = 64; break;            /* MAX_BLOCK_DIM_Z */
    case 5: *value = 2147483647; break;    /* MAX_GRID_DIM_X */
    case 6: case 7: *value = 65535; break; /* MAX_GRID_DIM_Y, _Z */
    case 8: *value = 49152; break;         /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 41: *value = 1; break;            /* UNIFIED_ADDRESSING */
    case 75: *value = 8; break;            /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = 6; break;            /* COMPUTE_CAPABILITY_MINOR */
    default: RETURN(CUDA_ERROR_INVALID_VALUE); /* CLOCK_RATE (13) and others: unknown */
    }
    RETURN(CUDA_SUCCESS);
}

/* 16 bytes, distinct per device, the same in every process. */
static CUresult device_uuid(CUuuid *uuid, CUdevice device) {
    int ordinal = ordinal_of(device);
    if (ordinal < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 16; i++)
        uuid->bytes[i] = (char)(unsigned char)((0x3d * (i + 1)) ^ (0x51 * ordinal));
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) {
    BEGIN(NEEDS_INIT);
    RETURN(device_uuid(uuid, device));
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) {
    BEGIN(NEEDS_INIT);
    RETURN(device_uuid(uuid, device));
}

#ifndef NO_ERROR_NAMES
static const struct {
    int code;
    const char *name, *text;
} ERRORS[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_text(int code, const char **text, int name) {
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++) {
        if (ERRORS[i].code == code) {
            *text = name ? ERRORS[i].name : ERRORS[i].text;
            return CUDA_SUCCESS;
        }
    }
    *text = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult code, const char **text) {
    BEGIN(NEEDS_NOTHING);
    RETURN(error_text(code, text, 1));
}

CUresult cuGetErrorString(CUresult code, const char **text) {
    BEGIN(NEEDS_NOTHING);
    RETURN(error_text(code, text, 0));
}
#endif

/* ---- primary contexts ------------------------------------------------------------------ */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice device) {
    BEGIN(NEEDS_INIT);
    int ordinal = ordinal_of(device);
    if (ordinal < 0) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    struct fake_ctx *ctx = &contexts[ordinal];
    if (ctx->refs++ == 0) {
        ctx->ordinal = ordinal;
        ctx->legacy.ctx = ctx->per_thread.ctx = ctx;
        ctx->legacy.kind = STREAM_LEGACY;
        ctx->per_thread.kind = STREAM_PER_THREAD;
        ctx->per_thread.flags = CU_STREAM_NON_BLOCKING;
    }
    *pctx = ctx;
    RETURN(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    BEGIN(NEEDS_INIT);
    int ordinal = ordinal_of(device);
    if (ordinal < 0) RETURN(CUDA_ERROR_INVALID_DEVICE);
    struct fake_ctx *ctx = &contexts[ordinal];
    if (ctx->refs == 0) {
        fake_violation("retain/release imbalance: cuDevicePrimaryCtxRelease_v2 on device %d "
                       "with no retain outstanding",
                       ordinal);
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (ctx->refs == 1) destroy_context(ctx); /* may drop the lock for host functions */
    ctx->refs--;
    RETURN(CUDA_SUCCESS);
}

static struct fake_ctx *context_of(CUcontext handle) {
    for (int i = 0; i < MAX_DEVICES; i++)
        if (handle == &contexts[i]) return &contexts[i];
    return NULL;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    BEGIN(NEEDS_INIT);
    if (!ctx) {
        current = NULL;
        RETURN(CUDA_SUCCESS);
    }
    struct fake_ctx *c = context_of(ctx);
    if (!c) {
        fake_violation("unknown handle: cuCtxSetCurrent on %#lx, which is no context",
                       (unsigned long)(uintptr_t)ctx);
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    if (c->refs == 0) {
        fake_violation("released context is current: cuCtxSetCurrent on device %d's primary "
                       "context, which is not retained",
                       c->ordinal);
        RETURN(CUDA_ERROR_CONTEXT_IS_DESTROYED);
    }
    current = c;
    RETURN(CUDA_SUCCESS);
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
    BEGIN(NEEDS_INIT);
    if (!ctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    *ctx = current;
    RETURN(CUDA_SUCCESS);
}

CUresult cuCtxGetDevice(CUdevice *device) {
    BEGIN(NEEDS_CONTEXT);
    if (!device) RETURN(CUDA_ERROR_INVALID_VALUE);
    *device = 10 + current->ordinal;
    RETURN(CUDA_SUCCESS);
}

CUresult cuCtxSynchronize(void) {
    BEGIN(NEEDS_CONTEXT);
    drain(current, 1);
    RETURN(CUDA_SUCCESS);
}

/* ---- memory ------------------------------------------------------------------------------ */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(alloc_memfd(bytesize, MEM_DEVICE, dptr));
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    BEGIN(NEEDS_CONTEXT);
    if (flags != 1 && flags != 2) RETURN(CUDA_ERROR_INVALID_VALUE); /* ATTACH_GLOBAL, _HOST */
    RETURN(alloc_memfd(bytesize, MEM_MANAGED, dptr));
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
    BEGIN(NEEDS_CONTEXT);
    uintptr_t p = (uintptr_t)dptr;
    if (p == 0) RETURN(CUDA_SUCCESS);
    struct fake_obj *obj = fake_obj_find("alloc", p);
    if (obj) {
        drain(NULL, 1); /* cuMemFree synchronises; the registry may change meanwhile */
        obj = fake_obj_find("alloc", p);
        if (obj) release_mem(obj, "freed");
        RETURN(CUDA_SUCCESS);
    }
    static const char *const OTHERS[] = {"alloc", "ipc", "host", NULL};
    struct fake_obj *other = fake_obj_find_range(OTHERS, p, 0);
    if (other && !strcmp(other->kind, "alloc")) {
        fake_violation("wrong free: cuMemFree_v2 on %#lx, inside alloc %#lx (id %llu) but not "
                       "its start",
                       (unsigned long)p, (unsigned long)other->handle, other->id);
    } else if (other) {
        fake_violation("wrong free: cuMemFree_v2 on %s %#lx (id %llu)%s", other->kind,
                       (unsigned long)other->handle, other->id,
                       !strcmp(other->kind, "ipc") ? ", close it with cuIpcCloseMemHandle"
                                                   : ", free it with cuMemFreeHost");
    } else {
        need("cuMemFree_v2", "alloc", (const void *)p, 1);
    }
    RETURN(CUDA_ERROR_INVALID_VALUE);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) {
    BEGIN(NEEDS_CONTEXT);
    if (!pp || bytesize == 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    void *p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct fake_mem *mem = p == MAP_FAILED ? NULL : calloc(1, sizeof *mem);
    if (!mem) {
        if (p != MAP_FAILED) munmap(p, bytesize);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    mem->kind = MEM_HOST;
    mem->ctx = current;
    mem->fd = -1;
    mem->map_len = bytesize;
    mem->src_pid = -1;
    fake_obj_add("host", (uintptr_t)p, bytesize, current, mem);
    *pp = p;
    RETURN(CUDA_SUCCESS);
}

CUresult cuMemFreeHost(void *p) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_obj *obj = fake_obj_find("host", (uintptr_t)p);
    if (!obj) {
        need("cuMemFreeHost", "host", p, 1);
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    drain(NULL, 1);
    obj = fake_obj_find("host", (uintptr_t)p);
    if (obj) release_mem(obj, "freed");
    RETURN(CUDA_SUCCESS);
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    BEGIN(NEEDS_CONTEXT);
    if (!free_bytes || !total) RETURN(CUDA_ERROR_INVALID_VALUE);
    *total = device_memory(current->ordinal);
    *free_bytes = *total - current->allocated;
    RETURN(CUDA_SUCCESS);
}

static int is_pinned(const void *p, size_t len) {
    static const char *const HOST[] = {"host", NULL};
    return fake_obj_find_range(HOST, (uintptr_t)p, len) != NULL;
}

/* A copy of `bytes` on stream `s` (NULL: synchronous, on the legacy stream of the current
 * context, and waits for it). */
static CUresult copy(const char *entry, void *dst, const void *src, size_t bytes, int dst_dev,
                     int src_dev, struct fake_stream *s) {
    if (bytes == 0) return CUDA_SUCCESS;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    if (dst_dev && (rc = check_memory(NULL, entry, "destination", (uintptr_t)dst, bytes)))
        return rc;
    if (src_dev && (rc = check_memory(NULL, entry, "source", (uintptr_t)src, bytes)))
        return rc;
    struct fake_op *op = new_op(OP_COPY);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->dst = dst;
    op->src = src;
    op->bytes = bytes;
    int sync = s == NULL;
    if (sync) s = &current->legacy;
    if (!src_dev && !sync && !is_pinned(src, bytes)) {
        /* From pageable memory: staged now, so the caller may reuse it at once. */
        op->staging = malloc(bytes);
        if (!op->staging) {
            free_op(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(op->staging, src, bytes);
    }
    int wait = sync || (!dst_dev && !is_pinned(dst, bytes));
    unsigned long long seq = enqueue(s, op);
    /* Synchronous copies, and copies to pageable host memory, return when done. */
    if (wait) stream_run(s, seq);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(copy(__func__, (void *)(uintptr_t)dst, src, bytes, 1, 0, NULL));
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(copy(__func__, dst, (const void *)(uintptr_t)src, bytes, 0, 1, NULL));
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(copy(__func__, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, 1, 1,
                NULL));
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    RETURN(copy(__func__, (void *)(uintptr_t)dst, src, bytes, 1, 0, s));
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    RETURN(copy(__func__, dst, (const void *)(uintptr_t)src, bytes, 0, 1, s));
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    RETURN(copy(__func__, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes, 1, 1, s));
}

static CUresult set(const char *entry, CUdeviceptr dst, unsigned value, int width, size_t count,
                    struct fake_stream *s) {
    if (count == 0) return CUDA_SUCCESS;
    if ((uintptr_t)dst % (uintptr_t)width) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_memory(NULL, entry, "destination", (uintptr_t)dst, count * (size_t)width);
    if (rc) return rc;
    struct fake_op *op = new_op(OP_SET);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->dst = (void *)(uintptr_t)dst;
    op->value = value;
    op->width = width;
    op->count = count;
    int sync = s == NULL;
    if (sync) s = &current->legacy;
    unsigned long long seq = enqueue(s, op);
    if (sync) stream_run(s, seq);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(set(__func__, dst, value, 1, count, NULL));
}

CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t count) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(set(__func__, dst, value, 2, count, NULL));
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(set(__func__, dst, value, 4, count, NULL));
}

#define MEMSET_ASYNC(name, type, width)                                                    \
    CUresult name(CUdeviceptr dst, type value, size_t count, CUstream stream) {            \
        BEGIN(NEEDS_CONTEXT);                                                              \
        struct fake_stream *s;                                                             \
        CUresult rc = resolve_stream(__func__, stream, &s);                                \
        if (rc) RETURN(rc);                                                                \
        RETURN(set(__func__, dst, value, width, count, s));                                \
    }
MEMSET_ASYNC(cuMemsetD8Async, unsigned char, 1)
MEMSET_ASYNC(cuMemsetD16Async, unsigned short, 2)
MEMSET_ASYNC(cuMemsetD32Async, unsigned int, 4)

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr) {
    BEGIN(NEEDS_CONTEXT);
    static const char *const KINDS[] = {"alloc", "ipc", "global", NULL};
    struct fake_obj *obj = fake_obj_find_range(KINDS, (uintptr_t)dptr, 0);
    if (!obj) RETURN(CUDA_ERROR_NOT_FOUND);
    if (base) *base = (CUdeviceptr)obj->handle;
    if (size) *size = obj->size;
    RETURN(CUDA_SUCCESS);
}

CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr) {
    BEGIN(NEEDS_CONTEXT);
    if (!data) RETURN(CUDA_ERROR_INVALID_VALUE);
    struct fake_obj *obj = fake_obj_find_range(DEVICE_MEMORY, (uintptr_t)ptr, 0);
    if (!obj) RETURN(CUDA_ERROR_INVALID_VALUE);
    int host = !strcmp(obj->kind, "host");
    int managed =
        !strcmp(obj->kind, "alloc") && ((struct fake_mem *)obj->data)->kind == MEM_MANAGED;
    switch (attribute) {
    case 1: /* CONTEXT */
        *(CUcontext *)data = obj_ctx(obj);
        break;
    case 2: /* MEMORY_TYPE: CU_MEMORYTYPE_HOST 1, _DEVICE 2 */
        *(unsigned int *)data = host ? 1 : 2;
        break;
    case 3: /* DEVICE_POINTER */
        *(CUdeviceptr *)data = ptr;
        break;
    case 4: /* HOST_POINTER */
        if (!host && !managed) RETURN(CUDA_ERROR_INVALID_VALUE);
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case 7: /* BUFFER_ID */
        *(unsigned long long *)data = obj->id;
        break;
    case 9: /* DEVICE_ORDINAL */
        *(int *)data = obj_ctx(obj)->ordinal;
        break;
    case 11: /* RANGE_START_ADDR */
        *(CUdeviceptr *)data = (CUdeviceptr)obj->handle;
        break;
    case 12: /* RANGE_SIZE */
        *(size_t *)data = obj->size;
        break;
    default: /* 15 is IS_GPU_DIRECT_RDMA_CAPABLE (not BUFFER_ID); others: not answered */
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    RETURN(CUDA_SUCCESS);
}

/* ---- streams and events ---------------------------------------------------------------- */

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    BEGIN(NEEDS_CONTEXT);
    if (!stream || (flags & ~CU_STREAM_NON_BLOCKING)) RETURN(CUDA_ERROR_INVALID_VALUE);
    struct fake_stream *s = calloc(1, sizeof *s);
    if (!s) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    s->ctx = current;
    s->flags = flags;
    s->kind = STREAM_USER;
    fake_obj_add("stream", (uintptr_t)s, 0, current, s);
    *stream = s;
    RETURN(CUDA_SUCCESS);
}

CUresult cuStreamDestroy_v2(CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_obj *obj = need(__func__, "stream", stream, 1);
    if (!obj) RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* Like CUDA, destroying a busy stream is allowed: its work completes first. */
    stream_run(stream, RUN_ALL);
    obj = fake_obj_find("stream", (uintptr_t)stream);
    if (obj) fake_obj_remove(obj, "destroyed");
    RETURN(CUDA_SUCCESS);
}

CUresult cuStreamSynchronize(CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    if (s->kind == STREAM_LEGACY) drain(s->ctx, 0);
    stream_run(s, RUN_ALL);
    RETURN(CUDA_SUCCESS);
}

CUresult cuStreamQuery(CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    if (!s->head && !s->busy) RETURN(CUDA_SUCCESS);
    if (!s->busy) stream_run(s, RUN_ALL); /* deferred work progresses when asked about */
    RETURN(CUDA_ERROR_NOT_READY);
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    struct fake_obj *obj = need(__func__, "event", event, 0);
    if (!obj) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (flags) RETURN(CUDA_ERROR_INVALID_VALUE);
    /* A wait on an event never recorded, or whose record has run, is a no-op. */
    if (!event->recorded || event->done_seq >= event->pending_seq) RETURN(CUDA_SUCCESS);
    struct fake_op *op = new_op(OP_WAIT);
    if (!op) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    op->event = event;
    op->wait_stream = event->stream;
    op->wait_seq = event->pending_seq;
    enqueue(s, op);
    RETURN(CUDA_SUCCESS);
}

CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *userData) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    if (!fn) RETURN(CUDA_ERROR_INVALID_VALUE);
    struct fake_op *op = new_op(OP_HOST);
    if (!op) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    op->host = fn;
    op->user = userData;
    enqueue(s, op); /* may run it now, without the lock */
    RETURN(CUDA_SUCCESS);
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
    BEGIN(NEEDS_CONTEXT);
    if (!event || (flags & ~7u)) RETURN(CUDA_ERROR_INVALID_VALUE);
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    e->ctx = current;
    e->flags = flags;
    fake_obj_add("event", (uintptr_t)e, 0, current, e);
    *event = e;
    RETURN(CUDA_SUCCESS);
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_obj *obj = need(__func__, "event", event, 0);
    if (!obj) RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, stream, &s);
    if (rc) RETURN(rc);
    if (event->ctx != s->ctx) {
        fake_violation("stream of another context: cuEventRecord of event %#lx (device %d) "
                       "on a stream of device %d",
                       (unsigned long)(uintptr_t)event, event->ctx->ordinal, s->ctx->ordinal);
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct fake_op *op = new_op(OP_RECORD);
    if (!op) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    op->event = event;
    enqueue(s, op);
    RETURN(CUDA_SUCCESS);
}

CUresult cuEventSynchronize(CUevent event) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "event", event, 0)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (event->recorded && event->done_seq < event->pending_seq)
        stream_run(event->stream, event->pending_seq);
    RETURN(CUDA_SUCCESS);
}

CUresult cuEventQuery(CUevent event) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "event", event, 0)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!event->recorded || event->done_seq >= event->pending_seq) RETURN(CUDA_SUCCESS);
    if (!event->stream->busy) stream_run(event->stream, event->pending_seq);
    RETURN(CUDA_ERROR_NOT_READY);
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "event", start, 0) || !need(__func__, "event", end, 0))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!ms) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!start->recorded || !end->recorded ||
        ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (start->done_seq < start->pending_seq || end->done_seq < end->pending_seq)
        RETURN(CUDA_ERROR_NOT_READY);
    *ms = (float)((double)(end->when.tv_sec - start->when.tv_sec) * 1e3 +
                  (double)(end->when.tv_nsec - start->when.tv_nsec) / 1e6);
    RETURN(CUDA_SUCCESS);
}

CUresult cuEventDestroy_v2(CUevent event) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_obj *obj = need(__func__, "event", event, 1);
    if (!obj) RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* A pending record still completes (the event's memory is never reused). */
    fake_obj_remove(obj, "destroyed");
    RETURN(CUDA_SUCCESS);
}

/* ---- PTX ---------------------------------------------------------------------------------- */

struct lexer {
    const char *p, *end;
    int line;
};

struct tok {
    const char *s;
    size_t n; /* 0: the end of the text */
    int line;
};

static int word_char(char c) {
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '$' || c == '%';
}

static struct tok lex(struct lexer *lx) {
    for (;;) {
        while (lx->p < lx->end && isspace((unsigned char)*lx->p)) {
            if (*lx->p == '\n') lx->line++;
            lx->p++;
        }
        if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '/') {
            while (lx->p < lx->end && *lx->p != '\n') lx->p++;
        } else if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '*') {
            const char *q = lx->p + 2;
            while (q + 1 < lx->end && !(q[0] == '*' && q[1] == '/')) {
                if (*q == '\n') lx->line++;
                q++;
            }
            lx->p = q + 1 < lx->end ? q + 2 : lx->end;
        } else {
            break;
        }
    }
    struct tok t = {lx->p, 0, lx->line};
    if (lx->p >= lx->end) return t;
    if (word_char(*lx->p)) {
        while (lx->p < lx->end && word_char(*lx->p)) lx->p++;
    } else if (*lx->p == '"') {
        lx->p++;
        while (lx->p < lx->end && *lx->p != '"' && *lx->p != '\n') lx->p++;
        if (lx->p < lx->end && *lx->p == '"') lx->p++;
    } else {
        lx->p++;
    }
    t.n = (size_t)(lx->p - t.s);
    return t;
}

static int is(struct tok t, const char *s) { return t.n == strlen(s) && !memcmp(t.s, s, t.n); }

/* An identifier: [A-Za-z_$%][A-Za-z0-9_$]* */
static int is_ident(struct tok t) {
    if (!t.n || !(isalpha((unsigned char)t.s[0]) || strchr("_$%", t.s[0]))) return 0;
    for (size_t i = 1; i < t.n; i++)
        if (t.s[i] == '.' || t.s[i] == '%') return 0;
    return 1;
}

/* An integer literal (decimal, 0x hex, 0 octal, with an optional U suffix). */
static int to_int(struct tok t, long long *out) {
    char buf[32];
    if (!t.n || t.n >= sizeof buf || !isdigit((unsigned char)t.s[0])) return 0;
    memcpy(buf, t.s, t.n);
    buf[t.n] = '\0';
    char *end;
    unsigned long long v = strtoull(buf, &end, 0);
    if (*end == 'U') end++;
    if (*end) return 0;
    *out = (long long)v;
    return 1;
}

static size_t type_size(struct tok t, int *is_float) {
    static const struct {
        const char *name;
        size_t size;
        int is_float;
    } TYPES[] = {
        {".b8", 1, 0},  {".u8", 1, 0},  {".s8", 1, 0},  {".b16", 2, 0}, {".u16", 2, 0},
        {".s16", 2, 0}, {".f16", 2, 1}, {".bf16", 2, 1}, {".f16x2", 4, 1}, {".b32", 4, 0},
        {".u32", 4, 0}, {".s32", 4, 0}, {".f32", 4, 1}, {".b64", 8, 0}, {".u64", 8, 0},
        {".s64", 8, 0}, {".f64", 8, 1}, {".b128", 16, 0},
    };
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        if (is(t, TYPES[i].name)) {
            if (is_float) *is_float = TYPES[i].is_float;
            return TYPES[i].size;
        }
    }
    return 0;
}

struct ptx {
    struct lexer lx;
    struct fake_module *m;
    char *err;
    size_t errcap;
};

__attribute__((format(printf, 3, 4))) static int ptx_fail(struct ptx *px, int line,
                                                          const char *fmt, ...) {
    int n = snprintf(px->err, px->errcap, "fake ptx: line %d: ", line);
    if (n > 0 && (size_t)n < px->errcap) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(px->err + n, px->errcap - (size_t)n, fmt, args);
        va_end(args);
    }
    return -1;
}

static struct tok next(struct ptx *px) { return lex(&px->lx); }

static struct tok peek(struct ptx *px) {
    struct lexer saved = px->lx;
    struct tok t = lex(&px->lx);
    px->lx = saved;
    return t;
}

/* Skips a balanced (...) or {...} whose opener was just read. */
static int skip_balanced(struct ptx *px, char open, char close, int line) {
    for (int depth = 1; depth;) {
        struct tok t = next(px);
        if (!t.n) return ptx_fail(px, line, "unbalanced '%c'", open);
        if (t.n == 1 && t.s[0] == open) depth++;
        if (t.n == 1 && t.s[0] == close) depth--;
    }
    return 0;
}

/* Skips a statement up to its ';', or through its {...} block. */
static int skip_statement(struct ptx *px, int line) {
    for (;;) {
        struct tok t = next(px);
        if (!t.n) return ptx_fail(px, line, "unterminated statement");
        if (is(t, ";")) return 0;
        if (is(t, "{")) return skip_balanced(px, '{', '}', t.line);
    }
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The parameter list after its '('; fills f (NULL: only checks). */
static int parse_params(struct ptx *px, struct fake_func *f, int is_entry, const char *name) {
    struct tok t = next(px);
    if (is(t, ")")) return 0;
    size_t offset = 0;
    for (;;) {
        if (!is(t, ".param") && (is_entry || !is(t, ".reg")))
            return ptx_fail(px, t.line, "expected .param in the parameter list of %s, found '%.*s'",
                            name, (int)t.n, t.s);
        size_t size = 0, align = 0, count = 1;
        int is_ptr = 0;
        for (t = next(px); t.n && t.s[0] == '.'; t = next(px)) {
            size_t ts = type_size(t, NULL);
            long long v;
            if (ts) {
                size = ts;
            } else if (is(t, ".ptr")) {
                is_ptr = 1;
            } else if (is(t, ".align")) {
                t = next(px);
                if (!to_int(t, &v) || v <= 0 || (v & (v - 1)))
                    return ptx_fail(px, t.line, "bad .align in the parameters of %s", name);
                align = (size_t)v;
            } else if (!(is(t, ".global") || is(t, ".const") || is(t, ".local") ||
                         is(t, ".shared"))) {
                return ptx_fail(px, t.line, "unexpected '%.*s' in the parameters of %s",
                                (int)t.n, t.s, name);
            }
        }
        if (!size) return ptx_fail(px, t.line, "a parameter of %s has no type", name);
        if (!is_ident(t))
            return ptx_fail(px, t.line, "expected a parameter name in %s, found '%.*s'", name,
                            (int)t.n, t.s);
        t = next(px);
        if (is(t, "[")) {
            long long v;
            t = next(px);
            if (!to_int(t, &v) || v <= 0)
                return ptx_fail(px, t.line, "bad array size in the parameters of %s", name);
            count = (size_t)v;
            if (!is(next(px), "]")) return ptx_fail(px, t.line, "expected ']' in %s", name);
            t = next(px);
        }
        if (!align) align = size;
        if (f) {
            if (f->nparams == PARAMS_MAX)
                return ptx_fail(px, t.line, "%s has more than %d parameters", name, PARAMS_MAX);
            struct ptx_param *p = &f->params[f->nparams++];
            offset = align_up(offset, align);
            p->offset = offset;
            p->size = size * count;
            p->align = align;
            p->is_ptr = is_ptr;
            offset += p->size;
            f->param_bytes = offset;
        }
        if (is(t, ")")) return 0;
        if (!is(t, ","))
            return ptx_fail(px, t.line, "expected ',' or ')' in the parameters of %s, found '%.*s'",
                            name, (int)t.n, t.s);
        t = next(px);
    }
}

/* After .entry or .func: [(return)] name [(params)] [directives] (; | { body }). */
static int parse_function(struct ptx *px, int is_entry, int line) {
    struct tok t = next(px);
    if (!is_entry && is(t, "(")) {
        if (skip_balanced(px, '(', ')', t.line)) return -1;
        t = next(px);
    }
    if (!is_ident(t))
        return ptx_fail(px, t.line, "expected a name after %s, found '%.*s'",
                        is_entry ? ".entry" : ".func", (int)t.n, t.s);
    char name[NAME_LEN];
    if (t.n >= NAME_LEN) return ptx_fail(px, t.line, "name too long");
    memcpy(name, t.s, t.n);
    name[t.n] = '\0';
    struct fake_module *m = px->m;
    struct fake_func *f = NULL;
    if (is_entry) {
        for (int i = 0; i < m->nfuncs; i++)
            if (!strcmp(m->funcs[i].name, name))
                return ptx_fail(px, t.line, "duplicate entry %s", name);
        struct fake_func *grown = realloc(m->funcs, (size_t)(m->nfuncs + 1) * sizeof *grown);
        if (!grown) return ptx_fail(px, t.line, "out of memory");
        m->funcs = grown;
        f = &m->funcs[m->nfuncs];
        memset(f, 0, sizeof *f);
        memcpy(f->name, name, sizeof name);
        f->module = m;
        f->add_step = 1;
    }
    t = next(px);
    if (is(t, "(")) {
        if (parse_params(px, f, is_entry, name)) return -1;
        t = next(px);
    }
    while (t.n && !is(t, "{") && !is(t, ";")) { /* .maxntid, .reqntid, .noreturn, ... */
        if (is(t, ")") || is(t, "}") || is(t, "("))
            return ptx_fail(px, t.line, "unexpected '%.*s' after %s", (int)t.n, t.s, name);
        t = next(px);
    }
    if (!t.n) return ptx_fail(px, line, "%s has no body", name);
    if (is(t, ";")) return 0; /* a declaration */
    /* The body: skipped, except add_one's step (see the top of the file). */
    int depth = 1, in_add = 0, have_literal = 0, negative = 0, found = 0;
    long long literal = 0;
    while (depth) {
        t = next(px);
        if (!t.n) return ptx_fail(px, line, "the body of %s is not closed", name);
        if (is(t, "{")) depth++;
        if (is(t, "}")) depth--;
        if (!f || found) continue;
        if (is(t, "add.s32") || is(t, "add.u32")) {
            in_add = 1;
            have_literal = negative = 0;
        } else if (in_add && is(t, ";")) {
            if (have_literal) {
                f->add_step = negative ? -literal : literal;
                found = 1;
            }
            in_add = 0;
        } else if (in_add) {
            int neg = is(t, "-");
            have_literal = to_int(t, &literal);
            if (!have_literal) negative = neg;
        }
    }
    if (f) m->nfuncs++;
    return 0;
}

/* Writes one initialiser value into `at` (elem bytes). */
static void put_value(unsigned char *at, size_t elem, int is_float, struct tok t, int negative) {
    char buf[64];
    if (!t.n || t.n >= sizeof buf) return;
    memcpy(buf, t.s, t.n);
    buf[t.n] = '\0';
    if ((buf[0] == '0' && (buf[1] == 'f' || buf[1] == 'F' || buf[1] == 'd' || buf[1] == 'D'))) {
        unsigned long long bits = strtoull(buf + 2, NULL, 16); /* 0fXXXXXXXX, 0dXXXX... */
        memcpy(at, &bits, elem < 8 ? elem : 8);
    } else if (is_float && elem == 4) {
        float v = (float)strtod(buf, NULL);
        if (negative) v = -v;
        memcpy(at, &v, 4);
    } else if (is_float && elem == 8) {
        double v = strtod(buf, NULL);
        if (negative) v = -v;
        memcpy(at, &v, 8);
    } else {
        unsigned long long v = strtoull(buf, NULL, 0);
        if (negative) v = 0 - v;
        memcpy(at, &v, elem < 8 ? elem : 8); /* little-endian */
    }
}

struct value {
    struct tok t;
    int negative;
};

static int declare_global(struct ptx *px, struct tok name, size_t elem, size_t vec,
                          size_t count, int open, size_t align, int is_const, int is_float,
                          struct tok t, const struct value *values, size_t nvalues, int line);

/* After a module-scope .global or .const: [.align N] [.vN] .type name[dims] [= init] ; */
static int parse_variable(struct ptx *px, int is_const, int line) {
    size_t elem = 0, align = 0, vec = 1;
    int is_float = 0;
    struct tok t;
    for (t = next(px); t.n && t.s[0] == '.'; t = next(px)) {
        size_t ts = type_size(t, &is_float);
        long long v;
        if (ts) {
            elem = ts;
        } else if (is(t, ".align")) {
            t = next(px);
            if (!to_int(t, &v) || v <= 0 || (v & (v - 1)))
                return ptx_fail(px, t.line, "bad .align");
            align = (size_t)v;
        } else if (is(t, ".v2") || is(t, ".v4") || is(t, ".v8")) {
            vec = (size_t)(t.s[2] - '0');
        } else if (is(t, ".texref") || is(t, ".samplerref") || is(t, ".surfref")) {
            return skip_statement(px, line);
        } else {
            return ptx_fail(px, t.line, "unexpected '%.*s' in a variable declaration", (int)t.n,
                            t.s);
        }
    }
    if (!elem) return ptx_fail(px, t.line, "a variable without a type");
    if (!is_ident(t))
        return ptx_fail(px, t.line, "expected a variable name, found '%.*s'", (int)t.n, t.s);
    struct tok name = t;
    if (name.n >= NAME_LEN) return ptx_fail(px, t.line, "name too long");
    size_t count = 1;
    int open = 0;
    for (t = next(px); is(t, "["); t = next(px)) {
        long long v;
        t = next(px);
        if (is(t, "]")) {
            open = 1;
            continue;
        }
        if (!to_int(t, &v) || v <= 0) return ptx_fail(px, t.line, "bad array size");
        count *= (size_t)v;
        if (!is(next(px), "]")) return ptx_fail(px, t.line, "expected ']'");
    }
    /* The initialiser's values, kept as tokens (and signs) until the size is known. */
    struct value *values = NULL;
    size_t nvalues = 0, cap = 0;
    if (is(t, "=")) {
        int depth = 0, negative = 0;
        do {
            t = next(px);
            if (!t.n) {
                free(values);
                return ptx_fail(px, line, "unterminated initialiser");
            }
            if (is(t, "{")) {
                depth++;
            } else if (is(t, "}")) {
                depth--;
            } else if (is(t, "-")) {
                negative = 1;
            } else if (is(t, ",")) {
                negative = 0;
            } else {
                if (nvalues == cap) {
                    cap = cap ? 2 * cap : 16;
                    struct value *grown = realloc(values, cap * sizeof *grown);
                    if (!grown) {
                        free(values);
                        return ptx_fail(px, line, "out of memory");
                    }
                    values = grown;
                }
                values[nvalues].t = t; /* numbers; addresses of symbols count as 0 */
                values[nvalues++].negative = negative;
                negative = 0;
            }
        } while (depth > 0);
        t = next(px);
    }
    int rc = declare_global(px, name, elem, vec, count, open, align, is_const, is_float, t,
                            values, nvalues, line);
    free(values);
    return rc;
}

static int declare_global(struct ptx *px, struct tok name, size_t elem, size_t vec,
                          size_t count, int open, size_t align, int is_const, int is_float,
                          struct tok t, const struct value *values, size_t nvalues, int line) {
    if (!is(t, ";"))
        return ptx_fail(px, t.line, "expected ';' after variable %.*s", (int)name.n, name.s);
    if (open) count = nvalues / vec;
    size_t size = elem * vec * count;
    if (!size) return ptx_fail(px, name.line, "variable %.*s has no size", (int)name.n, name.s);
    struct fake_module *m = px->m;
    for (int i = 0; i < m->nglobals; i++)
        if (strlen(m->globals[i].name) == name.n && !memcmp(m->globals[i].name, name.s, name.n))
            return ptx_fail(px, name.line, "duplicate variable %.*s", (int)name.n, name.s);
    struct fake_global *grown = realloc(m->globals, (size_t)(m->nglobals + 1) * sizeof *grown);
    if (!grown) return ptx_fail(px, line, "out of memory");
    m->globals = grown;
    struct fake_global *g = &m->globals[m->nglobals];
    memset(g, 0, sizeof *g);
    memcpy(g->name, name.s, name.n);
    g->size = size;
    g->align = align ? align : elem;
    g->is_const = is_const;
    void *mem = NULL;
    if (posix_memalign(&mem, g->align < 16 ? 16 : g->align, size))
        return ptx_fail(px, line, "out of memory");
    g->mem = mem;
    memset(g->mem, 0, size);
    for (size_t i = 0; i < nvalues && (i + 1) * elem <= size; i++)
        if (isdigit((unsigned char)values[i].t.s[0]))
            put_value(g->mem + i * elem, elem, is_float, values[i].t, values[i].negative);
    m->nglobals++;
    return 0;
}

/* Parses PTX text into m; returns 0, or -1 with the reason in px->err. */
static int ptx_parse(struct ptx *px) {
    struct tok t = next(px);
    if (!is(t, ".version"))
        return ptx_fail(px, t.line, "not PTX: expected .version, found '%.*s'",
                        (int)(t.n > 40 ? 40 : t.n), t.s);
    t = next(px);
    if (!t.n || !isdigit((unsigned char)t.s[0]) || !memchr(t.s, '.', t.n))
        return ptx_fail(px, t.line, "expected a version number after .version");
    for (;;) {
        t = next(px);
        if (!t.n) return 0;
        if (is(t, ".entry") || is(t, ".func")) {
            if (parse_function(px, is(t, ".entry"), t.line)) return -1;
        } else if (is(t, ".global") || is(t, ".const")) {
            if (parse_variable(px, is(t, ".const"), t.line)) return -1;
        } else if (is(t, ".target")) {
            do {
                t = next(px);
                if (!is_ident(t)) return ptx_fail(px, t.line, "bad .target");
            } while (is(peek(px), ",") && next(px).n);
        } else if (is(t, ".address_size")) {
            long long v;
            t = next(px);
            if (!to_int(t, &v) || (v != 32 && v != 64))
                return ptx_fail(px, t.line, "bad .address_size");
        } else if (is(t, ".file")) {
            long long v;
            if (!to_int(next(px), &v) || next(px).s[0] != '"')
                return ptx_fail(px, t.line, "bad .file");
            while (is(peek(px), ",")) {
                next(px);
                next(px);
            }
        } else if (is(t, ".visible") || is(t, ".extern") || is(t, ".weak") ||
                   is(t, ".common") || is(t, ";")) {
            continue;
        } else if (t.s[0] == '.') {
            /* .shared, .local, .section, .pragma, ...: nothing the fake needs. */
            if (skip_statement(px, t.line)) return -1;
        } else {
            return ptx_fail(px, t.line, "unexpected '%.*s' at module scope",
                            (int)(t.n > 40 ? 40 : t.n), t.s);
        }
    }
}

static void free_module(struct fake_module *m) {
    for (int i = 0; m && i < m->nglobals; i++) free(m->globals[i].mem);
    if (m) free(m->globals);
    if (m) free(m->funcs);
    free(m);
}

static CUresult load_module(CUmodule *module, const void *image, unsigned int n,
                            const CUjit_option *options, void **values) {
    if (!module || !image || (n && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
    char *log = NULL, *info = NULL;
    size_t log_cap = 0, info_cap = 0;
    int log_size_at = -1, info_size_at = -1;
    for (unsigned int i = 0; i < n; i++) {
        switch (options[i]) {
        case CU_JIT_ERROR_LOG_BUFFER: log = values[i]; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            log_cap = (unsigned int)(uintptr_t)values[i];
            log_size_at = (int)i;
            break;
        case CU_JIT_INFO_LOG_BUFFER: info = values[i]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            info_cap = (unsigned int)(uintptr_t)values[i];
            info_size_at = (int)i;
            break;
        default: break; /* other JIT options change nothing here */
        }
    }
    if (info && info_cap) info[0] = '\0';
    if (info_size_at >= 0) values[info_size_at] = (void *)(uintptr_t)0;
    char err[512] = "";
    struct fake_module *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->ctx = current;
    const unsigned char *bytes = image;
    int failed;
    if (bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F') {
        snprintf(err, sizeof err, "fake ptx: a cubin (ELF) image; this fake runs PTX text only");
        failed = 1;
    } else if (bytes[0] == 0x50 && bytes[1] == 0xed && bytes[2] == 0x55 && bytes[3] == 0xba) {
        snprintf(err, sizeof err, "fake ptx: a fatbin image; this fake runs PTX text only");
        failed = 1;
    } else {
        struct ptx px = {{image, (const char *)image + strlen(image), 1}, m, err, sizeof err};
        failed = ptx_parse(&px) != 0;
    }
    if (failed) {
        size_t written = 0;
        if (log && log_cap) {
            snprintf(log, log_cap, "%s", err);
            written = strlen(log);
        }
        if (log_size_at >= 0) values[log_size_at] = (void *)(uintptr_t)written;
        free_module(m);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    if (log && log_cap) log[0] = '\0';
    if (log_size_at >= 0) values[log_size_at] = (void *)(uintptr_t)0;
    fake_obj_add("module", (uintptr_t)m, 0, current, m);
    for (int i = 0; i < m->nfuncs; i++)
        fake_obj_add("function", (uintptr_t)&m->funcs[i], 0, m, &m->funcs[i]);
    for (int i = 0; i < m->nglobals; i++)
        fake_obj_add("global", (uintptr_t)m->globals[i].mem, m->globals[i].size, m,
                     &m->globals[i]);
    *module = m;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(load_module(module, image, numOptions, options, optionValues));
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
    BEGIN(NEEDS_CONTEXT);
    RETURN(load_module(module, image, 0, NULL, NULL));
}

CUresult cuModuleUnload(CUmodule module) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "module", module, 1)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    drain(NULL, 1); /* its kernels finish first */
    struct fake_obj *obj = fake_obj_find("module", (uintptr_t)module);
    if (obj) unload_module(obj, "unloaded");
    RETURN(CUDA_SUCCESS);
}

CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "module", module, 0)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!function || !name) RETURN(CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < module->nfuncs; i++) {
        if (!strcmp(module->funcs[i].name, name)) {
            *function = &module->funcs[i];
            RETURN(CUDA_SUCCESS);
        }
    }
    RETURN(CUDA_ERROR_NOT_FOUND);
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule module,
                              const char *name) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "module", module, 0)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!name) RETURN(CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < module->nglobals; i++) {
        if (!strcmp(module->globals[i].name, name)) {
            if (dptr) *dptr = (CUdeviceptr)(uintptr_t)module->globals[i].mem;
            if (bytes) *bytes = module->globals[i].size;
            RETURN(CUDA_SUCCESS);
        }
    }
    RETURN(CUDA_ERROR_NOT_FOUND);
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                            size_t *paramSize) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "function", func, 0)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!paramOffset || paramIndex >= (size_t)func->nparams) RETURN(CUDA_ERROR_INVALID_VALUE);
    *paramOffset = func->params[paramIndex].offset;
    if (paramSize) *paramSize = func->params[paramIndex].size;
    RETURN(CUDA_SUCCESS);
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* The fixture kernels (fake_common.h), and CUDA's own: shared_reverse(u32 *buf), which
 * reverses each block's words through dynamic shared memory. */
#define SHARED_REVERSE FAKE_FIXTURE_KERNELS

/* Which kernel f is (a fixture kernel or SHARED_REVERSE), -1 for another, -2 for a known
 * name with other parameters. */
static int known_kernel(const struct fake_func *f) {
    static const size_t reverse_sizes[1] = {8};
    int k = fake_fixture_index(f->name);
    int nparams = 1;
    const size_t *sizes = reverse_sizes;
    if (k >= 0) {
        nparams = fake_fixture[k].nparams;
        sizes = fake_fixture[k].sizes;
    } else if (!strcmp(f->name, "shared_reverse")) {
        k = SHARED_REVERSE;
    } else {
        return -1;
    }
    if (f->nparams != nparams) return -2;
    for (int i = 0; i < f->nparams; i++)
        if (f->params[i].size != sizes[i]) return -2;
    return k;
}

static uint64_t param_u64(const struct fake_func *f, const unsigned char *params, int i) {
    uint64_t v = 0;
    memcpy(&v, params + f->params[i].offset, f->params[i].size < 8 ? f->params[i].size : 8);
    return v;
}

/* The bytes a known kernel touches from its buffer argument. */
static uint64_t kernel_extent(int k, const struct fake_func *f, const unsigned char *params,
                              const unsigned grid[3], const unsigned block[3], unsigned shared) {
    uint64_t threads = (uint64_t)grid[0] * block[0];
    if (k == SHARED_REVERSE) return (uint64_t)shared >= 4ull * block[0] ? 4 * threads : 0;
    uint64_t n = k == FAKE_ADD_ONE || k == FAKE_FILL ? param_u64(f, params, k == FAKE_ADD_ONE ? 1 : 2) : 1;
    return 4 * fake_fixture_words(k, n, threads);
}

static void run_kernel(const struct fake_op *op) {
    const struct fake_func *f = op->func;
    int k = known_kernel(f);
    if (k < 0 || k == FAKE_NOOP) return; /* another entry, or noop */
    uint32_t *buf = (uint32_t *)(uintptr_t)param_u64(f, op->params, 0);
    uint64_t repeats = (uint64_t)op->grid[1] * op->grid[2] * op->block[1] * op->block[2];
    uint64_t count = kernel_extent(k, f, op->params, op->grid, op->block, op->shared) / 4;
    if (k < FAKE_FIXTURE_KERNELS) {
        const void *g = NULL;
        for (int i = 0; i < f->module->nglobals; i++)
            if (!strcmp(f->module->globals[i].name, "g") && f->module->globals[i].size >= 4)
                g = f->module->globals[i].mem;
        uint32_t value = k == FAKE_FILL ? (uint32_t)param_u64(f, op->params, 1) : 0;
        fake_fixture_run(k, buf, count, (uint32_t)((uint64_t)f->add_step * repeats), value, g);
    } else if (k == SHARED_REVERSE && count && repeats % 2) {
        for (uint64_t b = 0; b < op->grid[0]; b++) {
            uint32_t *lo = buf + b * op->block[0], *hi = lo + op->block[0] - 1;
            for (; lo < hi; lo++, hi--) {
                uint32_t x = *lo;
                *lo = *hi;
                *hi = x;
            }
        }
    }
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra) {
    BEGIN(NEEDS_CONTEXT);
    if (!need(__func__, "function", f, 0)) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (f->module->ctx != current) {
        fake_violation("launch in another context: cuLaunchKernel of %s, loaded in device %d's "
                       "context, while device %d's is current",
                       f->name, f->module->ctx->ordinal, current->ordinal);
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    }
    struct fake_stream *s;
    CUresult rc = resolve_stream(__func__, hStream, &s);
    if (rc) RETURN(rc);
    unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ ||
        blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64 ||
        (uint64_t)blockDimX * blockDimY * blockDimZ > 1024 || gridDimX > 2147483647u ||
        gridDimY > 65535 || gridDimZ > 65535 || sharedMemBytes > 49152)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (kernelParams && extra) RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned char *params = calloc(1, f->param_bytes + 8);
    if (!params) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    if (f->nparams && kernelParams) {
        for (int i = 0; i < f->nparams; i++) {
            if (!kernelParams[i]) {
                fake_violation("launch arguments: cuLaunchKernel of %s with kernelParams[%d] "
                               "NULL",
                               f->name, i);
                free(params);
                RETURN(CUDA_ERROR_INVALID_VALUE);
            }
            memcpy(params + f->params[i].offset, kernelParams[i], f->params[i].size);
        }
    } else if (f->nparams && extra) {
        const void *buffer = NULL;
        const size_t *size = NULL;
        for (void **e = extra; *e; e += 2) {
            if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = e[1];
            else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = e[1];
        }
        if (!buffer || !size || *size < f->param_bytes) {
            fake_violation("launch arguments: cuLaunchKernel of %s with an `extra` buffer of "
                           "%zu bytes where its parameters need %zu",
                           f->name, size ? *size : 0, f->param_bytes);
            free(params);
            RETURN(CUDA_ERROR_INVALID_VALUE);
        }
        memcpy(params, buffer, f->param_bytes);
    } else if (f->nparams) {
        fake_violation("launch arguments: cuLaunchKernel of %s with kernelParams NULL, but the "
                       "entry has %d parameters",
                       f->name, f->nparams);
        free(params);
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    int k = known_kernel(f);
    char what[NAME_LEN + 32];
    if (k == -2) {
        fake_violation("kernel signature: %s does not have the conformance kernel's parameters; "
                       "it runs as a no-op",
                       f->name);
    } else if (k == SHARED_REVERSE || (k >= 0 && fake_fixture[k].nparams)) {
        snprintf(what, sizeof what, "%s buffer", f->name);
        uint64_t bytes = kernel_extent(k, f, params, grid, block, sharedMemBytes);
        uintptr_t buf = (uintptr_t)param_u64(f, params, 0);
        if (check_memory("launch out of bounds", __func__, what, buf, (size_t)bytes)) {
            free(params);
            RETURN(CUDA_ERROR_ILLEGAL_ADDRESS);
        }
    } else if (k == -1) {
        for (int i = 0; i < f->nparams; i++) {
            uintptr_t p = (uintptr_t)param_u64(f, params, i);
            snprintf(what, sizeof what, "%s parameter %d", f->name, i);
            if (f->params[i].is_ptr && f->params[i].size == 8 && p &&
                check_memory("launch out of bounds", __func__, what, p, 0)) {
                free(params);
                RETURN(CUDA_ERROR_ILLEGAL_ADDRESS);
            }
        }
    }
    struct fake_op *op = new_op(OP_KERNEL);
    if (!op) {
        free(params);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    op->func = f;
    memcpy(op->grid, grid, sizeof grid);
    memcpy(op->block, block, sizeof block);
    op->shared = sharedMemBytes;
    op->params = params;
    enqueue(s, op);
    RETURN(CUDA_SUCCESS);
}

/* ---- IPC ---------------------------------------------------------------------------------- */

#define IPC_MAGIC 0x55434b46u /* "FKCU" */

struct ipc_wire {
    uint32_t magic, version;
    int32_t pid, fd;
    uint64_t size, id;
    uint32_t device, reserved0;
    uint8_t reserved[24];
};
_Static_assert(sizeof(struct ipc_wire) == sizeof(CUipcMemHandle), "CUipcMemHandle is 64 bytes");

CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr) {
    BEGIN(NEEDS_CONTEXT);
    if (!handle) RETURN(CUDA_ERROR_INVALID_VALUE);
    static const char *const ALLOC[] = {"alloc", NULL};
    struct fake_obj *obj = fake_obj_find_range(ALLOC, (uintptr_t)dptr, 0);
    if (!obj) {
        static const char *const OTHER[] = {"ipc", "host", "global", NULL};
        if (!fake_obj_find_range(OTHER, (uintptr_t)dptr, 0))
            check_memory(NULL, __func__, "pointer", (uintptr_t)dptr, 0); /* records why */
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    struct fake_mem *mem = obj->data;
    if (mem->kind != MEM_DEVICE) RETURN(CUDA_ERROR_INVALID_VALUE); /* managed memory */
    struct ipc_wire wire;
    memset(&wire, 0, sizeof wire);
    wire.magic = IPC_MAGIC;
    wire.version = 1;
    wire.pid = (int32_t)getpid();
    wire.fd = mem->fd;
    wire.size = obj->size;
    wire.id = obj->id;
    wire.device = (uint32_t)mem->ctx->ordinal;
    memcpy(handle, &wire, sizeof wire);
    RETURN(CUDA_SUCCESS);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    BEGIN(NEEDS_CONTEXT);
    if (!pdptr || Flags > 1) RETURN(CUDA_ERROR_INVALID_VALUE); /* LAZY_ENABLE_PEER_ACCESS */
    struct ipc_wire wire;
    memcpy(&wire, &handle, sizeof wire);
    if (wire.magic != IPC_MAGIC || wire.version != 1 || wire.size == 0 || wire.pid <= 0)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (wire.pid == (int32_t)getpid()) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    for (size_t i = 0; i < fake_live_len; i++) {
        struct fake_obj *o = &fake_live[i];
        struct fake_mem *mem = o->data;
        if (!strcmp(o->kind, "ipc") && o->owner == current && mem->src_pid == wire.pid &&
            mem->src_id == wire.id)
            RETURN(CUDA_ERROR_ALREADY_MAPPED);
    }
    char path[64], link[128], expected[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)wire.pid, (int)wire.fd);
    snprintf(expected, sizeof expected, "/memfd:fake-cuda-%d-%llu", (int)wire.pid,
             (unsigned long long)wire.id);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0) RETURN(CUDA_ERROR_INVALID_HANDLE); /* the exporter or its memory is gone */
    link[n] = '\0';
    size_t len = strlen(expected);
    if (strncmp(link, expected, len) || (link[len] && link[len] != ' '))
        RETURN(CUDA_ERROR_INVALID_HANDLE); /* stale: that fd is another file now */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= wire.size)
        p = mmap(NULL, (size_t)wire.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) RETURN(CUDA_ERROR_MAP_FAILED);
    struct fake_mem *mem = calloc(1, sizeof *mem);
    if (!mem) {
        munmap(p, (size_t)wire.size);
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    mem->kind = MEM_IPC;
    mem->ctx = current;
    mem->fd = -1;
    mem->map_len = (size_t)wire.size;
    mem->src_pid = wire.pid;
    mem->src_id = wire.id;
    fake_obj_add("ipc", (uintptr_t)p, (size_t)wire.size, current, mem);
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    RETURN(CUDA_SUCCESS);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
    BEGIN(NEEDS_CONTEXT);
    struct fake_obj *obj = fake_obj_find("ipc", (uintptr_t)dptr);
    if (!obj) {
        struct fake_obj *alloc = fake_obj_find("alloc", (uintptr_t)dptr);
        if (alloc)
            fake_violation("wrong free: cuIpcCloseMemHandle on alloc %#lx (id %llu), which is "
                           "no IPC mapping",
                           (unsigned long)alloc->handle, alloc->id);
        else
            need(__func__, "ipc", (const void *)(uintptr_t)dptr, 1);
        RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    drain(NULL, 1);
    obj = fake_obj_find("ipc", (uintptr_t)dptr);
    if (obj) release_mem(obj, "closed");
    RETURN(CUDA_SUCCESS);
}

/* ---- test hooks ----------------------------------------------------------------------------- */

FAKE_TEST_HOOKS(fake_cuda)

int fake_cuda_live(const char *kind) {
    if (!kind) return 0;
    fake_lock();
    int n = 0;
    if (!strcmp(kind, "context")) {
        for (int i = 0; i < MAX_DEVICES; i++) n += contexts[i].refs > 0;
    } else {
        n = fake_obj_count(kind);
    }
    fake_unlock();
    return n;
}
