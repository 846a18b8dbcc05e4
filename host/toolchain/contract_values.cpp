// Contract values at a shape: whole numbers within a launch's limits (`eval_whole`, `launch_shape`, `check_contract_values`).
#include "contract.hpp"

#include "error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace ptxlab {

namespace {
// " at N=1000 M=3", or "" for an expression over no variables.
std::string at_shape(const ShapeVars& vars) { return vars.empty() ? "" : " at " + shape_text(vars); }
}  // namespace

int64_t eval_whole(const std::string& text, const ShapeVars& vars, const std::string& what, int64_t lo, int64_t hi,
                   const std::string& limit) {
    Rational v;
    try {
        v = eval_expr(text, vars);
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{} = `{}`: {}{}", what, text, e.what(), at_shape(vars));
    }
    if (v.den != 1)
        PTXLAB_THROW(InputError, "{} = `{}` is {}/{}, not a whole number{}; write ceil({}) or floor({})", what, text,
                     v.num, v.den, at_shape(vars), text, text);
    if (v.num < lo || v.num > hi)
        PTXLAB_THROW(InputError, "{} = `{}` is {}{}, outside [{}, {}]{}", what, text, v.num, at_shape(vars), lo, hi,
                     limit.empty() ? "" : " (" + limit + ")");
    return v.num;
}

// ---- Values at a shape ------------------------------------------------------------------

namespace {

const char* const kAxis[] = {"x", "y", "z"};

// The limits of a launch on every GPU ptxlab runs on (sm_80 and newer), as the CUDA
// programming guide lists them; a launch past them fails in the driver with a bare error code.
unsigned grid_dim(const Contract& c, int i, const ShapeVars& s) {
    return unsigned(eval_whole(c.grid[i], s, fmt::format("grid.{}", kAxis[i]), 1, i ? 65535 : 2147483647,
                               i ? "grid.y and grid.z take at most 65535" : "grid.x takes at most 2^31 - 1"));
}
unsigned block_dim(const Contract& c, int i, const ShapeVars& s) {
    return unsigned(eval_whole(c.block[i], s, fmt::format("block.{}", kAxis[i]), 1, i == 2 ? 64 : 1024,
                               i == 2 ? "block.z takes at most 64" : "a block has at most 1024 threads"));
}
void check_threads(const std::array<unsigned, 3>& b, const ShapeVars& s) {
    const uint64_t threads = uint64_t(b[0]) * b[1] * b[2];
    if (threads > 1024)
        PTXLAB_THROW(InputError, "block {}x{}x{} has {} threads{}; a block has at most 1024 threads", b[0], b[1], b[2],
                     threads, at_shape(s));
}
// The cluster's sizes (c.cluster_line != 0): at most kMaxContractCluster blocks, each a divisor of the grid's.
std::array<unsigned, 3> cluster_dims(const Contract& c, const std::array<unsigned, 3>& grid, const ShapeVars& s) {
    std::array<unsigned, 3> d{};
    for (int i = 0; i < 3; ++i) {
        d[size_t(i)] = unsigned(eval_whole(c.cluster[size_t(i)], s, fmt::format("cluster.{}", kAxis[i]), 1,
                                           kMaxContractCluster, "a cluster has at most 8 blocks"));
        if (grid[size_t(i)] % d[size_t(i)] != 0)
            PTXLAB_THROW(InputError,
                         "cluster.{} = `{}` is {}{}, which does not divide grid.{} = {}: the grid must be whole "
                         "clusters",
                         kAxis[i], c.cluster[size_t(i)], d[size_t(i)], at_shape(s), kAxis[i], grid[size_t(i)]);
    }
    const unsigned blocks = d[0] * d[1] * d[2];
    if (blocks > kMaxContractCluster)
        PTXLAB_THROW(InputError, "cluster {}x{}x{} has {} blocks{}; a cluster has at most {} (the portable size)", d[0],
                     d[1], d[2], blocks, at_shape(s), kMaxContractCluster);
    return d;
}
unsigned shared_bytes(const Contract& c, const ShapeVars& s) {
    return unsigned(eval_whole(c.shared, s, "shared", 0, kMaxContractShared,
                               "227 KiB: the most dynamic shared memory any GPU lets a block opt in to"));
}

}  // namespace

