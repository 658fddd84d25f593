// Thin wrappers over the CUDA runtime for the Rust side (device memory, copies, device facts),
// so the crate needs no CUDA bindings crate. Each returns the cudaError_t as int32_t.
#include <cuda_runtime.h>

#include <cstring>

#include "replayssm/replayssm.h"

extern "C" {

int32_t rssm_cuda_device_count(int32_t *count) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  *count = e == cudaSuccess ? n : 0;
  return e;
}

int32_t rssm_cuda_versions(int32_t *runtime, int32_t *driver) {
  int r = 0, d = 0;
  cudaError_t e = cudaRuntimeGetVersion(&r);
  if (e == cudaSuccess) e = cudaDriverGetVersion(&d);
  *runtime = r;
  *driver = d;
  return e;
}

int32_t rssm_cuda_device_name(int32_t device, char *buf, int32_t len, int32_t *cc_major, int32_t *cc_minor) {
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return e;
  if (len > 0) {
    std::strncpy(buf, prop.name, static_cast<size_t>(len) - 1);
    buf[len - 1] = 0;
  }
  *cc_major = prop.major;
  *cc_minor = prop.minor;
  return cudaSuccess;
}

int32_t rssm_cuda_malloc(void **ptr, uint64_t bytes) { return cudaMalloc(ptr, bytes); }
int32_t rssm_cuda_free(void *ptr) { return cudaFree(ptr); }
int32_t rssm_cuda_memcpy_htod(void *dst, const void *src, uint64_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}
int32_t rssm_cuda_memcpy_dtoh(void *dst, const void *src, uint64_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}
int32_t rssm_cuda_memset(void *dst, int32_t value, uint64_t bytes) { return cudaMemset(dst, value, bytes); }
int32_t rssm_cuda_synchronize(void) { return cudaDeviceSynchronize(); }
int32_t rssm_cuda_last_error(void) { return cudaGetLastError(); }
const char *rssm_cuda_error_string(int32_t code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // extern "C"
