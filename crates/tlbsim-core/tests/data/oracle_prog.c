/* Oracle program for tests/oracle_cachegrind.rs: strided and random loads and
 * read-modify-writes over 8 MiB, so a small TLB misses often. */
#include <stdlib.h>
#include <stdint.h>
int main(void) {
    const size_t n = 1u << 20; /* 8 MiB of u64: 2048 pages */
    uint64_t *a = malloc(n * sizeof *a);
    uint64_t x = 88172645463325252ull, sum = 0;
    for (size_t i = 0; i < n; i += 512) a[i] = i;
    for (int k = 0; k < 20000; k++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t i = x % (n / 8) * 8;  /* within 1 MiB... */
        sum += a[(x >> 20) % 4096 * 256 % n];
        a[i] += sum;
    }
    return (int)(sum & 1);
}
