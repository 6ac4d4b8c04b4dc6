/* What a context switch costs on this machine: two processes pass a byte back and
 * forth over two pipes, 200,000 round trips (two switches each).
 *
 *   cc -O2 -o /tmp/pingpong bench/platform/pingpong.c
 *   /tmp/pingpong same    both pinned to CPU 0 (as tar and a FUSE queue thread run)
 *   /tmp/pingpong apart   pinned to CPUs 0 and 1 (every wake-up crosses CPUs)
 *   /tmp/pingpong         where the scheduler puts them
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "free";
    int ping[2], pong[2], n = 200000;
    char c = 'x';
    if (pipe(ping) || pipe(pong)) return 1;
    if (strcmp(mode, "free") != 0) pin(0);
    if (fork() == 0) {
        if (strcmp(mode, "apart") == 0) pin(1);
        for (int i = 0; i < n; i++)
            if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1) _exit(1);
        _exit(0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++)
        if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) return 1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    wait(NULL);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n / 1000.0;
    printf("%s: %.2f us per round trip\n", mode, us);
    return 0;
}
