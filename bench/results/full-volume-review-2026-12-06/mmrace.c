// A child stores into a shared mapping of FILE and msyncs in a loop; the
// parent opens FILE with O_TRUNC, then kills the child. After that, nothing
// may extend the file: on the kernel's ext4 it stays empty.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#define SZ (256 << 10)
int main(int argc, char **argv) {
    const char *path = argv[1];
    int iters = atoi(argv[2]), bad = 0;
    for (int it = 0; it < iters; it++) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (ftruncate(fd, SZ)) { perror("ftruncate"); return 1; }
        char *m = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        int go[2]; pipe(go);
        pid_t c = fork();
        if (c == 0) {
            signal(SIGBUS, _exit);
            int first = 1;
            for (unsigned n = 0;; n++) {
                for (int p = 0; p < SZ; p += 4096) m[p] = 'A' + (n % 26);
                msync(m, SZ, MS_SYNC);
                if (first) { write(go[1], "x", 1); first = 0; }
            }
        }
        char x; read(go[0], &x, 1);
        struct timespec ts = {0, (rand() % 2000) * 1000};
        nanosleep(&ts, NULL);
        int t = open(path, O_WRONLY | O_TRUNC);
        if (t < 0) { perror("open O_TRUNC"); return 1; }
        close(t);
        kill(c, SIGKILL); waitpid(c, NULL, 0);
        munmap(m, SZ); close(go[0]); close(go[1]);
        // Let anything still in flight land, then ask the file system afresh.
        int r = open(path, O_RDONLY); fsync(r); close(r);
        struct stat st; stat(path, &st);
        char cmd[512]; snprintf(cmd, sizeof cmd, "echo 2 > /proc/sys/vm/drop_caches");
        system(cmd);
        struct stat st2; stat(path, &st2);
        if (st2.st_size != 0) { bad++; printf("iter %d: size %lld after O_TRUNC (stat before drop_caches %lld)\n", it, (long long)st2.st_size, (long long)st.st_size); }
    }
    printf("%d of %d iterations left a non-empty file\n", bad, iters);
    return 0;
}
