// Twin of 12_cluster_dsmem.ptx: the same tree and rank order; the peers' part[0] through
// __cluster_map_shared_rank (mapa), the cluster barriers through __cluster_barrier_arrive/_wait.
extern "C" __global__ void cluster_sum(float* y, const float* x)
{
    __shared__ float part[256];
    const unsigned t = threadIdx.x, n = __clusterSizeInBlocks();
    part[t] = x[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned s = 128; s > 0; s >>= 1) {
        if (t < s) part[t] = __fadd_rn(part[t], part[t + s]);
        __syncthreads();
    }
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    if (__clusterRelativeBlockRank() == 0 && t == 0) {
        float sum = part[0];
        for (unsigned r = 1; r < n; ++r) sum = __fadd_rn(sum, *static_cast<float*>(__cluster_map_shared_rank(part, r)));
        y[blockIdx.x / n] = sum;
    }
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
}
