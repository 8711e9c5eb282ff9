/*
 * tlbsim_record.c: a QEMU user-mode TCG plugin that records a program for tlbsim.
 *
 * Follows: tlbsim's native trace format, version 2 (documented in
 * crates/tlbsim-core/src/trace/native.rs), and the QEMU TCG plugin API (docs/devel/tcg-plugins
 * of QEMU; API version 1, as in Debian's qemu-user 7.2). Debian ships no qemu-plugin.h, so
 * the few entry points used are declared below from the documented API.
 *
 * Records, per guest thread (named by its host thread id, which is the id the guest sees):
 * every instruction fetch (`fetches=on`, an Access of kind Fetch with the instruction's size)
 * or one Instructions record per executed translation block (`fetches=off`), every data
 * access with its size and direction, and the system calls that change the address space
 * or the threads, and the futex waits and wakes and set_tid_address that order them
 * (replay's sleeps), with their arguments and result (Syscall records), preceded by a File
 * record (device, inode) for a file mapping. Two calls pass what replay needs by pointer;
 * it is read from guest memory and recorded as an extra argument: sched_setaffinity's mask
 * (its first 64 CPUs, a fourth argument) and clone3's clone_args.flags (a third).
 *
 * Blocking calls, with what replay needs (extra arguments after the call's own, each read
 * or measured here; layouts documented in crates/tlbsim-core/src/trace/native.rs):
 * - read/write/readv/writev/pread64/pwrite64/preadv/pwritev of a regular file: a File
 *   record, then (fd, buf or iov, count, file offset) as the call returns (the offset at
 *   entry: lseek(fd, 0, SEEK_CUR), the file's size for an O_APPEND write, or the call's
 *   own for the p-variants); the result is the bytes moved;
 * - a call that can end another thread's wait (write/writev to a pipe, socket or other
 *   non-regular file, sendto, sendmsg, sendmmsg, connect, shutdown): (its first three
 *   arguments, CLOCK_MONOTONIC ns) as it enters (result 0), so it comes before the
 *   return of the wait it ends;
 * - a blocking wait (poll, select, pselect6, ppoll, epoll_wait, epoll_pwait, epoll_pwait2,
 *   accept, accept4, recvfrom, recvmsg, recvmmsg, and read/readv of a non-regular file):
 *   (its first four arguments, the CLOCK_MONOTONIC ns it entered at, the ns it was
 *   blocked) as it returns;
 * - nanosleep (req, rem, requested ns, blocked ns) and clock_nanosleep (clock, flags,
 *   req, rem, requested ns, blocked ns): the request read from the guest's timespec (an
 *   absolute deadline, TIMER_ABSTIME, made relative to the clock at entry).
 *
 * Calls that change the address space (mmap, mprotect, munmap, brk, mremap, madvise) hold
 * the recording's lock from their entry to their record at return: no other thread records
 * meanwhile, so the file orders them against every access as they took effect. Recorded
 * only at the return, a call that un-protected a page came after the stores other threads
 * made to it between its effect and its return (many, when the caller was preempted
 * there), and a barrier fault's handler unprotecting a page could come before the
 * collector's heap-wide mprotect that caused the fault (still sending its shootdown). The
 * kernel applies each under mmap_lock held for writing (mm/mprotect.c do_mprotect_pkey,
 * mm/mmap.c); the other threads stall only at their next record. An access is recorded just
 * after it ran (QEMU calls memory callbacks after the access): a store that ran before
 * another thread's mprotect took effect can still be recorded after it, but only as its
 * thread's first record after that call (replay reads that as the evidence it is:
 * crates/tlbsim-core/src/workload/recorded.rs).
 *
 * Simplifies: one process-wide lock and buffer, so the file's order is the order in which
 * the callbacks ran (a consistent global order: an access that happens after a syscall in
 * real time comes after it in the file); x86-64 guests only (syscall numbers);
 * read-modify-write instructions appear as a load then a store; writes no end record: the
 * raw file is finished by `tlbsim record` (compressed, end record appended). Forked
 * children append to the same file (O_APPEND); each buffer flush starts with a Thread
 * record, so chunks of different processes interleave safely. Between processes the file's
 * order is that of their flushes; the parent flushes right after recording a fork, so that
 * the fork comes before the child's events (issue 47: an Apache parent asleep in its
 * select loop otherwise held its fork record until its exit).
 *
 * Arguments: out=PATH (the raw file, already holding the 8-byte magic), fetches=on|off,
 * status=PATH (optional: the instruction count is written there at each flush).
 */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- The QEMU plugin API entry points used (API version 1, QEMU 7.2). ---- */
typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
typedef struct qemu_info_t qemu_info_t; /* not read */
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_mem_cb_t)(unsigned int vcpu_index, qemu_plugin_meminfo_t info,
                                          uint64_t vaddr, void *userdata);
typedef void (*qemu_plugin_vcpu_syscall_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index,
                                              int64_t num, uint64_t a1, uint64_t a2, uint64_t a3,
                                              uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7,
                                              uint64_t a8);
typedef void (*qemu_plugin_vcpu_syscall_ret_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_idx,
                                                  int64_t num, int64_t ret);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_mem_cb_t cb,
                                      enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw,
                                      void *userdata);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_cb_t cb);
void qemu_plugin_register_vcpu_syscall_ret_cb(qemu_plugin_id_t id,
                                              qemu_plugin_vcpu_syscall_ret_cb_t cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info);
bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* ---- Native format v2 (crates/tlbsim-core/src/trace/native.rs). ---- */
enum { TAG_INSTRUCTIONS = 0x20, TAG_THREAD = 0x21, TAG_SYSCALL = 0x24, TAG_FILE = 0x25 };
enum { KIND_FETCH = 0, KIND_LOAD = 1, KIND_STORE = 2 };

/* x86-64 Linux system-call numbers (arch/x86/entry/syscalls/syscall_64.tbl) and how many
 * arguments each takes (its man page). */
static int tracked_nargs(int64_t nr)
{
    switch (nr) {
    case 9: return 6;   /* mmap */
    case 10: return 3;  /* mprotect */
    case 11: return 2;  /* munmap */
    case 12: return 1;  /* brk */
    case 25: return 5;  /* mremap */
    case 26: return 3;  /* msync */
    case 28: return 3;  /* madvise */
    case 56: return 5;  /* clone */
    case 57: return 0;  /* fork */
    case 58: return 0;  /* vfork */
    case 60: return 1;  /* exit */
    case 202: return 5; /* futex (uaddr, op, val, timeout/val2, uaddr2) */
    case 203: return 3; /* sched_setaffinity */
    case 218: return 1; /* set_tid_address */
    case 231: return 1; /* exit_group */
    case 435: return 2; /* clone3 */
    /* File I/O, waits, wakes and sleeps: their recorded layouts are fixed (see above). */
    case 0: case 1: case 17: case 18: case 19: case 20: case 295: case 296: return 3;
    case 42: case 44: case 46: case 48: case 307: return 3;
    case 7: case 23: case 43: case 45: case 47: case 232: case 270: case 271: case 281:
    case 288: case 299: case 441: return 4;
    case 35: return 2;  /* nanosleep */
    case 230: return 4; /* clock_nanosleep */
    default: return -1;
    }
}

enum call_class { CALL_OTHER, CALL_FILE_IO, CALL_WAKER, CALL_WAIT, CALL_SLEEP };

/* What a tracked call is for replay; `fd_regular` says whether its fd (first argument) is
 * a regular file, for the calls that act on one. */
static enum call_class class_of(int64_t nr, bool fd_regular)
{
    switch (nr) {
    case 17: case 18: case 295: case 296: return fd_regular ? CALL_FILE_IO : CALL_OTHER;
    case 0: case 19: return fd_regular ? CALL_FILE_IO : CALL_WAIT;
    case 1: case 20: return fd_regular ? CALL_FILE_IO : CALL_WAKER;
    case 42: case 44: case 46: case 48: case 307: return CALL_WAKER;
    case 7: case 23: case 43: case 45: case 47: case 232: case 270: case 271: case 281:
    case 288: case 299: case 441: return CALL_WAIT;
    case 35: case 230: return CALL_SLEEP;
    default: return CALL_OTHER;
    }
}

