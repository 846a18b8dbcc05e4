// The float64 references' independent output rows on a few host threads (verify's large cases:
// a 4096 x 1024 x 1024 product is 4.3 G multiply-adds and its bound pass). Only which thread
// computes a row changes: each row is computed by one call of the same code, with the same
// float64 operations in the same order as on one thread, so the results are bit-identical to
// the serial loop's (tests/cpu/verify/test_parallel_rows.cpp checks it). Small work stays on
// the calling thread.
#pragma once

#include <cstddef>
#include <functional>

namespace ptxlab {

struct RowThreads {
    unsigned threads = 1;        // at most this many threads (the calling one among them)
    double min_work = 1 << 22;   // the least work (multiply-adds) worth one more thread
};

// The setting for_rows uses: by default hardware_concurrency() capped at kMaxRowThreads.
inline constexpr unsigned kMaxRowThreads = 16;
RowThreads row_threads();
void set_row_threads(const RowThreads& t);

// Sets row_threads() for one scope and restores the old setting after (the tests).
class ScopedRowThreads {
public:
    explicit ScopedRowThreads(const RowThreads& t) : old_(row_threads()) { set_row_threads(t); }
    ~ScopedRowThreads() { set_row_threads(old_); }
    ScopedRowThreads(const ScopedRowThreads&) = delete;
    ScopedRowThreads& operator=(const ScopedRowThreads&) = delete;

private:
    RowThreads old_;
};

// How many threads for_rows runs `rows` rows of `work_per_row` multiply-adds each on.
unsigned row_thread_count(size_t rows, double work_per_row);

// Calls body(begin, end) on consecutive chunks of [0, rows), each row in exactly one call,
// on row_thread_count(rows, work_per_row) threads (the calling one helps; a thread that
// cannot be started leaves its share to the others). body must only write what belongs to
// its rows. An exception from body stops the other chunks and is rethrown here, after every
// thread has been joined.
void for_rows(size_t rows, double work_per_row, const std::function<void(size_t begin, size_t end)>& body);

}  // namespace ptxlab
