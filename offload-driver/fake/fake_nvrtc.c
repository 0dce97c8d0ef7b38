/* A protocol-checking stand-in for NVRTC (libnvrtc.so.*), for offload-cuda's tests of CUDA
 * source programs. It exports the NVRTC entry points the CUDA backend uses, with their real
 * names and signatures (nvrtc.h), "compiles" by recognising sources, and RECORDS every
 * protocol violation it sees (see "Rules"). No CUDA toolkit is needed: the tests build it
 * with `cc -shared -fPIC` as libnvrtc.so (or a versioned soname) beside fake_cuda.c's
 * libcuda.so.1.
 *
 * Compiling. nvrtcCompileProgram looks at the source text:
 *   - a line containing `#error` fails with NVRTC_ERROR_COMPILATION (6) and the log
 *       <name>(<line>): catastrophic error: #error directive: <rest of the line>
 *
 *       1 catastrophic error detected in the compilation of "<name>".
 *       Compilation terminated.
 *   - a line containing `syntax error` fails with NVRTC_ERROR_COMPILATION and the log
 *       <name>(<line>): error: expected a ";"
 *
 *       1 error detected in the compilation of "<name>".
 *   - otherwise a source mentioning `add_one` compiles to the PTX in the file named by
 *     FAKE_NVRTC_PTX (offload-cuda/fixtures/kernels.ptx in the tests, whose kernels the fake
 *     libcuda runs by name), with its `.target` line set to the architecture compiled for
 *     and a header comment naming the fake and every option, as NVRTC's own header names
 *     the compiler: `// fake nvrtc <version> options: --gpu-architecture=compute_86 -DN=4`;
 *   - any other source fails with NVRTC_ERROR_COMPILATION and a log saying the fake
 *     compiles only sources that mention add_one.
 * The architecture is the option `--gpu-architecture=compute_XY` (or `sm_XY`; also spelled
 * `-arch=` or `-arch <value>`); without one, the oldest supported. One not supported is
 * NVRTC_ERROR_INVALID_OPTION (5) with the log
 * `nvrtc: error: invalid value for --gpu-architecture (-arch)`, as NVRTC answers. An option
 * that does not begin with `-` is INVALID_OPTION too (`nvrtc: error: unrecognized option`).
 *
 * Environment variables:
 *   FAKE_NVRTC_VERSION=<major>.<minor>  what nvrtcVersion answers (default 12.4)
 *   FAKE_NVRTC_ARCHS=<n>,<n>,...        the SM numbers nvrtcGetSupportedArchs lists
 *                                       (default 50,52,53,60,61,62,70,72,75,80,86,87,89,90)
 *   FAKE_NVRTC_PTX=<path>               the PTX a source mentioning add_one compiles to
 *   FAKE_NVRTC_COMPILE_MS=<ms>          each compile takes this long (with the fake's lock
 *                                       released, so different programs compile at once)
 *   FAKE_FAIL=entry:nth:code,...        the nth call of `entry` (counted from load) returns
 *                                       `code` instead of doing its work (fake_common.h)
 * Built with -DNO_SUPPORTED_ARCHS it lacks nvrtcGetNumSupportedArchs/nvrtcGetSupportedArchs
 * (as NVRTC before CUDA 11.2 does) and takes any architecture.
 *
 * Test hooks (exported C functions; offload_driver::testing::FakeHooks wraps them):
 *   int fake_nvrtc_violations(char *buf, size_t cap)  the messages joined by "; " into buf
 *                                                     (NUL-terminated, truncated to cap);
 *                                                     returns how many there were
 *   void fake_nvrtc_clear_violations(void)
 *   void fake_nvrtc_fail(const char *entry, int nth, int code)
 *                                                     the nth call of `entry` from now
 *                                                     (1 = the next) returns `code`
 *   unsigned long fake_nvrtc_calls(const char *entry) calls of `entry` so far
 *   int fake_nvrtc_live(const char *kind)             live objects of a kind: "program"
 *                                                     (created and not destroyed)
 * At process exit it prints `FAKE-NVRTC-VIOLATIONS: <n>` and the messages to stderr if
 * there were any (fake_common.h), and `FAKE-NVRTC-LEAKS: <n> programs not destroyed` if
 * programs are alive.
 *
 * Rules (each message starts with the rule's name and names the program):
 *   use after destroy         a call on a program already destroyed (INVALID_PROGRAM)
 *   double destroy            nvrtcDestroyProgram of a program already destroyed
 *   unknown program           a handle the fake never handed out, null included
 *                             (INVALID_PROGRAM)
 *   log without its size      nvrtcGetProgramLog with no nvrtcGetProgramLogSize of that
 *                             program since it was created or last compiled: the caller
 *                             cannot know how large a buffer the log needs
 *   PTX without its size      nvrtcGetPTX likewise without nvrtcGetPTXSize
 *   PTX of a failed program   nvrtcGetPTXSize or nvrtcGetPTX of a program not (or not
 *                             successfully) compiled (INVALID_PROGRAM)
 *   concurrent use            a call on a program while another thread compiles it (NVRTC
 *                             is thread-safe across programs only)
 * The live-program count (fake_nvrtc_live("program")) shows programs never destroyed.
 * Errors that NVRTC returns in normal use are returned WITHOUT a violation: null
 * arguments (INVALID_INPUT), a bad option, a compile error. */
