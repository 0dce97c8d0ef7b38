/* The generic part of offload's protocol-checking fake drivers (fake_cuda.c today; the HIP
 * and Level Zero fakes can reuse it). Header-only: every function is `static`, so each fake
 * library gets its own copy and its own state.
 *
 * What it keeps, all behind ONE process-wide mutex (fake_lock/fake_unlock):
 *   - a registry of live driver objects: kind (a static string such as "alloc"), handle,
 *     an address range for memory, the owning object (a context), a process-unique id and
 *     the driver's own record; removed objects go to a ring of the last FAKE_DEAD_MAX dead
 *     ones, so a later use can be told apart ("already freed") from a handle never seen;
 *   - a violation log: the first FAKE_VIOLATIONS_MAX messages (each at most
 *     FAKE_MESSAGE_MAX bytes) and the count of all of them;
 *   - per-entry-point call counters;
 *   - failure injection: the Nth call (1-based, counted from when it was armed) of a named
 *     entry point returns a given code. Armed at load from
 *     FAKE_FAIL="entry:nth:code[,entry:nth:code...]" and at run time by fake_fail_arm.
 *
 * The including file defines FAKE_NAME (e.g. "CUDA") before including this header; at
 * process exit a destructor prints `FAKE-<FAKE_NAME>-VIOLATIONS: <n>` and the messages to
 * stderr when there are any.
 *
 * Locking: the fake's entry points call fake_lock() first and fake_unlock() before they
 * return; the helpers below expect the lock to be held unless they say otherwise.
 * fake_wait()/fake_wake() are a condition variable on that mutex. */
#ifndef OFFLOAD_FAKE_COMMON_H
#define OFFLOAD_FAKE_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FAKE_NAME
#error "define FAKE_NAME (e.g. \"CUDA\") before including fake_common.h"
#endif

#define FAKE_VIOLATIONS_MAX 64
#define FAKE_MESSAGE_MAX 320
#define FAKE_COUNTERS_MAX 256
#define FAKE_ARMS_MAX 64
#define FAKE_ENTRY_MAX 64
#define FAKE_DEAD_MAX 16384

static pthread_mutex_t fake_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_cond = PTHREAD_COND_INITIALIZER;

static inline void fake_lock(void) { pthread_mutex_lock(&fake_mutex); }
static inline void fake_unlock(void) { pthread_mutex_unlock(&fake_mutex); }
/* Waits for fake_wake (the lock is held before and after). */
static inline void fake_wait(void) { pthread_cond_wait(&fake_cond, &fake_mutex); }
static inline void fake_wake(void) { pthread_cond_broadcast(&fake_cond); }

/* ---- violations ------------------------------------------------------------------------ */

static char fake_violation_text[FAKE_VIOLATIONS_MAX][FAKE_MESSAGE_MAX];
static unsigned long fake_violation_count;

/* Records a violation; messages never contain "; " (the hooks join them with it). */
__attribute__((format(printf, 1, 2))) static inline void fake_violation(const char *fmt, ...) {
    if (fake_violation_count < FAKE_VIOLATIONS_MAX) {
        char *slot = fake_violation_text[fake_violation_count];
        va_list args;
        va_start(args, fmt);
        vsnprintf(slot, FAKE_MESSAGE_MAX, fmt, args);
        va_end(args);
        for (char *p = slot; (p = strstr(p, "; ")) != NULL;) *p = ',';
    }
    fake_violation_count++;
}

/* Writes the messages joined by "; " into buf (NUL-terminated, truncated to cap), with a
 * last "<n> more violations were not kept" when the log overflowed; returns the count of
 * all violations. */
