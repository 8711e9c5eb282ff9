/* A single-threaded program whose data-TLB misses are dominated by its own loop: it maps
 * 6,144 pages (24 MiB), writes each once, then reads them in a fixed scrambled order for
 * 20 passes. Traced by valgrind lackey and by `tlbsim record`, its replayed data-TLB misses
 * must agree (python/tests/test_record.py). */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#define PAGES 6144
#define PASSES 20

int main(void)
{
    volatile uint8_t *p = mmap(NULL, (size_t)PAGES * 4096, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    for (uint64_t i = 0; i < PAGES; i++)
        p[i * 4096] = (uint8_t)i;
    uint64_t sum = 0;
    for (int pass = 0; pass < PASSES; pass++)
        for (uint64_t i = 0; i < PAGES; i++)
            sum += p[((i * 2654435761u) % PAGES) * 4096 + 8 * (uint64_t)pass];
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
