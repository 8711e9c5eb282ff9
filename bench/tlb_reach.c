/*
 * Native TLB-reach curve (issue 4 item 1, third part): a dependent chain of 8-byte reads,
 * one per page, in a random cyclic order of the pages of an array, for arrays of 16 KiB to
 * (by default) 4 GiB in x4 steps, backed by 4 KiB pages (MADV_NOHUGEPAGE) and by 2 MiB pages
 * (MADV_HUGEPAGE). Random pages over P pages miss a fully associative LRU TLB of E entries
 * with probability 1 - E/P, so the knees of ns-per-access locate the TLB levels; where perf
 * counters are permitted, dTLB-loads and dTLB-load-misses per access are read too (what they
 * count differs by vendor: on AMD dTLB-loads counts L1 DTLB misses and dTLB-load-misses
 * page walks; the output names the host's vendor).
 *
 * Each read lands on a 64-byte line of its page chosen by a hash of the page number, so that
 * the data caches see the pages spread over their sets, with 2 MiB pages too (whose frames
 * are contiguous: line i mod 64 of page i would put 2,048 pages in 64 sets of a 2,048-set
 * cache). The 2 MiB curve so sees the same data-cache misses as the 4 KiB one and few TLB
 * misses: their difference is the cost of translation alone.
 *
 * Finer steps find the knees: --factor F steps the array size by F instead of 4 (e.g. 1.19
 * for four steps per doubling), and --sizes N,N,... measures exactly these array sizes, in
 * 4 KiB pages (`tlbsim calibrate` sweeps coarsely, then again around each knee it found).
 *
 * Usage: tlb_reach [--max-bytes N] [--min-bytes N] [--factor F] [--sizes PAGES,...]
 *                  [--accesses N] [--reps R] [--dense] [--pages 4k|2m|both]
 * --dense chases every 64-byte line of the array instead of one per page: with 2 MiB
 * pages and an array several times the last-level cache, ns per access is the latency of
 * memory (tlbsim calibrate's machine.memory.local_latency).
 * --reps R times the chase R times and reports the fastest (the one least disturbed by
 * other work on a shared machine); perf counts are averaged over all R.
 * Output: one JSON object per (page size, array size) and line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define HUGE (2UL << 20)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A perf counter of the data TLB (read accesses or misses); -1 with errno when refused. */
/* The line (0..63) of page i that the chain reads. */
static size_t line_of(size_t i) {
    uint64_t z = i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return (size_t)(z >> 58);
}

static int dtlb_counter(int result) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HW_CACHE;
    a.config = PERF_COUNT_HW_CACHE_DTLB | (PERF_COUNT_HW_CACHE_OP_READ << 8) | (result << 16);
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static const char *vendor(void) {
    static char v[64] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return v;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "vendor_id", 9)) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(v, sizeof v, "%s", p + 2);
                v[strcspn(v, "\n")] = 0;
            }
            break;
        }
    }
    fclose(f);
    return v;
}

/* Bytes of the mapping at p backed by huge pages, from /proc/self/smaps (-1: unknown). */
static long anon_huge_kb(void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    unsigned long lo, hi, at = (unsigned long)p;
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') == line + strcspn(line, "-")) {
            in = at >= lo && at < hi;
            continue;
        }
        if (in && !strncmp(line, "AnonHugePages:", 14)) {
            kb = atol(line + 14);
            break;
        }
    }
    fclose(f);
    return kb;
}

static long reps = 1;
static int dense; /* --dense: chase every 64-byte line, not one per page */

