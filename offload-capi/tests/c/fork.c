/*
 * L9 in C: a child forked from a process running offload gets OFFLOAD_ERROR_FORKED from
 * every call at once (never a hang on a lock a thread of the parent held), and its exit
 * runs nothing of the parent's runtime. The child runs under alarm(20): a hang kills it
 * with SIGALRM, which fails the run.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define FORKED(call)                                                                       \
    do {                                                                                   \
        offload_status_t s_ = (call);                                                      \
        if (s_ != OFFLOAD_ERROR_FORKED) {                                                  \
            fprintf(stderr, "child: %s gave %s\n", #call, offload_status_name((int)s_));  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

int main(void) {
    offload_runtime_t rt = 0;
    offload_device_t dev = 0;
    offload_buffer_t buf = 0;
    REQUIRE(offload_init(NULL, &rt));
    REQUIRE(offload_device_of(rt, OFFLOAD_BACKEND_HOST, &dev));
    REQUIRE(offload_buffer_alloc(dev, 64, OFFLOAD_MEM_DEVICE, &buf));
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        alarm(20);
        unsigned char out[8];
        offload_runtime_t again = 0;
        offload_buffer_t more = 0;
        FORKED(offload_buffer_read(buf, 0, out, sizeof out));
        FORKED(offload_buffer_alloc(dev, 8, OFFLOAD_MEM_DEVICE, &more));
        FORKED(offload_init(NULL, &again));
        FORKED(offload_buffer_free(buf));
        FORKED(offload_shutdown(rt, NULL));
        if (!strstr(offload_last_error(), "offload_shutdown") ||
            !strstr(offload_last_error(), "forked")) {
            fprintf(stderr, "child: the message names neither the call nor the fork: %s\n",
                    offload_last_error());
            exit(1);
        }
        if (offload_live_handles() != 0) exit(1);
        exit(0); /* the exit hooks run, offload's too: they must do nothing here */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fork: the child failed (%s %d)\n",
                WIFSIGNALED(status) ? "signal" : "exit code",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 1;
    }
    REQUIRE(offload_buffer_free(buf));
    REQUIRE(offload_shutdown(rt, NULL));
    printf("fork: the child got OFFLOAD_ERROR_FORKED from every call and exited\n");
    return 0;
}
