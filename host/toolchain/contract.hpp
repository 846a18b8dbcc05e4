// The contract header: what `verify FILE.ptx` and `bench FILE.ptx` need to run any kernel
// against its CUDA C twin, written in comments at the top of the .ptx file.
//
//   // @contract
//   //   entry    leaky_relu
//   //   vars     N
//   //   shape    N=1000
//   //   shape    N=1
//   //   param    y      out  f32[N]
//   //   param    x      in   f32[N]   -4 .. 4
//   //   param    n      u32 = N
//   //   param    alpha  f32 = 0.125
//   //   grid     ceil(N / 256)
//   //   block    256
//   //   twin     reference/01_predicates.cu
//   //   compare  bitwise
//   //   bytes    8 * N
//   //   flops    N
//   // @end
//
// One key a line, in any order:
//   entry NAME                the .entry the contract describes (the file may hold others)
//   vars A B ...              the shape variables (identifiers); every expression uses only these
//   shape A=1, B=64           a default shape: every variable given once, each 1 .. 2^31 (repeatable, >= 1 line)
//   param NAME in|inout TYPE[LEN] LO .. HI
//                             a buffer the kernel reads, filled with fresh uniform random values in
//                             [LO, HI) (integers: LO..HI inclusive); TYPE f32, u32 or s32
//   param NAME out TYPE[LEN]  a buffer the kernel writes: poisoned before the launch, compared after;
//                             a LEN written as a product (M * N) gives verify's messages coordinates: C[3][17]
//   param NAME TYPE = EXPR    a scalar: u32, s32 (an expression over the variables) or f32 (a number)
//   param NAME tensormap(BUF, ROWS, COLS, BOX_ROWS, BOX_COLS)
//                             a CUtensorMap made by the host (cuTensorMapEncodeTiled) and passed by value
//                             (`.param .align 64 .b8 NAME[128]`): buffer BUF (a 32-bit element type) seen
//                             as ROWS x COLS row-major, 2-D tiles (boxes) of BOX_ROWS x BOX_COLS, no swizzle,
//                             no interleave, out-of-bounds elements read as zero. ROWS * COLS must be BUF's
//                             length, 4 COLS and 4 BOX_COLS multiples of 16 bytes, each box size 1 .. 256.
//   param NAME tensormap(BUF, ROWS, COLS, BOX_ROWS, BOX_COLS, swizzle128)
//                             the same with the 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B), the layout
//                             wgmma's descriptors call swizzle mode 1: a box row is at most 128 bytes
//                             (4 BOX_COLS <= 128), and the kernel's shared destination must be 1024-byte aligned.
//                             The params are listed in the entry's order, with the entry's names.
//   grid X[, Y[, Z]]          the launch shape as expressions (block likewise; default 1 for Y, Z)
//   block X[, Y[, Z]]
//   shared EXPR               dynamic shared memory in bytes (default 0; above 48 KiB the launch opts in)
//   cluster X[, Y[, Z]]       optional: launch as thread-block clusters of X x Y x Z blocks (the launch
//                             attribute CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, sm_90): at most 8 blocks
//                             (the portable cluster size), each grid size a multiple of its cluster size.
//                             Not for an entry with .reqnctapercluster (its size is fixed in the PTX).
//   twin PATH                 the CUDA C twin, relative to the .ptx file's directory
//   compare bitwise | ulp N | rel X
//                             how outputs must agree; anything but bitwise needs a `why` line
//   why TEXT                  the reason for the comparison (continues on following `why` lines)
//   bytes EXPR, flops EXPR    optional: the least traffic and arithmetic, for bench's GB/s, GFLOP/s
// Expressions: integers, decimals (f32 scalars, bytes, flops), the variables, + - * /, parentheses,
// ceil(E), floor(E), min(A, B), max(A, B). Division is exact (rational, over 64-bit integers: a
// step past 2^63 is an error, never a wrapped value); a length, launch size or integer scalar
// must come out whole: write ceil(N / 256), not N / 256.
// Anything else in the block (an unknown key, a length over undeclared names, a parameter list
// that disagrees with the .entry) is an error at file:line.
//
// Values: `check`, and `verify`/`bench` of a file before they look for a GPU, evaluate every
// expression at every shape (check_contract_values) and report, at the line of its key, a value
// the launch could not take: a grid past 2^31 - 1 (x) or 65535 (y, z), a block past 1024
// threads (z past 64), a cluster past 8 blocks or not dividing the grid, dynamic shared memory past
// 227 KiB (kMaxContractShared; above 48 KiB verify and bench opt in, and the device's own limit is
// checked at launch), a buffer past 2^32 elements, a u32 or s32 scalar out of its
// range, a negative bytes or flops, anything not whole where it must be or past 2^63.
//
// Limits of the text: a contract line is at most kMaxContractLineChars characters, except `why`
// lines (any length: the header is read by plain scanning, never std::regex); a shape value is
// 1 .. 2^31.
#pragma once

