/*
 * Ground truth for the run-time allocator (issue 46 item 6): a producer thread mallocs N
 * buffers of S bytes and writes them; a consumer thread frees them, so every free goes to
 * the producer's arena from another thread. Count the system calls glibc's free makes:
 *
 *   strace -f -c -e trace=madvise,mmap,munmap target/native/malloc_handoff ORDER N S
 *
 * ORDER: fifo  - the producer mallocs all N, hands them over, the consumer frees them in
 *                allocation order;
 *        lifo  - the same, freed last-allocated first;
 *        step  - one at a time: malloc, hand over, free, and only then the next malloc.
 * N = 0 runs the threads without a malloc (the calls of start-up and pthread_create, to
 * subtract). The main thread mallocs nothing (its arena, the brk heap, is not involved):
 * both workers get thread arenas. S below 128 KiB (the mmap threshold) comes from the
 * heap; above 1,032 bytes it bypasses glibc 2.26+'s tcache.
 * The simulator's run of the same shapes: crates/tlbsim-core/tests/malloc.rs
 * (the_malloc_handoff_bench_shapes_trim_as_the_hand_model_says).
 *
 * Measured here (Debian 12, glibc 2.36, N = 64, S = 65536; calls beyond the N = 0 run's
 * 10 mmap, 1 munmap, 2 madvise, which are start-up, the thread stacks and their release
 * at thread exit):
 *   fifo: madvise 1 (one trim of 4,063,232 bytes), mmap 2, munmap 3
 *   lifo: madvise 62 (64 KiB each), mmap 2, munmap 3
 *   step: madvise 0, mmap 2, munmap 3
 * mmap 2: the producer's heap and the consumer's (its first free sets up its tcache, which
 * takes an arena); munmap 3: new_heap trimming its 128 MiB reservation to an aligned
 * 64 MiB (two for the first heap, one for the second), which the simulator does not make.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t n, size;
static int order; /* 0 fifo, 1 lifo, 2 step */
static void **bufs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
/* Buffers handed over (the producer's count) and freed (the consumer's). */
static size_t handed, freed;

static void *producer(void *arg) {
    (void)arg;
    for (size_t i = 0; i < n; i++) {
        if (order == 2) {
            pthread_mutex_lock(&lock);
            while (freed < i)
                pthread_cond_wait(&cond, &lock);
            pthread_mutex_unlock(&lock);
        }
        bufs[i] = malloc(size);
        if (!bufs[i]) {
            perror("malloc");
            exit(1);
        }
        memset(bufs[i], (int)i + 1, size);
        if (order == 2 || i + 1 == n) {
            pthread_mutex_lock(&lock);
            handed = i + 1;
            pthread_cond_broadcast(&cond);
            pthread_mutex_unlock(&lock);
        }
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (size_t k = 0; k < n; k++) {
        pthread_mutex_lock(&lock);
        while (handed <= (order == 2 ? k : n - 1))
            pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
        size_t i = order == 1 ? n - 1 - k : k;
        free(bufs[i]);
        pthread_mutex_lock(&lock);
        freed = k + 1;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s fifo|lifo|step N BYTES\n", argv[0]);
        return 2;
    }
    order = !strcmp(argv[1], "fifo") ? 0 : !strcmp(argv[1], "lifo") ? 1 : !strcmp(argv[1], "step") ? 2 : -1;
    if (order < 0) {
        fprintf(stderr, "order must be fifo, lifo or step\n");
        return 2;
    }
    n = strtoul(argv[2], NULL, 0);
    size = strtoul(argv[3], NULL, 0);
    /* A static array: no malloc in the main thread. */
    static void *storage[4096];
    if (n > 4096) {
        fprintf(stderr, "N at most 4096\n");
        return 2;
    }
    bufs = storage;
    pthread_t p, c;
    pthread_create(&p, NULL, producer, NULL);
    pthread_create(&c, NULL, consumer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    return 0;
}
