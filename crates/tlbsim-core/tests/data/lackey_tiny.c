/* Tiny freestanding program traced with valgrind lackey for tlbsim's golden tests (see README.md). */
static long data[512];
static char text[64] = "tlbsim";

static long syscall1(long n, long a) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
    return r;
}

__attribute__((noinline)) static long work(long *a, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) {
        a[i] = a[i] * 3 + i;     /* load + store (or modify) */
        s += a[(i * 7) % n];    /* load */
    }
    for (int i = 0; i < 64; i++) text[i] ^= (char)i;  /* byte modifies */
    return s;
}

void _start(void) {
    long s = 0;
    for (int r = 0; r < 2; r++) s += work(data, 384);
    syscall1(60, s & 1);  /* exit */
}
