// libFuzzer target: the contract header (contract.hpp) and its expression evaluator.
//
// The input is read as a .ptx file with a header (parsed, checked against its entries, every
// expression evaluated at every default shape by check_contract_values and by the functions a
// run uses) and, line by line, as expressions. Each must return or throw ptxlab::InputError; a
// crash, a sanitizer report or an invariant below failing is a bug. One invariant ties the two
// together: when check_contract_values finds nothing, every shape can be run (launch_shape,
// buffer_length, scalar_bits, bytes and flops succeed). Inputs up to 256 KiB: no std::regex reads
// the header, so a long `why` line is an input like any other.
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
        const auto values = ptxlab::check_contract_values(c);
        for (const auto& d : values) require(d.line >= 1 && d.line <= lines && d.severity == "error");
        for (const auto& s : c.shapes) {
            require(s.size() == c.vars.size());
            bool ran = true;  // every value of this shape came out
            try {
                const ptxlab::LaunchShape l = ptxlab::launch_shape(c, s);
                require(uint64_t(l.block[0]) * l.block[1] * l.block[2] <= 1024 && l.shared <= ptxlab::kMaxContractShared);
            } catch (const ptxlab::InputError&) {
                ran = false;
            }
            for (const auto& p : c.params) {
                try {
                    if (p.buffer()) {
                        const size_t n = ptxlab::buffer_length(c, p, s);
                        require(n >= 1 && n <= size_t(ptxlab::kMaxContractElements));
                        // Coordinates, when the length is a product: its factors multiply to the length,
                        // and the last element's name is within them.
                        const auto extents = ptxlab::buffer_extents(p, s);
                        uint64_t product = 1;
                        for (const auto e : extents) product *= uint64_t(e);
                        require(extents.empty() || product == n);
                        require(!ptxlab::element_name(p.name, extents, n - 1).empty());
                    } else if (p.role == ptxlab::ParamRole::TensorMap) {
                        const ptxlab::TensorMapShape t = ptxlab::tensor_map_shape(c, p, s);
                        require(t.box_rows >= 1 && t.box_rows <= 256 && t.box_cols % 4 == 0 && t.cols % 4 == 0);
                    } else {
                        (void)ptxlab::scalar_bits(c, p, s);
                    }
                } catch (const ptxlab::InputError&) {
                    ran = false;
                }
            }
            for (const auto* what : {&c.bytes, &c.flops}) {
                if (what->empty()) continue;
                try {
                    require(ptxlab::contract_amount(*what, "bytes", s) >= 0);
                } catch (const ptxlab::InputError&) {
                    ran = false;
                }
            }
            require(ran || !values.empty());
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
