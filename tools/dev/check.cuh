// tools/dev/check.cuh: CK(call), the dev probes' check of a CUDA runtime call: on an error,
// the file, line, call and the runtime's message on stderr, and exit 2.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                \
                         cudaGetErrorString(e_));                                          \
            std::exit(2);                                                                  \
        }                                                                                  \
    } while (0)
