/*
 * sleep_read.c: a thread that sleeps and reads a file while another maps, touches and
 * unmaps memory, for `tlbsim record` (issue 47 item 4: blocking calls take time and free
 * the core).
 *
 * The reader loops until main is done: nanosleep(SLEEP_US), then pread64 one page of a
 * file (through the page cache) and sum it. Main, meanwhile, does OPS operations: mmap 4
 * anonymous pages, write each, munmap them. While the reader sleeps its CPU is idle, in
 * lazy-TLB mode: Linux's flush skips it (should_flush_tlb, arch/x86/mm/tlb.c) unless the
 * munmap freed page tables, so main's munmaps interrupt it rarely. A replay in which the
 * sleeps took no time would keep the reader in the address space, receiving an IPI at
 * nearly every munmap.
 *
 * Usage: sleep_read [OPS [SLEEP_US [FILE_PAGES]]] (200 200 16).
 * Prints one JSON line: the operations, the reader's reads, the TLB-shootdown IPIs the
 * kernel counted meanwhile (the `TLB:` row of /proc/interrupts summed over CPUs; -1
 * without it), as bench/shootdown.c counts them, and the seconds taken.
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
#define MAP_PAGES 4

static int ops = 200, sleep_us = 200, file_pages = 16;
static int fd = -1;
static volatile int done;
static volatile uint64_t sink;
static long reads;

static void *reader(void *arg)
{
    (void)arg;
    static uint8_t buf[PAGE];
    uint64_t sum = 0;
    struct timespec ts = {0, (long)sleep_us * 1000};
    for (long i = 0; !done; i++) {
        nanosleep(&ts, NULL);
        if (pread(fd, buf, PAGE, (off_t)(i % file_pages) * PAGE) != PAGE) {
            perror("pread");
            exit(1);
        }
        for (int off = 0; off < PAGE; off += 64)
            sum += buf[off];
        reads++;
    }
    sink += sum;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1) ops = atoi(argv[1]);
    if (argc > 2) sleep_us = atoi(argv[2]);
    if (argc > 3) file_pages = atoi(argv[3]);
    if (ops < 1 || sleep_us < 0 || sleep_us > 1000000 || file_pages < 1) {
        fprintf(stderr, "usage: sleep_read [OPS [SLEEP_US(0-1000000) [FILE_PAGES]]]\n");
        return 2;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/tlbsim_sleep_read_%d", (int)getpid());
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    unlink(path);
    static uint8_t block[PAGE];
    for (int i = 0; i < PAGE; i++)
        block[i] = (uint8_t)i;
    for (int p = 0; p < file_pages; p++)
        if (write(fd, block, PAGE) != PAGE) {
            perror("write");
            return 1;
        }
    struct timespec t0, t1;
    long long ipis0 = tlb_ipis();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t tid;
    pthread_create(&tid, NULL, reader, NULL);
    for (int i = 0; i < ops; i++) {
        uint8_t *p = mmap(NULL, MAP_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        for (int q = 0; q < MAP_PAGES; q++)
            p[q * PAGE] = (uint8_t)i;
        munmap(p, MAP_PAGES * PAGE);
    }
    done = 1;
    pthread_join(tid, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ipis1 = tlb_ipis();
    close(fd);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"program\": \"sleep_read\", \"ops\": %d, \"reads\": %ld, \"tlb_ipis\": %lld, \"seconds\": %.6f}\n",
           ops, reads, ipis0 < 0 ? -1 : ipis1 - ipis0, secs);
    return 0;
}