LaunchShape launch_shape(const Contract& c, const ShapeVars& s) {
    LaunchShape l;
    for (int i = 0; i < 3; ++i) l.grid[i] = grid_dim(c, i, s);
    for (int i = 0; i < 3; ++i) l.block[i] = block_dim(c, i, s);
    check_threads(l.block, s);
    if (c.cluster_line) l.cluster = cluster_dims(c, l.grid, s);
    l.shared = shared_bytes(c, s);
    return l;
}

size_t buffer_length(const Contract& c, const ContractParam& p, const ShapeVars& s) {
    (void)c;
    return size_t(eval_whole(p.length, s, fmt::format("the length of '{}'", p.name), 1, kMaxContractElements,
                             "overflows the 2^32 elements a buffer may have"));
}

std::vector<int64_t> buffer_extents(const ContractParam& p, const ShapeVars& s) {
    // The factors of a product at the top level of the length (outside parentheses), or none when
    // anything else (+, -, /) stands there: `M * (N + 1)` is two factors, `M * N + 4` none.
    std::vector<std::string> factors;
    int depth = 0;
    size_t from = 0;
    for (size_t i = 0; i < p.length.size(); ++i) {
        const char ch = p.length[i];
        if (ch == '(') ++depth;
        if (ch == ')') --depth;
        if (depth != 0) continue;
        if (ch == '+' || ch == '-' || ch == '/') return {};
        if (ch == '*') {
            factors.push_back(p.length.substr(from, i - from));
            from = i + 1;
        }
    }
    factors.push_back(p.length.substr(from));
    if (factors.size() < 2) return {};
    std::vector<int64_t> extents;
    int64_t product = 1;
    for (const auto& f : factors) {
        Rational v;
        try {
            v = eval_expr(f, s);
        } catch (const InputError&) {
            return {};
        }
        if (v.den != 1 || v.num < 1 || v.num > kMaxContractElements) return {};
        product *= v.num;  // each <= 2^32 and the running product <= the buffer's length: no overflow
        if (product > kMaxContractElements) return {};
        extents.push_back(v.num);
    }
    return extents;
}

std::string element_name(const std::string& name, const std::vector<int64_t>& extents, size_t index) {
    if (extents.empty()) return fmt::format("{}[{}]", name, index);
    std::vector<uint64_t> coords(extents.size());
    uint64_t rest = index;
    for (size_t k = extents.size(); k-- > 0;) {
        coords[k] = rest % uint64_t(extents[k]);
        rest /= uint64_t(extents[k]);
    }
    std::string out = name;
    for (const auto c : coords) out += fmt::format("[{}]", c);
    return out;
}

uint32_t scalar_bits(const Contract& c, const ContractParam& p, const ShapeVars& s) {
    (void)c;
    const std::string what = fmt::format("parameter '{}'", p.name);
    if (p.type == ElemType::U32) return uint32_t(eval_whole(p.value, s, what, 0, UINT32_MAX, "out of u32 range"));
    if (p.type == ElemType::S32)
        return uint32_t(int32_t(eval_whole(p.value, s, what, INT32_MIN, INT32_MAX, "out of s32 range")));
    // An f32 needs no range check: a rational over 64-bit integers is below 2^63, far inside float's range.
    try {
        return std::bit_cast<uint32_t>(float(eval_expr(p.value, s).value()));
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{} = `{}`: {}{}", what, p.value, e.what(), at_shape(s));
    }
}

