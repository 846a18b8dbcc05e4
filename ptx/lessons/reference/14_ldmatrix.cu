// Twin of 14_ldmatrix.ptx: the transpose of each 16 x 16 tile of 16-bit values, element by element;
// word e of a row holds columns 2e (lower half) and 2e + 1.
extern "C" __global__ void ldmatrix_t16(unsigned* Y, const unsigned* X, unsigned tiles)
{
    const unsigned gid = blockIdx.x * 128 + threadIdx.x, w = gid >> 5, lane = gid & 31;
    if (w >= tiles) return;
    const unsigned short* x = reinterpret_cast<const unsigned short*>(X + (size_t)w * 128);
    for (unsigned e = lane; e < 128; e += 32) {
        const unsigned r = e / 8, c = 2 * (e % 8);  // Y[r][c], Y[r][c + 1] = X[c][r], X[c + 1][r]
        Y[(size_t)w * 128 + e] = x[c * 16 + r] | (unsigned)x[(c + 1) * 16 + r] << 16;
    }
}
