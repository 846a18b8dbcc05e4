// libFuzzer target: the contract header (contract.hpp) and its expression evaluator.
//
// The input is read as a .ptx file with a header (parsed, checked against its entries, and every
// expression evaluated at every default shape) and, line by line, as expressions. Each must
// return or throw ptxlab::InputError; a crash, a sanitizer report or an invariant below failing
// is a bug.
//
//   tests/fuzz/run.sh contract 60      (seeds: tests/fuzz/corpus/contract and ptx/lessons)
#include "contract.hpp"
#include "error.hpp"

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>

static void require(bool ok) {
    if (!ok) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const int lines = 1 + int(std::count(text.begin(), text.end(), '\n'));
    ptxlab::ContractParse cp = ptxlab::parse_contract(ptxlab::SourceFile{"fuzz.ptx", text});
    for (const auto& d : cp.problems) require(d.line >= 1 && d.line <= lines && d.severity == "error");
    require(!cp.contract || cp.problems.empty());
    if (cp.contract) {
        const ptxlab::Contract& c = *cp.contract;
        require(!c.entry.empty() && !c.shapes.empty());
        try {
            for (const auto& d : ptxlab::check_contract(c, ptxlab::parse_ptx(text))) require(d.line >= 1 && d.line <= lines);
        } catch (const ptxlab::InputError&) {
        }
        for (const auto& s : c.shapes) {
            require(s.size() == c.vars.size());
            try {
                (void)ptxlab::launch_shape(c, s);
            } catch (const ptxlab::InputError&) {
            }
            for (const auto& p : c.params) {
                try {
                    if (p.buffer()) require(ptxlab::buffer_length(c, p, s) >= 1);
                    else (void)ptxlab::eval_expr(p.value, s);
                } catch (const ptxlab::InputError&) {
                }
            }
        }
    }
    // Each line as an expression over N=7, B=64.
    const ptxlab::ShapeVars vars{{"N", 7}, {"B", 64}};
    size_t pos = 0;
    for (int k = 0; k < 64 && pos <= text.size(); ++k) {
        const size_t nl = text.find('\n', pos);
        const std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        try {
            const ptxlab::Rational q = ptxlab::eval_expr(line, vars);
            require(q.den >= 1);
        } catch (const ptxlab::InputError&) {
        }
        if (nl == std::string::npos) break;
        pos = nl + 1;
    }
    return 0;
}
