// Launching a kernel whose weights are read once per call, with those bytes marked for early
// eviction from L2.
//
// A matmul at small M streams its weights from device memory exactly once, while whatever the
// model keeps in L2 (the previous layer's output, the activations it is about to read) is worth
// keeping. By default every line the weight stream brings in competes with that data as an equal,
// and when L2 holds dirty lines each of them costs a write-back before it can be replaced. A
// launch attribute (an access-policy window over the weight bytes, its hits and misses given the
// streaming property) tells L2 to evict those lines first. It changes where bytes live in L2,
// never which bytes a thread reads or what it computes, so the bits are those of a plain
// launch. Measured on the H200 with the L2 flushed (benchmarks/NOTES.md, "streamed weights"):
// 1.00-1.03x on tile-contiguous weights, up to 1.06x on row-major weights at M = 1.
//
// The window is a per-launch attribute (cudaLaunchKernelEx), not a stream attribute: the
// caller's stream keeps the policy it had. A device that offers no window (the attribute's
// maximum size is 0) gets a plain launch; a weight larger than the maximum window is covered
// from its start up to that size.
#pragma once

#include <stddef.h>

#include "nvfp4_common.cuh"

namespace nvfp4 {

// The largest access-policy window of the current device, in bytes (0: none).
inline size_t max_access_policy_window() {
  const int bytes = cached_device_attribute<cudaDevAttrMaxAccessPolicyWindowSize>();
  return bytes > 0 ? static_cast<size_t>(bytes) : 0;
}

// Fills `attr` with the streaming window over [weights, weights + weight_bytes) (see above) and
// returns true; false, `attr` untouched, where the device offers no window or there are no bytes.
inline bool streaming_window(cudaLaunchAttribute& attr, const void* weights, size_t weight_bytes) {
  if (weights == nullptr || weight_bytes == 0) return false;
  const size_t max_bytes = max_access_policy_window();
  if (max_bytes == 0) return false;
  attr.id = cudaLaunchAttributeAccessPolicyWindow;
  attr.val.accessPolicyWindow.base_ptr = const_cast<void*>(weights);
  attr.val.accessPolicyWindow.num_bytes = weight_bytes < max_bytes ? weight_bytes : max_bytes;
  attr.val.accessPolicyWindow.hitRatio = 1.0f;
  attr.val.accessPolicyWindow.hitProp = cudaAccessPropertyStreaming;
  attr.val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  return true;
}

// kernel<<<grid, block, smem, stream>>>(args...) with [weights, weights + weight_bytes) marked
// streaming in L2 (see above; no bytes, no window), and, where `dependent`, as the programmatic
// dependent of the work before it on `stream` (mma_decode.cuh's launch_programmatic_dependent says
// what that buys). Returns the launch's error and leaves none behind for cudaGetLastError, as a
// <<<>>> launch followed by cudaGetLastError does not either: the caller reports it once.
template <typename... KernelArgs, typename... Args>
cudaError_t launch_streaming_weights_as(bool dependent, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                                        size_t smem, cudaStream_t stream, const void* weights, size_t weight_bytes,
                                        Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned count = 0;
  if (streaming_window(attrs[count], weights, weight_bytes)) ++count;
  if (dependent) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = count > 0 ? attrs : nullptr;
  config.numAttrs = count;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...);
  if (err != cudaSuccess) cudaGetLastError();
  return err;
}

// The streamed launch in the stream's order (not a programmatic dependent).
template <typename... KernelArgs, typename... Args>
cudaError_t launch_streaming_weights(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t stream, const void* weights, size_t weight_bytes,
                                     Args... args) {
  return launch_streaming_weights_as(false, kernel, grid, block, smem, stream, weights, weight_bytes, args...);
}

}  // namespace nvfp4
