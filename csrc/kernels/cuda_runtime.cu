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
int32_t rssm_cuda_memcpy_htod_async(void *dst, const void *src, uint64_t bytes, void *stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_memcpy_dtoh_async(void *dst, const void *src, uint64_t bytes, void *stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_memset_async(void *dst, int32_t value, uint64_t bytes, void *stream) {
  return cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_synchronize(void) { return cudaDeviceSynchronize(); }
int32_t rssm_cuda_last_error(void) { return cudaGetLastError(); }
const char *rssm_cuda_error_string(int32_t code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int32_t rssm_cuda_stream_create(void **stream) {
  return cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t *>(stream), cudaStreamNonBlocking);
}
int32_t rssm_cuda_stream_destroy(void *stream) { return cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }
int32_t rssm_cuda_stream_synchronize(void *stream) {
  return cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_event_create(void **event) { return cudaEventCreate(reinterpret_cast<cudaEvent_t *>(event)); }
int32_t rssm_cuda_event_destroy(void *event) { return cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
int32_t rssm_cuda_event_record(void *event, void *stream) {
  return cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_event_elapsed_ms(float *ms, void *start, void *stop) {
  return cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop));
}
int32_t rssm_cuda_graph_begin_capture(void *stream) {
  return cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal);
}
int32_t rssm_cuda_graph_end_capture(void *stream, void **graph_exec) {
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (e != cudaSuccess) return e;
  e = cudaGraphInstantiate(reinterpret_cast<cudaGraphExec_t *>(graph_exec), graph, 0);
  const cudaError_t d = cudaGraphDestroy(graph);
  return e != cudaSuccess ? e : d;
}
int32_t rssm_cuda_graph_launch(void *graph_exec, void *stream) {
  return cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec), static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_graph_exec_destroy(void *graph_exec) {
  return cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec));
}
int32_t rssm_cuda_memcpy_dtod_async(void *dst, const void *src, uint64_t bytes, void *stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_memcpy_2d_dtod_async(void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                                       uint64_t width, uint64_t height, void *stream) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice,
                           static_cast<cudaStream_t>(stream));
}
int32_t rssm_cuda_mem_info(uint64_t *free_bytes, uint64_t *total_bytes) {
  size_t f = 0, t = 0;
  const cudaError_t e = cudaMemGetInfo(&f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return e;
}
int32_t rssm_cuda_device_facts(int32_t device, int32_t *sm_count, int32_t *l2_bytes) {
  cudaError_t e = cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(l2_bytes, cudaDevAttrL2CacheSize, device);
  return e;
}

}  // extern "C"