static inline int fake_violations_text(char *buf, size_t cap) {
    size_t used = 0;
    unsigned long kept =
        fake_violation_count < FAKE_VIOLATIONS_MAX ? fake_violation_count : FAKE_VIOLATIONS_MAX;
    char more[64];
    if (buf && cap) buf[0] = '\0';
    for (unsigned long i = 0; i <= kept; i++) {
        const char *msg;
        if (i < kept) {
            msg = fake_violation_text[i];
        } else if (fake_violation_count > kept) {
            snprintf(more, sizeof more, "%lu more violations were not kept",
                     fake_violation_count - kept);
            msg = more;
        } else {
            break;
        }
        if (buf && cap) {
            int n = snprintf(buf + used, cap - used, "%s%s", i ? "; " : "", msg);
            if (n < 0) break;
            used += (size_t)n;
            if (used >= cap) {
                used = cap - 1;
                break;
            }
        }
    }
    return (int)fake_violation_count;
}

/* Forgets the violations recorded so far and disarms every failure that has not fired, so
 * a failure armed for one run can never fire in the next. */
static inline void fake_clear_violations(void);

/* ---- call counters and failure injection ----------------------------------------------- */

static struct {
    const char *entry; /* a static string (the entry point's __func__) */
    unsigned long calls;
} fake_counters[FAKE_COUNTERS_MAX];
static size_t fake_counter_len;

static inline unsigned long *fake_counter(const char *entry, int create) {
    for (size_t i = 0; i < fake_counter_len; i++) {
        if (strcmp(fake_counters[i].entry, entry) == 0) return &fake_counters[i].calls;
    }
    if (!create || fake_counter_len == FAKE_COUNTERS_MAX) return NULL;
    fake_counters[fake_counter_len].entry = entry;
    fake_counters[fake_counter_len].calls = 0;
    return &fake_counters[fake_counter_len++].calls;
}

/* How many times `entry` was called (0 for one never called). */
static inline unsigned long fake_calls(const char *entry) {
    unsigned long *n = fake_counter(entry, 0);
    return n ? *n : 0;
}

static struct {
    char entry[FAKE_ENTRY_MAX];
    unsigned long at; /* fires when the entry's call count reaches this */
    int code;
} fake_arms[FAKE_ARMS_MAX];
static size_t fake_arm_len;

/* Makes the nth call of `entry` from now (1 = the next one) return `code`. */
static inline void fake_fail_arm(const char *entry, int nth, int code) {
    if (!entry || nth < 1 || fake_arm_len == FAKE_ARMS_MAX) return;
    size_t len = strlen(entry);
    if (len >= FAKE_ENTRY_MAX) return; /* no entry point has such a name */
    memcpy(fake_arms[fake_arm_len].entry, entry, len + 1);
    fake_arms[fake_arm_len].at = fake_calls(entry) + (unsigned long)nth;
    fake_arms[fake_arm_len].code = code;
    fake_arm_len++;
}

/* Counts a call of `entry` (a static string); returns the injected code or 0. */
static inline int fake_count_call(const char *entry) {
    unsigned long *n = fake_counter(entry, 1);
    unsigned long calls = n ? ++*n : 0;
    for (size_t i = 0; i < fake_arm_len; i++) {
        if (fake_arms[i].at == calls && strcmp(fake_arms[i].entry, entry) == 0) {
            int code = fake_arms[i].code;
            fake_arms[i] = fake_arms[--fake_arm_len];
            return code;
        }
    }
    return 0;
}

/* Arms every "entry:nth:code" of a comma-separated list; malformed items are ignored. */
static inline void fake_fail_parse(const char *list) {
    char item[FAKE_ENTRY_MAX + 48];
    while (list && *list) {
        size_t len = strcspn(list, ",");
        if (len < sizeof item) {
            memcpy(item, list, len);
            item[len] = '\0';
            char *first = strchr(item, ':');
            char *second = first ? strchr(first + 1, ':') : NULL;
            if (second) {
                *first = *second = '\0';
                fake_fail_arm(item, atoi(first + 1), atoi(second + 1));
            }
        }
        list += len + (list[len] == ',');
    }
}

static inline void fake_clear_violations(void) {
    fake_violation_count = 0;
    fake_arm_len = 0;
}

/* ---- the object registry --------------------------------------------------------------- */

