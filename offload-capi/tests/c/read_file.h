/* A whole file read into memory (a program image the tests load), for the C tests that
 * need one: suite.c and dlopen.c. The caller frees the bytes; NULL when it cannot be read. */
#ifndef OFFLOAD_TEST_READ_FILE_H
#define OFFLOAD_TEST_READ_FILE_H

#include <stdio.h>
#include <stdlib.h>

static inline unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)n);
    if (bytes && fread(bytes, 1, (size_t)n, f) != (size_t)n) {
        free(bytes);
        bytes = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return bytes;
}

#endif
