/*
 * FPR's munmap micro-benchmark cases (FPR §V-A1, Fig. 6; issue 4 item 1, second part).
 * Thread classes: I/O threads loop mmap -> 4 KiB access -> munmap on a shared file mapping;
 * compute threads loop a register-only computation (one operation = 10,000 increments,
 * FPR's "1 CF = 10K ops"); mixed threads alternate one I/O and one compute operation.
 *   case 1: N I/O threads            case 2: 1 I/O thread + N compute threads
 *   case 3: N I/O + 1 compute        case 4: N I/O + M compute
 *   case 5: N mixed threads
 * Threads are pinned round-robin over the CPUs this process may run on (sched_getaffinity). Each run lasts --seconds and prints
 * one JSON line: operations per second per thread class (total and per thread) and the TLB
 * shootdown IPIs received per second (TLB row of /proc/interrupts, summed over CPUs).
 *
 * Usage: fpr_munmap [--seconds S] [--case C --threads N [--compute M]]
 *   Without --case: cases 1-5 for N = 1 .. allowed CPUs (case 4: M = N).
 * The I/O file is a 4 KiB file in $TMPDIR (FPR used a null block device: its page-cache
 * page is what every mmap maps).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "proc_interrupts.h"

enum kind { IO, COMPUTE, MIXED };
static const char *KIND_NAMES[] = {"io", "compute", "mixed"};

struct worker {
    pthread_t thread;
    enum kind kind;
    int cpu;
    uint64_t ops;
};

static atomic_int running;
static int file_fd;
static long cpus;
static int cpu_ids[CPU_SETSIZE]; /* the allowed CPUs, in order */

static void io_op(void) {
    char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, file_fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    volatile char c = p[(rand() & 63) * 64];
    (void)c;
    munmap(p, 4096);
}

static void compute_op(void) {
    uint64_t x = 0;
    for (int i = 0; i < 10000; i++) __asm__ volatile("add $1, %0" : "+r"(x));
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    while (atomic_load_explicit(&running, memory_order_relaxed)) {
        if (w->kind != COMPUTE) io_op();
        if (w->kind != IO) compute_op();
        w->ops++;
    }
    return NULL;
}

static void run(int c, int n_io, int n_compute, int n_mixed, double seconds) {
    int n = n_io + n_compute + n_mixed;
    struct worker *ws = calloc(n, sizeof *ws);
    for (int i = 0; i < n; i++) {
        ws[i].kind = i < n_io ? IO : i < n_io + n_compute ? COMPUTE : MIXED;
        ws[i].cpu = cpu_ids[i % cpus];
    }
    atomic_store(&running, 1);
    long long before = tlb_ipis();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]);
    struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&running, 0);
    for (int i = 0; i < n; i++) pthread_join(ws[i].thread, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long after = tlb_ipis();
    double el = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("{\"case\": %d, \"io_threads\": %d, \"compute_threads\": %d, \"mixed_threads\": %d, \"seconds\": %.3f",
           c, n_io, n_compute, n_mixed, el);
    for (int k = 0; k < 3; k++) {
        int count = k == IO ? n_io : k == COMPUTE ? n_compute : n_mixed;
        if (!count) continue;
        uint64_t total = 0;
        printf(", \"%s_ops_per_second_per_thread\": [", KIND_NAMES[k]);
        int first = 1;
        for (int i = 0; i < n; i++) {
            if ((int)ws[i].kind != k) continue;
            printf("%s%.1f", first ? "" : ", ", ws[i].ops / el);
            first = 0;
            total += ws[i].ops;
        }
        printf("], \"%s_ops_per_second\": %.1f", KIND_NAMES[k], total / el);
    }
    if (before >= 0 && after >= 0)
        printf(", \"shootdown_ipis_per_second\": %.1f}\n", (after - before) / el);
    else
        printf(", \"shootdown_ipis\": \"not measurable here: no TLB row in /proc/interrupts\"}\n");
    fflush(stdout);
    free(ws);
}

static void run_case(int c, int n, int m, double seconds) {
    switch (c) {
    case 1: run(c, n, 0, 0, seconds); break;
    case 2: run(c, 1, n, 0, seconds); break;
    case 3: run(c, n, 1, 0, seconds); break;
    case 4: run(c, n, m, 0, seconds); break;
    case 5: run(c, 0, 0, n, seconds); break;
    }
}

int main(int argc, char **argv) {
    double seconds = 1.0;
    int c = 0, n = 0, m = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) c = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compute") && i + 1 < argc) m = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: fpr_munmap [--seconds S] [--case 1-5 --threads N [--compute M]]\n");
            return 2;
        }
    }
    if (seconds <= 0 || seconds > 3600 || c < 0 || c > 5 || (c && n < 1)) {
        fprintf(stderr, "fpr_munmap: need 0 < --seconds <= 3600, --case 1-5 with --threads >= 1\n");
        return 2;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) { perror("sched_getaffinity"); return 1; }
    cpus = 0;
    for (int k = 0; k < CPU_SETSIZE; k++)
        if (CPU_ISSET(k, &allowed)) cpu_ids[cpus++] = k;
    char path[] = "/tmp/tlbsim-fpr-XXXXXX";
    file_fd = mkstemp(path);
    if (file_fd < 0) { perror("mkstemp"); return 1; }
    unlink(path);
    char page[4096];
    memset(page, 1, sizeof page);
    if (write(file_fd, page, sizeof page) != (ssize_t)sizeof page) { perror("write"); return 1; }
    if (c) {
        run_case(c, n, m < 0 ? n : m, seconds);
    } else {
        for (int k = 1; k <= 5; k++)
            for (int t = 1; t <= cpus; t++) run_case(k, t, t, seconds);
    }
    return 0;
}
