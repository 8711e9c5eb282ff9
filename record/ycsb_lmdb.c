/*
 * YCSB's read-only workload C on LMDB, in one process: the program `make recordings`
 * records for the `ycsb` generator's `lmdb` test (FPR §V-B, Fig. 21: "the read-heavy lookup
 * workload YCSB-C"; issue 47 items 5 and 6).
 *
 * What it follows of YCSB, as record/ycsb_leveldb.cc does (record/ycsb_common.h): records
 * of 1,000 bytes, keys "user" + FNV-1a-64 of the record's number, requests zipfian
 * (constant 0.99) over the records with the rank scrambled by the same hash. Of YCSB's LMDB binding: every read is
 * its own read-only transaction (mdb_txn_begin with MDB_RDONLY, mdb_get, mdb_txn_abort).
 * LMDB maps its data file once, read-only, and reads through the map (no MDB_WRITEMAP):
 * the single memory map the generator models.
 *
 * Usage:
 *   ycsb_lmdb --db DIR --load --records N                         create the database
 *   ycsb_lmdb --db DIR --records N --ops M [--threads T] [--seed S]   YCSB-C
 * Prints one JSON line: operations, reads that found their key, seconds.
 */
#define _GNU_SOURCE
#include <lmdb.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ycsb_common.h"

#define VALUE_BYTES 1000

static void check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "ycsb_lmdb: %s: %s\n", what, mdb_strerror(rc));
        exit(1);
    }
}

static MDB_env *env;
static struct ycsb_zipfian zipf;
static MDB_dbi dbi;
static long long records, ops, threads = 2, seed = 47;

struct worker {
    long long index, ops, found;
};

static void *work(void *arg) {
    struct worker *w = arg;
    uint64_t rng = (uint64_t)seed * 1000003u + (uint64_t)w->index;
    char key[32];
    for (long long i = 0; i < w->ops; i++) {
        uint64_t record = ycsb_next_record(&zipf, &rng);
        MDB_val k = {(size_t)ycsb_key(record, key), key}, v;
        MDB_txn *txn;
        check(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), "mdb_txn_begin");
        w->found += mdb_get(txn, dbi, &k, &v) == 0 && v.mv_size == VALUE_BYTES;
        mdb_txn_abort(txn);
    }
    return NULL;
}

static void usage(const char *why) {
    fprintf(stderr, "ycsb_lmdb: %s\n", why);
    fprintf(stderr,
            "usage: ycsb_lmdb --db DIR --load --records N\n"
            "       ycsb_lmdb --db DIR --records N --ops M [--threads T] [--seed S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int load = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--load")) {
            load = 1;
            continue;
        }
        if (i + 1 >= argc) usage("an option is missing its value");
        const char *v = argv[++i];
        if (!strcmp(a, "--db")) dir = v;
        else if (!strcmp(a, "--records")) records = atoll(v);
        else if (!strcmp(a, "--ops")) ops = atoll(v);
        else if (!strcmp(a, "--threads")) threads = atoll(v);
        else if (!strcmp(a, "--seed")) seed = atoll(v);
        else usage("unknown argument");
    }
    if (!dir || records < 1) usage("--db and --records (>= 1) are needed");
    if (!load && (ops < 1 || threads < 1 || threads > 256)) usage("--ops (>= 1) and --threads (1..256) are needed");
    mkdir(dir, 0755);
    check(mdb_env_create(&env), "mdb_env_create");
    /* Room for the records: a 4 KiB leaf holds 3 of ~1 KiB, 2 after the splits of inserts in hashed order. */
    check(mdb_env_set_mapsize(env, (size_t)records * 4096 + (64u << 20)), "mdb_env_set_mapsize");
    check(mdb_env_set_maxreaders(env, 512), "mdb_env_set_maxreaders");
    check(mdb_env_open(env, dir, load ? MDB_NOSYNC : MDB_RDONLY, 0644), "mdb_env_open");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long long found = 0;
    if (load) {
        uint64_t rng = (uint64_t)seed;
        char key[32], value[VALUE_BYTES];
        for (long long r = 0; r < records; r += 10000) {
            MDB_txn *txn;
            check(mdb_txn_begin(env, NULL, 0, &txn), "mdb_txn_begin");
            check(mdb_dbi_open(txn, NULL, 0, &dbi), "mdb_dbi_open");
            for (long long k = r; k < records && k < r + 10000; k++) {
                for (int i = 0; i < VALUE_BYTES; i += 8) {
                    uint64_t x = ycsb_splitmix64(&rng);
                    memcpy(value + i, &x, VALUE_BYTES - i < 8 ? VALUE_BYTES - i : 8);
                }
                MDB_val kv = {(size_t)ycsb_key((uint64_t)k, key), key}, vv = {VALUE_BYTES, value};
                check(mdb_put(txn, dbi, &kv, &vv, 0), "mdb_put");
            }
            check(mdb_txn_commit(txn), "mdb_txn_commit");
        }
        check(mdb_env_sync(env, 1), "mdb_env_sync");
    } else {
        MDB_txn *txn;
        check(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), "mdb_txn_begin");
        check(mdb_dbi_open(txn, NULL, 0, &dbi), "mdb_dbi_open");
        mdb_txn_abort(txn);
        ycsb_zipfian_init(&zipf, (uint64_t)records);
        pthread_t tid[256];
        struct worker w[256];
        for (long long t = 0; t < threads; t++) {
            w[t] = (struct worker){t, ops / threads + (t < ops % threads), 0};
            if (pthread_create(&tid[t], NULL, work, &w[t]) != 0) usage("pthread_create failed");
        }
        for (long long t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            found += w[t].found;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    mdb_env_close(env);
    printf("{\"load\": %s, \"records\": %lld, \"ops\": %lld, \"found\": %lld, \"seconds\": %.3f}\n",
           load ? "true" : "false", records, load ? records : ops, found,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
