/*
 * prefork_threads.c: a prefork server whose worker processes run threads (Apache's worker
 * MPM, PostgreSQL's backends with their background workers), for `tlbsim record` (issue
 * 47 item 3: a forked child that creates threads replays with its own threads).
 *
 * The parent forks CHILDREN processes and waits for them. Each child creates THREADS
 * threads; each thread does OPS operations: mmap 4 anonymous pages, write each, munmap
 * them. Every munmap of a thread flushes the CPUs that run the child's other threads (a
 * shootdown within the child's address space); the parent's address space is not involved.
 *
 * Usage: prefork_threads [CHILDREN [THREADS [OPS]]] (1 2 100).
 * Prints one JSON line: children, threads per child, operations in all, the TLB-shootdown
 * IPIs the kernel counted meanwhile (the `TLB:` row of /proc/interrupts summed over CPUs;
 * -1 without it), as bench/shootdown.c counts them, and the seconds taken.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../bench/proc_interrupts.h"

#define PAGE 4096
#define MAP_PAGES 4

static int children = 1, threads = 2, ops = 100;

static void *worker(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < ops; i++) {
        uint8_t *p = mmap(NULL, MAP_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        for (int q = 0; q < MAP_PAGES; q++)
            p[q * PAGE] = (uint8_t)(i + id);
        munmap(p, MAP_PAGES * PAGE);
    }
    return NULL;
}

static int child_main(void)
{
    pthread_t tid[64];
    for (long i = 0; i < threads; i++)
        if (pthread_create(&tid[i], NULL, worker, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1) children = atoi(argv[1]);
    if (argc > 2) threads = atoi(argv[2]);
    if (argc > 3) ops = atoi(argv[3]);
    if (children < 1 || children > 16 || threads < 1 || threads > 64 || ops < 1) {
        fprintf(stderr, "usage: prefork_threads [CHILDREN(1-16) [THREADS(1-64) [OPS]]]\n");
        return 2;
    }
    struct timespec t0, t1;
    long long ipis0 = tlb_ipis();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int c = 0; c < children; c++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0)
            _exit(child_main());
    }
    int failed = 0;
    for (int c = 0; c < children; c++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ipis1 = tlb_ipis();
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"program\": \"prefork_threads\", \"children\": %d, \"threads\": %d, \"ops\": %d, \"tlb_ipis\": %lld, \"seconds\": %.6f}\n",
           children, threads, children * threads * ops, ipis0 < 0 ? -1 : ipis1 - ipis0, secs);
    return failed;
}
