// The kernel registry (host/verify/registry.hpp): one row for every kernel the host launches,
// in the module of its ptx/FILE.ptx family, each with a check, a harness and cases; every
// entry a kernel set trains or bench times has its row (and bench's its shape and work).
#include "bench.hpp"
#include "error.hpp"
#include "recipe.hpp"
#include "registry.hpp"
#include "rng.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace ptxlab;

namespace {

// The family (module) that holds each entry's row.
std::map<std::string, const KernelFamily*> family_of_rows() {
    std::map<std::string, const KernelFamily*> m;
    for (const KernelFamily* f : kernel_families())
        for (const KernelRow& r : f->rows) {
            CAPTURE(r.entry);
            CHECK_MESSAGE(m.emplace(r.entry, f).second, "two rows for one entry");
        }
    return m;
}

const std::vector<KernelChoice>& all_choices() {
    static const std::vector<KernelChoice> choices = [] {
        std::vector<KernelChoice> v;
        for (const char* name : {"ptx", "reference", "fast", "fast-reference", "fused", "fused-reference", "tc",
                                 "tc-reference", "tc-bf16", "tc-bf16-reference"})
            v.push_back(parse_kernel_choice(name));
        return v;
    }();
    return choices;
}

}  // namespace

TEST_CASE("registry: one row for each kernel the host launches, in the module of its ptx/FILE.ptx family") {
    const auto rows = family_of_rows();
    std::set<std::string> spec_files, family_files, families;
    for (const KernelSpec& s : kernel_specs()) {
        CAPTURE(s.entry);
        spec_files.insert(s.file);
        REQUIRE(rows.count(s.entry) == 1);
        const auto& files = rows.at(s.entry)->files;
        CHECK(std::find(files.begin(), files.end(), s.file) != files.end());
        CHECK(find_kernel_row(s.entry) == &kernel_row(s.entry));
        CHECK(kernel_row(s.entry).entry == s.entry);
    }
    CHECK(rows.size() == kernel_specs().size());  // no row for a kernel the host does not know
    for (const KernelFamily* f : kernel_families()) {
        CHECK(families.insert(f->name).second);  // one module a name
        for (const auto& file : f->files) CHECK_MESSAGE(family_files.insert(file).second, file);
    }
    CHECK(family_files == spec_files);  // each ptx family in exactly one module
    CHECK(find_kernel_row("nope") == nullptr);
    CHECK_THROWS_WITH_AS(kernel_row("nope"), doctest::Contains("no verify harness for kernel 'nope'"), InputError);
    CHECK_THROWS_WITH_AS(shape_names("forward4"), doctest::Contains("no verify harness for kernel 'forward4'"),
                         InputError);
}

TEST_CASE("registry: every kernel file's module registered itself: its entries and its verify table") {
    // The modules register from static objects that nothing names (KernelSpecs, FamilyRegistration):
    // a module the link left out would take its file's entries and table with it, unseen by the
    // tests above. Every ptx/FILE.ptx of the tree has its entries and its family here.
    const KernelDirs dirs = KernelDirs::from_ptx_dir(std::string(PTXLAB_SOURCE_DIR) + "/ptx");
    const std::vector<KernelPair> pairs = find_kernel_pairs(dirs);
    REQUIRE(pairs.size() >= 20);
    std::set<std::string> spec_files, family_files;
    for (const KernelSpec& s : kernel_specs()) spec_files.insert(s.file);
    for (const KernelFamily* f : kernel_families()) family_files.insert(f->files.begin(), f->files.end());
    for (const KernelPair& p : pairs) {
        CAPTURE(p.stem);
        CHECK(spec_files.count(p.stem) == 1);
        CHECK(family_files.count(p.stem) == 1);
    }
    for (const char* sub : {"hopper/densewgk", "hopper/transpose"}) CHECK(spec_files.count(sub) == 1);
    CHECK(&kernel_family("bn") == kernel_families().back());
    CHECK(kernel_family("mlp").files == std::vector<std::string>{"forward", "grad"});
    CHECK_THROWS_WITH_AS(kernel_family("nope"), doctest::Contains("no kernel family 'nope'"), InputError);
    // kernel_specs(): by file, then in each module's order.
    for (size_t i = 1; i < kernel_specs().size(); ++i) CHECK(kernel_specs()[i - 1].file <= kernel_specs()[i].file);
}

TEST_CASE("registry: the entries are ordered by file, each module's order kept, and an entry registered twice is refused") {
    using namespace kernel_params;
    const std::vector<KernelSpec> v = ordered_kernel_specs(
        {{"b_one", "bfile", {P}}, {"a_one", "afile", {U}}, {"b_two", "bfile", {F}}, {"a_two", "afile", {P, U}}});
    REQUIRE(v.size() == 4);
    CHECK(v[0].entry == "a_one");
    CHECK(v[1].entry == "a_two");
    CHECK(v[2].entry == "b_one");
    CHECK(v[3].entry == "b_two");
    CHECK(v[3].params == std::vector<ParamKind>{ParamKind::F32});
    // The same entry from two modules (a copy-pasted KernelSpecs row): refused, naming both files.
    CHECK_THROWS_WITH_AS(ordered_kernel_specs({{"conv_fwd", "conv", {P}}, {"x", "a", {P}}, {"conv_fwd", "tcconv", {P}}}),
                         doctest::Contains("kernel 'conv_fwd' is registered twice (conv.ptx and tcconv.ptx)"), Error);
    CHECK_NOTHROW(ordered_kernel_specs(std::vector<KernelSpec>(kernel_specs())));  // the real registrations
}