static uint64_t mono_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define BUF_SIZE (1 << 20)
#define REC_MAX 96

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t buf[BUF_SIZE + REC_MAX];
static size_t buf_len;
static int64_t cur_tid = -1; /* thread of the last record in the buffer, -1: none yet */
static int out_fd = -1;
static int status_fd = -1;
static uint64_t instructions;
static bool fetches = true;

static __thread int64_t my_tid = -1;
static __thread uint64_t my_prev;          /* delta base of this thread's accesses */
static __thread uint64_t sys_args[8];       /* arguments of the pending system call */
static __thread struct stat sys_file;        /* file of a pending file mmap */
static __thread bool sys_has_file;
static __thread int sys_nargs;               /* arguments recorded for the pending call */
static __thread enum call_class sys_class;   /* what the pending call is for replay */
static __thread uint64_t sys_entered;        /* CLOCK_MONOTONIC ns at its entry */
static __thread bool sys_holds_lock;         /* holds `lock` through its pending call */
/* The pipe by which a forking thread releases its child once the fork's record is in the
 * file (`before_fork`); -1 when there is none. Per thread: the thread that forks is the one
 * whose return callback records the fork. */
static __thread int fork_gate[2] = {-1, -1};

static void open_fork_gate(void)
{
    if (fork_gate[1] >= 0) {
        char c = 1;
        while (write(fork_gate[1], &c, 1) < 0 && errno == EINTR) {
        }
        close(fork_gate[1]);
        fork_gate[1] = -1;
    }
}

/* The calls that change the address space: mmap, mprotect, munmap, brk, mremap, madvise. */
static bool changes_address_space(int64_t nr)
{
    return nr == 9 || nr == 10 || nr == 11 || nr == 12 || nr == 25 || nr == 28;
}

/* Read 8 bytes of the guest at `addr` (QEMU user mode on an x86-64 host maps guest
 * addresses 1:1 when it can, guest_base 0): process_vm_readv fails cleanly (EFAULT) where a
 * plain load would crash. Returns false if unreadable. */
static bool read_guest_u64(uint64_t addr, uint64_t *out)
{
    struct iovec local = {out, sizeof *out}, remote = {(void *)(uintptr_t)addr, sizeof *out};
    return addr != 0 && process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof *out;
}

/* The request of a nanosleep-family call: the timespec at `addr`, relative ns; an
 * absolute deadline (`abs_clock` >= 0) made relative to that clock now. */
static bool read_request(uint64_t addr, int abs_clock, uint64_t *ns)
{
    struct timespec ts;
    struct iovec local = {&ts, sizeof ts}, remote = {(void *)(uintptr_t)addr, sizeof ts};
    if (addr == 0 || process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof ts)
        return false;
    if (ts.tv_sec < 0 || ts.tv_nsec < 0)
        return false;
    uint64_t v = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (abs_clock >= 0) {
        uint64_t now = mono_ns((clockid_t)abs_clock);
        v = v > now ? v - now : 0;
    }
    *ns = v;
    return true;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)v | 0x80;
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t zigzag(uint64_t d) { return (d << 1) ^ (uint64_t)((int64_t)d >> 63); }

static void flush_locked(void)
{
    size_t off = 0;
    while (off < buf_len) {
        ssize_t w = write(out_fd, buf + off, buf_len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "tlbsim_record: write failed: %s\n", strerror(errno));
            _exit(70);
        }
        off += (size_t)w;
    }
    buf_len = 0;
    cur_tid = -1; /* every chunk starts with a Thread record */
    if (status_fd >= 0)
        (void)!pwrite(status_fd, &instructions, sizeof instructions, 0);
}

/* Start a record for the calling thread: lock, emit a Thread record if needed. */
static inline uint8_t *begin(void)
{
    if (my_tid < 0)
        my_tid = syscall(SYS_gettid);
    if (!sys_holds_lock)
        pthread_mutex_lock(&lock);
    uint8_t *p = buf + buf_len;
    if (cur_tid != my_tid) {
        *p++ = TAG_THREAD;
        p = put_varint(p, (uint64_t)my_tid);
        cur_tid = my_tid;
    }
    return p;
}