#define FAKE_NAME "NVRTC"
#include "fake_common.h"

#include <ctype.h>
#include <time.h>

typedef int nvrtcResult;
typedef struct fake_program *nvrtcProgram;

enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
};

#define ARCHS_MAX 64

struct fake_program {
    char *source;
    char *name;
    int compiled; /* 0: not yet, 1: compiled, -1: failed */
    int busy;     /* a thread is compiling it (without the lock) */
    char *log;    /* NUL-terminated, never NULL */
    char *ptx;    /* NUL-terminated, or NULL */
    int log_size_read, ptx_size_read;
};

/* ---- configuration ---------------------------------------------------------------------- */

static int version_major = 12, version_minor = 4;
static int archs[ARCHS_MAX];
static int arch_count;

__attribute__((constructor)) static void nvrtc_load(void) {
    const char *v = getenv("FAKE_NVRTC_VERSION");
    if (v) sscanf(v, "%d.%d", &version_major, &version_minor);
    const char *list = getenv("FAKE_NVRTC_ARCHS");
    if (!list) list = "50,52,53,60,61,62,70,72,75,80,86,87,89,90";
    while (*list && arch_count < ARCHS_MAX) {
        char *end;
        long a = strtol(list, &end, 10);
        if (end == list) break;
        archs[arch_count++] = (int)a;
        list = *end == ',' ? end + 1 : end;
    }
}

__attribute__((destructor)) static void nvrtc_exit(void) {
    int n = fake_obj_count("program");
    if (n) fprintf(stderr, "FAKE-NVRTC-LEAKS: %d programs not destroyed\n", n);
}

/* ---- helpers ---------------------------------------------------------------------------- */

#define RETURN(code)                                                                       \
    do {                                                                                   \
        nvrtcResult code_ = (code);                                                        \
        fake_unlock();                                                                     \
        return code_;                                                                      \
    } while (0)

/* Locks, counts the call, and returns an injected failure at once. */
#define BEGIN()                                                                            \
    fake_lock();                                                                           \
    do {                                                                                   \
        int injected_ = fake_count_call(__func__);                                         \
        if (injected_) RETURN(injected_);                                                  \
    } while (0)

static char *copy_text(const char *text) {
    size_t len = strlen(text);
    char *copy = malloc(len + 1);
    if (copy) memcpy(copy, text, len + 1);
    return copy;
}

/* printf into a new string. */
__attribute__((format(printf, 1, 2))) static char *format_text(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    char *text = NULL;
    if (vasprintf(&text, fmt, args) < 0) text = NULL;
    va_end(args);
    return text;
}

