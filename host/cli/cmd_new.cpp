// ptxlab new NAME: a starting pair, NAME.ptx (a contract header and a commented elementwise
// kernel) and reference/NAME.cu (its CUDA C twin), that passes `check` and `verify` as it stands.
#include "commands.hpp"
#include "error.hpp"
#include "files.hpp"

#include <filesystem>
#include <fstream>
#include <regex>

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
    return std::regex_replace(std::string(tmpl), std::regex("@NAME@"), name);
}

void write_new(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) PTXLAB_THROW(Error, "cannot write {}", path);
}

int run_new(const NewOptions& o) {
    // The length before the regex, which recurses once per character (a 100 KB name crashed it).
    if (o.name.size() > 64)
        PTXLAB_THROW(InputError, "a kernel name of {} characters is too long: at most 64", o.name.size());
    static const std::regex ident(R"([A-Za-z_][A-Za-z0-9_]*)");
    if (!std::regex_match(o.name, ident))
        PTXLAB_THROW(InputError, "'{}' is not a kernel name: letters, digits and _, not starting with a digit", o.name);
    require_directory(o.dir, "--dir");
    const fs::path ptx = fs::path(o.dir) / (o.name + ".ptx"), ref_dir = fs::path(o.dir) / "reference",
                   cu = ref_dir / (o.name + ".cu");
    for (const auto& p : {ptx, cu}) {
        std::error_code ec;
        if (fs::exists(fs::symlink_status(p, ec)))
            PTXLAB_THROW(InputError, "{} already exists; ptxlab new does not overwrite (pick another NAME or --dir)",
                         p.string());
    }
    std::error_code ec;
    fs::create_directories(ref_dir, ec);
    if (ec) PTXLAB_THROW(InputError, "cannot create {}: {}", ref_dir.string(), ec.message());
    write_new(ptx.string(), fill(kPtxTemplate, o.name));
    write_new(cu.string(), fill(kCuTemplate, o.name));
    fmt::print("wrote {} and {}\nnext: ptxlab check {} && ptxlab verify {}\n", ptx.string(), cu.string(), ptx.string(),
               ptx.string());
    return kExitOk;
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
    sub->add_option("--dir", o->dir, "where to write (default: the current directory)")->capture_default_str();
    sub->callback([o, &chosen] { chosen = [o] { return run_new(*o); }; });
}

}  // namespace ptxlab::cli
