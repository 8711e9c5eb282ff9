/*
 * file_server.c: a small multi-threaded server loop for `tlbsim record` (issue 17).
 *
 * Each worker thread serves requests; a request maps one of a set of files (mmap,
 * MAP_SHARED, PROT_READ), reads every cache line of it (the response), unmaps it and
 * closes it. This is the pattern of a static-file web server that maps files (Apache's
 * EnableMMAP, ABIS §5.2): every munmap of a multi-threaded process flushes the TLBs of the
 * CPUs that run its other threads (a shootdown).
 *
 * Usage: file_server [THREADS [REQUESTS_PER_THREAD [FILES [FILE_PAGES]]]] (2 100 8 4).
 * Prints one JSON line: the requests served and the TLB-shootdown IPIs the kernel counted
 * meanwhile (the `TLB:` row of /proc/interrupts, summed over CPUs; -1 without it), as
 * bench/shootdown.c counts them.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../bench/proc_interrupts.h"

#define PAGE 4096

static int threads = 2, requests = 100, files = 8, file_pages = 4;
static char paths[64][64];
static volatile uint64_t sink;

static void *worker(void *arg)
{
    long id = (long)arg;
    uint64_t sum = 0;
    for (int r = 0; r < requests; r++) {
        int f = (int)((r * threads + id) % files);
        int fd = open(paths[f], O_RDONLY);
        if (fd < 0) {
            perror("open");
            exit(1);
        }
        size_t len = (size_t)file_pages * PAGE;
        const uint8_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        for (size_t off = 0; off < len; off += 64)
            sum += p[off];
        munmap((void *)p, len);
        close(fd);
    }
    sink += sum;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1) threads = atoi(argv[1]);
    if (argc > 2) requests = atoi(argv[2]);
    if (argc > 3) files = atoi(argv[3]);
    if (argc > 4) file_pages = atoi(argv[4]);
    if (threads < 1 || threads > 256 || requests < 1 || files < 1 || files > 64 || file_pages < 1) {
        fprintf(stderr, "usage: file_server [THREADS(1-256) [REQUESTS [FILES(1-64) [FILE_PAGES]]]]\n");
        return 2;
    }
    /* The files, in the page cache before the timed part. */
    static uint8_t block[PAGE];
    for (int i = 0; i < PAGE; i++)
        block[i] = (uint8_t)i;
    for (int f = 0; f < files; f++) {
        snprintf(paths[f], sizeof paths[f], "/tmp/tlbsim_file_server_%d_%d", (int)getpid(), f);
        int fd = open(paths[f], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) {
            perror("open");
            return 1;
        }
        for (int p = 0; p < file_pages; p++)
            if (write(fd, block, PAGE) != PAGE) {
                perror("write");
                return 1;
            }
        close(fd);
    }
    pthread_t tid[256];
    struct timespec t0, t1;
    long long ipis0 = tlb_ipis();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, worker, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ipis1 = tlb_ipis();
    for (int f = 0; f < files; f++)
        unlink(paths[f]);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"program\": \"file_server\", \"threads\": %d, \"requests\": %d, \"tlb_ipis\": %lld, \"seconds\": %.6f}\n",
           threads, threads * requests, ipis0 < 0 ? -1 : ipis1 - ipis0, secs);
    return 0;
}
