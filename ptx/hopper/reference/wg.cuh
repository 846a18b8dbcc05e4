// Shared by the twins of the wgmma kernels (densewg.cu, densewgk.cu), which include it (NVRTC gets
// each twin's directory as an include path): the tensor map's bytes, tf32 truncation, one
// mma.sync k8 step -- the step whose bits equal one wgmma k8 step's (densewg.ptx's header) --
// and a 16 x 8 tile's epilogue.
#pragma once

// A CUtensorMap passed by value: 128 bytes, 64-byte aligned (NVRTC has no cuda.h); the twins
// take it for the parameter list and do not read it.
struct alignas(64) TensorMap { unsigned long long bits[16]; };

// The tensor core's reading of a raw FP32 .tf32 element: sign, exponent, upper 10 mantissa bits.
__device__ __forceinline__ unsigned tf32_bits(float x) { return __float_as_uint(x) & 0xffffe000u; }

// c = A B + c for one 16 x 8 x 8 tile: fragments a0..a3 (rows g, g + 8; k q, q + 4), b0, b1 (k q, q + 4).
__device__ __forceinline__ void mma_tf32(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The epilogue of a lane's 16 x 8 tile: c0, c1 at row r0, columns n, n + 1 (n = the tile's first
// column + 2q); c2, c3 at row r0 + 8. v = add.rn(c, bias[col]) with flags bit 1, max(v, +0) with
// bit 0, +0 where !(Y[row][col] > 0) with bit 2 (dense_wg_k's mask); nothing outside [M][N].
__device__ __forceinline__ void store_tile(float* C, const float* bias, const float c[4], unsigned r0, unsigned n,
                                           unsigned M, unsigned N, unsigned flags, const float* Y = nullptr)
{
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned row = e < 2 ? r0 : r0 + 8, col = n + e % 2;
        if (row >= M || col >= N) continue;
        float v = (flags & 2u) ? __fadd_rn(c[e], bias[col]) : c[e];
        if (flags & 1u) v = fmaxf(v, 0.0f);
        if ((flags & 4u) && !(Y[(size_t)row * N + col] > 0.0f)) v = 0.0f;
        C[(size_t)row * N + col] = v;
    }
}
