#include <sys/mman.h>
#include <pthread.h>
#include <stdio.h>
static void *worker(void *a){ char *p = mmap(0, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); p[0]=1; mprotect(p, 4096, PROT_READ); munmap(p, 8192); return a; }
int main(void){ pthread_t t; pthread_create(&t,0,worker,0); pthread_join(t,0); char *q = mmap(0, 4096*4, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); for (int i=0;i<4;i++) q[i*4096]=i; madvise(q, 4096*4, MADV_DONTNEED); munmap(q, 4096*4); return 0; }
