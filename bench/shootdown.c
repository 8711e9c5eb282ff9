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
 * With a spinning sibling, the sibling counts its spin iterations: per second while the
 * measuring thread sleeps (before and after the operations: "sibling_spins_per_second_idle")
 * and while it runs them ("sibling_spins_per_second"). The ratio is the share of the
 * sibling's CPU left after the shootdown IPIs it handled: the receiver's cost.
 *
 * Where the kernel keeps schedstat, time a thread spent runnable but kept off its CPU by
 * another task is taken out: "ops_per_second_on_cpu" and the "_on_cpu" spin rates, with
 * the "wait_fraction"s removed, are what the operations cost on a machine others share.
 *
 * The two CPUs are the first two this process may run on (sched_getaffinity), so that
 * `taskset -c 0 shootdown` stands for a one-CPU machine.
 *
 * Output: one JSON object per pattern and line. A pattern that cannot be measured here (one
 * CPU, for a pattern with a sibling) says so in "not_measurable" instead of failing; without
 * a TLB row the operations per second are still measured and "ipis_not_measurable" says why
 * the IPI fields are missing.
 *
 * Usage: shootdown [--ops N] [--reps R] [--busy-neighbour] [--list] [PATTERN ...]
 *   --list prints each pattern's name, sibling, op and pages (as in patterns.toml).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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
/* Written by the spinning sibling every iteration, read by the measuring thread at the
 * window edges only; on a cache line of its own. */
static struct { volatile unsigned long n; char pad[56]; } spins __attribute__((aligned(64)));
static int cpu_main, cpu_sibling; /* the first two CPUs of the affinity mask */
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

static volatile pid_t sibling_tid;

static void *spin_main(void *arg) {
    (void)arg;
    pin(cpu_sibling);
    sibling_tid = (pid_t)syscall(SYS_gettid);
    unsigned long n = 0;
    while (!stop_sibling) {
        __asm__ volatile("pause");
        spins.n = ++n;
    }
    return NULL;
}

/* Nanoseconds thread `tid` of this process has waited on a run queue (runnable, another
 * task on its CPU), from /proc/self/task/TID/schedstat; -1 where the kernel has no
 * schedstat. Time a thread was runnable but not running is taken out of the rates below,
 * so that other programs sharing the CPUs do not count as the operations' cost. */
static long long runq_wait_ns(pid_t tid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long run, wait;
    int ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
    fclose(f);
    return ok ? (long long)wait : -1;
}

static int have_schedstat;

/* --busy-neighbour: while a pattern without a spinning sibling runs, a separate process
 * spins (the same pause loop) on the sibling's CPU. It shares no mm, so it receives no
 * shootdown; it keeps that CPU as busy as a spinning sibling does. On a virtual machine an
 * idle vCPU changes how fast the other runs (the host puts other work beside it), so this
 * is the control for the spinning-sibling patterns' throughput. */
static int busy_neighbour;

static pid_t start_neighbour(void) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        pin(cpu_sibling);
        for (;;) __asm__ volatile("pause");
    }
    return pid;
}

/* Spin rates of the sibling over `seconds` of the measuring thread sleeping: per second
 * of wall time and per second the sibling was not kept off its CPU by another task. */
