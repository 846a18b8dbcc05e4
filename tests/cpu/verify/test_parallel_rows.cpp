// for_rows (host/reference/parallel_rows.hpp): the float64 references' rows on a few threads,
// every row in exactly one chunk.
#include "parallel_rows.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

using namespace ptxlab;

namespace {

// Each chunk's rows, as for_rows handed them out (the calls may come from any thread).
std::vector<int> visits(size_t rows, unsigned threads) {
    const ScopedRowThreads t({threads, 0.0});
    std::vector<std::atomic<int>> seen(rows);
    std::atomic<int> bad_chunks{0};
    for_rows(rows, 1.0, [&](size_t begin, size_t end) {
        if (!(begin < end && end <= rows)) ++bad_chunks;
        for (size_t r = begin; r < end && r < rows; ++r) ++seen[r];
    });
    CHECK(bad_chunks == 0);
    std::vector<int> v;
    for (auto& s : seen) v.push_back(s.load());
    return v;
}

}  // namespace

TEST_CASE("parallel rows: every row in exactly one chunk, for any count of rows and threads") {
    for (size_t rows : {0u, 1u, 2u, 7u, 97u, 1001u})
        for (unsigned threads : {1u, 2u, 3u, 5u, 16u, 40u}) {
            CAPTURE(rows);
            CAPTURE(threads);
            const std::vector<int> v = visits(rows, threads);
            CHECK(std::count(v.begin(), v.end(), 1) == long(rows));
        }
}

TEST_CASE("parallel rows: small work stays on one thread, large work takes the threads it may") {
    const ScopedRowThreads t({8, 1000.0});
    CHECK(row_thread_count(100, 5.0) == 1);       // 500 multiply-adds: not worth a thread
    CHECK(row_thread_count(100, 30.0) == 3);      // 3000: three threads' worth
    CHECK(row_thread_count(100, 1e6) == 8);       // capped by the setting
    CHECK(row_thread_count(3, 1e6) == 3);         // and by the rows
    CHECK(row_thread_count(0, 1e6) == 1);
    set_row_threads({0, -1.0});                   // nonsense: one thread, no minimum
    CHECK(row_threads().threads == 1);
    CHECK(row_threads().min_work == 0.0);
}

TEST_CASE("parallel rows: a row's exception reaches the caller after every thread has stopped") {
    const ScopedRowThreads t({4, 0.0});
    std::atomic<size_t> done{0};
    CHECK_THROWS_WITH_AS(for_rows(1000, 1.0,
                                  [&](size_t begin, size_t end) {
                                      if (begin <= 437 && 437 < end) throw std::runtime_error("row 437");
                                      done += end - begin;
                                  }),
                         "row 437", std::runtime_error);
    CHECK(done < 1000);
}
