// tools/dev/tf32_probe.cu: what does mma.sync.m16n8k8 .tf32 do with FP32 bits that are not
// a tf32 (the 13 low mantissa bits not zero)? (a dev probe for fc3_step's operands, not built
// by CMake or CI)
//
// Each warp takes one 16 x 8 x 8 tile of random floats (magnitudes 2^-20 .. 2^20, both signs)
// and runs the same mma three times, from +0: (raw) the FP32 bits as they are, (trunc) the bits
// & 0xffffe000, (rna) cvt.rna.tf32.f32. It counts, over every accumulator of every tile, where
// raw differs from trunc and where it differs from rna. "raw == trunc everywhere" says the
// tensor core ignores the 13 low bits (truncation toward zero), as dense_wg_k's header states
// for wgmma: then an operand needs no cvt before the mma when its float64 bound allows 2^-10.
//
//   nvcc -O2 -arch=sm_90 -std=c++17 tools/dev/tf32_probe.cu -o /tmp/tp && /tmp/tp [TILES]

#include "check.cuh"  // CK

__device__ unsigned hash(unsigned x) {  // a 32-bit mix (splitmix-like), one value an index
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}
// A random float: sign, exponent 2^-20 .. 2^20, all 23 mantissa bits random.
__device__ float rnd(unsigned i) {
    const unsigned h = hash(i), e = 107u + hash(i ^ 0x9e3779b9u) % 41u;
    return __uint_as_float((h & 0x80000000u) | (e << 23) | (h & 0x7fffffu));
}

__device__ void mma(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    c[0] = c[1] = c[2] = c[3] = 0.0f;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// counts[0]: accumulators compared; [1]: raw != trunc; [2]: raw != rna.
__global__ void probe(unsigned seed, unsigned long long* counts) {
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    const unsigned base = seed * 0x01000193u + warp * 64u + lane;  // six values a lane, distinct
    unsigned raw_a[4], raw_b[2], tr_a[4], tr_b[2], rn_a[4], rn_b[2];
    for (int i = 0; i < 6; ++i) {
        const float x = rnd(base * 8u + i);
        const unsigned r = __float_as_uint(x), t = r & 0xffffe000u;
        unsigned n;
        asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(n) : "f"(x));
        if (i < 4) { raw_a[i] = r; tr_a[i] = t; rn_a[i] = n; }
        else       { raw_b[i - 4] = r; tr_b[i - 4] = t; rn_b[i - 4] = n; }
    }
    float cr[4], ct[4], cn[4];
    mma(cr, raw_a, raw_b);
    mma(ct, tr_a, tr_b);
    mma(cn, rn_a, rn_b);
    unsigned dt = 0, dn = 0;
    for (int i = 0; i < 4; ++i) {
        dt += __float_as_uint(cr[i]) != __float_as_uint(ct[i]);
        dn += __float_as_uint(cr[i]) != __float_as_uint(cn[i]);
    }
    atomicAdd(&counts[0], 4ull);
    atomicAdd(&counts[1], static_cast<unsigned long long>(dt));
    atomicAdd(&counts[2], static_cast<unsigned long long>(dn));
}

int main(int argc, char** argv) {
    const long tiles = argc > 1 ? std::atol(argv[1]) : 1 << 20;
    if (tiles < 1 || tiles > (1L << 26) || tiles % 8) {
        std::fprintf(stderr, "usage: %s [TILES] (a multiple of 8, at most 2^26)\n", argv[0]);
        return 2;
    }
    unsigned long long* counts = nullptr;
    CK(cudaMalloc(&counts, 3 * sizeof(unsigned long long)));
    CK(cudaMemset(counts, 0, 3 * sizeof(unsigned long long)));
    probe<<<static_cast<unsigned>(tiles / 8), 256>>>(12345u, counts);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    unsigned long long h[3];
    CK(cudaMemcpy(h, counts, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("tf32_probe: %ld tiles, %llu accumulators: raw != trunc %llu, raw != rna %llu\n", tiles, h[0],
                h[1], h[2]);
    CK(cudaFree(counts));
    return h[1] ? 1 : 0;
}
