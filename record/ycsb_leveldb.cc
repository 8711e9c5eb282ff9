// YCSB's core workloads on LevelDB, in one process: the program `make recordings` records
// for the `ycsb` generator's `leveldb` test (FPR §V-B, Fig. 21; issue 47 items 5 and 6).
//
// What it follows of YCSB (core/src/main/java/site/ycsb/workloads/CoreWorkload.java and
// generator/ScrambledZipfianGenerator.java, their defaults): records of 10 fields of 100
// bytes (one 1,000-byte value here), keys "user" + FNV-1a-64 of the record's number
// (insertorder=hashed), requests drawn from a zipfian distribution of constant 0.99 over
// the records whose rank is scrambled by the same hash (requestdistribution=zipfian),
// workloads a (50% reads, 50% updates), b (95/5) and c (reads only). Simplified: an update
// writes the whole record (YCSB's writeallfields=false writes one field; LevelDB's binding
// writes what it is given), and the zipfian draws over the records loaded (YCSB's
// scrambled generator draws over 10^10 items and folds them), which keeps its skew.
//
// What it keeps of LevelDB's defaults, and what it sets: tables of 2 MiB (max_file_size),
// a 4 MiB write buffer, tables read through mmap (PosixEnv maps up to 1,000 read-only
// files on a 64-bit machine), no compression (YCSB's values are random bytes: snappy
// would not shrink them; the tables keep their size), and max_open_files at its least,
// 74, so that the table cache holds 64 open tables (max_open_files minus 10 for other
// files): a database of more than 64 tables evicts tables, and an evicted table is
// unmapped (the munmaps FPR recycles).
//
// Usage:
//   ycsb_leveldb --db DIR --load --records N              create the database
//   ycsb_leveldb --db DIR [--reset-from PRISTINE] --workload a|b|c --records N --ops M
//                [--threads T] [--seed S]
// --reset-from: before opening, DIR's files are replaced by hard links to PRISTINE's
// (LevelDB never writes a table, log or manifest it did not create in that open, so the
// pristine copy is not changed), so every run starts from the same database.
// Prints one JSON line: operations, reads, updates, reads that found their key, seconds.

#include <dirent.h>
#include <leveldb/db.h>
#include <leveldb/options.h>
#include <leveldb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ycsb_common.h"

namespace {

constexpr int kValueBytes = 1000;

void fill_value(uint64_t *rng, char *v) {
    for (int i = 0; i < kValueBytes; i += 8) {
        uint64_t x = ycsb_splitmix64(rng);
        memcpy(v + i, &x, kValueBytes - i < 8 ? kValueBytes - i : 8);
    }
}

[[noreturn]] void usage(const char *why) {
    fprintf(stderr, "ycsb_leveldb: %s\n", why);
    fprintf(stderr,
            "usage: ycsb_leveldb --db DIR --load --records N\n"
            "       ycsb_leveldb --db DIR [--reset-from PRISTINE] --workload a|b|c --records N --ops M "
            "[--threads T] [--seed S]\n");
    exit(2);
}

void reset_from(const std::string &db, const std::string &pristine) {
    mkdir(db.c_str(), 0755);
    for (const std::string &dir : {db, pristine}) {
        DIR *d = opendir(dir.c_str());
        if (!d) {
            perror(dir.c_str());
            exit(1);
        }
        std::vector<std::string> names;
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.') names.push_back(e->d_name);
        closedir(d);
        for (const std::string &name : names) {
            if (dir == db) {
                unlink((db + "/" + name).c_str());
            } else if (name != "LOCK" && name.rfind("LOG", 0) != 0 &&
                       link((pristine + "/" + name).c_str(), (db + "/" + name).c_str()) != 0) {
                perror(name.c_str());
                exit(1);
            }
        }
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::string db_dir, pristine, workload;
    long long records = 0, ops = 0, threads = 2, seed = 47;
    bool load = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
            return argv[++i];
        };
        if (a == "--db") db_dir = value();
        else if (a == "--reset-from") pristine = value();
        else if (a == "--workload") workload = value();
        else if (a == "--records") records = atoll(value());
        else if (a == "--ops") ops = atoll(value());
        else if (a == "--threads") threads = atoll(value());
        else if (a == "--seed") seed = atoll(value());
        else if (a == "--load") load = true;
        else usage(("unknown argument " + a).c_str());
    }
    if (db_dir.empty() || records < 1) usage("--db and --records (>= 1) are needed");
    int read_percent = 0;
    if (!load) {
        if (workload == "a") read_percent = 50;
        else if (workload == "b") read_percent = 95;
        else if (workload == "c") read_percent = 100;
        else usage("--workload must be a, b or c");
        if (ops < 1 || threads < 1 || threads > 256) usage("--ops (>= 1) and --threads (1..256) are needed");
    }
    if (!pristine.empty()) reset_from(db_dir, pristine);

    leveldb::Options options;
    options.create_if_missing = load;
    options.compression = leveldb::kNoCompression;
    options.max_open_files = 74;
    leveldb::DB *db = nullptr;
    leveldb::Status s = leveldb::DB::Open(options, db_dir, &db);
    if (!s.ok()) {
        fprintf(stderr, "ycsb_leveldb: %s\n", s.ToString().c_str());
        return 1;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::atomic<long long> reads{0}, updates{0}, found{0};
    if (load) {
        uint64_t rng = (uint64_t)seed;
        char value[kValueBytes], key[32];
        for (long long r = 0; r < records; r += 1000) {
            leveldb::WriteBatch batch;
            for (long long k = r; k < records && k < r + 1000; k++) {
                fill_value(&rng, value);
                batch.Put(leveldb::Slice(key, ycsb_key((uint64_t)k, key)), leveldb::Slice(value, kValueBytes));
            }
            s = db->Write(leveldb::WriteOptions(), &batch);
            if (!s.ok()) break;
        }
        // Every table written out and compacted: the runs start from settled levels.
        if (s.ok()) db->CompactRange(nullptr, nullptr);
    } else {
        ycsb_zipfian zipf;
        ycsb_zipfian_init(&zipf, (uint64_t)records);
        std::vector<std::thread> pool;
        for (long long t = 0; t < threads; t++) {
            long long mine = ops / threads + (t < ops % threads);
            pool.emplace_back([&, t, mine] {
                uint64_t rng = (uint64_t)seed * 1000003u + (uint64_t)t;
                char value[kValueBytes], keybuf[32];
                std::string got;
                long long r = 0, u = 0, f = 0;
                for (long long i = 0; i < mine; i++) {
                    uint64_t record = ycsb_next_record(&zipf, &rng);
                    leveldb::Slice key(keybuf, ycsb_key(record, keybuf));
                    if ((long long)(ycsb_splitmix64(&rng) % 100) < read_percent) {
                        r++;
                        f += db->Get(leveldb::ReadOptions(), key, &got).ok();
                    } else {
                        u++;
                        fill_value(&rng, value);
                        db->Put(leveldb::WriteOptions(), key, leveldb::Slice(value, kValueBytes));
                    }
                }
                reads += r;
                updates += u;
                found += f;
            });
        }
        for (auto &th : pool) th.join();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    delete db;
    if (!s.ok()) {
        fprintf(stderr, "ycsb_leveldb: %s\n", s.ToString().c_str());
        return 1;
    }
    printf("{\"load\": %s, \"records\": %lld, \"ops\": %lld, \"reads\": %lld, \"updates\": %lld, \"found\": %lld, "
           "\"seconds\": %.3f}\n",
           load ? "true" : "false", records, load ? records : ops, reads.load(), updates.load(), found.load(),
           seconds);
    return 0;
}
