/* What a first-touch page fault costs on this machine: touch 20,000 fresh
 * anonymous 4 KiB pages, then the same with MADV_HUGEPAGE (transparent huge pages).
 *
 *   cc -O2 -o /tmp/pagefault bench/platform/pagefault.c && /tmp/pagefault
 */
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

static double touch_us(int huge) {
    size_t n = 20000, page = 4096;
    char *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return -1;
    if (huge) madvise(p, n * page, MADV_HUGEPAGE);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < n; i++) p[i * page] = 1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    munmap(p, n * page);
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n / 1000.0;
}

int main(void) {
    printf("%.2f us per 4 KiB page, small pages\n", touch_us(0));
    printf("%.2f us per 4 KiB page, MADV_HUGEPAGE\n", touch_us(1));
    return 0;
}