/* The live program `prog`; otherwise records why not and returns NULL. */
static struct fake_program *need(const char *entry, nvrtcProgram prog, int destroying) {
    uintptr_t h = (uintptr_t)prog;
    struct fake_obj *obj = h ? fake_obj_find("program", h) : NULL;
    if (obj) {
        struct fake_program *p = obj->data;
        if (p->busy) {
            fake_violation("concurrent use: %s on program %#lx (id %llu) while another thread "
                           "compiles it",
                           entry, (unsigned long)h, obj->id);
        }
        return p;
    }
    const struct fake_dead *dead = h ? fake_obj_find_dead("program", h, 0) : NULL;
    if (dead) {
        fake_violation("%s: %s on program %#lx (id %llu), already destroyed",
                       destroying ? "double destroy" : "use after destroy", entry,
                       (unsigned long)h, dead->id);
    } else {
        fake_violation("unknown program: %s on %#lx, never created", entry, (unsigned long)h);
    }
    return NULL;
}

/* Frees what `p` holds. The record itself is kept (and leaked) once it was handed out, so
 * that its address is never reused: a stale handle stays recognisable. */
static void free_contents(struct fake_program *p) {
    free(p->source);
    free(p->name);
    free(p->log);
    free(p->ptx);
    p->source = p->name = p->log = p->ptx = NULL;
}

/* The 1-based line of `at` in `text`. */
static int line_of(const char *text, const char *at) {
    int line = 1;
    for (const char *c = text; c < at; c++) line += *c == '\n';
    return line;
}

static int arch_supported(int arch) {
#ifdef NO_SUPPORTED_ARCHS
    return arch > 0;
#else
    for (int i = 0; i < arch_count; i++)
        if (archs[i] == arch) return 1;
    return 0;
#endif
}

static int default_arch(void) {
#ifdef NO_SUPPORTED_ARCHS
    return 52;
#else
    int oldest = 0;
    for (int i = 0; i < arch_count; i++)
        if (!oldest || archs[i] < oldest) oldest = archs[i];
    return oldest ? oldest : 52;
#endif
}

/* The SM number of an architecture value (`compute_86`, `sm_86`), or -1. */
static int parse_arch(const char *value) {
    const char *digits = NULL;
    if (!strncmp(value, "compute_", 8)) digits = value + 8;
    else if (!strncmp(value, "sm_", 3)) digits = value + 3;
    if (!digits || !isdigit((unsigned char)*digits)) return -1;
    char *end;
    long arch = strtol(digits, &end, 10);
    return *end ? -1 : (int)arch;
}

/* The PTX of `path` with its `.target` set to sm_<arch> and a header naming `options`;
 * NULL (and *why set) when the file cannot be read. */
static char *ptx_for(const char *path, int arch, const char *options, char **why) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = format_text("fake nvrtc: cannot read FAKE_NVRTC_PTX=%s", path);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (len + 1 >= cap) {
            cap = cap ? 2 * cap : 4096;
            char *grown = realloc(text, cap);
            if (!grown) break;
            text = grown;
        }
        text[len++] = (char)c;
    }
    fclose(f);
    if (!text) {
        *why = format_text("fake nvrtc: FAKE_NVRTC_PTX=%s is empty", path);
        return NULL;
    }
    text[len] = '\0';
    /* The `.version` line: the PTX ISA this NVRTC writes (NVRTC 12.x writes 8.x, 13.x 9.x),
     * so the target rewritten below has a version that knows it, as a real NVRTC's has. */
    char *version = strstr(text, "\n.version ");
    if (version) {
        char *end = strchr(version + 1, '\n');
        *version = '\0';
        char *redone = format_text("%s\n.version %d.%d%s", text, version_major - 4, version_minor,
                                   end ? end : "\n");
        free(text);
        text = redone;
        if (!text) {
            *why = format_text("fake nvrtc: out of memory");
            return NULL;
        }
    }
    /* The `.target` directive's line, replaced whole. */
    char *target = strstr(text, "\n.target ");
    char *ptx;
    if (target) {
        char *end = strchr(target + 1, '\n');
        *target = '\0';
        ptx = format_text("//\n// fake nvrtc %d.%d options: %s\n//\n%s\n.target sm_%d%s",
                          version_major, version_minor, options, text, arch, end ? end : "\n");
    } else {
        ptx = format_text("//\n// fake nvrtc %d.%d options: %s\n//\n%s", version_major,
                          version_minor, options, text);
    }
    free(text);
    return ptx;
}

