/*
 * offload host kernel ABI, version 2 (version 1 plus the shared-memory fields at the end
 * of offload_launch: a version-1 kernel, which never reads them, runs unchanged).
 *
 * A host program is an ELF shared object for the machine it runs on (x86-64 or AArch64
 * Linux). A kernel is an exported C function
 *
 *     void name(void *const *args, const offload_launch *launch);
 *
 * together with an exported string `offload_params_<name>` that declares its parameters,
 * one character each: 'b' for a buffer; a typed scalar, whose type offload checks at each
 * launch: 'c' int8_t, 'C' uint8_t, 'h' int16_t, 'H' uint16_t, 'i' int32_t, 'I' uint32_t,
 * 'q' int64_t, 'Q' uint64_t, 'f' float, 'd' double; or '1', '2', '4', '8' for a scalar
 * known only by its size (any type of that size is accepted). OFFLOAD_KERNEL declares
 * both. offload refuses a kernel without the string, and checks every launch against it.
 *
 * args[i] points to the value of argument i: for a buffer, to the buffer's base address
 * (so the buffer is `*(T **)args[i]`); for a scalar, to its bytes. The pointers are valid
 * for the duration of the call only.
 *
 * The device calls the kernel once per block of the launch grid, on several threads at
 * once; `launch->block_id` says which block. The kernel runs the block's threads itself
 * (typically a loop over `launch->block[0]`). It must stay inside its buffers: offload
 * checks sizes and devices, but native code can write anywhere.
 *
 * Exported globals (`OFFLOAD_GLOBAL`) can be read and written with Module::read_global /
 * write_global; only writable data (not const) can be written.
 */
#ifndef OFFLOAD_HOST_H
#define OFFLOAD_HOST_H

#include <stdint.h>

typedef struct offload_launch {
    uint32_t grid[3];     /* blocks in the grid, per dimension */
    uint32_t block[3];    /* threads per block, per dimension */
    uint32_t block_id[3]; /* the block this call runs */
    uint32_t shared_size; /* bytes of dynamic shared memory (Dims::shared_memory) */
    void *shared;         /* this block's shared memory, 64-byte aligned, contents undefined
                             at the start of the block; NULL when shared_size is 0 */
} offload_launch;

#define OFFLOAD_EXPORT __attribute__((visibility("default")))

/* Declares a kernel and its parameter string, e.g. OFFLOAD_KERNEL(add_one, "b4") { ... } */
#define OFFLOAD_KERNEL(name, params)                                  \
    OFFLOAD_EXPORT const char offload_params_##name[] = params;      \
    OFFLOAD_EXPORT void name(void *const *args, const offload_launch *launch)

/* A global variable the host can read and write. */
#define OFFLOAD_GLOBAL OFFLOAD_EXPORT

/* Argument i as a buffer of `type`, or as a scalar of `type`. */
#define OFFLOAD_BUFFER(type, i) ((type *)(*(void *const *)args[i]))
#define OFFLOAD_SCALAR(type, i) (*(const type *)args[i])

/* This block's dynamic shared memory as an array of `type`. */
#define OFFLOAD_SHARED(type) ((type *)launch->shared)

/* The global index of thread t of this block along x. */
#define OFFLOAD_INDEX_X(t) ((uint64_t)launch->block_id[0] * launch->block[0] + (t))

#endif
