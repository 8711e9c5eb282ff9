/* Shared by the native benchmarks: TLB-shootdown IPIs received so far, summed over CPUs,
 * from the `TLB:` row of /proc/interrupts; -1 when the kernel has no such row.
 * TLBSIM_PROC_INTERRUPTS names another file to read instead (tests use it to stand for a
 * kernel without the row). */
#ifndef TLBSIM_PROC_INTERRUPTS_H
#define TLBSIM_PROC_INTERRUPTS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long long tlb_ipis(void) {
    const char *path = getenv("TLBSIM_PROC_INTERRUPTS");
    FILE *f = fopen(path && *path ? path : "/proc/interrupts", "r");
    if (!f) return -1;
    char line[8192];
    long long sum = -1;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ') p++;
        if (strncmp(p, "TLB:", 4) != 0) continue;
        p += 4;
        sum = 0;
        for (;;) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p) break;
            sum += v;
            p = end;
        }
        break;
    }
    fclose(f);
    return sum;
}
#endif