struct fake_obj {
    const char *kind;   /* a static string: "alloc", "module", "stream", ... */
    uintptr_t handle;   /* what the API handed out (for memory: the base address) */
    size_t size;        /* for memory: the length of [handle, handle + size); else 0 */
    void *owner;        /* the owning object (a context), or NULL */
    unsigned long long id; /* process-unique, from 1, never reused */
    void *data;         /* the driver's own record */
};

struct fake_dead {
    const char *kind;
    uintptr_t handle;
    size_t size;
    unsigned long long id;
    const char *why; /* "freed", "destroyed with its context", ... */
};

static struct fake_obj *fake_live;
static size_t fake_live_len, fake_live_cap;
static unsigned long long fake_next_id = 1;
static struct fake_dead fake_dead_ring[FAKE_DEAD_MAX];
static size_t fake_dead_next, fake_dead_len;

/* Adds a live object; returns its id (0 when out of memory). */
static inline unsigned long long fake_obj_add(const char *kind, uintptr_t handle, size_t size,
                                              void *owner, void *data) {
    if (fake_live_len == fake_live_cap) {
        size_t cap = fake_live_cap ? 2 * fake_live_cap : 64;
        struct fake_obj *grown = realloc(fake_live, cap * sizeof *grown);
        if (!grown) return 0;
        fake_live = grown;
        fake_live_cap = cap;
    }
    struct fake_obj *obj = &fake_live[fake_live_len++];
    obj->kind = kind;
    obj->handle = handle;
    obj->size = size;
    obj->owner = owner;
    obj->id = fake_next_id++;
    obj->data = data;
    return obj->id;
}

/* The live object of `kind` (NULL: any kind) whose handle is `handle`. The pointer is valid
 * until the registry changes. */
static inline struct fake_obj *fake_obj_find(const char *kind, uintptr_t handle) {
    for (size_t i = fake_live_len; i-- > 0;) {
        struct fake_obj *obj = &fake_live[i];
        if (obj->handle == handle && (!kind || strcmp(obj->kind, kind) == 0)) return obj;
    }
    return NULL;
}

/* The live memory object, of one of the NULL-terminated `kinds`, that holds all of
 * [addr, addr + len) (len 0: addr itself must lie inside). */
static inline struct fake_obj *fake_obj_find_range(const char *const *kinds, uintptr_t addr,
                                                   size_t len) {
    for (size_t i = fake_live_len; i-- > 0;) {
        struct fake_obj *obj = &fake_live[i];
        int match = 0;
        for (const char *const *k = kinds; *k && !match; k++) match = !strcmp(obj->kind, *k);
        if (!match || addr < obj->handle || addr - obj->handle >= obj->size) continue;
        if (len <= obj->size - (addr - obj->handle)) return obj;
    }
    return NULL;
}

/* The most recent dead object of `kind` (NULL: any) with that handle, or whose range holds
 * addr when `in_range`. */
static inline const struct fake_dead *fake_obj_find_dead(const char *kind, uintptr_t addr,
                                                         int in_range) {
    for (size_t n = 0; n < fake_dead_len; n++) {
        const struct fake_dead *d =
            &fake_dead_ring[(fake_dead_next + FAKE_DEAD_MAX - 1 - n) % FAKE_DEAD_MAX];
        if (kind && strcmp(d->kind, kind) != 0) continue;
        if (d->handle == addr || (in_range && addr > d->handle && addr - d->handle < d->size))
            return d;
    }
    return NULL;
}

/* Removes a live object (remembering it as dead, for `why`). It moves another entry into
 * its place: pointers to entries are not valid after a removal (or an addition). */
static inline void fake_obj_remove(struct fake_obj *obj, const char *why) {
    struct fake_dead *d = &fake_dead_ring[fake_dead_next];
    d->kind = obj->kind;
    d->handle = obj->handle;
    d->size = obj->size;
    d->id = obj->id;
    d->why = why;
    fake_dead_next = (fake_dead_next + 1) % FAKE_DEAD_MAX;
    if (fake_dead_len < FAKE_DEAD_MAX) fake_dead_len++;
    *obj = fake_live[--fake_live_len];
}

