// One struct for every launcher's arguments, so the Python side can fill a preallocated ctypes
// Structure and pass one pointer: a ctypes call converting 13 arguments costs several
// microseconds, a decode-sized kernel runs in a few tens. Field order and types must match
// nvfp4_kernels/cuda_backend.py (LaunchArgs); nvfp4_launch_args_size() lets it check.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {

struct Nvfp4LaunchArgs {
  const void* a;        // activations [m, k] (GEMV and fused only)
  const void* packed;   // [n, k/2] packed E2M1 codes (kernel 5: tile-contiguous)
  const void* scales;   // [n, ceil(k/block_size)] E4M3 bytes (kernel 5: tile-contiguous)
  const void* g;        // one fp32 global scale in device memory
  const void* bias;     // [n] or null (GEMV and fused only)
  void* out;            // GEMV, fused: [m, n]; dequant: [n, k]
  float* workspace;     // GEMV / fused split-K partials, splits * m * n floats (or null)
  cudaStream_t stream;
  int64_t n;
  int64_t k;
  int32_t m;
  int32_t block_size;
  int32_t out_bf16;
  int32_t splits;       // GEMV, fused: K splits; dequant vec8: chunks per thread (0 = automatic)
  int* counters;        // GEMV, fused: one zeroed int per tile for the in-launch split-K sum (or null);
                        // kernels 8, 9: the workspace of the permuted activations (16-byte aligned)
  int32_t scale_bytes;  // kernel 5: the weight's scale-byte range lo | hi << 8, or 0 (nvfp4_launch_fused_tiled)
  int32_t whole_tiles;  // kernels 8, 9: the fused_wgmma plan's tiles that take every K step (the rest split)
};

// 0: the GEMV, 1: vec8 dequant, 2: scalar dequant, 3: the fused tensor-core kernel, 4: an empty kernel
// (the benchmark's host-time floor: what one launch through this entry costs), 5: the fused kernel
// on tile-contiguous weights (packed and scales in nvfp4_launch_fused_tiled's layout), 8: the
// fused_wgmma kernel (nvfp4_launch_fused_wgmma_mma_order; splits and whole_tiles are its plan, its
// act_ws in `counters`), 9: the same on tile-contiguous weights (its `tiled` form). 6 and 7 were the
// natural-order fused_wgmma launches, retired (benchmarks/NOTES.md, nineteenth session); they and
// any other number are refused with cudaErrorInvalidValue.
int nvfp4_launch_packed(int32_t kernel, const Nvfp4LaunchArgs* args);
int nvfp4_launch_args_size(void);

}  // extern "C"
