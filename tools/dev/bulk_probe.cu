// tools/dev/bulk_probe.cu: is compute-sanitizer memcheck's report on tc_step's bulk copies a
// bug of ours or of the tool? (issue 35; a dev probe, not built by CMake or CI)
//
// memcheck reports "Invalid __shared__ write of size 2048 bytes ... not located in remote CTA"
// at tc_step's cp.async.bulk.shared::cluster.shared::cta copies, while verify passes bit for
// bit and racecheck is clean. This probe does the same exchange with nothing else around it:
// a cluster of N blocks, D bytes of dynamic shared memory each; block r fills B bytes at
// offset 1024 with words r * 2^20 + i, and thread q sends them to rank q's slot
// OFF + r * B, in the same two ways tc_step and its twin do:
//   mode 1  cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes, the
//           receiver's mbarrier armed with expect_tx ((N-1) x B bytes), waited on by parity;
//   mode 0  plain DSMEM stores (st.shared::cluster.u32 through mapa), then a cluster barrier.
// Every receiver checks every word it got; the program exits 1 if any is wrong. Run it
// plainly, then under `compute-sanitizer --tool memcheck`: a report on a run whose words
// all arrived right, in mode 1 and not in mode 0, is the tool's, not the copy's. Modes 2 and 3
// are 1 and 0 with the cluster's shape fixed in the kernel (__cluster_dims__(16, 1, 1), which
// nvcc writes as .reqnctapercluster, as tc_step declares it) instead of the launch attribute
// (N must be 16 there).
//
//   nvcc -O2 -arch=sm_90 -std=c++17 tools/dev/bulk_probe.cu -o /tmp/bp
//   /tmp/bp N D OFF B MODE        e.g. /tmp/bp 16 224576 192512 2048 1 (tc_step's shapes)

#include "check.cuh"  // CK

__device__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

extern __shared__ __align__(1024) unsigned char smem[];

// errors[r]: wrong words seen by rank r.
__device__ void probe_body(int n, int off, int bytes, int mode, int* errors) {
    const unsigned rank = cluster_rank();
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const unsigned mb = base;          // the mbarrier, 8 bytes at offset 0
    const unsigned src = base + 1024;  // this block's words
    const int words = bytes / 4;
    unsigned* srcw = reinterpret_cast<unsigned*>(smem + 1024);
    unsigned* dstw = reinterpret_cast<unsigned*>(smem + off);

    // ---- the mbarrier, initialised and made visible to the cluster before any copy --------
    if (threadIdx.x == 0)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
                     "fence.mbarrier_init.release.cluster;" ::"r"(mb) : "memory");
    for (int i = threadIdx.x; i < words; i += blockDim.x) srcw[i] = (rank << 20) + i;
    if (mode == 1) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    cluster_sync();

    if (mode == 1) {
        // ---- bulk copies: thread q sends this block's words to rank q's slot ---------------
        if (threadIdx.x == 0)
            asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
                         ::"r"(mb), "r"((n - 1) * bytes) : "memory");
        const unsigned q = threadIdx.x;
        if (q < static_cast<unsigned>(n) && q != rank) {
            const unsigned local_dst = base + off + rank * bytes;
            unsigned rdst, rbar;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rdst) : "r"(local_dst), "r"(q));
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(mb), "r"(q));
            asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"
                         " [%0], [%1], %2, [%3];\n\t"
                         "cp.async.bulk.commit_group;"
                         ::"r"(rdst), "r"(src), "r"(bytes), "r"(rbar) : "memory");
        }
        // ---- wait for phase 0 of this block's mbarrier: every peer's bytes are here ---------
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
                         " selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(mb) : "memory");
        if (q < static_cast<unsigned>(n) && q != rank)
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    } else {
        // ---- DSMEM stores: every thread stores words to every peer's slot ------------------
        for (int p = 0; p < n; ++p) {
            if (p == static_cast<int>(rank)) continue;
            for (int i = threadIdx.x; i < words; i += blockDim.x) {
                unsigned rdst;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                             : "=r"(rdst) : "r"(base + off + rank * bytes + 4 * i), "r"(p));
                asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(rdst), "r"(srcw[i]) : "memory");
            }
        }
        cluster_sync();
    }

    // ---- check every word from every peer ----------------------------------------------------
    int bad = 0;
    for (int p = 0; p < n; ++p) {
        if (p == static_cast<int>(rank)) continue;
        for (int i = threadIdx.x; i < words; i += blockDim.x)
            bad += dstw[p * words + i] != (static_cast<unsigned>(p) << 20) + i;
    }
    atomicAdd(&errors[blockIdx.x], bad);
    cluster_sync();  // no block leaves while a peer may still touch its shared memory
}

__global__ void probe(int n, int off, int bytes, int mode, int* errors) { probe_body(n, off, bytes, mode, errors); }
__global__ void __cluster_dims__(16, 1, 1) probe16(int n, int off, int bytes, int mode, int* errors) {
    probe_body(n, off, bytes, mode, errors);
}

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s N D OFF B MODE (mode 1: bulk copies, 0: DSMEM stores; 3, 2: the same "
                             "with __cluster_dims__(16, 1, 1))\n", argv[0]);
        return 2;
    }
    const int n = std::atoi(argv[1]), d = std::atoi(argv[2]), off = std::atoi(argv[3]);
    const int bytes = std::atoi(argv[4]), mode = std::atoi(argv[5]);
    if (n < 2 || n > 16 || bytes < 16 || bytes % 16 || off % 16 || off < 1024 + bytes ||
        off + n * bytes > d || mode < 0 || mode > 3 || (mode >= 2 && n != 16)) {
        std::fprintf(stderr, "bad shape: need 2 <= N <= 16, B and OFF multiples of 16, "
                             "OFF >= 1024 + B, OFF + N x B <= D, MODE 0 to 3 (2, 3: N = 16)\n");
        return 2;
    }
    const bool fixed = mode >= 2;
    auto* kernel = fixed ? probe16 : probe;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d));
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    int* errors = nullptr;
    CK(cudaMalloc(&errors, n * sizeof(int)));
    CK(cudaMemset(errors, 0, n * sizeof(int)));

    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = d;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = n;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = fixed ? nullptr : attr;
    cfg.numAttrs = fixed ? 0 : 1;
    const int body_mode = mode % 2;  // 1 bulk, 0 DSMEM stores
    CK(cudaLaunchKernelEx(&cfg, kernel, n, off, bytes, body_mode, errors));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());

    int host[16] = {};
    CK(cudaMemcpy(host, errors, n * sizeof(int), cudaMemcpyDeviceToHost));
    int total = 0;
    for (int r = 0; r < n; ++r) total += host[r];
    std::printf("bulk_probe N=%d D=%d OFF=%d B=%d mode=%s%s: %d wrong words of %d\n", n, d, off, bytes,
                mode % 2 ? "bulk" : "dsmem", fixed ? " (__cluster_dims__)" : "", total, n * (n - 1) * bytes / 4);
    CK(cudaFree(errors));
    return total ? 1 : 0;
}
