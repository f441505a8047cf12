// Development build (not part of the library): the library's fused_wgmma kernel
// (kernels/cuda/fused_wgmma.cu, in fused_mma's K order) in a library of its own, with template
// arguments the library does not launch (more blocks an SM, more stages, weights staged through
// shared memory), for scripts/ws_dev/mma_order_dev.py's measurements. Built by
// `python scripts/ws_dev/ra_dev.py --out DIR --prebuild`.
//
// The natural-order entries this file had (nvfp4ra_launch, nvfp4ra_launch_plan,
// nvfp4ra_launch_narrow: the fragment-ordered weight layout, the thirteenth to fifteenth
// sessions' measurements) went with that kernel form (benchmarks/NOTES.md, nineteenth session);
// they are in git history.
#include "fused_wgmma.cu"

extern "C" {

// The dev entries' plan: the library's argument checks for the narrow tiles (m up to nact);
// false where the launch cannot take them.
static bool dev_plan(int32_t m, int32_t n, int32_t k, int32_t whole_tiles, int32_t splits, int32_t nact,
                     const float* workspace, nvfp4::WgmmaPlan* plan) {
  const int steps = k / nvfp4::kWgStepK, tiles = (n + nvfp4::kWgRows - 1) / nvfp4::kWgRows;
  if (m < 1 || m > nact || n < 1 || k < nvfp4::kWgStepK || k % nvfp4::kWgStepK || whole_tiles < 0 ||
      whole_tiles > tiles || splits < 1 || splits > steps || (whole_tiles < tiles && splits > 1 && workspace == nullptr)) {
    return false;
  }
  const int per = (steps + splits - 1) / splits;
  if ((steps + per - 1) / per != splits) return false;
  *plan = nvfp4::WgmmaPlan{whole_tiles, tiles, splits, per};
  return true;
}

// Dev entry (scripts/ws_dev/mma_order_dev.py):
// fused_mma's weights, `tiled` the tile-contiguous copy (nvfp4_kernels.layout.tile_weights) or
// else the contract's row-major bytes, the activations permuted into act_ws
// (nvfp4ra_permuted_rows(m, nact) x k values, 16-byte aligned) by the launch. Blocks of `nact`
// activation rows, `min_blocks` resident per SM, `stages` stages, the weights copied into them
// when `staged` (tiled only), or each thread's bytes into a ring of `ring` steps of its own (0:
// the register prefetch of one step); a combination not built returns cudaErrorInvalidValue.
int nvfp4ra_launch_mma_order(const void* a, void* act_ws, const void* packed, const void* scales, const void* g,
                             const void* bias, void* out, float* workspace, int32_t m, int32_t n, int32_t k,
                             int32_t out_bf16, int32_t whole_tiles, int32_t splits, int32_t nact, int32_t min_blocks,
                             int32_t stages, int32_t staged, int32_t tiled, int32_t ring, cudaStream_t stream) {
  nvfp4::WgmmaPlan plan{};
  if (!dev_plan(m, n, k, whole_tiles, splits, nact, workspace, &plan) || a == nullptr ||
      reinterpret_cast<uintptr_t>(a) % 16 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
#define NVFP4RA_MMA_ORDER(TILED, NACT, MINB, STAGES, STAGED, RING)                                                \
  if (!tiled == !TILED && nact == NACT && min_blocks == MINB && stages == STAGES && !staged == !STAGED &&         \
      ring == RING) {                                                                                              \
    return static_cast<int>(                                                                                      \
        out_bf16 ? nvfp4::launch_wgmma<__nv_bfloat16, TILED, NACT, MINB, STAGES, STAGED, RING>(                  \
                       a, packed, scales, g, bias, out, workspace, m, n, k, plan, stream, act_ws)                 \
                 : nvfp4::launch_wgmma<__half, TILED, NACT, MINB, STAGES, STAGED, RING>(                          \
                       a, packed, scales, g, bias, out, workspace, m, n, k, plan, stream, act_ws));               \
  }
#if NVFP4_WGMMA_ABLATE
  // an ablation build (ra_dev.py --ablations): the library's launches (its export), the
  // two-blocks-an-SM variant at M <= 64 and the 64-row tile with a ring of 4 or of 6 (two blocks
  // an SM) only, to keep the build short
  NVFP4RA_MMA_ORDER(true, 64, 2, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 64, 1, 3, false, 4)
  NVFP4RA_MMA_ORDER(true, 64, 2, 3, false, 6)
#else
  NVFP4RA_MMA_ORDER(true, 256, 1, 3, false, 0)
  NVFP4RA_MMA_ORDER(false, 256, 1, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 192, 1, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 128, 1, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 64, 2, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 32, 2, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 16, 3, 3, false, 0)
  NVFP4RA_MMA_ORDER(true, 256, 1, 3, true, 0)
  NVFP4RA_MMA_ORDER(true, 128, 1, 5, true, 0)
  NVFP4RA_MMA_ORDER(true, 64, 2, 4, true, 0)
  NVFP4RA_MMA_ORDER(true, 64, 1, 8, true, 0)
  NVFP4RA_MMA_ORDER(true, 16, 3, 5, true, 0)
  // each thread's own ring of weight bytes (RING): the register prefetch's one step in flight
  // becomes RING steps, with no thread waiting for another
  NVFP4RA_MMA_ORDER(true, 64, 1, 3, false, 4)
  NVFP4RA_MMA_ORDER(false, 64, 1, 3, false, 4)
  NVFP4RA_MMA_ORDER(true, 64, 2, 3, false, 4)
  // the 64-row tile with its ring of 4 and a deeper activation stream (twenty-ninth session: the
  // stream probe's handshake cost 2.7-5 us of the weight stream at three stages); four stages
  // (105 KB) keep two blocks an SM, five (121 KB) one
  NVFP4RA_MMA_ORDER(true, 64, 1, 4, false, 4)
  NVFP4RA_MMA_ORDER(true, 64, 1, 5, false, 4)
  NVFP4RA_MMA_ORDER(false, 64, 1, 4, false, 4)
  // the 128-row tile's library configuration since the twenty-ninth session (four stages, ring of
  // 4), so that a change to the kernel can be timed against its twin built from the old source
  NVFP4RA_MMA_ORDER(true, 128, 1, 4, false, 4)
  NVFP4RA_MMA_ORDER(false, 128, 1, 4, false, 4)
  NVFP4RA_MMA_ORDER(true, 128, 1, 3, false, 4)
  NVFP4RA_MMA_ORDER(true, 256, 1, 3, false, 2)
  // three 64-row blocks an SM (24 warps, 80 registers without spills, two activation stages so that
  // three blocks' shared memory fits; twenty-seventh session): more warps to hide the decode's and
  // the wgmmas' latency, where the library's 64-row tile runs two
  NVFP4RA_MMA_ORDER(true, 64, 3, 2, false, 4)
  // the 64-row tile with deeper rings (twenty-eighth session): the ring-of-4 kernel with its
  // decode, MMAs and activation stream compiled out still took 28 us on the H200 to stream the
  // 50 MB that a copy reads in 17.5. The library's tile runs two blocks an SM (111 registers), so
  // 8 weight steps a thread are in flight on an SM. A ring of 6 at two blocks (112 KB of shared
  // memory a block; launch_wgmma asks for the full carveout) puts 12 there; a ring of 8 fits one
  // block only (130 KB): the same 8 steps an SM from half the warps
  NVFP4RA_MMA_ORDER(true, 64, 2, 3, false, 6)
  NVFP4RA_MMA_ORDER(false, 64, 2, 3, false, 6)
  NVFP4RA_MMA_ORDER(true, 64, 1, 3, false, 8)
  NVFP4RA_MMA_ORDER(false, 64, 1, 3, false, 8)
  // the ring on the row-major weight beyond the 64-row tile, and the 64-row tile at two blocks an
  // SM on it (twenty-third session: M = 17..64 through fused_wgmma, and the row-major M = 256
  // target's margin)
  NVFP4RA_MMA_ORDER(false, 64, 2, 3, false, 4)
  NVFP4RA_MMA_ORDER(false, 128, 1, 3, false, 4)
  NVFP4RA_MMA_ORDER(false, 256, 1, 3, false, 2)
  // the 192-row tile with a ring (its shared memory holds 4 steps; the library's since the
  // twenty-fourth session)
  NVFP4RA_MMA_ORDER(true, 192, 1, 3, false, 4)
  NVFP4RA_MMA_ORDER(false, 192, 1, 3, false, 4)
#endif
#undef NVFP4RA_MMA_ORDER
  return static_cast<int>(cudaErrorInvalidValue);
}

// The launches' activation permutation alone (a: [m, k], out: [rows_out, k], rows_out >= m,
// both 16-byte aligned), for mma_order_dev.py's check of it against its Python definition (and of
// the zero rows it pads with) and its timing.
int nvfp4ra_permute_act(const void* a, void* out, int32_t m, int32_t rows_out, int32_t k, cudaStream_t stream) {
  if (a == nullptr || out == nullptr || m < 1 || rows_out < m || k < nvfp4::kWgStepK || k % nvfp4::kWgStepK ||
      reinterpret_cast<uintptr_t>(a) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(nvfp4::launch_permute_act(a, out, m, rows_out, k, stream));
}

// Rows of the permuted copy a launch with `nact`-row tiles needs (act_ws holds that many x k values).
int64_t nvfp4ra_permuted_rows(int32_t m, int32_t nact) { return nvfp4::permuted_rows(m, nact); }

}  // extern "C"
