// ptxlab new NAME: a starting pair, NAME.ptx (a contract header and a commented elementwise
// kernel) and reference/NAME.cu (its CUDA C twin), that passes `check` and `verify` as it stands.
#include "commands.hpp"
#include "flags.hpp"
#include "compile.hpp"
#include "error.hpp"
#include "files.hpp"

#include <filesystem>
#include <algorithm>

namespace fs = std::filesystem;

namespace ptxlab::cli {

namespace {

struct NewOptions {
    std::string name;
    std::string dir = ".";
};

// @NAME@ is replaced by the kernel's name.
constexpr const char* kPtxTemplate = R"(// ============================================================================
// @NAME@.ptx -- y[i] = a * x[i] + b, one thread per element (a starting point).
//
// C signature (the twin is reference/@NAME@.cu):
//   void @NAME@(float* y, const float* x, unsigned n, float a, float b);
// Launch shape: 1-D, 256 threads a block, ceil(n / 256) blocks; thread i = element i.
// Rounding: one fma.rn.f32 per element, as the twin's __fmaf_rn: the two agree bit for bit.
//
// The contract below tells `ptxlab verify` and `ptxlab bench` how to run this kernel:
// each parameter's role, the launch shape and the shapes to test (see `ptxlab new --help`).
//
// @contract
//   entry    @NAME@
//   vars     N
//   shape    N=1000
//   shape    N=1
//   shape    N=100003
//   param    y  out  f32[N]
//   param    x  in   f32[N]   -1 .. 1
//   param    n  u32 = N
//   param    a  f32 = 2.5
//   param    b  f32 = -0.75
//   grid     ceil(N / 256)
//   block    256
//   twin     reference/@NAME@.cu
//   compare  bitwise
//   bytes    8 * N
//   flops    2 * N
// @end
//
// Register key (registers start with %, parameters do not):
//   %i          this thread's element; %n the element count
//   %px, %py    global addresses of x[i] and y[i]
//   %a, %b, %v  the scalars and the value
// ============================================================================

.version 8.0
.target sm_80
.address_size 64

.visible .entry @NAME@(
    .param .u64 y, .param .u64 x, .param .u32 n, .param .f32 a, .param .f32 b)
{
    .reg .u64   %py, %px, %off;
    .reg .u32   %i, %n, %blk, %bdim, %thr;
    .reg .f32   %a, %b, %v;
    .reg .pred  %past;

    // i = blockIdx.x * blockDim.x + threadIdx.x; threads past the end leave.
    mov.u32         %blk, %ctaid.x;
    mov.u32         %bdim, %ntid.x;
    mov.u32         %thr, %tid.x;
    mad.lo.u32      %i, %blk, %bdim, %thr;
    ld.param.u32    %n, [n];
    setp.ge.u32     %past, %i, %n;
    @%past bra      DONE;

    // Addresses of x[i] and y[i].
    ld.param.u64    %px, [x];
    ld.param.u64    %py, [y];
    cvta.to.global.u64  %px, %px;
    cvta.to.global.u64  %py, %py;
    mul.wide.u32    %off, %i, 4;
    add.u64         %px, %px, %off;
    add.u64         %py, %py, %off;

    // y[i] = a * x[i] + b, one rounding.
    ld.param.f32    %a, [a];
    ld.param.f32    %b, [b];
    ld.global.f32   %v, [%px];
    fma.rn.f32      %v, %a, %v, %b;
    st.global.f32   [%py], %v;
DONE:
    ret;
}
)";

constexpr const char* kCuTemplate = R"(// CUDA C twin of @NAME@.ptx, compiled at run time by NVRTC: the same entry name and
// parameter list, the same rounding (__fmaf_rn: one fma, never split or contracted).
extern "C" __global__ void @NAME@(float* y, const float* x, unsigned n, float a, float b)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = __fmaf_rn(a, x[i], b);
}
)";

std::string fill(const char* tmpl, const std::string& name) {
    std::string out(tmpl);
    for (size_t at = out.find("@NAME@"); at != std::string::npos; at = out.find("@NAME@", at + name.size()))
        out.replace(at, 6, name);
    return out;
}