/* The first live object owned by `owner` (NULL if none). */
static inline struct fake_obj *fake_obj_owned(void *owner) {
    for (size_t i = 0; i < fake_live_len; i++) {
        if (fake_live[i].owner == owner) return &fake_live[i];
    }
    return NULL;
}

/* How many live objects of `kind` there are. */
static inline int fake_obj_count(const char *kind) {
    int n = 0;
    for (size_t i = 0; i < fake_live_len; i++) n += strcmp(fake_live[i].kind, kind) == 0;
    return n;
}

/* Every entry point called so far as "entry=calls" joined by ",", into buf (cap bytes,
 * NUL-terminated, cut short when full); returns how many entry points there are. */
static inline int fake_entries_text(char *buf, size_t cap) {
    size_t used = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < fake_counter_len; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s=%lu", i ? "," : "",
                         fake_counters[i].entry, fake_counters[i].calls);
        if (n < 0 || (size_t)n >= cap - used) break;
        used += (size_t)n;
    }
    return (int)fake_counter_len;
}

/* The test hooks every fake exports, named <prefix>_violations, _clear_violations, _fail,
 * _calls and _entries (offload_driver::testing::FakeHooks); each fake adds <prefix>_live,
 * its own or FAKE_LIVE_HOOK's. */
#define FAKE_TEST_HOOKS(prefix)                                                              \
    int prefix##_violations(char *buf, size_t cap) {                                         \
        fake_lock();                                                                         \
        int n = fake_violations_text(buf, cap);                                              \
        fake_unlock();                                                                       \
        return n;                                                                            \
    }                                                                                        \
    void prefix##_clear_violations(void) {                                                   \
        fake_lock();                                                                         \
        fake_clear_violations();                                                             \
        fake_unlock();                                                                       \
    }                                                                                        \
    void prefix##_fail(const char *entry, int nth, int code) {                               \
        fake_lock();                                                                         \
        fake_fail_arm(entry, nth, code);                                                     \
        fake_unlock();                                                                       \
    }                                                                                        \
    unsigned long prefix##_calls(const char *entry) {                                        \
        fake_lock();                                                                         \
        unsigned long n = entry ? fake_calls(entry) : 0;                                     \
        fake_unlock();                                                                       \
        return n;                                                                            \
    }                                                                                        \
    int prefix##_entries(char *buf, size_t cap) {                                            \
        fake_lock();                                                                         \
        int n = fake_entries_text(buf, cap);                                                 \
        fake_unlock();                                                                       \
        return n;                                                                            \
    }

/* <prefix>_live for a fake whose kinds of object are all in the registry. */
#define FAKE_LIVE_HOOK(prefix)                                                               \
    int prefix##_live(const char *kind) {                                                    \
        if (!kind) return 0;                                                                 \
        fake_lock();                                                                         \
        int n = fake_obj_count(kind);                                                        \
        fake_unlock();                                                                       \
        return n;                                                                            \
    }

/* ---- entry points ---------------------------------------------------------------------- */

/* An integer from the environment, or `fallback`. */
static inline int fake_env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value ? atoi(value) : fallback;
}

/* The driver's result type (int unless the fake defines FAKE_RESULT first). */
#ifndef FAKE_RESULT
#define FAKE_RESULT int
#endif

/* An entry point's start: takes the lock, counts the call and answers an injected failure
 * (unlocking first); otherwise returns with the lock held. */
#define FAKE_BEGIN()                                                                         \
    fake_lock();                                                                             \
    do {                                                                                     \
        int injected_ = fake_count_call(__func__);                                           \
        if (injected_) {                                                                     \
            fake_unlock();                                                                   \
            return (FAKE_RESULT)injected_;                                                   \
        }                                                                                    \
    } while (0)

/* An entry point's return: unlocks and returns `code`. */
#define FAKE_END(code)                                                                       \
    do {                                                                                     \
        FAKE_RESULT code_ = (code);                                                          \
        fake_unlock();                                                                       \
        return code_;                                                                        \
    } while (0)

