/*
 * gc_barrier.c: mprotect as a concurrent garbage collector's write barrier, for
 * `tlbsim record` (issue 17).
 *
 * Mutator threads write into a heap while a collector thread runs collection cycles. A
 * cycle starts by write-protecting the whole heap (mprotect PROT_READ: the barrier armed);
 * a mutator's first write to a page then faults, and the SIGSEGV handler notes the page
 * dirty and makes it writable again (mprotect of that page); the collector scans the heap
 * meanwhile, rescans the dirty pages and ends the cycle by unprotecting the heap. This is
 * the page-protection barrier of mostly-concurrent collectors (Boehm, Demers and Shenker,
 * PLDI 1991; the Boehm collector's incremental mode; the STM of ABIS §5 uses the same
 * mechanism). Each heap-wide mprotect that removes write permission flushes every CPU that
 * runs a mutator (a shootdown).
 *
 * Usage: gc_barrier [MUTATORS [CYCLES [HEAP_PAGES]]] (2 20 256). Prints one JSON line: the
 * cycles run, the barrier faults taken, and the TLB-shootdown IPIs the kernel counted
 * meanwhile (/proc/interrupts, as bench/shootdown.c counts them; -1 without it).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../bench/proc_interrupts.h"

#define PAGE 4096

static int mutators = 2, cycles = 20, heap_pages = 256;
static uint8_t *heap;
static uint8_t *dirty; /* one byte per heap page */
static atomic_int done;
static atomic_long barrier_faults;
static volatile uint64_t sink;

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (a < (uintptr_t)heap || a >= (uintptr_t)heap + (size_t)heap_pages * PAGE)
        abort();
    size_t page = (a - (uintptr_t)heap) / PAGE;
    dirty[page] = 1;
    atomic_fetch_add(&barrier_faults, 1);
    mprotect(heap + page * PAGE, PAGE, PROT_READ | PROT_WRITE);
}

static void *mutator(void *arg)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)((long)arg + 1);
    while (!atomic_load(&done)) {
        /* Allocate-and-initialise a 64-byte object somewhere in the heap. */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t at = (size_t)(x % ((uint64_t)heap_pages * PAGE / 64)) * 64;
        memset(heap + at, (int)(x & 0xff), 64);
    }
    return NULL;
}

static uint64_t scan(size_t from_page, size_t pages)
{
    uint64_t s = 0;
    for (size_t off = from_page * PAGE; off < (from_page + pages) * PAGE; off += 64)
        s += heap[off];
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1) mutators = atoi(argv[1]);
    if (argc > 2) cycles = atoi(argv[2]);
    if (argc > 3) heap_pages = atoi(argv[3]);
    if (mutators < 1 || mutators > 64 || cycles < 1 || heap_pages < 1) {
        fprintf(stderr, "usage: gc_barrier [MUTATORS(1-64) [CYCLES [HEAP_PAGES]]]\n");
        return 2;
    }
    size_t len = (size_t)heap_pages * PAGE;
    heap = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    dirty = calloc((size_t)heap_pages, 1);
    if (heap == MAP_FAILED || !dirty) {
        perror("mmap");
        return 1;
    }
    memset(heap, 1, len);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);

    pthread_t tid[64];
    struct timespec t0, t1;
    long long ipis0 = tlb_ipis();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < mutators; i++)
        pthread_create(&tid[i], NULL, mutator, (void *)i);
    uint64_t s = 0;
    for (int c = 0; c < cycles; c++) {
        memset(dirty, 0, (size_t)heap_pages);
        mprotect(heap, len, PROT_READ); /* arm the barrier: a shootdown */
        s += scan(0, (size_t)heap_pages); /* mark, concurrently with the mutators */
        for (int p = 0; p < heap_pages; p++)
            if (dirty[p])
                s += scan((size_t)p, 1); /* rescan what they dirtied */
        mprotect(heap, len, PROT_READ | PROT_WRITE); /* disarm */
    }
    atomic_store(&done, 1);
    for (int i = 0; i < mutators; i++)
        pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ipis1 = tlb_ipis();
    sink = s;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"program\": \"gc_barrier\", \"mutators\": %d, \"cycles\": %d, \"barrier_faults\": %ld, \"tlb_ipis\": %lld, \"seconds\": %.6f}\n",
           mutators, cycles, (long)atomic_load(&barrier_faults), ipis0 < 0 ? -1 : ipis1 - ipis0, secs);
    return 0;
}