// The name's own rules first (each with its reason), then the proof: the pair must assemble
// (nvJitLink) and compile (NVRTC) as written, so that a name ptxas or C++ reserves (`_`, `int`,
// `return`) is refused before anything is written, with the tool's own words.
void require_kernel_name(const std::string& name, const std::string& ptx, const std::string& cu) {
    constexpr size_t kMaxName = 64;
    if (name.empty()) PTXLAB_THROW(InputError, "the kernel name is empty");
    if (name.size() > kMaxName)
        PTXLAB_THROW(InputError, "the kernel name '{}...' is {} characters long; ptxlab new takes at most {}",
                     name.substr(0, 16), name.size(), kMaxName);
    const auto bad = std::find_if_not(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (bad != name.end())
        PTXLAB_THROW(InputError, "'{}' is not a kernel name: character {} is '{}'; use letters, digits and _", name,
                     bad - name.begin() + 1, *bad);
    if (name[0] >= '0' && name[0] <= '9')
        PTXLAB_THROW(InputError, "'{}' is not a kernel name: it starts with a digit", name);
    const AssemblyResult as = assemble_offline(SourceFile{name + ".ptx", ptx}, "sm_90");
    if (!as.ok) {
        std::string why = as.diagnostics.empty() ? as.error_log : as.diagnostics.front().message;
        PTXLAB_THROW(InputError, "'{}' cannot be a kernel name: the PTX with it does not assemble ({})", name, why);
    }
    try {
        (void)nvrtc_compile(SourceFile{name + ".cu", cu}, "compute_90");
    } catch (const InputError& e) {
        // NVRTC's first error line says why ("expected an identifier").
        const std::string log = e.what();
        std::string why = log.substr(0, log.find('\n'));
        for (size_t at = 0; at < log.size();) {
            const size_t nl = std::min(log.find('\n', at), log.size());
            const std::string line = log.substr(at, nl - at);
            if (const size_t err = line.find("error:"); err != std::string::npos) {
                why = line.substr(err);
                break;
            }
            at = nl + 1;
        }
        PTXLAB_THROW(InputError, "'{}' cannot be a kernel name: the CUDA C twin with it does not compile ({}; is it "
                                 "a C++ keyword?)", name, why);
    }
}

void write_pair(const NewOptions& o, const std::string& ptx_text, const std::string& cu_text);

int run_new(const NewOptions& o) {
    const std::string ptx_text = fill(kPtxTemplate, o.name), cu_text = fill(kCuTemplate, o.name);
    require_kernel_name(o.name, ptx_text, cu_text);
    // --dir is made if it is missing (its parents too, as mkdir -p); what was made is removed
    // again should the files not be written: a failed `new` leaves nothing behind.
    std::error_code ec;
    fs::path made;  // the outermost directory this run created, or empty
    if (!fs::exists(fs::symlink_status(o.dir, ec))) {
        for (fs::path p = fs::path(o.dir).lexically_normal(); !p.empty() && !fs::exists(fs::symlink_status(p, ec));
             p = p.parent_path()) {
            made = p;
            if (p == p.parent_path()) break;
        }
        fs::create_directories(o.dir, ec);
        if (ec) {
            const std::string why = ec.message();
            if (!made.empty()) fs::remove_all(made, ec);
            PTXLAB_THROW(InputError, "--dir '{}' cannot be created: {}", o.dir, why);
        }
    }
    try {
        write_pair(o, ptx_text, cu_text);
    } catch (...) {
        if (!made.empty()) fs::remove_all(made, ec);
        throw;
    }
    return kExitOk;
}

// NAME.ptx and reference/NAME.cu in --dir (an existing directory), both or neither.
void write_pair(const NewOptions& o, const std::string& ptx_text, const std::string& cu_text) {
    std::error_code ec;
    require_directory(o.dir, "--dir");
    const fs::path ptx = fs::path(o.dir) / (o.name + ".ptx"), ref_dir = fs::path(o.dir) / "reference",
                   cu = ref_dir / (o.name + ".cu");
    for (const auto& p : {ptx, cu}) {
        if (fs::exists(fs::symlink_status(p, ec)))
            PTXLAB_THROW(InputError, "{} already exists; ptxlab new does not overwrite (pick another NAME or --dir)",
                         p.string());
    }
    const bool had_ref_dir = fs::exists(fs::symlink_status(ref_dir, ec));
    fs::create_directories(ref_dir, ec);
    if (ec) PTXLAB_THROW(InputError, "cannot create {}: {}", ref_dir.string(), ec.message());
    try {
        write_file_atomically(ptx.string(), ptx_text, "ptxlab new");
        write_file_atomically(cu.string(), cu_text, "ptxlab new");
    } catch (...) {
        fs::remove(ptx, ec);  // both files or neither
        if (!had_ref_dir) fs::remove(ref_dir, ec);
        throw;
    }
    fmt::print("wrote {} and {}\nnext: ptxlab check {} && ptxlab verify {}\n", ptx.string(), cu.string(), ptx.string(),
               ptx.string());
}

}  // namespace

void setup_new(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<NewOptions>();
    auto* sub = app.add_subcommand(
        "new",
        "Write a starting pair for your own kernel: NAME.ptx (a contract header that `verify FILE.ptx` and `bench "
        "FILE.ptx` read, and a commented elementwise kernel) and reference/NAME.cu (its CUDA C twin). Refuses to "
        "overwrite. The pair passes `ptxlab check` and `ptxlab verify` as it stands.");
    sub->add_option("name", o->name, "the kernel's name (its .entry and file names)")->required();
    sub->add_option("--dir", o->dir, "where to write (default: the current directory); made if missing, with its parents (as mkdir -p), "
                    "and removed again if the files cannot be written; refused when it is a file or cannot be made")->capture_default_str()->check(kNonEmptyPath);
    sub->callback([o, &chosen] { chosen = [o] { return run_new(*o); }; });
}

}  // namespace ptxlab::cli
