/*
 * Native memory bandwidth, STREAM-like (issue 46 item 2, memory-level parallelism): each of
 * T threads (1, then 2 by default) sweeps its own part of arrays far larger than the
 * last-level cache, and the run reports the bytes moved per second of the slowest thread.
 * Two kernels, after McCalpin's STREAM (https://www.cs.virginia.edu/stream/): `read`, a sum
 * over one array (8-byte loads only: what the simulator's sequential synthetic stream and
 * the Mitosis co-runner's reads model), and `triad`, a[i] = b[i] + s * c[i] (two loads and a
 * store per element; STREAM counts 24 bytes per element, writes' read-for-ownership not
 * counted, as STREAM does).
 *
 * A single thread's bandwidth is bounded by the misses its core keeps in flight (Little's
 * law: fill buffers x 64 bytes / memory latency) and by its prefetchers; two threads show
 * whether the node's channels or the core is the limit. On a virtual machine the vCPUs are
 * host threads and the node's bandwidth is shared with whatever else the host runs: the
 * figure is this guest's, at this moment, and the fastest of --reps repetitions is kept.
 * gbps_cpu_best divides by the slowest thread's CPU time instead (CLOCK_THREAD_CPUTIME_ID):
 * what the threads moved while they ran, without the time they waited for a CPU that other
 * work held (with 2 threads on 2 vCPUs it assumes they ran together).
 *
 * Usage: stream_bw [--mib-per-array N] [--threads 1,2] [--reps R] [--kernel read|triad|both]
 * Defaults: arrays of 4 x the last-level cache read from sysfs (at least 256 MiB each,
 * split among the threads), threads 1 and 2, 5 repetitions, both kernels.
 * Output: one JSON object per (kernel, threads) and line.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

/* The largest cache of cpu0 (sysfs), in bytes; 0 if unreadable. */
static uint64_t llc_bytes(void) {
    uint64_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            uint64_t v = strtoull(buf, &end, 10);
            if (*end == 'K') v <<= 10;
            else if (*end == 'M') v <<= 20;
            if (v > best) best = v;
        }
        fclose(f);
    }
    return best;
}

enum kernel { READ, TRIAD };

struct job {
    enum kernel k;
    double *a, *b, *c;
    size_t n;             /* elements of this thread's part */
    int cpu;
    pthread_barrier_t *start;
    double seconds;
    double cpu_seconds; /* on the CPU: without the time the thread waited to run */
    double sink;
};

static void *run(void *arg) {
    struct job *j = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    pthread_barrier_wait(j->start);
    double t0 = now(), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    if (j->k == READ) {
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        const double *b = j->b;
        for (size_t i = 0; i + 4 <= j->n; i += 4) {
            s0 += b[i];
            s1 += b[i + 1];
            s2 += b[i + 2];
            s3 += b[i + 3];
        }
        j->sink = s0 + s1 + s2 + s3;
    } else {
        double *a = j->a;
        const double *b = j->b, *c = j->c;
        const double s = 3.0;
        for (size_t i = 0; i < j->n; i++) a[i] = b[i] + s * c[i];
        j->sink = a[j->n / 2];
    }
    j->seconds = now() - t0;
    j->cpu_seconds = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

static double *array(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    /* 2 MiB pages where the kernel gives them: the probe measures memory, not the TLB. */
    madvise(p, bytes, MADV_HUGEPAGE);
    double *d = p;
    for (size_t i = 0; i < bytes / sizeof(double); i++) d[i] = 1.0; /* populate */
    return d;
}

int main(int argc, char **argv) {
    uint64_t llc = llc_bytes();
    uint64_t mib = (4 * llc) >> 20;
    if (mib < 256) mib = 256;
    int threads[8] = {1, 2}, nthreads = 2, reps = 5, kernels = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib-per-array") && i + 1 < argc) mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthreads = 0;
            for (char *t = strtok(argv[++i], ","); t && nthreads < 8; t = strtok(NULL, ",")) threads[nthreads++] = atoi(t);
        } else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) {
            const char *k = argv[++i];
            kernels = !strcmp(k, "read") ? 1 : !strcmp(k, "triad") ? 2 : 3;
        } else {
            fprintf(stderr, "usage: %s [--mib-per-array N] [--threads 1,2] [--reps R] [--kernel read|triad|both]\n", argv[0]);
            return 2;
        }
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(double);
    double *a = array(bytes), *b = array(bytes), *c = array(bytes);
    for (int k = READ; k <= TRIAD; k++) {
        if (!(kernels & (1 << k))) continue;
        for (int ti = 0; ti < nthreads; ti++) {
            int t = threads[ti];
            if (t < 1 || t > 8) continue;
            double best = 0, worst = 1e300, best_cpu = 0;
            for (int r = 0; r < reps; r++) {
                pthread_t tid[8];
                struct job jobs[8];
                pthread_barrier_t start;
                pthread_barrier_init(&start, NULL, t);
                size_t part = n / t / 4 * 4;
                for (int i = 0; i < t; i++) {
                    jobs[i] = (struct job){.k = k, .a = a + i * part, .b = b + i * part, .c = c + i * part, .n = part, .cpu = (int)(i % cpus), .start = &start};
                    pthread_create(&tid[i], NULL, run, &jobs[i]);
                }
                double slowest = 0, slowest_cpu = 0;
                for (int i = 0; i < t; i++) {
                    pthread_join(tid[i], NULL);
                    if (jobs[i].seconds > slowest) slowest = jobs[i].seconds;
                    if (jobs[i].cpu_seconds > slowest_cpu) slowest_cpu = jobs[i].cpu_seconds;
                }
                pthread_barrier_destroy(&start);
                double moved = (double)part * t * sizeof(double) * (k == READ ? 1 : 3);
                double gbps = moved / slowest / 1e9;
                if (gbps > best) best = gbps;
                if (gbps < worst) worst = gbps;
                if (moved / slowest_cpu / 1e9 > best_cpu) best_cpu = moved / slowest_cpu / 1e9;
            }
            printf("{\"bench\": \"stream_bw\", \"kernel\": \"%s\", \"threads\": %d, \"cpus\": %ld, \"mib_per_array\": %llu, "
                   "\"llc_bytes\": %llu, \"reps\": %d, \"gbps_best\": %.3f, \"gbps_worst\": %.3f, \"gbps_cpu_best\": %.3f}\n",
                   k == READ ? "read" : "triad", t, cpus, (unsigned long long)mib, (unsigned long long)llc, reps, best, worst, best_cpu);
            fflush(stdout);
        }
    }
    return 0;
}
