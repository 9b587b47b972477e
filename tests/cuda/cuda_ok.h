// CUDA_OK(call): a GoogleTest fatal assertion that a CUDA runtime call succeeded, naming the call
// and the error (shared by the GPU suites).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#define CUDA_OK(x)                                                      \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #x << ": " << cudaGetErrorString(e_); \
  } while (0)
