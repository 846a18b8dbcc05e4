// A TMA tensor map of a 2-D row-major array (cuTensorMapEncodeTiled through the dlopen'ed driver):
// shared by the contract runner (verify_file.cpp: a header's `tensormap(...)` parameters) and
// dense_wg_k's launcher (densewgk.cpp).
#pragma once

#include "cuda.hpp"

#include <cstdint>

namespace ptxlab {

// rows x cols elements of 4 bytes (type: FLOAT32, UINT32 or INT32) at `base`, `row_bytes` from
// one row to the next (a multiple of 16, base 16-byte aligned: the driver refuses others), boxes
// of box_rows x box_cols, the 128-byte swizzle or none, +0 fill for a box past the edges
// (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros). Throws CudaError where the driver refuses.
CUtensorMap encode_tensor_map_2d(CUtensorMapDataType type, CUdeviceptr base, uint64_t rows, uint64_t cols,
                                 uint64_t row_bytes, uint32_t box_rows, uint32_t box_cols, bool swizzle128);

}  // namespace ptxlab
