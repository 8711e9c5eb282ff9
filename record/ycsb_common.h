/*
 * What record/ycsb_leveldb.cc and record/ycsb_lmdb.c share (C and C++): YCSB's keys and
 * its zipfian request distribution (core/src/main/java/site/ycsb/generator/
 * ZipfianGenerator.java, Gray et al., "Quickly generating billion-record synthetic
 * databases"), and the drivers' random numbers.
 */
#ifndef YCSB_COMMON_H
#define YCSB_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* YCSB's FNV-1a 64 of a record's number: its key order (insertorder=hashed) and the
 * scrambling of the zipfian ranks. */
static inline uint64_t ycsb_fnv1a64(uint64_t v) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (int i = 0; i < 8; i++) {
        h ^= v & 0xff;
        h *= 1099511628211ull;
        v >>= 8;
    }
    return h;
}

/* "user" + the hash, zero-padded: 24 bytes and a NUL. */
static inline int ycsb_key(uint64_t record, char buf[32]) {
    return snprintf(buf, 32, "user%020llu", (unsigned long long)ycsb_fnv1a64(record));
}

static inline uint64_t ycsb_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double ycsb_uniform(uint64_t *s) { return (double)(ycsb_splitmix64(s) >> 11) / 9007199254740992.0; }

/* The zipfian distribution of constant 0.99 over items 0..n-1. */
struct ycsb_zipfian {
    double n, theta, alpha, zetan, eta, half;
};

static inline void ycsb_zipfian_init(struct ycsb_zipfian *z, uint64_t items) {
    z->n = (double)items;
    z->theta = 0.99;
    z->zetan = 0;
    for (uint64_t i = 1; i <= items; i++) z->zetan += 1.0 / pow((double)i, z->theta);
    double zeta2 = 1.0 + 1.0 / pow(2.0, z->theta);
    z->alpha = 1.0 / (1.0 - z->theta);
    z->eta = (1.0 - pow(2.0 / z->n, 1.0 - z->theta)) / (1.0 - zeta2 / z->zetan);
    z->half = 1.0 + pow(0.5, z->theta);
}

static inline uint64_t ycsb_zipfian_next(const struct ycsb_zipfian *z, uint64_t *s) {
    double u = ycsb_uniform(s), uz = u * z->zetan;
    if (uz < 1.0) return 0;
    if (uz < z->half) return 1;
    uint64_t r = (uint64_t)(z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
    return r < (uint64_t)z->n ? r : (uint64_t)z->n - 1;
}

/* A YCSB request: the record a zipfian rank stands for, scrambled by the hash. */
static inline uint64_t ycsb_next_record(const struct ycsb_zipfian *z, uint64_t *s) {
    return ycsb_fnv1a64(ycsb_zipfian_next(z, s)) % (uint64_t)z->n;
}

#endif