static void idle_spin_rate(double seconds, double *wall, double *on_cpu) {
    unsigned long n0 = spins.n;
    long long w0 = runq_wait_ns(sibling_tid);
    double t0 = now();
    struct timespec d = {0, (long)(seconds * 1e9)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {}
    unsigned long n1 = spins.n;
    double el = now() - t0;
    long long w1 = runq_wait_ns(sibling_tid);
    *wall = (double)(n1 - n0) / el;
    double avail = el - (w0 >= 0 && w1 >= 0 ? (w1 - w0) * 1e-9 : 0);
    *on_cpu = avail > el * 0.05 ? (double)(n1 - n0) / avail : *wall;
}

static void *sleep_main(void *arg) {
    (void)arg;
    pin(cpu_sibling);
    char c;
    /* Blocked in the kernel until the measuring thread writes. */
    while (read(sleep_pipe[0], &c, 1) < 0 && errno == EINTR) {}
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define IDLE_WINDOW 0.02 /* seconds of each idle spin-rate window */

struct rep {
    double ipis_per_op, ops_per_s;
    double ops_per_s_on_cpu, wait_fraction; /* the measuring thread, run-queue waits removed */
    double spin_idle, spin_busy;            /* the spinning sibling, per wall second */
    double spin_idle_on_cpu, spin_busy_on_cpu, sibling_wait_fraction;
    double sibling_away_fraction, ipis_per_op_sibling_present; /* see measure() */
};

/* One repetition of `ops` operations. */
static void measure(const struct pattern *p, long ops, struct rep *r) {
    pthread_t sib;
    pid_t other = -1;
    pid_t self = (pid_t)syscall(SYS_gettid);
    memset(r, 0, sizeof *r);
    stop_sibling = 0;
    sibling_tid = 0;
    if (p->sibling == SPIN) {
        if (pthread_create(&sib, NULL, spin_main, NULL) != 0) die("pthread_create");
        while (!sibling_tid) sched_yield();
    }
    if (p->sibling == SLEEP) {
        if (pipe(sleep_pipe) != 0) die("pipe");
        if (pthread_create(&sib, NULL, sleep_main, NULL) != 0) die("pthread_create");
    }
    if (p->sibling == PROCESS) {
        other = fork();
        if (other < 0) die("fork");
        if (other == 0) {
            pin(cpu_sibling);
            for (long i = 0; i < ops; i++) p->op(i);
            _exit(0);
        }
    }
    pid_t neighbour = busy_neighbour && (p->sibling == SLEEP || p->sibling == NONE) ? start_neighbour() : -1;
    if (p->setup) p->setup();
    usleep(20000); /* let the sibling settle on its CPU (spinning, or asleep) */
    double idle_before = 0, idle_before_cpu = 0, idle_after = 0, idle_after_cpu = 0;
    if (p->sibling == SPIN) idle_spin_rate(IDLE_WINDOW, &idle_before, &idle_before_cpu);
    long long before = tlb_ipis();
    unsigned long s0 = spins.n;
    long long mw0 = runq_wait_ns(self), sw0 = p->sibling == SPIN ? runq_wait_ns(sibling_tid) : -1;
    /* An operation during which the spinning sibling's count did not move found it off its
     * CPU (another task on it, or the hypervisor's preemption): the kernel sends such an
     * operation no IPI (the CPU runs another mm, or KVM flushes the preempted vCPU when it
     * next runs, PV TLB flush). Operations without an IPI run many times faster, so a
     * sibling away 1% of the time can miss 10% of the operations; they are counted, and the
     * IPIs per operation the sibling was there for are reported beside the plain ratio. */
    long away = 0;
    unsigned long last = spins.n;
    double t0 = now();
    if (p->sibling == SPIN) {
        for (long i = 0; i < ops; i++) {
            p->op(i);
            unsigned long cur = spins.n;
            away += cur == last;
            last = cur;
        }
    } else {
        for (long i = 0; i < ops; i++) p->op(i);
    }
    double t1 = now();
    long long mw1 = runq_wait_ns(self), sw1 = p->sibling == SPIN ? runq_wait_ns(sibling_tid) : -1;
    unsigned long s1 = spins.n;
    long long after = tlb_ipis();
    if (p->sibling == SPIN) idle_spin_rate(IDLE_WINDOW, &idle_after, &idle_after_cpu);
    double el = t1 - t0;
    r->ipis_per_op = (double)(after - before) / (double)ops;
    r->sibling_away_fraction = (double)away / (double)ops;
    r->ipis_per_op_sibling_present = away < ops ? (double)(after - before) / (double)(ops - away) : 0;
    r->ops_per_s = (double)ops / el;
    r->wait_fraction = mw0 >= 0 && mw1 >= 0 ? (mw1 - mw0) * 1e-9 / el : 0;
    r->ops_per_s_on_cpu = r->wait_fraction < 0.95 ? (double)ops / (el * (1 - r->wait_fraction)) : r->ops_per_s;
    if (p->sibling == SPIN) {
        r->spin_idle = (idle_before + idle_after) / 2;
        r->spin_idle_on_cpu = (idle_before_cpu + idle_after_cpu) / 2;
        r->spin_busy = (double)(s1 - s0) / el;
        r->sibling_wait_fraction = sw0 >= 0 && sw1 >= 0 ? (sw1 - sw0) * 1e-9 / el : 0;
        r->spin_busy_on_cpu =
            r->sibling_wait_fraction < 0.95 ? r->spin_busy / (1 - r->sibling_wait_fraction) : r->spin_busy;
    }
    if (neighbour > 0) {
        kill(neighbour, SIGKILL);
        waitpid(neighbour, NULL, 0);
    }
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
}

static void print_list(const char *name, const struct rep *r, long reps, size_t offset, const char *fmt) {
    printf(", \"%s\": [", name);
    for (long k = 0; k < reps; k++) {
        printf("%s", k ? ", " : "");
        printf(fmt, *(const double *)((const char *)&r[k] + offset));
    }
    printf("]");
}

static double median_of(const struct rep *r, long reps, size_t offset) {
    double v[99];
    for (long k = 0; k < reps; k++) v[k] = *(const double *)((const char *)&r[k] + offset);
    qsort(v, reps, sizeof v[0], cmp_double);
    return v[reps / 2];
}

int main(int argc, char **argv) {
    long ops = 100000, reps = 3;
    int first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--ops") && first + 1 < argc) ops = atol(argv[++first]);
        else if (!strcmp(argv[first], "--reps") && first + 1 < argc) reps = atol(argv[++first]);
        else if (!strcmp(argv[first], "--busy-neighbour")) busy_neighbour = 1;
        else if (!strcmp(argv[first], "--list")) {
            for (size_t k = 0; k < NPATTERNS; k++)
                printf("%s %s %s %ld\n", PATTERNS[k].name, SIBLING_NAMES[PATTERNS[k].sibling], PATTERNS[k].op_name,
                       PATTERNS[k].pages);
            return 0;
        } else {
            fprintf(stderr, "usage: shootdown [--ops N] [--reps R] [--busy-neighbour] [--list] [PATTERN ...]\n");
            return 2;
        }
    }
    if (ops < 1 || reps < 1 || reps > 99) {
        fprintf(stderr, "shootdown: --ops must be >= 1 and --reps 1..99\n");
        return 2;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) die("sched_getaffinity");
    long cpus = CPU_COUNT(&allowed);
    cpu_main = -1;
    cpu_sibling = -1;
    for (int c = 0; c < CPU_SETSIZE && cpu_sibling < 0; c++) {
        if (!CPU_ISSET(c, &allowed)) continue;
        if (cpu_main < 0) cpu_main = c;
        else cpu_sibling = c;
    }
    int have_row = tlb_ipis() >= 0;
    have_schedstat = runq_wait_ns((pid_t)syscall(SYS_gettid)) >= 0;
    pin(cpu_main);
    for (size_t k = 0; k < NPATTERNS; k++) {
        const struct pattern *p = &PATTERNS[k];
        int wanted = first == argc;
        for (int a = first; a < argc; a++) wanted |= !strcmp(argv[a], p->name);
        if (!wanted) continue;
        if (cpus < 2 && p->sibling != NONE) {
            printf("{\"pattern\": \"%s\", \"sibling\": \"%s\", \"not_measurable\": \"%s\"}\n", p->name,
                   SIBLING_NAMES[p->sibling], "one CPU: no second CPU for the sibling");
            continue;
        }
        struct rep r[99];
        for (long k = 0; k < reps; k++) measure(p, ops, &r[k]);
        printf("{\"pattern\": \"%s\", \"sibling\": \"%s\", \"ops\": %ld, \"reps\": %ld", p->name,
               SIBLING_NAMES[p->sibling], ops, reps);
        if (busy_neighbour && (p->sibling == SLEEP || p->sibling == NONE))
            printf(", \"neighbour\": \"a process spinning on the sibling's CPU\"");
        if (have_row) print_list("ipis_per_op", r, reps, offsetof(struct rep, ipis_per_op), "%.4f");
        else printf(", \"ipis_not_measurable\": \"no TLB row in /proc/interrupts\"");
        print_list("ops_per_second", r, reps, offsetof(struct rep, ops_per_s), "%.1f");
        if (have_schedstat) {
            print_list("wait_fraction", r, reps, offsetof(struct rep, wait_fraction), "%.4f");
            print_list("ops_per_second_on_cpu", r, reps, offsetof(struct rep, ops_per_s_on_cpu), "%.1f");
        }
        if (p->sibling == SPIN) {
            print_list("sibling_spins_per_second_idle", r, reps, offsetof(struct rep, spin_idle), "%.1f");
            print_list("sibling_spins_per_second", r, reps, offsetof(struct rep, spin_busy), "%.1f");
            print_list("sibling_away_fraction", r, reps, offsetof(struct rep, sibling_away_fraction), "%.4f");
            if (have_row)
                print_list("ipis_per_op_sibling_present", r, reps, offsetof(struct rep, ipis_per_op_sibling_present),
                           "%.4f");
            if (have_schedstat) {
                print_list("sibling_wait_fraction", r, reps, offsetof(struct rep, sibling_wait_fraction), "%.4f");
                print_list("sibling_spins_per_second_idle_on_cpu", r, reps, offsetof(struct rep, spin_idle_on_cpu),
                           "%.1f");
                print_list("sibling_spins_per_second_on_cpu", r, reps, offsetof(struct rep, spin_busy_on_cpu), "%.1f");
            }
        }
        if (have_row) printf(", \"ipis_per_op_median\": %.4f", median_of(r, reps, offsetof(struct rep, ipis_per_op)));
        if (have_row && p->sibling == SPIN)
            printf(", \"ipis_per_op_sibling_present_median\": %.4f",
                   median_of(r, reps, offsetof(struct rep, ipis_per_op_sibling_present)));
        printf(", \"ops_per_second_median\": %.1f", median_of(r, reps, offsetof(struct rep, ops_per_s)));
        if (have_schedstat)
            printf(", \"ops_per_second_on_cpu_median\": %.1f",
                   median_of(r, reps, offsetof(struct rep, ops_per_s_on_cpu)));
        printf("}\n");
        fflush(stdout);
    }
    return 0;
}