/* A call that needs the driver initialised (`flag`) first: a violation naming `init` and
 * `code` returned otherwise. */
#define FAKE_NEED_INIT(flag, init, code)                                                     \
    do {                                                                                     \
        if (!(flag)) {                                                                       \
            fake_violation("%s before " init, __func__);                                     \
            FAKE_END(code);                                                                  \
        }                                                                                    \
    } while (0)

/* ---- the fixture kernels ----------------------------------------------------------------- */

/* The conformance kernels every backend's fixture has (offload_driver::testing::cases),
 * which the fakes run by name over host memory. Thread i is block * block size + thread:
 *   add_one(u32 *buf, u32 n)          buf[i] += 1 for i < n
 *   fill(u32 *buf, u32 value, u32 n)  buf[i] = value for i < n
 *   noop()
 *   read_global(u32 *buf)             buf[0] = the module's global `g` */
enum { FAKE_ADD_ONE, FAKE_FILL, FAKE_NOOP, FAKE_READ_GLOBAL, FAKE_FIXTURE_KERNELS };

static const struct {
    const char *name;
    int nparams;
    size_t sizes[3]; /* of each parameter, in bytes */
} fake_fixture[FAKE_FIXTURE_KERNELS] = {
    {"add_one", 2, {8, 4, 0}},
    {"fill", 3, {8, 4, 4}},
    {"noop", 0, {0, 0, 0}},
    {"read_global", 1, {8, 0, 0}},
};

/* Which fixture kernel `name` is, -1 for another. */
static inline int fake_fixture_index(const char *name) {
    for (int i = 0; i < FAKE_FIXTURE_KERNELS; i++)
        if (!strcmp(fake_fixture[i].name, name)) return i;
    return -1;
}

/* How many u32s of its buffer a launch of fixture kernel `k` over `threads` x-threads
 * touches, `n` being its element count argument (add_one's second, fill's third). */
static inline uint64_t fake_fixture_words(int k, uint64_t n, uint64_t threads) {
    switch (k) {
    case FAKE_ADD_ONE:
    case FAKE_FILL: return n < threads ? n : threads;
    case FAKE_READ_GLOBAL: return 1;
    default: return 0;
    }
}

/* Runs fixture kernel `k` over the `words` u32s at `buf`: add_one adds `step` (1 per
 * thread covering the word: the launch's y/z extent), fill writes `value`, read_global
 * copies the u32 at `global` (0 when the module has none). */
static inline void fake_fixture_run(int k, uint32_t *buf, uint64_t words, uint32_t step,
                                    uint32_t value, const void *global) {
    if (k == FAKE_ADD_ONE) {
        for (uint64_t i = 0; i < words; i++) buf[i] += step;
    } else if (k == FAKE_FILL) {
        for (uint64_t i = 0; i < words; i++) buf[i] = value;
    } else if (k == FAKE_READ_GLOBAL && words) {
        uint32_t g = 0;
        if (global) memcpy(&g, global, 4);
        buf[0] = g;
    }
}

/* ---- load and exit --------------------------------------------------------------------- */

__attribute__((constructor)) static void fake_common_load(void) {
    fake_fail_parse(getenv("FAKE_FAIL"));
}

__attribute__((destructor)) static void fake_common_exit(void) {
    /* Another thread may be stuck inside the fake at exit: print without the lock then. */
    int locked = pthread_mutex_trylock(&fake_mutex) == 0;
    if (fake_violation_count) {
        static char text[FAKE_VIOLATIONS_MAX * (FAKE_MESSAGE_MAX + 2) + 64];
        int n = fake_violations_text(text, sizeof text);
        fprintf(stderr, "FAKE-" FAKE_NAME "-VIOLATIONS: %d\n", n);
        for (char *msg = text, *end; msg && *msg; msg = end ? end + 2 : NULL) {
            end = strstr(msg, "; ");
            fprintf(stderr, "  %.*s\n", end ? (int)(end - msg) : (int)strlen(msg), msg);
        }
    }
    if (locked) fake_unlock();
}

#endif