#include "ptx_text.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ptxlab {

// A shape: a value for each variable.
using ShapeVars = std::map<std::string, int64_t>;

// The longest contract line ptxlab reads (a `why` line may be longer).
inline constexpr size_t kMaxContractLineChars = 4096;
// Dynamic shared memory: a launch gets up to kSharedWithoutOptIn (48 KiB) as it is; above that,
// verify and bench first raise the function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (the
// driver's opt-in), after checking the device's own limit (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_
// PER_BLOCK_OPTIN, less the kernel's static shared memory). kMaxContractShared is the most any GPU
// lets a block opt in to (227 KiB: sm_90, sm_100), checked without a GPU.
inline constexpr int64_t kSharedWithoutOptIn = 48 * 1024;
inline constexpr int64_t kMaxContractShared = 227 * 1024;
// The most elements a contract buffer may have (16 GiB of 32-bit elements).
inline constexpr int64_t kMaxContractElements = int64_t(1) << 32;

// Evaluates an expression over `vars` exactly (rational arithmetic). Throws InputError
// ("unknown name 'M'", "division by zero", "overflows 64-bit integers", "a number of more than
// 18 digits is too large", a syntax error with its column).
struct Rational {
    int64_t num = 0, den = 1;
    double value() const { return double(num) / double(den); }
};
Rational eval_expr(const std::string& text, const ShapeVars& vars);
// The same, but the result must be a whole number in [lo, hi]; `what` names it in messages,
// `limit` (optional) says where the range comes from: "grid.y = `70000` is 70000 at N=1, outside
// [1, 65535] (grid.y and grid.z take at most 65535)".
int64_t eval_whole(const std::string& text, const ShapeVars& vars, const std::string& what, int64_t lo, int64_t hi,
                   const std::string& limit = {});
// The identifiers an expression uses (function names excluded); throws on a syntax error.
std::vector<std::string> expr_names(const std::string& text);

enum class ElemType { F32, U32, S32 };
enum class ParamRole { In, Out, InOut, Scalar, TensorMap };
std::string to_string(ElemType t);   // "f32"
std::string to_string(ParamRole r);  // "in"

struct ContractParam {
    std::string name;
    int line = 0;
    ParamRole role = ParamRole::In;
    ElemType type = ElemType::F32;
    std::string length;     // buffers: the element count
    double lo = 0, hi = 0;  // in, inout: the random range
    std::string value;      // scalars: the expression
    // tensor maps: the buffer described, its rows and columns, the box's rows and columns (expressions)
    std::string tmap_of;
    std::array<std::string, 4> tmap{};
    bool tmap_swizzle128 = false;  // `swizzle128`: CU_TENSOR_MAP_SWIZZLE_128B, else no swizzle
    bool buffer() const { return role != ParamRole::Scalar && role != ParamRole::TensorMap; }
    // What the .entry must declare: ".u64" for buffers, ".b8[128]" for a tensor map, else ".u32" ...
    std::string ptx_type() const;
};

enum class CompareKind { Bitwise, Ulp, Rel };