static inline void end(uint8_t *p)
{
    buf_len = (size_t)(p - buf);
    if (buf_len >= BUF_SIZE)
        flush_locked();
    if (!sys_holds_lock)
        pthread_mutex_unlock(&lock);
}

static inline void record_access(int kind, unsigned size_code, uint64_t va)
{
    uint8_t *p = begin();
    *p++ = (uint8_t)((size_code << 2) | kind);
    p = put_varint(p, zigzag(va - my_prev));
    my_prev = va;
    if (kind == KIND_FETCH)
        instructions++;
    end(p);
}

static unsigned size_code_of(uint64_t size)
{
    switch (size) {
    case 1: return 1; case 2: return 2; case 4: return 3; case 8: return 4;
    case 16: return 5; case 32: return 6; case 64: return 7; default: return 0;
    }
}

static void on_insn(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    uint64_t packed = (uint64_t)(uintptr_t)udata; /* vaddr << 4 | size (x86: <= 15) */
    uint64_t size = packed & 15, va = packed >> 4;
    uint8_t *p = begin();
    unsigned sc = size_code_of(size);
    *p++ = (uint8_t)((sc << 2) | KIND_FETCH);
    p = put_varint(p, zigzag(va - my_prev));
    if (sc == 0)
        p = put_varint(p, size);
    my_prev = va;
    instructions++;
    end(p);
}

static void on_tb(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    uint64_t n = (uint64_t)(uintptr_t)udata;
    uint8_t *p = begin();
    *p++ = TAG_INSTRUCTIONS;
    p = put_varint(p, n);
    instructions += n;
    end(p);
}

static void on_mem(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t va, void *udata)
{
    (void)vcpu;
    (void)udata;
    unsigned shift = qemu_plugin_mem_size_shift(info);
    record_access(qemu_plugin_mem_is_store(info) ? KIND_STORE : KIND_LOAD,
                  shift <= 6 ? shift + 1 : 0, va);
}

static void on_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (!fetches)
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (fetches) {
            uint64_t packed = (qemu_plugin_insn_vaddr(insn) << 4) | (qemu_plugin_insn_size(insn) & 15);
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_insn, QEMU_PLUGIN_CB_NO_REGS,
                                                   (void *)(uintptr_t)packed);
        }
        qemu_plugin_register_vcpu_mem_cb(insn, on_mem, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, NULL);
    }
}

