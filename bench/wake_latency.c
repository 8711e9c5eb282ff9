/*
 * What waking a thread on an idle CPU costs (issue 46 item 1): the time from a futex wake
 * on one CPU to the woken thread running on another, as a function of how long that CPU
 * had been idle before.
 *
 * Two threads pinned to two CPUs. The waker busy-waits (its CPU never idles) for a gap G,
 * reads the clock, and calls FUTEX_WAKE; the sleeper waits in FUTEX_WAIT (its CPU idles for
 * about G: cpuidle picks a state, on a KVM guest the haltpoll driver polls for a while and
 * then halts the vCPU with HLT, a VM exit) and reads the clock as soon as it runs. The
 * latency is the difference (CLOCK_MONOTONIC is synchronised across CPUs). For short gaps
 * the idle CPU is still polling and the wake costs the scheduler's path alone; past the
 * polling window it costs the idle state's exit too (on a guest: the host waking the
 * vCPU's thread and entering the VM again). The difference of the two plateaus is the idle
 * exit latency that `costs.idle_exit` models, the gap where the step happens its polling
 * window (`costs.idle_poll`).
 *
 * Output: one JSON line per gap: gap_us, median and p10/p90 latency in ns, the median time
 * the waker spent in its FUTEX_WAKE (waker_median_ns: the reschedule IPI it sends to a
 * halted CPU is part of it), samples.
 * Usage: wake_latency [--gaps us,us,...] [--samples N] [--cpus A,B]
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s)) { perror("sched_setaffinity"); exit(1); }
}

static atomic_int word;          /* the futex: 0 = wait, 1 = woken */
static atomic_int sleeper_ready; /* the sleeper is about to wait */
static atomic_llong woke_at;     /* the waker's clock at its FUTEX_WAKE */
static atomic_llong ran_at;      /* the sleeper's clock when it ran */
static atomic_int done;
static int cpu_a = 0, cpu_b = 1;

static void *sleeper(void *arg) {
    (void)arg;
    pin(cpu_b);
    while (!atomic_load(&done)) {
        atomic_store(&sleeper_ready, 1);
        while (atomic_load(&word) == 0)
            syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        atomic_store(&ran_at, now_ns());
        atomic_store(&word, 0);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int gaps[64], ngaps = 0, samples = 400;
    const char *gap_list = "5,10,20,50,100,150,200,300,500,1000,2000,5000";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gaps") && i + 1 < argc) gap_list = argv[++i];
        else if (!strcmp(argv[i], "--samples") && i + 1 < argc) samples = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpus") && i + 1 < argc) sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b);
        else { fprintf(stderr, "usage: wake_latency [--gaps us,..] [--samples N] [--cpus A,B]\n"); return 2; }
    }
    for (const char *p = gap_list; *p && ngaps < 64;) {
        gaps[ngaps++] = atoi(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    pin(cpu_a);
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    long long *lat = malloc(sizeof(long long) * samples);
    long long *waker = malloc(sizeof(long long) * samples);
    for (int g = 0; g < ngaps; g++) {
        int n = 0;
        for (int s = 0; s < samples + 10; s++) {
            while (!atomic_load(&sleeper_ready)) ;
            atomic_store(&sleeper_ready, 0);
            atomic_store(&ran_at, 0);
            /* The sleeper goes to sleep within a few µs of saying it is ready: the gap
             * starts after the flag, so its CPU idles for about `gap`. */
            long long until = now_ns() + gaps[g] * 1000LL;
            while (now_ns() < until) ;
            long long w = now_ns();
            atomic_store(&woke_at, w);
            atomic_store(&word, 1);
            syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
            long long back = now_ns();
            long long r;
            while ((r = atomic_load(&ran_at)) == 0) ;
            if (s >= 10) { /* the first few warm up the path */
                waker[n] = back - w;
                lat[n++] = r - w;
            }
        }
        qsort(lat, n, sizeof *lat, cmp);
        qsort(waker, n, sizeof *waker, cmp);
        printf("{\"gap_us\": %d, \"median_ns\": %lld, \"p10_ns\": %lld, \"p90_ns\": %lld, \"waker_median_ns\": %lld, \"samples\": %d, \"cpus\": [%d, %d]}\n",
               gaps[g], lat[n / 2], lat[n / 10], lat[n * 9 / 10], waker[n / 2], n, cpu_a, cpu_b);
        fflush(stdout);
    }
    atomic_store(&done, 1);
    atomic_store(&word, 1);
    syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    pthread_join(t, NULL);
    return 0;
}