/* ---- the API ---------------------------------------------------------------------------- */

const char *nvrtcGetErrorString(nvrtcResult result) {
    switch (result) {
    case 0: return "NVRTC_SUCCESS";
    case 1: return "NVRTC_ERROR_OUT_OF_MEMORY";
    case 2: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
    case 3: return "NVRTC_ERROR_INVALID_INPUT";
    case 4: return "NVRTC_ERROR_INVALID_PROGRAM";
    case 5: return "NVRTC_ERROR_INVALID_OPTION";
    case 6: return "NVRTC_ERROR_COMPILATION";
    case 7: return "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE";
    case 8: return "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION";
    case 9: return "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION";
    case 10: return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
    case 11: return "NVRTC_ERROR_INTERNAL_ERROR";
    case 12: return "NVRTC_ERROR_TIME_FILE_WRITE_FAILED";
    default: return "NVRTC_ERROR unknown";
    }
}

nvrtcResult nvrtcVersion(int *major, int *minor) {
    BEGIN();
    if (!major || !minor) RETURN(NVRTC_ERROR_INVALID_INPUT);
    *major = version_major;
    *minor = version_minor;
    RETURN(NVRTC_SUCCESS);
}

#ifndef NO_SUPPORTED_ARCHS
nvrtcResult nvrtcGetNumSupportedArchs(int *count) {
    BEGIN();
    if (!count) RETURN(NVRTC_ERROR_INVALID_INPUT);
    *count = arch_count;
    RETURN(NVRTC_SUCCESS);
}

nvrtcResult nvrtcGetSupportedArchs(int *supported) {
    BEGIN();
    if (!supported) RETURN(NVRTC_ERROR_INVALID_INPUT);
    memcpy(supported, archs, (size_t)arch_count * sizeof *archs);
    RETURN(NVRTC_SUCCESS);
}
#endif

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames) {
    BEGIN();
    if (!prog || !src || numHeaders < 0 || (numHeaders > 0 && (!headers || !includeNames)))
        RETURN(NVRTC_ERROR_INVALID_INPUT);
    struct fake_program *p = calloc(1, sizeof *p);
    if (!p) RETURN(NVRTC_ERROR_OUT_OF_MEMORY);
    p->source = copy_text(src);
    p->name = copy_text(name ? name : "default_program");
    p->log = copy_text("");
    if (!p->source || !p->name || !p->log ||
        !fake_obj_add("program", (uintptr_t)p, 0, NULL, p)) {
        free_contents(p);
        free(p);
        RETURN(NVRTC_ERROR_OUT_OF_MEMORY);
    }
    *prog = p;
    RETURN(NVRTC_SUCCESS);
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
    BEGIN();
    if (!prog) RETURN(NVRTC_ERROR_INVALID_INPUT);
    struct fake_program *p = need(__func__, *prog, 1);
    if (!p || p->busy) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    fake_obj_remove(fake_obj_find("program", (uintptr_t)p), "destroyed");
    free_contents(p);
    *prog = NULL;
    RETURN(NVRTC_SUCCESS);
}

/* What compiling `p` with these options gives: the result code, and the log and PTX (new
 * strings) that go with it. Runs without the lock: `p`'s source and name are not changed
 * while it is busy. */