TEST_CASE("registry: every row has its fields, a check, a harness, and cases in both sets that it accepts") {
    std::map<std::string, size_t> n_default, n_quick;
    for (const KernelFamily* f : kernel_families()) {
        CAPTURE(f->name);
        std::set<std::string> own;
        for (const KernelRow& r : f->rows) {
            CAPTURE(r.entry);
            own.insert(r.entry);
            CHECK(!r.shape.empty());
            CHECK((r.validate != nullptr));
            CHECK((r.harness != nullptr));
            CHECK(r.variants.size() == optim_variants(r.entry));
        }
        REQUIRE((f->default_cases != nullptr));
        REQUIRE((f->quick_cases != nullptr));
        for (auto [set, counts] : {std::pair{f->default_cases(), &n_default}, std::pair{f->quick_cases(), &n_quick}})
            for (const VerifyCase& c : set) {
                CAPTURE(c.entry);
                CAPTURE(shape_text(c));
                CHECK(own.count(c.entry) == 1);  // a family lists cases of its own kernels only
                CHECK_NOTHROW(validate_case(c));
                ++(*counts)[c.entry];
            }
    }
    for (const KernelSpec& s : kernel_specs()) {
        CAPTURE(s.entry);
        CHECK(n_default[s.entry] > 0);
        CHECK(n_quick[s.entry] > 0);
    }
}

TEST_CASE("registry: the default set runs family by family, in the registry's order") {
    const std::vector<VerifyCase> all = default_cases();
    size_t at = 0;
    for (const KernelFamily* f : kernel_families()) {
        CAPTURE(f->name);
        for (const VerifyCase& c : f->default_cases()) {
            REQUIRE(at < all.size());
            CHECK(all[at].entry == c.entry);
            CHECK(all[at].shape == c.shape);
            ++at;
        }
    }
    CHECK(at == all.size());
    size_t quick = 0;
    for (const KernelFamily* f : kernel_families()) quick += f->quick_cases().size();
    CHECK(quick_cases().size() == quick);  // the quick set: every family's quick cases, once
}

TEST_CASE("registry: every entry a kernel set trains or bench times has its row, and bench's a shape and work") {
    for (const KernelChoice& k : all_choices()) {
        CAPTURE(to_string(k));
        TrainConfig cfg;
        cfg.kernels = k;
        for (const auto& e : with_precision(training_entries(cfg), k)) {
            CAPTURE(e);
            CHECK(find_kernel_row(e) != nullptr);
        }
        for (const auto& e : cnn_training_entries(cfg.optim, conv_kernels_of(k))) {
            CAPTURE(e);
            CHECK(find_kernel_row(e) != nullptr);
        }
        for (const auto& e : bench_entries(k)) {
            CAPTURE(e);
            REQUIRE(find_kernel_row(e) != nullptr);
            const KernelRow& r = kernel_row(e);
            REQUIRE((r.bench_shape != nullptr));
            REQUIRE((r.work != nullptr));
            for (unsigned B : {64u, 1024u}) {
                const auto shape = r.bench_shape(B);
                if (!shape) continue;  // tc_step at 1024
                const VerifyCase c{e, *shape};
                CAPTURE(shape_text(c));
                CHECK_NOTHROW(validate_case(c));
                const auto [bytes, flops] = r.work(c);
                CHECK(bytes > 0);
                CHECK(flops >= 0);
            }
        }
    }
    CHECK(kernel_row("tc_step").bench_shape(64).has_value());
    CHECK(!kernel_row("tc_step").bench_shape(65).has_value());
    for (const auto& e : bench_cnn_entries()) {
        CAPTURE(e);
        REQUIRE(find_kernel_row(e) != nullptr);
        CHECK((kernel_row(e).work != nullptr));
    }
}

TEST_CASE("registry: a row's harness makes the tensors and the float64 reference of its outputs") {
    // One small case a family (a harness runs its reference on the CPU; nothing is launched).
    for (const KernelFamily* f : kernel_families()) {
        CAPTURE(f->name);
        std::vector<VerifyCase> q = f->quick_cases();
        REQUIRE(!q.empty());
        const VerifyCase& c = *std::min_element(q.begin(), q.end(), [](const VerifyCase& a, const VerifyCase& b) {
            size_t na = 1, nb = 1;
            for (unsigned x : a.shape) na *= std::max(x, 1u);
            for (unsigned x : b.shape) nb *= std::max(x, 1u);
            return na < nb;
        });
        CAPTURE(c.entry);
        Rng rng(1);
        const verify_detail::Harness h = kernel_row(c.entry).harness(c, rng);
        CHECK(h.launch);
        size_t outputs = 0;
        for (const auto& t : h.tensors)
            if (t.role != verify_detail::Role::In) {
                ++outputs;
                CAPTURE(t.name);
                REQUIRE(h.expected.count(t.name) == 1);
                CHECK(h.expected.at(t.name).v.size() == t.count());
            }
        CHECK(outputs > 0);
    }
}
