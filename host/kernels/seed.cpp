// The entries of the notebook's kernels (ptx/forward.ptx, ptx/grad.ptx: one thread a sample,
// `--kernels ptx`) and of the batch gather every set runs (ptx/gather.ptx). Their launches
// are the trainer's own (train.cpp, mlp_program.cpp).
#include "kernels.hpp"

namespace ptxlab {

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // X W1 b1 W2 b2 A1 Y | B I H O | act
    {"forward2", "forward", {P, P, P, P, P, P, P, U, U, U, U, U}},
    // X W1 b1 W2 b2 W3 b3 A1 A2 Y | B I H1 H2 O | act
    {"forward3", "forward", {P, P, P, P, P, P, P, P, P, P, U, U, U, U, U, U}},
    // X T W1 b1 W2 b2 A1 Y gW1 gb1 gW2 gb2 | B I H O | loss act
    {"grad2", "grad", {P, P, P, P, P, P, P, P, P, P, P, P, U, U, U, U, U, U}},
    // X T W1 b1 W2 b2 W3 b3 A1 A2 Y gW1 gb1 gW2 gb2 gW3 gb3 | B I H1 H2 O | loss act
    {"grad3", "grad", {P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, U, U, U, U, U, U, U}},
    // dst src idx | rows cols
    {"gather", "gather", {P, P, P, U, U}},
};
}  // namespace

}  // namespace ptxlab