static nvrtcResult compile(const struct fake_program *p, int arch, const char *options,
                           char **log, char **ptx) {
    const char *at;
    if ((at = strstr(p->source, "#error")) != NULL) {
        const char *rest = at + strlen("#error");
        while (*rest == ' ' || *rest == '\t') rest++;
        int len = (int)strcspn(rest, "\r\n");
        *log = format_text("%s(%d): catastrophic error: #error directive: %.*s\n\n"
                           "1 catastrophic error detected in the compilation of \"%s\".\n"
                           "Compilation terminated.\n",
                           p->name, line_of(p->source, at), len, rest, p->name);
        return NVRTC_ERROR_COMPILATION;
    }
    if ((at = strstr(p->source, "syntax error")) != NULL) {
        *log = format_text("%s(%d): error: expected a \";\"\n\n"
                           "1 error detected in the compilation of \"%s\".\n",
                           p->name, line_of(p->source, at), p->name);
        return NVRTC_ERROR_COMPILATION;
    }
    if (!strstr(p->source, "add_one")) {
        *log = format_text("%s(1): error: the fake nvrtc compiles only sources that mention "
                           "add_one\n\n1 error detected in the compilation of \"%s\".\n",
                           p->name, p->name);
        return NVRTC_ERROR_COMPILATION;
    }
    const char *path = getenv("FAKE_NVRTC_PTX");
    if (!path) {
        *log = copy_text("fake nvrtc: FAKE_NVRTC_PTX is not set\n");
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    char *why = NULL;
    *ptx = ptx_for(path, arch, options, &why);
    if (!*ptx) {
        *log = why;
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    *log = copy_text("");
    return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options) {
    BEGIN();
    struct fake_program *p = need(__func__, prog, 0);
    if (!p) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    if (p->busy) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    if (numOptions < 0 || (numOptions > 0 && !options)) RETURN(NVRTC_ERROR_INVALID_INPUT);
    for (int i = 0; i < numOptions; i++)
        if (!options[i]) RETURN(NVRTC_ERROR_INVALID_INPUT);

    /* A new compile starts over: the sizes must be read again. */
    free(p->log);
    free(p->ptx);
    p->log = NULL;
    p->ptx = NULL;
    p->log_size_read = p->ptx_size_read = 0;
    p->compiled = -1;

    /* The options, joined, and the architecture they name. */
    size_t joined_len = 1;
    for (int i = 0; i < numOptions; i++) joined_len += strlen(options[i]) + 1;
    char *joined = calloc(1, joined_len);
    if (!joined) {
        p->log = copy_text("");
        RETURN(NVRTC_ERROR_OUT_OF_MEMORY);
    }
    int arch = default_arch();
    const char *bad = NULL;
    for (int i = 0; i < numOptions; i++) {
        const char *o = options[i];
        if (i) strcat(joined, " ");
        strcat(joined, o);
        const char *value = NULL;
        int separate = 0; /* `-arch <value>`: the value is the next option */
        if (!strncmp(o, "--gpu-architecture=", 19)) {
            value = o + 19;
        } else if (!strncmp(o, "-arch=", 6)) {
            value = o + 6;
        } else if (!strcmp(o, "-arch") || !strcmp(o, "--gpu-architecture")) {
            value = i + 1 < numOptions ? options[i + 1] : "";
            separate = 1;
        }
        if (value) {
            arch = parse_arch(value);
            if (arch < 0 || !arch_supported(arch)) {
                p->log = copy_text("nvrtc: error: invalid value for --gpu-architecture (-arch)\n");
                free(joined);
                RETURN(NVRTC_ERROR_INVALID_OPTION);
            }
            if (separate) {
                i++;
                strcat(joined, " ");
                strcat(joined, value);
            }
        } else if (o[0] != '-' && !bad) {
            bad = o;
        }
    }
    if (bad) {
        p->log = format_text("nvrtc: error: unrecognized option %s\n", bad);
        free(joined);
        RETURN(NVRTC_ERROR_INVALID_OPTION);
    }

    /* The compile itself, without the lock. */
    p->busy = 1;
    fake_unlock();
    char *log = NULL, *ptx = NULL;
    nvrtcResult result = compile(p, arch, joined, &log, &ptx);
    const char *ms = getenv("FAKE_NVRTC_COMPILE_MS");
    if (ms && atoi(ms) > 0) {
        struct timespec delay = {atoi(ms) / 1000, (long)(atoi(ms) % 1000) * 1000000L};
        nanosleep(&delay, NULL);
    }
    free(joined);
    fake_lock();
    p->busy = 0;
    p->log = log ? log : copy_text("");
    p->ptx = result == NVRTC_SUCCESS ? ptx : NULL;
    if (result != NVRTC_SUCCESS) free(ptx);
    if (result == NVRTC_SUCCESS && !p->ptx) result = NVRTC_ERROR_OUT_OF_MEMORY;
    p->compiled = result == NVRTC_SUCCESS ? 1 : -1;
    RETURN(result);
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size) {
    BEGIN();
    struct fake_program *p = need(__func__, prog, 0);
    if (!p) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    if (!size) RETURN(NVRTC_ERROR_INVALID_INPUT);
    *size = strlen(p->log ? p->log : "") + 1;
    p->log_size_read = 1;
    RETURN(NVRTC_SUCCESS);
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
    BEGIN();
    struct fake_program *p = need(__func__, prog, 0);
    if (!p) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    if (!log) RETURN(NVRTC_ERROR_INVALID_INPUT);
    if (!p->log_size_read) {
        fake_violation("log without its size: nvrtcGetProgramLog of program %#lx (%s) before "
                       "nvrtcGetProgramLogSize",
                       (unsigned long)(uintptr_t)p, p->name);
    }
    const char *text = p->log ? p->log : "";
    memcpy(log, text, strlen(text) + 1);
    RETURN(NVRTC_SUCCESS);
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size) {
    BEGIN();
    struct fake_program *p = need(__func__, prog, 0);
    if (!p) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    if (!size) RETURN(NVRTC_ERROR_INVALID_INPUT);
    if (p->compiled != 1 || !p->ptx) {
        fake_violation("PTX of a failed program: nvrtcGetPTXSize of program %#lx (%s), %s",
                       (unsigned long)(uintptr_t)p, p->name,
                       p->compiled ? "whose compile failed" : "never compiled");
        RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    }
    *size = strlen(p->ptx) + 1;
    p->ptx_size_read = 1;
    RETURN(NVRTC_SUCCESS);
}

nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx) {
    BEGIN();
    struct fake_program *p = need(__func__, prog, 0);
    if (!p) RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    if (!ptx) RETURN(NVRTC_ERROR_INVALID_INPUT);
    if (p->compiled != 1 || !p->ptx) {
        fake_violation("PTX of a failed program: nvrtcGetPTX of program %#lx (%s), %s",
                       (unsigned long)(uintptr_t)p, p->name,
                       p->compiled ? "whose compile failed" : "never compiled");
        RETURN(NVRTC_ERROR_INVALID_PROGRAM);
    }
    if (!p->ptx_size_read) {
        fake_violation("PTX without its size: nvrtcGetPTX of program %#lx (%s) before "
                       "nvrtcGetPTXSize",
                       (unsigned long)(uintptr_t)p, p->name);
    }
    memcpy(ptx, p->ptx, strlen(p->ptx) + 1);
    RETURN(NVRTC_SUCCESS);
}

/* ---- test hooks ------------------------------------------------------------------------- */

int fake_nvrtc_violations(char *buf, size_t cap) {
    fake_lock();
    int n = fake_violations_text(buf, cap);
    fake_unlock();
    return n;
}

void fake_nvrtc_clear_violations(void) {
    fake_lock();
    fake_clear_violations();
    fake_unlock();
}

void fake_nvrtc_fail(const char *entry, int nth, int code) {
    fake_lock();
    fake_fail_arm(entry, nth, code);
    fake_unlock();
}

unsigned long fake_nvrtc_calls(const char *entry) {
    fake_lock();
    unsigned long n = entry ? fake_calls(entry) : 0;
    fake_unlock();
    return n;
}

int fake_nvrtc_live(const char *kind) {
    if (!kind) return 0;
    fake_lock();
    int n = fake_obj_count(kind);
    fake_unlock();
    return n;
}