static void run(size_t bytes, int huge, long accesses, int c_access, int c_miss, const char *why_no_perf) {
    size_t len = bytes < HUGE && huge ? HUGE : bytes;
    char *a = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) {
        printf("{\"page_size\": \"%s\", \"bytes\": %zu, \"not_measurable\": \"mmap failed: %s\"}\n",
               huge ? "2m" : "4k", bytes, strerror(errno));
        return;
    }
    char *base = (char *)(((uintptr_t)a + HUGE - 1) & ~(HUGE - 1));
    madvise(base, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    size_t pages = bytes / PAGE;
    /* the chain's nodes: one line per page, or (--dense) every line of the array */
    size_t nodes = dense ? bytes / 64 : pages;
    uint32_t *order = malloc(nodes * sizeof *order);
    if (!order) {
        printf("{\"page_size\": \"%s\", \"bytes\": %zu, \"not_measurable\": \"out of memory\"}\n",
               huge ? "2m" : "4k", bytes);
        munmap(a, len + HUGE);
        return;
    }
    for (size_t i = 0; i < nodes; i++) order[i] = (uint32_t)i;
    for (size_t i = nodes - 1; i > 0; i--) {
        size_t j = rng() % (i + 1);
        uint32_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (size_t k = 0; k < len; k += PAGE) base[k] = 0; /* fault everything in */
#define NODE(i) (dense ? base + (i) * 64 : base + (i) * PAGE + line_of(i) * 64)
    for (size_t i = 0; i < nodes; i++) {
        size_t from = order[i], to = order[(i + 1) % nodes];
        *(char **)NODE(from) = NODE(to);
    }
    free(order);
    long huge_kb = anon_huge_kb(base);
    char **p = (char **)NODE(0);
#undef NODE
    for (long i = 0; i < (long)nodes * 2 && i < accesses; i++) p = (char **)*p; /* warm */
    uint64_t acc0 = 0, miss0 = 0, acc1 = 0, miss1 = 0;
    if (c_access >= 0) { ioctl(c_access, PERF_EVENT_IOC_RESET, 0); ioctl(c_access, PERF_EVENT_IOC_ENABLE, 0); }
    if (c_miss >= 0) { ioctl(c_miss, PERF_EVENT_IOC_RESET, 0); ioctl(c_miss, PERF_EVENT_IOC_ENABLE, 0); }
    /* --reps timed chases; the fastest is the one least disturbed by other work */
    double best = 1e300;
    for (long r = 0; r < reps; r++) {
        double t0 = now();
        for (long i = 0; i < accesses; i++) p = (char **)*p;
        double t1 = now();
        if (t1 - t0 < best) best = t1 - t0;
    }
    if (c_access >= 0) { ioctl(c_access, PERF_EVENT_IOC_DISABLE, 0); if (read(c_access, &acc1, 8) != 8) acc1 = 0; }
    if (c_miss >= 0) { ioctl(c_miss, PERF_EVENT_IOC_DISABLE, 0); if (read(c_miss, &miss1, 8) != 8) miss1 = 0; }
    printf("{\"page_size\": \"%s\", \"bytes\": %zu, \"pages_4k\": %zu, \"accesses\": %ld, "
           "\"ns_per_access\": %.3f, \"anon_huge_kib\": %ld",
           huge ? "2m" : "4k", bytes, pages, accesses, best * 1e9 / accesses, huge_kb);
    if (reps > 1) printf(", \"reps\": %ld", reps);
    if (dense) printf(", \"dense\": true, \"lines\": %zu", nodes);
    if (c_access >= 0 && c_miss >= 0) /* counted over all the repetitions */
        printf(", \"dtlb_loads_per_access\": %.4f, \"dtlb_load_misses_per_access\": %.4f",
               (double)(acc1 - acc0) / accesses / reps, (double)(miss1 - miss0) / accesses / reps);
    else
        printf(", \"perf\": \"not measurable here: %s\"", why_no_perf);
    printf(", \"sink\": %d}\n", p != NULL);
    fflush(stdout);
    munmap(a, len + HUGE);
}

int main(int argc, char **argv) {
    size_t min_bytes = 16UL << 10, max_bytes = 4UL << 30;
    long accesses = 2000000;
    int want4k = 1, want2m = 1;
    double factor = 4.0;
    size_t sizes[4096];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc) max_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--min-bytes") && i + 1 < argc) min_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--accesses") && i + 1 < argc) accesses = atol(argv[++i]);
        else if (!strcmp(argv[i], "--factor") && i + 1 < argc) factor = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dense")) dense = 1;
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            for (char *t = strtok(argv[++i], ","); t; t = strtok(NULL, ",")) {
                long n = atol(t);
                if (n < 2 || nsizes == (int)(sizeof sizes / sizeof sizes[0])) {
                    fprintf(stderr, "tlb_reach: --sizes takes up to 4096 page counts, each >= 2\n");
                    return 2;
                }
                sizes[nsizes++] = (size_t)n * PAGE;
            }
        }
        else if (!strcmp(argv[i], "--pages") && i + 1 < argc) {
            const char *v = argv[++i];
            want4k = !strcmp(v, "4k") || !strcmp(v, "both");
            want2m = !strcmp(v, "2m") || !strcmp(v, "both");
        } else {
            fprintf(stderr, "usage: tlb_reach [--max-bytes N] [--min-bytes N] [--factor F] [--sizes PAGES,...] "
                            "[--accesses N] [--reps R] [--dense] [--pages 4k|2m|both]\n");
            return 2;
        }
    }
    if (accesses < 1 || reps < 1 || min_bytes < 2 * PAGE || max_bytes < min_bytes || !(want4k || want2m) || !(factor > 1.0)) {
        fprintf(stderr, "tlb_reach: need --accesses >= 1, --reps >= 1, 8 KiB <= --min-bytes <= --max-bytes, --factor > 1, "
                        "and a page size\n");
        return 2;
    }
    if (!nsizes) {
        /* min_bytes, then x factor, rounded to whole pages and strictly increasing */
        for (double b = (double)min_bytes; nsizes < 4096; b *= factor) {
            size_t bytes = ((size_t)(b + PAGE / 2) / PAGE) * PAGE;
            if (bytes > max_bytes) break;
            if (nsizes && bytes <= sizes[nsizes - 1]) continue;
            sizes[nsizes++] = bytes;
        }
    }
    int c_access = dtlb_counter(PERF_COUNT_HW_CACHE_RESULT_ACCESS);
    int e1 = errno;
    int c_miss = dtlb_counter(PERF_COUNT_HW_CACHE_RESULT_MISS);
    int e2 = errno;
    char why[160] = "";
    if (c_access < 0 || c_miss < 0)
        snprintf(why, sizeof why, "perf_event_open refused the dTLB counters (%s)", strerror(c_access < 0 ? e1 : e2));
    printf("{\"host\": {\"vendor\": \"%s\", \"perf_dtlb\": %s, \"counter_meaning\": \"%s\"}}\n", vendor(),
           why[0] ? "false" : "true",
           !strcmp(vendor(), "AuthenticAMD")
               ? "dTLB-loads = L1 DTLB misses, dTLB-load-misses = page walks (AMD)"
               : "dTLB-loads = loads looked up in the DTLB, dTLB-load-misses = loads that missed the DTLB (Intel)");
    for (int h = 0; h < 2; h++) {
        if ((h == 0 && !want4k) || (h == 1 && !want2m)) continue;
        for (int k = 0; k < nsizes; k++) run(sizes[k], h, accesses, c_access, c_miss, why);
    }
    return 0;
}
