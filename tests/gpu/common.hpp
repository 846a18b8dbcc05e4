// Shared by the GPU tests: one context for the whole run, the kernel directories.
#pragma once

#include "cuda.hpp"
#include "kernels.hpp"

namespace ptxlab::test {
const Context& gpu();  // created by main() before any test runs
}