TensorMapShape tensor_map_shape(const Contract& c, const ContractParam& p, const ShapeVars& s) {
    TensorMapShape t;
    const auto of = std::find_if(c.params.begin(), c.params.end(), [&](const ContractParam& q) { return q.name == p.tmap_of; });
    if (of == c.params.end() || !of->buffer())
        PTXLAB_THROW(InputError, "tensor map '{}' describes '{}', which is not a buffer parameter", p.name, p.tmap_of);
    t.buffer = size_t(of - c.params.begin());
    const std::string n = fmt::format("tensor map '{}'", p.name);
    t.rows = uint64_t(eval_whole(p.tmap[0], s, n + " rows", 1, kMaxContractElements));
    t.cols = uint64_t(eval_whole(p.tmap[1], s, n + " columns", 1, kMaxContractElements));
    t.box_rows = uint32_t(eval_whole(p.tmap[2], s, n + " box rows", 1, 256, "a box side is 1 .. 256 elements"));
    t.box_cols = uint32_t(eval_whole(p.tmap[3], s, n + " box columns", 1, 256, "a box side is 1 .. 256 elements"));
    const size_t len = buffer_length(c, *of, s);
    if (t.rows > len || len % t.rows != 0 || len / t.rows != t.cols)  // rows * cols != len, without overflow
        PTXLAB_THROW(InputError, "{} is {} x {} elements{}, but '{}' has {}", n, t.rows, t.cols, at_shape(s), of->name,
                     len);
    if (t.cols % 4 != 0)
        PTXLAB_THROW(InputError, "{}: a row of {} columns is {} bytes{}; a tensor map's row stride must be a multiple of "
                     "16 bytes (4 columns)", n, t.cols, 4 * t.cols, at_shape(s));
    if (t.box_cols % 4 != 0)
        PTXLAB_THROW(InputError, "{}: a box row of {} columns is {} bytes{}; it must be a multiple of 16 bytes (4 columns)",
                     n, t.box_cols, 4 * t.box_cols, at_shape(s));
    t.swizzle128 = p.tmap_swizzle128;
    if (t.swizzle128 && t.box_cols > 32)
        PTXLAB_THROW(InputError, "{}: a box row of {} columns is {} bytes{}; the 128-byte swizzle takes at most 128 "
                     "bytes (32 columns)", n, t.box_cols, 4 * t.box_cols, at_shape(s));
    return t;
}

double contract_amount(const std::string& text, const std::string& what, const ShapeVars& s) {
    double v = 0;
    try {
        v = eval_expr(text, s).value();
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{} = `{}`: {}{}", what, text, e.what(), at_shape(s));
    }
    if (v < 0) PTXLAB_THROW(InputError, "{} = `{}` is {:g}{}: a count of bytes or operations is never negative", what, text, v, at_shape(s));
    return v;
}

std::vector<Diagnostic> check_contract_values(const Contract& c, const std::vector<ShapeVars>& shapes) {
    std::vector<Diagnostic> out;
    // One key at a time, at every shape; its first failure is reported at its line (the
    // @contract line for a key left at its default).
    auto key = [&](int line, auto&& eval) {
        for (const auto& s : shapes) {
            try {
                eval(s);
            } catch (const InputError& e) {
                out.push_back({line ? line : c.line, "error", e.what()});
                return;
            }
        }
    };
    key(c.grid_line, [&](const ShapeVars& s) {
        for (int i = 0; i < 3; ++i) grid_dim(c, i, s);
    });
    key(c.block_line, [&](const ShapeVars& s) {
        std::array<unsigned, 3> b{};
        for (int i = 0; i < 3; ++i) b[size_t(i)] = block_dim(c, i, s);
        check_threads(b, s);
    });
    if (c.cluster_line)
        key(c.cluster_line, [&](const ShapeVars& s) {
            std::array<unsigned, 3> g{};
            try {
                for (int i = 0; i < 3; ++i) g[size_t(i)] = grid_dim(c, i, s);
            } catch (const InputError&) {
                return;  // reported at the grid's line
            }
            cluster_dims(c, g, s);
        });
    key(c.shared_line, [&](const ShapeVars& s) { shared_bytes(c, s); });
    for (const auto& p : c.params)
        key(p.line, [&](const ShapeVars& s) {
            if (p.buffer()) buffer_length(c, p, s);
            else if (p.role == ParamRole::TensorMap) tensor_map_shape(c, p, s);
            else scalar_bits(c, p, s);
        });
    if (!c.bytes.empty()) key(c.bytes_line, [&](const ShapeVars& s) { contract_amount(c.bytes, "bytes", s); });
    if (!c.flops.empty()) key(c.flops_line, [&](const ShapeVars& s) { contract_amount(c.flops, "flops", s); });
    std::stable_sort(out.begin(), out.end(), [](const Diagnostic& a, const Diagnostic& b) { return a.line < b.line; });
    return out;
}

std::vector<Diagnostic> check_contract_values(const Contract& c) { return check_contract_values(c, c.shapes); }

}  // namespace ptxlab
