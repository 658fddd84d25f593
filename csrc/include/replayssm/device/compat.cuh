// One include for kernel sources: the CUDA headers under nvcc, the SIMT emulator otherwise.
#pragma once

#if defined(RSSM_EMULATION)
#include "simt.h"
#define RSSM_UNROLL _Pragma("GCC unroll 32")
#define RSSM_NO_UNROLL _Pragma("GCC unroll 1")
// Opting in to more than 48 KB of dynamic shared memory is a CUDA attribute; the emulator
// only checks the hardware maximum at launch.
#define RSSM_ALLOW_SMEM(kernel, bytes) 0
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define RSSM_UNROLL _Pragma("unroll")
// A loop the model counts as a loop (its body once per trip), not as unrolled copies.
#define RSSM_NO_UNROLL _Pragma("unroll 1")
// `RSSM_DYNAMIC_SMEM(float, buf);` declares `float *buf` pointing at dynamic shared memory.
#define RSSM_DYNAMIC_SMEM(type, name)                                   \
  extern __shared__ __align__(16) unsigned char rssm_dynamic_smem_[]; \
  type *name = reinterpret_cast<type *>(rssm_dynamic_smem_)
#define RSSM_ALLOW_SMEM(kernel, bytes)                                                                    \
  ((bytes) > 48 * 1024                                                                                   \
       ? static_cast<int>(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (bytes))) \
       : 0)
// Launches on the caller's stream; evaluates to the cudaError_t of the launch as int.
#define RSSM_LAUNCH(kernel, grid, block, smem, stream, ...)                                       \
  (kernel<<<(grid), (block), (smem), static_cast<cudaStream_t>(stream)>>>(__VA_ARGS__), \
   static_cast<int>(cudaGetLastError()))
#endif