struct Contract {
    std::string path;  // the .ptx file
    int line = 0;      // of `@contract`
    std::string entry;
    int entry_line = 0;
    std::vector<std::string> vars;
    std::vector<ShapeVars> shapes;
    std::vector<ContractParam> params;
    std::array<std::string, 3> grid{"1", "1", "1"}, block{"1", "1", "1"};
    std::array<std::string, 3> cluster{"1", "1", "1"};
    std::string shared = "0";
    int grid_line = 0, block_line = 0, shared_line = 0, cluster_line = 0;  // 0: not given
    std::string twin;  // as written
    int twin_line = 0;
    CompareKind compare = CompareKind::Bitwise;
    double tolerance = 0;  // ulp count or relative bound
    std::string why;
    std::string bytes, flops;  // empty when not given
    int bytes_line = 0, flops_line = 0;
    std::string twin_path() const;  // resolved against the .ptx file's directory
    std::string compare_text() const;  // "bitwise", "within 16 ulp", "relative 1e-06"
};

struct ContractParse {
    std::optional<Contract> contract;  // empty when the file has no `@contract` block (or it is broken)
    std::vector<Diagnostic> problems;  // errors at the line of the header they concern
};

// Reads the contract block of a .ptx file, if it has one.
ContractParse parse_contract(const SourceFile& src);

// Compares the contract with the file's entries: the entry exists, the same parameters in the
// same order with the same names, buffers declared .u64 and scalars with their types.
std::vector<Diagnostic> check_contract(const Contract& c, const PtxInfo& info);
// Compares the contract's parameter types with the twin's entry (from NVRTC's PTX).
std::vector<Diagnostic> check_contract_twin(const Contract& c, const PtxInfo& twin, const std::string& twin_path);

// "N=1000,M=3" (the --shape flag) -> a shape; every variable once, each >= 1. InputError otherwise.
ShapeVars parse_shape(const std::string& text, const Contract& c, const std::string& what);
std::string shape_text(const ShapeVars& s);  // "N=1000 M=3"

// Sizes for one shape (InputError with the param's name when an expression misbehaves or a
// value is past the limits above).
struct LaunchShape {
    std::array<unsigned, 3> grid{1, 1, 1}, block{1, 1, 1};
    std::array<unsigned, 3> cluster{0, 0, 0};  // 0, 0, 0: no `cluster` key (a plain launch)
    unsigned shared = 0;
};
// The most blocks a contract's `cluster` may have: 8, the portable cluster size (more needs
// cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED), which verify does not call).
inline constexpr int64_t kMaxContractCluster = 8;
LaunchShape launch_shape(const Contract& c, const ShapeVars& s);
size_t buffer_length(const Contract& c, const ContractParam& p, const ShapeVars& s);
// A buffer's extents at a shape when its length is written as a product (`f32[M * N]`, `4 * Q`):
// one per factor, in the order written, so the element at flat index i is [i / N][i % N] (row
// major). Empty for a length of one factor or any other form (`N + 1`): one index then.
std::vector<int64_t> buffer_extents(const ContractParam& p, const ShapeVars& s);
// "C[3][17]" (flat index 1553 with extents {5, 512}), "y[17]" with no extents.
std::string element_name(const std::string& name, const std::vector<int64_t>& extents, size_t index);
// A scalar parameter's 32 bits: a u32 or s32 in range, or an f32 (rounded to nearest).
uint32_t scalar_bits(const Contract& c, const ContractParam& p, const ShapeVars& s);
// A tensor map parameter at a shape: the buffer it describes (its index in c.params) and the sizes,
// checked against the limits above (InputError at a value the encoding would refuse).
struct TensorMapShape {
    size_t buffer = 0;
    uint64_t rows = 0, cols = 0;
    uint32_t box_rows = 0, box_cols = 0;
    bool swizzle128 = false;
};
TensorMapShape tensor_map_shape(const Contract& c, const ContractParam& p, const ShapeVars& s);
// `bytes` or `flops` at a shape (`what` names it): never negative.
double contract_amount(const std::string& text, const std::string& what, const ShapeVars& s);

// Every expression of the contract at every shape (the contract's own, or those given): the
// first value of each key that the launch could not take, as an error at the key's line (the
// @contract line for a key left at its default). Empty when every shape can be run.
std::vector<Diagnostic> check_contract_values(const Contract& c, const std::vector<ShapeVars>& shapes);
std::vector<Diagnostic> check_contract_values(const Contract& c);  // at c.shapes

// Throws InputError with every problem formatted (file:line, the source line) when there are any.
void throw_if_problems(const SourceFile& src, const std::vector<Diagnostic>& problems);

}  // namespace ptxlab
