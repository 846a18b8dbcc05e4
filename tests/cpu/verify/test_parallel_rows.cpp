// for_rows (host/reference/parallel_rows.hpp): the float64 references' rows on a few threads.
// Every row is computed once, by the serial code's float64 sequence: a harness's reference is
// bit-identical on 1 thread and on several, and the dense products equal plain serial loops.
#include "dense_products.hpp"
#include "parallel_rows.hpp"
#include "registry.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using namespace ptxlab;
using namespace ptxlab::verify_detail;

namespace {

constexpr uint64_t kSeed = 0x5eed;

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

// Whether two references hold the same bits (values and bounds), naming the first difference.
std::string bit_difference(const std::map<std::string, Bounded>& a, const std::map<std::string, Bounded>& b) {
    if (a.size() != b.size()) return "different tensors";
    for (const auto& [name, x] : a) {
        const Bounded& y = b.at(name);
        if (x.v.size() != y.v.size() || x.e.size() != y.e.size()) return name + ": different sizes";
        for (size_t i = 0; i < x.v.size(); ++i)
            if (std::memcmp(&x.v[i], &y.v[i], 8) != 0 || std::memcmp(&x.e[i], &y.e[i], 8) != 0)
                return name + "[" + std::to_string(i) + "] differs";
    }
    return "";
}

Harness harness_on(const VerifyCase& c, unsigned threads) {
    const ScopedRowThreads t({threads, 0.0});  // min_work 0: even a small case is split
    validate_case(c);
    Rng rng(kSeed);
    return kernel_row(c.entry).harness(c, rng);
}

const std::vector<float>& input(const Harness& h, const std::string& name) {
    for (const Tensor& t : h.tensors)
        if (t.name == name) return t.data;
    throw std::runtime_error("no tensor " + name);
}

// dense_mm's three products by plain serial loops (the layer's maths, as family_dense.cpp
// wrote them before for_rows): the values only, bit for bit.
std::vector<double> dense_serial(unsigned op, unsigned B, unsigned I, unsigned O, unsigned act, const Harness& h,
                                 double scale) {
    std::vector<double> out;
    if (op == kOpForward) {
        const auto &X = input(h, "X"), &W = input(h, "W"), &b = input(h, "b");
        for (unsigned s = 0; s < B; ++s)
            for (unsigned o = 0; o < O; ++o) {
                double v = 0;
                for (unsigned i = 0; i < I; ++i) v += double(X[size_t(s) * I + i]) * W[size_t(o) * I + i];
                v += b[o];
                out.push_back(act == 1 ? std::max(v, 0.0) : v);
            }
        return out;
    }
    const std::vector<double> G = masked_g(input(h, "dY"), input(h, "Y"), act);
    if (op == kOpDeltas) {
        const auto& W = input(h, "W");
        for (unsigned s = 0; s < B; ++s)
            for (unsigned i = 0; i < I; ++i) {
                double v = 0;
                for (unsigned o = 0; o < O; ++o) v += G[size_t(s) * O + o] * W[size_t(o) * I + i];
                out.push_back(v);
            }
        return out;
    }
    const auto& X = input(h, "X");
    for (unsigned o = 0; o < O; ++o)
        for (unsigned i = 0; i < I; ++i) {
            double v = 0;
            for (unsigned s = 0; s < B; ++s) v += G[size_t(s) * O + o] * X[size_t(s) * I + i];
            out.push_back(scale * v);
        }
    return out;
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

TEST_CASE("parallel rows: dense_mm's and dense_tc's references equal the serial loops bit for bit") {
    // Odd sizes: 203 samples split in chunks that leave partial groups of 8 and of 4.
    for (unsigned op = 0; op < 3; ++op)
        for (unsigned threads : {1u, 2u, 3u, 5u, 16u}) {
            CAPTURE(op);
            CAPTURE(threads);
            const VerifyCase mm{"dense_mm", {op, 203, 131, 29, op % 2, 0}};
            const Harness h = harness_on(mm, threads);
            const Bounded& got = h.expected.at(op == kOpForward ? "Y" : op == kOpDeltas ? "dX" : "dW");
            // The weight gradient's scale is the first draw of the harness's generator.
            Rng rng(kSeed);
            const double scale = op == kOpWeights ? double(rng.uniform(0.5f, 2.0f) / 203.0f) : 1.0;
            const std::vector<double> want = dense_serial(op, 203, 131, 29, op % 2, h, scale);
            REQUIRE(got.v.size() == want.size());
            size_t differ = 0;
            for (size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&got.v[i], &want[i], 8) != 0;
            CHECK(differ == 0);
            CHECK(bit_difference(h.expected, harness_on(mm, 1).expected) == "");
            const VerifyCase tc{"dense_tc", {op, 203, 131, 29, op % 2}};
            CHECK(bit_difference(harness_on(tc, threads).expected, harness_on(tc, 1).expected) == "");
        }
}

TEST_CASE("parallel rows: every default case's reference is bit-identical on 1 and on 5 threads") {
    // The cheap ones (a few seconds in all): every family and every reference for_rows splits.
    size_t n = 0;
    for (const VerifyCase& c : default_cases()) {
        double size = 1;
        for (unsigned z : c.shape) size *= std::max(z, 1u);
        if (size > 3e6) continue;
        CAPTURE(c.entry);
        CAPTURE(shape_text(c));
        CHECK(bit_difference(harness_on(c, 5).expected, harness_on(c, 1).expected) == "");
        ++n;
    }
    CHECK(n > 300);
}
