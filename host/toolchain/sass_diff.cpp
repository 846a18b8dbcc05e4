// `ptxlab sass --diff`: two versions of a kernel side by side, counts by class and the opcodes.
#include "sass.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace ptxlab {

namespace {

// What the listing compares: the opcode with its modifiers and the predicate without its register
// number ("@P0 FFMA R1, R2, R3, R4" -> "@P FFMA"): register allocation alone is not a difference.
std::string diff_key(const SassInstruction& ins) {
    std::string pred;
    for (char c : ins.predicate)
        if (c < '0' || c > '9') pred.push_back(c);
    return pred.empty() ? ins.opcode : pred + " " + ins.opcode;
}

struct Op {
    char kind;  // ' ' in both, '-' only in A, '+' only in B
    size_t a, b;
};

// A shortest edit script between two opcode sequences: the common prefix and suffix, and the
// longest common subsequence of the middle where that table fits in kMaxCells (else the
// middle is shown as removed then added).
std::vector<Op> diff_ops(const std::vector<std::string>& A, const std::vector<std::string>& B, bool& aligned) {
    constexpr size_t kMaxCells = size_t(8) << 20;
    size_t pre = 0, suf = 0;
    while (pre < A.size() && pre < B.size() && A[pre] == B[pre]) ++pre;
    while (suf < A.size() - pre && suf < B.size() - pre && A[A.size() - 1 - suf] == B[B.size() - 1 - suf]) ++suf;
    const size_t n = A.size() - pre - suf, m = B.size() - pre - suf;
    std::vector<Op> ops;
    for (size_t i = 0; i < pre; ++i) ops.push_back({' ', i, i});
    aligned = (n + 1) * (m + 1) <= kMaxCells;
    if (aligned) {
        // L[i][j]: length of the LCS of A[pre+i..pre+n) and B[pre+j..pre+m).
        std::vector<uint32_t> L((n + 1) * (m + 1), 0);
        auto at = [&](size_t i, size_t j) -> uint32_t& { return L[i * (m + 1) + j]; };
        for (size_t i = n; i-- > 0;)
            for (size_t j = m; j-- > 0;)
                at(i, j) = A[pre + i] == B[pre + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
        size_t i = 0, j = 0;
        while (i < n || j < m) {
            if (i < n && j < m && A[pre + i] == B[pre + j]) ops.push_back({' ', pre + i++, pre + j++});
            else if (j == m || (i < n && at(i + 1, j) >= at(i, j + 1))) ops.push_back({'-', pre + i++, pre + j});
            else ops.push_back({'+', pre + i, pre + j++});
        }
    } else {
        for (size_t i = 0; i < n; ++i) ops.push_back({'-', pre + i, pre});
        for (size_t j = 0; j < m; ++j) ops.push_back({'+', pre + n, pre + j});
    }
    for (size_t k = 0; k < suf; ++k) ops.push_back({' ', pre + n + k, pre + m + k});
    return ops;
}

std::string signed_text(long d) { return d == 0 ? "0" : fmt::format("{:+}", d); }

std::string count_table(const SassVersion& a, const SassVersion& b) {
    const ClassCounts ca = count_classes(*a.function), cb = count_classes(*b.function);
    std::string out = fmt::format("  {:<16} {:>7} {:>7} {:>7}\n", "class", "A", "B", "B-A");
    auto row = [&](const std::string& name, long x, long y) {
        out += fmt::format("  {:<16} {:>7} {:>7} {:>7}\n", name, x, y, signed_text(y - x));
    };
    for (const auto& n : opcode_class_names()) {
        row(n, ca.by_class.at(n), cb.by_class.at(n));
        if (n != "other") continue;
        std::map<std::string, int> both = ca.other;  // the "other" opcodes whose counts differ
        for (const auto& [op, k] : cb.other) both[op] += 0;
        for (const auto& [op, k] : both) {
            const int x = ca.other.count(op) ? ca.other.at(op) : 0, y = cb.other.count(op) ? cb.other.at(op) : 0;
            if (x != y) row("  " + op, x, y);
        }
    }
    row("total", ca.total, cb.total);
    const EntryResources *ra = a.resources, *rb = b.resources;
    if (ra && rb) {
        row("registers", ra->registers, rb->registers);
        row("barriers", ra->barriers, rb->barriers);
        row("stack (B)", ra->stack, rb->stack);
        row("spill stores (B)", ra->spill_stores, rb->spill_stores);
        row("spill loads (B)", ra->spill_loads, rb->spill_loads);
        row("shared (B)", ra->shared, rb->shared);
        row("local (B)", ra->local, rb->local);
    }
    return out;
}

}  // namespace

std::string format_diff(const SassVersion& a, const SassVersion& b, int context) {
    std::vector<const SassInstruction*> ia, ib;
    std::vector<std::string> ka, kb;
    for (const auto& ins : a.function->code)
        if (!ins.padding) ia.push_back(&ins), ka.push_back(diff_key(ins));
    for (const auto& ins : b.function->code)
        if (!ins.padding) ib.push_back(&ins), kb.push_back(diff_key(ins));

    std::string out = fmt::format("{} {}: A = {}, B = {}\n", a.function->entry ? ".entry" : ".func", a.function->name,
                                  a.source->path, b.source->path);
    out += count_table(a, b);
    bool aligned = true;
    const std::vector<Op> ops = diff_ops(ka, kb, aligned);
    size_t changes = 0;
    for (const auto& op : ops) changes += op.kind != ' ';
    if (changes == 0) return out + fmt::format("  the opcodes are the same, in the same order ({} instructions)\n", ka.size());
    out += fmt::format("  opcodes, A -> B ({} only in A, {} only in B; '-' A only, '+' B only, each with its PTX line{})\n",
                       std::count_if(ops.begin(), ops.end(), [](const Op& o) { return o.kind == '-'; }),
                       std::count_if(ops.begin(), ops.end(), [](const Op& o) { return o.kind == '+'; }),
                       aligned ? "" : "; too long to align, the differing middle is shown whole");
    // "A:35", and for a changed instruction the PTX line itself: "A:35 fma.rn.f32 v, a, v, 1.0;".
    auto line_of = [](const SassInstruction* ins, const SassSource* src, const char* side, bool text) {
        const SourceRef r = resolve_line(*ins, *src);
        if (r.line == 0) return fmt::format("{}:?", side);
        if (!r.in_source) return fmt::format("{}:{}:{}", side, r.file, r.line);
        std::string s = fmt::format("{}:{}", side, r.line);
        if (text && static_cast<size_t>(r.line) <= src->lines.size()) {
            std::string_view t = src->lines[static_cast<size_t>(r.line - 1)];
            while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
            while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
            if (!t.empty()) s += fmt::format("  {}", t);
        }
        return s;
    };
    const size_t ctx = static_cast<size_t>(std::max(context, 0));
    for (size_t k = 0; k < ops.size();) {
        if (ops[k].kind == ' ') {
            ++k;
            continue;
        }
        // A hunk: from ctx before this change to ctx after the last change closer than 2 * ctx + 1.
        size_t begin = k > ctx ? k - ctx : 0, end = k;
        for (size_t j = k; j < ops.size() && j <= end + 2 * ctx; ++j)
            if (ops[j].kind != ' ') end = j;
        end = std::min(ops.size(), end + ctx + 1);
        const Op& first = ops[begin];
        out += fmt::format("  @@ A /*{:04x}*/  B /*{:04x}*/ @@\n", first.a < ia.size() ? ia[first.a]->address : 0u,
                           first.b < ib.size() ? ib[first.b]->address : 0u);
        for (size_t j = begin; j < end; ++j) {
            const Op& o = ops[j];
            const std::string key = o.kind == '+' ? kb[o.b] : ka[o.a];
            std::string where;
            if (o.kind != '+') where += line_of(ia[o.a], a.source, "A", o.kind != ' ');
            if (o.kind != '-') where += (where.empty() ? "" : "  ") + line_of(ib[o.b], b.source, "B", o.kind != ' ');
            out += fmt::format("  {} {:<32} {}\n", o.kind, key, where);
        }
        k = end;
    }
    return out;
}

}  // namespace ptxlab
