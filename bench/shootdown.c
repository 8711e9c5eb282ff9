/*
 * Native TLB-shootdown micro-benchmarks (the engine issue's pattern table; issue 4 item 1).
 *
 * For each pattern of bench/patterns.toml: the measuring thread, pinned to one CPU,
 * repeats an operation (mmap/munmap, mprotect, madvise, copy-on-write, file mmap) while a
 * sibling on another CPU spins in user space, sleeps in the kernel, is absent, or is a
 * second process. Shootdown IPIs are read from the `TLB:` row of /proc/interrupts (summed
 * over CPUs) before and after; the result is IPIs received per operation and operations
 * per second, median of --reps repetitions of --ops operations.
 *
 * Output: one JSON object per pattern and line. A pattern that cannot be measured here (no
 * TLB row, one CPU) says so in "not_measurable" instead of failing.
 *
 * Usage: shootdown [--ops N] [--reps R] [--list] [PATTERN ...]
 *   --list prints each pattern's name, sibling, op and pages (as in patterns.toml).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_interrupts.h"

#define PAGE 4096L

enum sibling { SPIN, SLEEP, NONE, PROCESS };

struct pattern {
    const char *name;
    enum sibling sibling;
    const char *op_name; /* patterns.toml's machine-readable `op` and `pages` (--list prints them) */
    long pages;
    void (*setup)(void);
    void (*op)(long i);
    void (*teardown)(void);
};

static volatile int stop_sibling;
static int sleep_pipe[2];
static char *page;      /* the one page of mprotect-toggle and dontneed */
static int file_fd = -1;