static void write_syscall(int64_t nr, int64_t ret)
{
    int nargs = sys_nargs;
    uint8_t *p = begin();
    if (sys_has_file) {
        *p++ = TAG_FILE;
        p = put_varint(p, (uint64_t)sys_file.st_dev);
        p = put_varint(p, (uint64_t)sys_file.st_ino);
    }
    *p++ = TAG_SYSCALL;
    p = put_varint(p, (uint64_t)nr);
    *p++ = (uint8_t)nargs;
    for (int i = 0; i < nargs; i++)
        p = put_varint(p, sys_args[i]);
    p = put_varint(p, zigzag((uint64_t)ret));
    sys_has_file = false;
    end(p);
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t nr, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8)
{
    (void)id;
    (void)vcpu;
    if (tracked_nargs(nr) < 0)
        return;
    if (changes_address_space(nr) && !sys_holds_lock) {
        pthread_mutex_lock(&lock);
        sys_holds_lock = true;
    }
    uint64_t a[8] = {a1, a2, a3, a4, a5, a6, a7, a8};
    memcpy(sys_args, a, sizeof a);
    sys_has_file = false;
    sys_nargs = tracked_nargs(nr);
    sys_class = CALL_OTHER;
    switch (nr) {
    case 0: case 1: case 17: case 18: case 19: case 20: case 295: case 296:
        sys_has_file = fstat((int)a1, &sys_file) == 0 && S_ISREG(sys_file.st_mode);
        sys_class = class_of(nr, sys_has_file);
        break;
    default:
        sys_class = class_of(nr, false);
    }
    if ((nr == 17 || nr == 18 || nr == 295 || nr == 296) && !sys_has_file) {
        /* pread/pwrite of a non-regular file: not a blocking call replay models. */
        sys_has_file = false;
        sys_nargs = -1;
        return;
    }
    sys_entered = mono_ns(CLOCK_MONOTONIC);
    if (sys_class == CALL_FILE_IO) {
        /* The file offset the call starts at: its own for the p-variants (preadv's is
         * split in two words on 32-bit only; x86-64 passes it whole in the fourth). */
        if (nr == 17 || nr == 18 || nr == 295 || nr == 296) {
            sys_args[3] = a4;
        } else {
            int fl = fcntl((int)a1, F_GETFL);
            off_t pos = lseek((int)a1, 0, SEEK_CUR);
            sys_args[3] = (fl >= 0 && (fl & O_APPEND) && (nr == 1 || nr == 20)) ? (uint64_t)sys_file.st_size
                                                                                  : (uint64_t)(pos < 0 ? 0 : pos);
        }
        sys_nargs = 4;
        return; /* recorded as it returns */
    }
    if (sys_class == CALL_WAKER) {
        sys_args[3] = sys_entered;
        sys_nargs = 4;
        write_syscall(nr, 0);
        return;
    }
    if (sys_class == CALL_WAIT || sys_class == CALL_SLEEP)
        return; /* recorded as it returns, with the time blocked */
    /* Arguments passed by pointer that replay needs: sched_setaffinity's mask (its first
     * 64 CPUs, as a fourth argument) and clone3's clone_args.flags (as a third). */
    if (nr == 203 && read_guest_u64(a3, &sys_args[3]))
        sys_nargs = 4;
    if (nr == 435 && read_guest_u64(a1, &sys_args[2]))
        sys_nargs = 3;
    /* mmap of a file: MAP_ANONYMOUS is 0x20, the fd the fifth argument. */
    if (nr == 9 && !(a4 & 0x20) && (int64_t)(int32_t)a5 >= 0)
        sys_has_file = fstat((int)a5, &sys_file) == 0;
    if (nr == 202) {
        /* A wake is recorded as it enters, so it comes before the return of every wait it
         * ends (its result, the number woken, is not known then: recorded as 0); a wait as
         * it returns; the other operations (PI locks) not at all. */
        uint64_t cmd = a2 & 0x7f;
        if (cmd == 1 || cmd == 3 || cmd == 4 || cmd == 5 || cmd == 10)
            write_syscall(nr, 0);
        return;
    }
    if (nr == 60 || nr == 231) {
        /* exit and exit_group do not return: record them now, and make the file whole. */
        write_syscall(nr, 0);
        pthread_mutex_lock(&lock);
        flush_locked();
        pthread_mutex_unlock(&lock);
    }
}

static void record_return(int64_t nr, int64_t ret);

static void on_syscall_ret(qemu_plugin_id_t id, unsigned int vcpu, int64_t nr, int64_t ret)
{
    (void)id;
    (void)vcpu;
    record_return(nr, ret);
    if (sys_holds_lock) {
        sys_holds_lock = false;
        pthread_mutex_unlock(&lock);
    }
}

