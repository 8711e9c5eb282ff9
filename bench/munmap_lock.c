/*
 * munmap throughput with and without a shared mmap_lock (issue 10 item 4).
 * Each worker loops mmap(4 KiB, anonymous, private) -> write one byte (a page fault) ->
 * munmap. Workers are pinned round-robin over the allowed CPUs and run for --seconds.
 *   --mode threads: N threads of ONE process: their mmap/munmap take the same mmap_lock
 *                   for write, and a munmap of a page another thread's CPU may cache flushes
 *                   that CPU's TLB (a shootdown IPI) while holding it.
 *   --mode procs:   N single-threaded PROCESSES (fork): one mmap_lock each, no sharing, no
 *                   shootdowns (each mm runs on one CPU).
 * Output: one JSON line with the mode, N and operations per second per worker (each
 * worker's count over the common wall time) and their sum.
 * Usage: munmap_lock [--mode threads|procs] [--workers N] [--seconds S]
 *   Without --mode: threads and procs for N = 1 and 2.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXW 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct shared {
    atomic_int go, stop;
    long ops[MAXW];
};

static struct shared *sh;
static int cpus[1024], ncpus;

static void pin(int i) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpus[i % ncpus], &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void work(int i) {
    pin(i);
    while (!atomic_load(&sh->go)) ;
    long n = 0;
    while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
        char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); exit(1); }
        p[0] = 1;
        munmap(p, 4096);
        n++;
    }
    sh->ops[i] = n;
}

static void *thread_main(void *arg) { work((int)(long)arg); return NULL; }

static void run(const char *mode, int n, double seconds) {
    memset(sh, 0, sizeof *sh);
    pthread_t t[MAXW];
    pid_t pid[MAXW];
    int threads = !strcmp(mode, "threads");
    for (int i = 0; i < n; i++) {
        if (threads) pthread_create(&t[i], NULL, thread_main, (void *)(long)i);
        else if ((pid[i] = fork()) == 0) { work(i); _exit(0); }
    }
    usleep(50000);
    double t0 = now();
    atomic_store(&sh->go, 1);
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&sh->stop, 1);
    double dt = now() - t0;
    for (int i = 0; i < n; i++) {
        if (threads) pthread_join(t[i], NULL);
        else waitpid(pid[i], NULL, 0);
    }
    double sum = 0;
    printf("{\"mode\": \"%s\", \"workers\": %d, \"cpus\": %d, \"seconds\": %.3f, \"ops_per_second_per_worker\": [",
           mode, n, ncpus, dt);
    for (int i = 0; i < n; i++) { printf("%s%.1f", i ? ", " : "", sh->ops[i] / dt); sum += sh->ops[i] / dt; }
    printf("], \"ops_per_second\": %.1f, \"ops_per_second_per_thread\": %.1f}\n", sum, sum / n);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *mode = NULL;
    int n = 0;
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else { fprintf(stderr, "usage: munmap_lock [--mode threads|procs] [--workers N] [--seconds S]\n"); return 2; }
    }
    if ((mode && strcmp(mode, "threads") && strcmp(mode, "procs")) || n < 0 || n > MAXW || !(seconds > 0)) {
        fprintf(stderr, "munmap_lock: need --mode threads|procs, 1 <= --workers <= %d, --seconds > 0\n", MAXW);
        return 2;
    }
    cpu_set_t s;
    sched_getaffinity(0, sizeof s, &s);
    for (int c = 0; c < 1024; c++) if (CPU_ISSET(c, &s)) cpus[ncpus++] = c;
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    if (mode) { run(mode, n ? n : 1, seconds); return 0; }
    for (int k = 1; k <= 2; k++) { run("threads", k, seconds); run("procs", k, seconds); }
    return 0;
}
