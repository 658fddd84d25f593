// Self-test kernels of the SIMT emulator, written exactly as CUDA kernels are.
#include "selftest.h"

#include "replayssm/device/common.cuh"
#include "replayssm/replayssm.h"

namespace {

__global__ void rotate_kernel(const float *in, float *out, int n, int with_barrier) {
  RSSM_DYNAMIC_SMEM(float, buf);
  const int t = threadIdx.x;
  const int base = blockIdx.x * n;
  buf[t] = 2.0f * in[base + t];
  if (with_barrier) __syncthreads();
  out[base + t] = buf[(t + 1) % n];
}

__global__ void block_sum_kernel(const float *in, float *out, int n, int skip_barrier) {
  __shared__ float buf[1024];
  const int t = threadIdx.x;
  buf[t] = in[blockIdx.x * n + t];
  __syncthreads();
  int step = 0;
  for (int stride = n / 2; stride > 0; stride /= 2, ++step) {
    if (t < stride) buf[t] += buf[t + stride];
    if (step != skip_barrier) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

__global__ void shuffles_kernel(const int *in, int arg, int width, int *o_shfl, int *o_xor, int *o_down, int *o_up,
                                unsigned *o_ballot, int *o_any, int *o_all) {
  const int l = threadIdx.x;
  const int x = in[l];
  o_shfl[l] = __shfl_sync(rssm::kFullMask, x, arg, width);
  o_xor[l] = __shfl_xor_sync(rssm::kFullMask, x, arg, width);
  o_down[l] = __shfl_down_sync(rssm::kFullMask, x, static_cast<unsigned>(arg), width);
  o_up[l] = __shfl_up_sync(rssm::kFullMask, x, static_cast<unsigned>(arg), width);
  o_ballot[l] = __ballot_sync(rssm::kFullMask, x & 1);
  o_any[l] = __any_sync(rssm::kFullMask, x & 1);
  o_all[l] = __all_sync(rssm::kFullMask, x & 1);
}

__global__ void warp_sum_kernel(const float *in, float *out) {
  float x[1] = {in[blockIdx.x * 32 + threadIdx.x]};
  rssm::warp_sum(x);
  // Every lane must hold the same bits; lane 0 publishes, others check.
  const float lane0 = __shfl_sync(rssm::kFullMask, x[0], 0);
  if (__float_as_uint(lane0) != __float_as_uint(x[0])) out[blockIdx.x] = __int_as_float(0x7fc00001);
  else if (threadIdx.x == 0) out[blockIdx.x] = x[0];
}

__global__ void atomics_kernel(int *counter, unsigned *bits) {
  atomicAdd(counter, 1);
  atomicOr(bits, 1u << (threadIdx.x % 32));
}

__global__ void empty_kernel() {}

__global__ void divergent_kernel(int *out) {
  int x = threadIdx.x;
  if (threadIdx.x < 16) x = __shfl_xor_sync(rssm::kFullMask, x, 1);
  out[threadIdx.x] = x;
}

__global__ void deadlock_kernel(int *out) {
  int x = threadIdx.x;
  if (threadIdx.x % 32 < 16) x = __shfl_xor_sync(rssm::kFullMask, x, 1);
  else __syncthreads();
  out[threadIdx.x] = x;
}

int status(int err) { return err == 0 ? RSSM_OK : RSSM_ERR_EMULATOR; }

}  // namespace

extern "C" {

int32_t rssm_emu_selftest_rotate(const float *in, float *out, int32_t n, int32_t blocks, int32_t with_barrier) {
  return status(RSSM_LAUNCH(rotate_kernel, dim3(blocks), dim3(n), n * sizeof(float), nullptr, in, out, n,
                            with_barrier));
}

int32_t rssm_emu_selftest_block_sum(const float *in, float *out, int32_t n, int32_t blocks, int32_t skip_barrier) {
  return status(RSSM_LAUNCH(block_sum_kernel, dim3(blocks), dim3(n), 0, nullptr, in, out, n, skip_barrier));
}

int32_t rssm_emu_selftest_shuffles(const int32_t *in, int32_t arg, int32_t width, int32_t *out_shfl,
                                   int32_t *out_xor, int32_t *out_down, int32_t *out_up, uint32_t *out_ballot,
                                   int32_t *out_any, int32_t *out_all) {
  return status(RSSM_LAUNCH(shuffles_kernel, dim3(1), dim3(32), 0, nullptr, in, arg, width, out_shfl, out_xor,
                            out_down, out_up, out_ballot, out_any, out_all));
}

int32_t rssm_emu_selftest_warp_sum(const float *in, float *out, int32_t warps) {
  return status(RSSM_LAUNCH(warp_sum_kernel, dim3(warps), dim3(32), 0, nullptr, in, out));
}

int32_t rssm_emu_selftest_atomics(int32_t *counter, uint32_t *bits, int32_t blocks, int32_t threads) {
  return status(RSSM_LAUNCH(atomics_kernel, dim3(blocks), dim3(threads), 0, nullptr, counter, bits));
}

int32_t rssm_emu_selftest_launch(uint32_t grid_x, uint32_t block_x, uint32_t block_y, uint64_t dynamic_smem) {
  return status(RSSM_LAUNCH(empty_kernel, dim3(grid_x), dim3(block_x, block_y), dynamic_smem, nullptr));
}

int32_t rssm_emu_selftest_divergent(void) {
  int out[32];
  return status(RSSM_LAUNCH(divergent_kernel, dim3(1), dim3(32), 0, nullptr, out));
}

int32_t rssm_emu_selftest_deadlock(void) {
  int out[64];
  return status(RSSM_LAUNCH(deadlock_kernel, dim3(1), dim3(64), 0, nullptr, out));
}

void rssm_emu_selftest_convert(const float *in, float *out_bf16, float *out_f16, int32_t n) {
  for (int i = 0; i < n; ++i) {
    out_bf16[i] = __bfloat162float(__float2bfloat16(in[i]));
    out_f16[i] = __half2float(__float2half(in[i]));
  }
}

}  // extern "C"
