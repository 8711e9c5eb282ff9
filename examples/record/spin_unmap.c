/*
 * spin_unmap.c: one thread spins in user space on a flag while the other maps, touches and
 * unmaps memory, for `tlbsim record` (issue 47: synchronization-aware replay).
 *
 * The spinner busy-waits (`while (!done) ;`, loads only, no system call) on its own CPU
 * until the main thread has run OPS operations, each an anonymous mmap of PAGES pages, a
 * store to each page and an munmap. The spinner's CPU runs in the address space throughout,
 * so each munmap sends it a TLB-shootdown IPI: about one per operation on a real kernel.
 * Replay has to keep the spinner spinning until main's store to `done` (not for the
 * iterations it happened to run under QEMU) to see the same. The main thread itself spins
 * until the spinner has started, so that the operations run while it spins. Each thread
 * pins itself to one CPU (0 and 1) when the machine has two.
 *
 * Usage: spin_unmap [OPS [PAGES]] (200 4). Prints one JSON line: the operations run, the
 * TLB-shootdown IPIs the kernel counted meanwhile (/proc/interrupts, as bench/shootdown.c
 * counts them; -1 without it), the whole machine's, and how often the spinner was
 * preempted (its involuntary context switches): while another task has its CPU, that CPU
 * is not in the address space, so the count then measures the machine's other load.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "../../bench/proc_interrupts.h"

#define PAGE 4096

/* Each flag on its own line: a store to one does not touch the other's line. */
static _Alignas(64) atomic_int started;
static _Alignas(64) atomic_int done;
static long spinner_preempted;

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    /* A one-CPU machine keeps both threads where the scheduler puts them. */
    (void)sched_setaffinity(0, sizeof set, &set);
}

static void *spinner(void *arg)
{
    (void)arg;
    pin(1);
    atomic_store(&started, 1);
    while (!atomic_load_explicit(&done, memory_order_acquire))
        ;
    struct rusage ru;
    spinner_preempted = getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : -1;
    return NULL;
}

int main(int argc, char **argv)
{
    int ops = argc > 1 ? atoi(argv[1]) : 200;
    int pages = argc > 2 ? atoi(argv[2]) : 4;
    if (ops < 1 || pages < 1) {
        fprintf(stderr, "usage: spin_unmap [OPS [PAGES]]\n");
        return 2;
    }
    pin(0);
    pthread_t t;
    if (pthread_create(&t, NULL, spinner, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    while (!atomic_load_explicit(&started, memory_order_acquire))
        ;
    long long ipis0 = tlb_ipis();
    size_t len = (size_t)pages * PAGE;
    for (int i = 0; i < ops; i++) {
        volatile char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        for (int k = 0; k < pages; k++)
            p[(size_t)k * PAGE] = (char)i;
        munmap((void *)p, len);
    }
    long long ipis1 = tlb_ipis();
    atomic_store_explicit(&done, 1, memory_order_release);
    pthread_join(t, NULL);
    printf("{\"program\": \"spin_unmap\", \"ops\": %d, \"pages\": %d, \"tlb_ipis\": %lld, \"spinner_preempted\": %ld}\n",
           ops, pages, ipis0 < 0 || ipis1 < 0 ? -1 : ipis1 - ipis0, spinner_preempted);
    return 0;
}