static void record_return(int64_t nr, int64_t ret)
{
    if (tracked_nargs(nr) < 0 || nr == 60 || nr == 231 || sys_nargs < 0)
        return;
    if (sys_class == CALL_WAKER)
        return; /* recorded as it entered */
    if (sys_class == CALL_WAIT || sys_class == CALL_SLEEP) {
        uint64_t blocked = mono_ns(CLOCK_MONOTONIC) - sys_entered;
        if (sys_class == CALL_WAIT) {
            sys_args[4] = sys_entered;
            sys_args[5] = blocked;
            sys_nargs = 6;
        } else {
            /* nanosleep(req, rem); clock_nanosleep(clock, flags, req, rem): TIMER_ABSTIME 1. */
            bool clock = nr == 230;
            uint64_t req = clock ? sys_args[2] : sys_args[0];
            int abs_clock = clock && (sys_args[1] & 1) ? (int)sys_args[0] : -1;
            uint64_t requested;
            if (!read_request(req, abs_clock, &requested))
                requested = blocked;
            int at = clock ? 4 : 2;
            sys_args[at] = requested;
            sys_args[at + 1] = blocked;
            sys_nargs = at + 2;
        }
    }
    if (nr == 202 && (sys_args[1] & 0x7f) != 0 && (sys_args[1] & 0x7f) != 9)
        return; /* only futex waits are recorded at their return */
    /* The child side of fork/clone returns 0 here (a forked process): the parent's record
     * (with the child's id) is the event. */
    if ((nr == 56 || nr == 57 || nr == 58 || nr == 435) && ret == 0)
        return;
    write_syscall(nr, ret);
    /* A new process (fork, vfork, clone without CLONE_VM): its record, in the parent's
     * buffer, must reach the file before the child's first chunk, which the child writes
     * when its own buffer fills or it exits. Left in the buffer, it would wait for the
     * parent's next flush: a server's parent that then sleeps in its accept or select loop
     * flushes at its exit, and every event of its children came before their fork. */
    bool new_process = nr == 57 || nr == 58 || (nr == 56 && !(sys_args[0] & 0x100)) ||
                       (nr == 435 && sys_nargs >= 3 && !(sys_args[2] & 0x100)); /* CLONE_VM */
    if (new_process && ret > 0) {
        if (!sys_holds_lock)
            pthread_mutex_lock(&lock);
        flush_locked();
        if (!sys_holds_lock)
            pthread_mutex_unlock(&lock);
    }
    if (new_process)
        open_fork_gate();
}

/* fork(): flush in the parent so the child starts with an empty buffer; the child is a
 * new thread id with a fresh delta base (as the reader starts one). The child then waits at
 * its gate until the parent has flushed its record of the fork (`open_fork_gate`, at the
 * fork's return in the parent): the parent may be descheduled between the kernel's fork
 * and its return callback, long enough on a loaded machine for the child to run, exit and
 * write its events first (python/tests/test_record.py's fork_wait saw it). QEMU's user mode
 * runs a guest's vfork as a fork, so the parent never waits for a gated child. */
static void before_fork(void)
{
    pthread_mutex_lock(&lock);
    flush_locked();
    if (pipe2(fork_gate, O_CLOEXEC) != 0)
        fork_gate[0] = fork_gate[1] = -1; /* no gate: the child runs at once, as before */
}
static void after_fork_parent(void)
{
    if (fork_gate[0] >= 0)
        close(fork_gate[0]);
    fork_gate[0] = -1;
    pthread_mutex_unlock(&lock);
}
static void after_fork_child(void)
{
    if (fork_gate[1] >= 0)
        close(fork_gate[1]);
    if (fork_gate[0] >= 0) {
        /* a byte when the parent has flushed, or end of file if it died first */
        char c;
        while (read(fork_gate[0], &c, 1) < 0 && errno == EINTR) {
        }
        close(fork_gate[0]);
    }
    fork_gate[0] = fork_gate[1] = -1;
    pthread_mutex_init(&lock, NULL);
    sys_holds_lock = false;
    buf_len = 0;
    cur_tid = -1;
    my_tid = -1;
    my_prev = 0;
    instructions = 0;
}

static void on_exit_cb(qemu_plugin_id_t id, void *udata)
{
    (void)id;
    (void)udata;
    pthread_mutex_lock(&lock);
    flush_locked();
    pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t *info, int argc,
                                                               char **argv)
{
    (void)info;
    const char *out = NULL, *status = NULL;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0)
            out = argv[i] + 4;
        else if (strncmp(argv[i], "status=", 7) == 0)
            status = argv[i] + 7;
        else if (strcmp(argv[i], "fetches=on") == 0)
            fetches = true;
        else if (strcmp(argv[i], "fetches=off") == 0)
            fetches = false;
        else {
            fprintf(stderr, "tlbsim_record: unknown argument %s (expected out=, status=, fetches=on|off)\n", argv[i]);
            return -1;
        }
    }
    if (!out) {
        fprintf(stderr, "tlbsim_record: missing out=PATH\n");
        return -1;
    }
    out_fd = open(out, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (out_fd < 0) {
        fprintf(stderr, "tlbsim_record: %s: %s\n", out, strerror(errno));
        return -1;
    }
    if (status)
        status_fd = open(status, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
