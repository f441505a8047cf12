// Development build (not part of the library): the library's fused_wgmma kernel
// (kernels/cuda/fused_wgmma.cu) with the weights in the dev re-layout instead of the contract's
// row-major bytes, for measuring what the re-layout buys before the library registers it as a
// weight layout (benchmarks/NOTES.md, fourteenth session: 92.8 against 107.5 us at M = 256 on
// 5120 x 17408).
//
// Weight layout (a one-time re-layout, built by scripts/ws_dev/ra_dev.py): 64-row tiles, per tile
// and step 64 rows x 64 bytes; lane t's 16 bytes of a row hold word q = 0..3, whose code i is
// K = 16 (2 q + i / 4) + 2 t + (0, 1, 8, 9)[i % 4] of the step, with the signs placed as in the
// tile-contiguous layout; the scale bytes are the tile-contiguous layout's
// (nvfp4_kernels.layout.tile_weights). The kernel loads the lane's 16 bytes directly (no gather)
// and decodes placed signs; everything else, and so the bits at equal split counts, is the
// library kernel's. The thirteenth session's own copy of this kernel (with a serial K loop as
// well) is in git history before this file became a wrapper.
#include "fused_wgmma.cu"

extern "C" {

// Dev entry: packed in ra_dev.py's layout, scales tile-contiguous; the library's plan (the first
// whole_tiles 128-row tiles unsplit, the rest in `splits` equal non-empty K ranges).
int nvfp4ra_launch_plan(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                        void* out, float* workspace, int32_t m, int32_t n, int32_t k, int32_t out_bf16,
                        int32_t whole_tiles, int32_t splits, cudaStream_t stream) {
  const int steps = k / nvfp4::kWgStepK, tiles = (n + nvfp4::kWgRows - 1) / nvfp4::kWgRows;
  if (m < 1 || m > nvfp4::kWgActRows || n < 1 || k < nvfp4::kWgStepK || k % nvfp4::kWgStepK || whole_tiles < 0 ||
      whole_tiles > tiles || splits < 1 || splits > steps || (whole_tiles < tiles && splits > 1 && workspace == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int per = (steps + splits - 1) / splits;
  if ((steps + per - 1) / per != splits) return static_cast<int>(cudaErrorInvalidValue);
  const nvfp4::WgmmaPlan plan{whole_tiles, tiles, splits, per};
  const cudaError_t err =
      out_bf16 ? nvfp4::launch_wgmma<__nv_bfloat16, true>(a, packed, scales, g, bias, out, workspace, m, n, k, plan,
                                                         stream)
               : nvfp4::launch_wgmma<__half, true>(a, packed, scales, g, bias, out, workspace, m, n, k, plan, stream);
  return static_cast<int>(err);
}

// ra_dev.py's entry: every tile split in `splits` (the plan (0, splits)).
int nvfp4ra_launch(const void* a, const void* packed, const void* scales, const void* g, const void* bias, void* out,
                   float* workspace, int32_t m, int32_t n, int32_t k, int32_t out_bf16, int32_t splits,
                   cudaStream_t stream) {
  return nvfp4ra_launch_plan(a, packed, scales, g, bias, out, workspace, m, n, k, out_bf16, 0, splits, stream);
}

}  // extern "C"
