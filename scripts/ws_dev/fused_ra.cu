// Development build (not part of the library): the library's fused_wgmma kernel
// (kernels/cuda/fused_wgmma.cu) in a library of its own, for the dev scripts' measurements of the
// fragment-ordered weight layout (ra_dev.py, wgmma_dev.py). The library itself launches that
// layout as nvfp4_launch_fused_wgmma_tiled for a registered weight (nvfp4_kernels.layout); these
// entries keep the dev scripts' names and argument order.
//
// Weight layout (built by ra_dev.py's ra_layout and by nvfp4_kernels.layout.wgmma_weights alike):
// 64-row tiles, per tile and step 64 rows x 64 bytes; lane t's 16 bytes of a row hold word
// q = 0..3, whose code i is K = 16 (2 q + i / 4) + 2 t + (0, 1, 8, 9)[i % 4] of the step, with the
// signs placed as in the tile-contiguous layout; the scale bytes are the tile-contiguous layout's.
// The thirteenth session's own copy of this kernel (with a serial K loop as well) is in git
// history before this file became a wrapper.
#include "fused_wgmma.cu"

extern "C" {

// Dev entry: the library's plan (the first whole_tiles 128-row tiles unsplit, the rest in
// `splits` equal non-empty K ranges).
int nvfp4ra_launch_plan(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                        void* out, float* workspace, int32_t m, int32_t n, int32_t k, int32_t out_bf16,
                        int32_t whole_tiles, int32_t splits, cudaStream_t stream) {
  return nvfp4_launch_fused_wgmma_tiled(a, packed, scales, g, bias, out, workspace, m, n, k, out_bf16, whole_tiles,
                                        splits, stream);
}

// ra_dev.py's entry: every tile split in `splits` (the plan (0, splits)).
int nvfp4ra_launch(const void* a, const void* packed, const void* scales, const void* g, const void* bias, void* out,
                   float* workspace, int32_t m, int32_t n, int32_t k, int32_t out_bf16, int32_t splits,
                   cudaStream_t stream) {
  return nvfp4ra_launch_plan(a, packed, scales, g, bias, out, workspace, m, n, k, out_bf16, 0, splits, stream);
}

}  // extern "C"
