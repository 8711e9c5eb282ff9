/*
 * realign_signals.c: an LD_PRELOAD library for recording under QEMU 7.2 (Debian 12's
 * qemu-user) a program whose signal handlers do real work, PostgreSQL 15's postmaster
 * (it forks its children from its SIGCHLD handler).
 *
 * QEMU 7.2's linux-user enters an x86-64 signal handler with the stack 8 bytes off the
 * alignment the ABI guarantees at a function's entry (System V x86-64 psABI §3.2.2: rsp + 8
 * a multiple of 16); later QEMU fixed it ("linux-user/i386: Properly align signal frame").
 * Compiled code then faults on its first aligned SSE store to the stack (movaps), e.g. in
 * OpenSSL's RAND_poll, which PostgreSQL's fork_process calls. This library interposes
 * sigaction: every handler is installed behind a trampoline compiled with
 * force_align_arg_pointer (GCC: realigns the stack at entry), which calls the program's
 * handler with its arguments; the old action it reports is the program's own.
 *
 * Simplifies: handlers installed by signal() or bsd_signal() inside glibc (which call the
 * internal __sigaction, not interposable) are not wrapped; the recording holds the
 * trampoline's few instructions per signal. Used by record/recordings.py for PostgreSQL
 * only, through QEMU_SET_ENV (the guest's environment, not QEMU's own).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static void *handlers[NSIG];
static sigaction_fn real_sigaction;

__attribute__((force_align_arg_pointer)) static void tramp_info(int sig, siginfo_t *si, void *uc)
{
    ((void (*)(int, siginfo_t *, void *))handlers[sig])(sig, si, uc);
}

__attribute__((force_align_arg_pointer)) static void tramp(int sig)
{
    ((void (*)(int))handlers[sig])(sig);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!real_sigaction)
        real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    int ok = sig > 0 && sig < NSIG;
    void *prev = ok ? handlers[sig] : NULL;
    int r;
    if (act && ok && act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN) {
        struct sigaction copy = *act;
        if (act->sa_flags & SA_SIGINFO) {
            handlers[sig] = (void *)act->sa_sigaction;
            copy.sa_sigaction = tramp_info;
        } else {
            handlers[sig] = (void *)act->sa_handler;
            copy.sa_handler = tramp;
        }
        r = real_sigaction(sig, &copy, old);
    } else {
        r = real_sigaction(sig, act, old);
    }
    /* Report the program's own handler, not the trampoline. */
    if (old && r == 0 && prev) {
        if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction == tramp_info)
            old->sa_sigaction = (void (*)(int, siginfo_t *, void *))prev;
        else if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler == tramp)
            old->sa_handler = (void (*)(int))prev;
    }
    return r;
}