static void die(const char *what) {
    fprintf(stderr, "shootdown: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- operations ---- */

static void op_munmap_4k(long i) {
    (void)i;
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    p[0] = 1;
    if (munmap(p, PAGE) != 0) die("munmap");
}

static void op_munmap_64(long i) {
    (void)i;
    char *p = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    for (int k = 0; k < 64; k++) p[k * PAGE] = 1;
    if (munmap(p, 64 * PAGE) != 0) die("munmap");
}

static void setup_page(void) {
    page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) die("mmap");
    page[0] = 1;
}

static void teardown_page(void) { munmap(page, PAGE); }

static void op_mprotect_toggle(long i) {
    (void)i;
    if (mprotect(page, PAGE, PROT_READ) != 0) die("mprotect");
    if (mprotect(page, PAGE, PROT_READ | PROT_WRITE) != 0) die("mprotect");
    page[0] = 1;
}

static void op_dontneed(long i) {
    (void)i;
    page[0] = 1;
    if (madvise(page, PAGE, MADV_DONTNEED) != 0) die("madvise");
}

/* Copy-on-write: a region of COW_PAGES private pages shared with a forked child that
 * blocks; operation i writes one byte to page i of the region. Every COW_PAGES operations
 * the child exits and a new region and child are made (that fork's own flush is amortised
 * over COW_PAGES operations). */
#define COW_PAGES 4096L
static char *cow_region;
static pid_t cow_child = -1;
static int cow_pipe[2];

static void cow_end_round(void) {
    if (cow_child > 0) {
        close(cow_pipe[1]);
        waitpid(cow_child, NULL, 0);
        cow_child = -1;
    }
    if (cow_region) munmap(cow_region, COW_PAGES * PAGE);
    cow_region = NULL;
}

static void cow_new_round(void) {
    cow_end_round();
    cow_region = mmap(NULL, COW_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (cow_region == MAP_FAILED) die("mmap");
    for (long k = 0; k < COW_PAGES; k++) cow_region[k * PAGE] = 1;
    if (pipe(cow_pipe) != 0) die("pipe");
    cow_child = fork();
    if (cow_child < 0) die("fork");
    if (cow_child == 0) {
        char c;
        close(cow_pipe[1]);
        while (read(cow_pipe[0], &c, 1) > 0) {}
        _exit(0);
    }
    close(cow_pipe[0]);
}

static void op_cow(long i) {
    if (i % COW_PAGES == 0) cow_new_round();
    cow_region[(i % COW_PAGES) * PAGE] = 2;
}

static void setup_file(void) {
    char file_path[] = "/tmp/tlbsim-shootdown-XXXXXX";
    file_fd = mkstemp(file_path);
    if (file_fd < 0) die("mkstemp");
    unlink(file_path);
    char buf[PAGE];
    memset(buf, 7, sizeof buf);
    if (write(file_fd, buf, sizeof buf) != (ssize_t)sizeof buf) die("write");
}

static void teardown_file(void) { close(file_fd); }

static volatile char sink;
static void op_file_read(long i) {
    (void)i;
    char *p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, file_fd, 0);
    if (p == MAP_FAILED) die("mmap file");
    sink = p[0];
    if (munmap(p, PAGE) != 0) die("munmap");
}

static const struct pattern PATTERNS[] = {
    {"munmap-4k", SPIN, "munmap", 1, NULL, op_munmap_4k, NULL},
    {"munmap-4k-sleep", SLEEP, "munmap", 1, NULL, op_munmap_4k, NULL},
    {"munmap-4k-alone", NONE, "munmap", 1, NULL, op_munmap_4k, NULL},
    {"munmap-64", SPIN, "munmap", 64, NULL, op_munmap_64, NULL},
    {"munmap-64-sleep", SLEEP, "munmap", 64, NULL, op_munmap_64, NULL},
    {"mprotect-toggle", SPIN, "mprotect-toggle", 1, setup_page, op_mprotect_toggle, teardown_page},
    {"mprotect-toggle-sleep", SLEEP, "mprotect-toggle", 1, setup_page, op_mprotect_toggle, teardown_page},
    {"dontneed", SPIN, "dontneed", 1, setup_page, op_dontneed, teardown_page},
    {"cow", SPIN, "cow", COW_PAGES, NULL, op_cow, cow_end_round},
    {"cow-sleep", SLEEP, "cow", COW_PAGES, NULL, op_cow, cow_end_round},
    {"two-processes", PROCESS, "munmap", 1, NULL, op_munmap_4k, NULL},
    {"file-read", SPIN, "file-read", 1, setup_file, op_file_read, teardown_file},
    {"file-read-sleep", SLEEP, "file-read", 1, setup_file, op_file_read, teardown_file},
};
#define NPATTERNS (sizeof PATTERNS / sizeof PATTERNS[0])

static const char *SIBLING_NAMES[] = {"spin", "sleep", "none", "process"};

/* ---- siblings ---- */

static void *spin_main(void *arg) {
    (void)arg;
    pin(1);
    while (!stop_sibling) __asm__ volatile("pause");
    return NULL;
}

static void *sleep_main(void *arg) {
    (void)arg;
    pin(1);
    char c;
    /* Blocked in the kernel until the measuring thread writes. */
    while (read(sleep_pipe[0], &c, 1) < 0 && errno == EINTR) {}
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One repetition: returns IPIs per op and ops per second through the pointers. */
static void measure(const struct pattern *p, long ops, double *ipis_per_op, double *ops_per_s) {
    pthread_t sib;
    pid_t other = -1;
    stop_sibling = 0;
    if (p->sibling == SPIN && pthread_create(&sib, NULL, spin_main, NULL) != 0) die("pthread_create");
    if (p->sibling == SLEEP) {
        if (pipe(sleep_pipe) != 0) die("pipe");
        if (pthread_create(&sib, NULL, sleep_main, NULL) != 0) die("pthread_create");
    }
    if (p->sibling == PROCESS) {
        other = fork();
        if (other < 0) die("fork");
        if (other == 0) {
            pin(1);
            for (long i = 0; i < ops; i++) p->op(i);
            _exit(0);
        }
    }
    if (p->setup) p->setup();
    usleep(20000); /* let the sibling settle on its CPU (spinning, or asleep) */
    long long before = tlb_ipis();
    double t0 = now();
    for (long i = 0; i < ops; i++) p->op(i);
    double t1 = now();
    long long after = tlb_ipis();
    if (p->teardown) p->teardown();
    if (p->sibling == SPIN) {
        stop_sibling = 1;
        pthread_join(sib, NULL);
    }
    if (p->sibling == SLEEP) {
        if (write(sleep_pipe[1], "x", 1) != 1) die("write");
        pthread_join(sib, NULL);
        close(sleep_pipe[0]);
        close(sleep_pipe[1]);
    }
    if (p->sibling == PROCESS) waitpid(other, NULL, 0);
    *ipis_per_op = (double)(after - before) / (double)ops;
    *ops_per_s = (double)ops / (t1 - t0);
}

int main(int argc, char **argv) {
    long ops = 100000, reps = 3;
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--ops") && first + 1 < argc) ops = atol(argv[++first]);
        else if (!strcmp(argv[first], "--reps") && first + 1 < argc) reps = atol(argv[++first]);
        else if (!strcmp(argv[first], "--list")) {
            for (size_t k = 0; k < NPATTERNS; k++)
                printf("%s %s %s %ld\n", PATTERNS[k].name, SIBLING_NAMES[PATTERNS[k].sibling], PATTERNS[k].op_name,
                       PATTERNS[k].pages);
            return 0;
        } else {
            fprintf(stderr, "usage: shootdown [--ops N] [--reps R] [--list] [PATTERN ...]\n");
            return 2;
        }
    }
    if (ops < 1 || reps < 1 || reps > 99) {
        fprintf(stderr, "shootdown: --ops must be >= 1 and --reps 1..99\n");
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int have_row = tlb_ipis() >= 0;
    pin(0);
    for (size_t k = 0; k < NPATTERNS; k++) {
        const struct pattern *p = &PATTERNS[k];
        int wanted = first == argc;
        for (int a = first; a < argc; a++) wanted |= !strcmp(argv[a], p->name);
        if (!wanted) continue;
        const char *why = NULL;
        if (!have_row) why = "no TLB row in /proc/interrupts";
        else if (cpus < 2) why = "one CPU: no second CPU for the sibling";
        if (why) {
            printf("{\"pattern\": \"%s\", \"sibling\": \"%s\", \"not_measurable\": \"%s\"}\n", p->name,
                   SIBLING_NAMES[p->sibling], why);
            continue;
        }
        double ipis[99], rate[99];
        for (long r = 0; r < reps; r++) measure(p, ops, &ipis[r], &rate[r]);
        printf("{\"pattern\": \"%s\", \"sibling\": \"%s\", \"ops\": %ld, \"reps\": %ld, \"ipis_per_op\": [", p->name,
               SIBLING_NAMES[p->sibling], ops, reps);
        for (long r = 0; r < reps; r++) printf("%s%.4f", r ? ", " : "", ipis[r]);
        printf("], \"ops_per_second\": [");
        for (long r = 0; r < reps; r++) printf("%s%.1f", r ? ", " : "", rate[r]);
        qsort(ipis, reps, sizeof ipis[0], cmp_double);
        qsort(rate, reps, sizeof rate[0], cmp_double);
        printf("], \"ipis_per_op_median\": %.4f, \"ops_per_second_median\": %.1f}\n", ipis[reps / 2], rate[reps / 2]);
        fflush(stdout);
    }
    return 0;
}
