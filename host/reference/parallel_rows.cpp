// for_rows: the float64 references' rows on a few host threads (parallel_rows.hpp).
#include "parallel_rows.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace ptxlab {

namespace {

RowThreads default_row_threads() {
    const unsigned hw = std::thread::hardware_concurrency();  // 0 where it cannot tell
    return {std::clamp(hw, 1u, kMaxRowThreads), RowThreads{}.min_work};
}

std::mutex& setting_mutex() {
    static std::mutex m;
    return m;
}

RowThreads& setting() {
    static RowThreads t = default_row_threads();
    return t;
}

// The chunks of one for_rows call, handed out in order to whichever thread asks next; the
// first exception from body stops the handing out.
struct Chunks {
    Chunks(size_t r, size_t s, const std::function<void(size_t, size_t)>& b)
        : rows(r), size(s), count((r + s - 1) / s), body(b) {}
    size_t rows, size, count;
    const std::function<void(size_t, size_t)>& body;
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex error_mutex;

    void work() noexcept {
        try {
            for (size_t c; !failed.load() && (c = next.fetch_add(1)) < count;)
                body(c * size, std::min(rows, (c + 1) * size));
        } catch (...) {
            const std::lock_guard<std::mutex> lock(error_mutex);
            if (!error) error = std::current_exception();
            failed.store(true);
        }
    }
};

}  // namespace

RowThreads row_threads() {
    const std::lock_guard<std::mutex> lock(setting_mutex());
    return setting();
}

void set_row_threads(const RowThreads& t) {
    const std::lock_guard<std::mutex> lock(setting_mutex());
    setting() = {std::max(t.threads, 1u), std::max(t.min_work, 0.0)};
}

unsigned row_thread_count(size_t rows, double work_per_row) {
    const RowThreads t = row_threads();
    const double total = double(rows) * std::max(work_per_row, 0.0);
    const double by_work = t.min_work > 0 ? total / t.min_work : double(t.threads);
    const double n = std::min({double(t.threads), double(rows), std::floor(by_work)});
    return n < 1 ? 1u : unsigned(n);
}

void for_rows(size_t rows, double work_per_row, const std::function<void(size_t begin, size_t end)>& body) {
    if (rows == 0) return;
    const unsigned n = row_thread_count(rows, work_per_row);
    if (n == 1) {
        body(0, rows);
        return;
    }
    // About 8 chunks a thread, so that a thread slowed by others still finishes with them.
    const size_t size = std::max<size_t>(1, (rows + size_t(n) * 8 - 1) / (size_t(n) * 8));
    Chunks chunks(rows, size, body);
    std::vector<std::thread> threads;
    threads.reserve(n - 1);
    for (unsigned i = 1; i < n; ++i) {
        try {
            threads.emplace_back([&chunks] { chunks.work(); });
        } catch (const std::system_error&) {
            break;  // no more threads: the ones running (and this one) take every chunk
        }
    }
    chunks.work();
    for (auto& t : threads) t.join();
    if (chunks.error) std::rethrow_exception(chunks.error);
}

}  // namespace ptxlab
