#include "tensormap.hpp"

namespace ptxlab {

CUtensorMap encode_tensor_map_2d(CUtensorMapDataType type, CUdeviceptr base, uint64_t rows, uint64_t cols,
                                 uint64_t row_bytes, uint32_t box_rows, uint32_t box_cols, bool swizzle128) {
    const cuuint64_t dims[2] = {cols, rows}, strides[1] = {row_bytes};
    const cuuint32_t box[2] = {box_cols, box_rows}, elem_strides[2] = {1, 1};
    CUtensorMap map{};
    CU(cuTensorMapEncodeTiled, &map, type, 2, reinterpret_cast<void*>(base), dims, strides, box, elem_strides,
       CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return map;
}

}  // namespace ptxlab
