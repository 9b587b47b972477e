// FA4_HD: functions of the small value types shared by host code and CUDA kernels (masks, tile
// schedules) -- __host__ __device__ under nvcc, plain inline in the C++ compiler.
#pragma once

#if defined(__CUDACC__)
#define FA4_HD __host__ __device__ __forceinline__
#else
#define FA4_HD inline
#endif
