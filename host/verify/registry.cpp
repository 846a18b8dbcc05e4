// The kernel registry (registry.hpp): the family tables in one list, lookup by entry, and what
// verify.hpp answers from the rows (shape names and text, checks, the default and quick sets).
#include "registry.hpp"

#include "recipe.hpp"

#include <algorithm>
#include <map>

namespace ptxlab {

using namespace verify_detail;

namespace {

struct Registered {
    const KernelFamily& (*table)();
    int order, quick_order;
};

// The tables registered so far (FamilyRegistration), in registration order.
std::vector<Registered>& registered() {
    static std::vector<Registered> v;
    return v;
}

// Every registered family ordered by `key`; two families with the same key are an internal error.
std::vector<const KernelFamily*> families_by(int Registered::*key, const char* what) {
    std::vector<Registered> r = registered();
    std::sort(r.begin(), r.end(), [&](const Registered& a, const Registered& b) { return a.*key < b.*key; });
    std::vector<const KernelFamily*> out;
    for (size_t i = 0; i < r.size(); ++i) {
        out.push_back(&r[i].table());
        if (i > 0 && r[i].*key == r[i - 1].*key)
            PTXLAB_THROW(Error, "internal error: the kernel families '{}' and '{}' both take {} {}", out[i - 1]->name,
                         out[i]->name, what, r[i].*key);
    }
    return out;
}

}  // namespace

FamilyRegistration::FamilyRegistration(const KernelFamily& (*table)(), int order, int quick_order) {
    registered().push_back({table, order, quick_order});
}

const std::vector<const KernelFamily*>& kernel_families() {
    static const std::vector<const KernelFamily*> families = families_by(&Registered::order, "order");
    return families;
}

const KernelFamily& kernel_family(std::string_view name) {
    for (const KernelFamily* f : kernel_families())
        if (f->name == name) return *f;
    PTXLAB_THROW(InputError, "no kernel family '{}'", name);
}

const KernelRow* find_kernel_row(std::string_view entry) {
    static const std::map<std::string, const KernelRow*, std::less<>> rows = [] {
        std::map<std::string, const KernelRow*, std::less<>> m;
        for (const KernelFamily* f : kernel_families())
            for (const KernelRow& r : f->rows) m.emplace(r.entry, &r);
        return m;
    }();
    const auto it = rows.find(entry);
    return it == rows.end() ? nullptr : it->second;
}

const KernelRow& kernel_row(std::string_view entry) {
    if (const KernelRow* r = find_kernel_row(entry)) return *r;
    PTXLAB_THROW(InputError, "no verify harness for kernel '{}'", entry);
}

namespace {

size_t field_count(const std::string& names) { return size_t(std::count(names.begin(), names.end(), ',')) + 1; }

// The shape's fields one by one.
std::vector<std::string> fields_of(const std::string& names) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        const size_t comma = names.find(',', start);
        out.push_back(names.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

// The position of a named field ("loss", "act") in the kernel's shape, or -1.
int shape_field(const std::string& entry, const std::string& field) {
    const std::string names = "," + shape_names(entry) + ",";
    const size_t at = names.find("," + field + ",");
    if (at == std::string::npos) return -1;
    return static_cast<int>(std::count(names.begin(), names.begin() + long(at), ','));
}

}  // namespace

// The kernels with a loss-code parameter take it after the sizes: 0 (kLossDiff, d = y - t) or
// 1 (kLossSoftmax, d = softmax(y) - t); those with an activation code take it as the last
// number (recipe.hpp act_code: 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu).
std::string shape_names(const std::string& entry, size_t count) {
    const KernelRow& r = kernel_row(entry);
    if (!r.shape_alt.empty() && count == field_count(r.shape_alt)) return r.shape_alt;
    return r.shape;
}

unsigned optim_variants(const std::string& entry) {
    const KernelRow* r = find_kernel_row(entry);
    return r ? unsigned(r->variants.size()) : 0;
}

std::string optim_variant_text(const std::string& entry, unsigned variant) {
    const KernelRow* r = find_kernel_row(entry);
    if (!r || variant >= r->variants.size()) return "?";
    return r->variants[variant];
}

std::string optim_variant_list(const std::string& entry) {
    std::string out;
    for (unsigned v = 0; v < optim_variants(entry); ++v)
        out += fmt::format("{}{} {}", v ? ", " : "", v, optim_variant_text(entry, v));
    return out;
}

void validate_case(const VerifyCase& c) { kernel_row(c.entry).validate(c); }

std::string shape_text(const VerifyCase& c) {
    const KernelRow& row = kernel_row(c.entry);
    const std::vector<std::string> names = fields_of(shape_names(c.entry, c.shape.size()));
    std::string out;
    for (size_t k = 0; k < c.shape.size() && k < names.size(); ++k) {
        const std::string& n = names[k];
        out += fmt::format("{}{}={}", out.empty() ? "" : " ", n, c.shape[k]);
        if (n == "variant") out += fmt::format(" ({})", optim_variant_text(c.entry, c.shape[k]));
        if (n == "optim") out += fmt::format(" ({})", to_string(static_cast<OptimKind>(c.shape[k])));
        if (n == "act" && row.act_named && c.shape[k] <= kActGelu)
            out += fmt::format(" ({})", to_string(activation_of_code(c.shape[k])));
    }
    return out;
}

std::vector<VerifyCase> default_cases() {
    std::vector<VerifyCase> v;
    for (const KernelFamily* f : kernel_families())
        for (auto& c : f->default_cases()) v.push_back(std::move(c));
    return v;
}

std::vector<VerifyCase> quick_cases() {
    // The quick set runs the families in an order of its own (the one it has always run in).
    static const std::vector<const KernelFamily*> order = families_by(&Registered::quick_order, "quick order");
    std::vector<VerifyCase> out;
    for (const KernelFamily* f : order)
        for (auto& c : f->quick_cases()) out.push_back(std::move(c));
    return out;
}

namespace verify_detail {

bool takes_loss_code(const std::string& entry) { return shape_field(entry, "loss") >= 0; }
bool takes_act_code(const std::string& entry) { return shape_field(entry, "act") >= 0; }

// One field of a named shape: a code within its range, or a size >= 1.
static void check_field(const VerifyCase& c, const std::string& name, unsigned x) {
    if (name == "loss") {  // a loss code, not a size
        if (x != kLossDiff && x != kLossSoftmax)
            PTXLAB_THROW(InputError, "kernel '{}': the loss code must be {} (y - t) or {} (softmax(y) - t), got {}",
                         c.entry, kLossDiff, kLossSoftmax, x);
    } else if (name == "optim") {
        if (x >= optim_code_count())
            PTXLAB_THROW(InputError, "kernel '{}': the optimizer code must be one of {}, got {}", c.entry,
                         optim_code_list(), x);
    } else if (name == "act") {
        if (x > kActGelu)
            PTXLAB_THROW(InputError,
                         "kernel '{}': the activation code must be 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid or 4 "
                         "gelu, got {}",
                         c.entry, x);
    } else if (name == "variant") {
        const unsigned variants = optim_variants(c.entry);
        if (x >= variants)
            PTXLAB_THROW(InputError, "kernel '{}' has variants 0..{} ({}), got {}", c.entry, variants - 1,
                         optim_variant_list(c.entry), x);
    } else if (x == 0) {
        PTXLAB_THROW(InputError, "kernel '{}': shape sizes must be >= 1", c.entry);
    }
}

void validate_named_shape(const VerifyCase& c) {
    const std::string names = shape_names(c.entry);
    const size_t want = field_count(names);
    if (c.shape.size() != want)
        PTXLAB_THROW(InputError, "kernel '{}' takes a shape {} ({} numbers), got {}", c.entry, names, want,
                     c.shape.size());
    const std::vector<std::string> fields = fields_of(names);
    for (size_t k = 0; k < c.shape.size(); ++k) check_field(c, fields[k], c.shape[k]);
}

void add_with_acts(std::vector<VerifyCase>& v, unsigned n_shape, const std::string& entry, std::vector<unsigned> s,
                   unsigned last_act) {
    const bool loss = takes_loss_code(entry);
    for (unsigned act = kActRelu; act <= last_act; ++act) {
        std::vector<unsigned> z = s;
        if (!loss) {
            z.push_back(act);
            v.push_back({entry, z});
            continue;
        }
        for (unsigned code : {kLossDiff, kLossSoftmax}) {
            if (act != kActRelu && code != (act + n_shape) % 2) continue;
            std::vector<unsigned> w = z;
            w.push_back(code);
            w.push_back(act);
            v.push_back({entry, w});
        }
    }
}

void add_quick(std::vector<VerifyCase>& out, VerifyCase c) {
    const std::string names = shape_names(c.entry, c.shape.size());
    const bool complete = c.shape.size() == field_count(names);
    if (!takes_act_code(c.entry) || complete) {  // fused_step's quick shapes name every code
        out.push_back(std::move(c));
        return;
    }
    const bool loss = takes_loss_code(c.entry);
    for (unsigned code : {kLossDiff, kLossSoftmax}) {
        if (!loss && code != kLossDiff) continue;
        for (unsigned act : {kActRelu, kActTanh, kActGelu}) {
            if (loss && act == kActTanh && code != kLossDiff) continue;
            if (loss && act == kActGelu && code != kLossSoftmax) continue;
            out.push_back(c);
            if (loss) out.back().shape.push_back(code);
            out.back().shape.push_back(act);
        }
    }
}

}  // namespace verify_detail

}  // namespace ptxlab
