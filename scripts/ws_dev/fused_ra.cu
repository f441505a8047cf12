// Development build (not part of the library): a fused NVFP4 matmul for M up to 256 on Hopper
// warpgroup MMAs (sm_90a) with the weights as the register A operand, so that no decoded weight
// passes through shared memory (the thirteenth session's probes: in fused_ws.cu the decoded tile's
// stores cost 20-25 us at M >= 128; benchmarks/NOTES.md).
//
// Y = A @ W^T (+ bias), block size 16, K % 128 == 0. A block owns 64 C weight rows (one consumer
// warpgroup per 64) and 256 activation rows, and walks its split's 128-value K steps:
// - thread 0 copies each step's activations by TMA (two K-half boxes of 256 rows x 64 values,
//   128-byte swizzle: a wgmma B operand as it lands; rows past M are zero-filled) into a ring of
//   DA stages, DA - 1 steps ahead; each warpgroup releases a stage when its wgmmas are complete;
// - every thread loads its own packed words and scale bytes of the next step from global memory
//   (one 16-byte and one 8-byte load per weight row), decodes them with the table decode of
//   mma_decode.cuh straight into m16n8k16 A fragments (the exact multiply form where a block's
//   scale leaves the table's range), and its warpgroup runs wgmma.m64n256k16 with A from
//   registers and B by descriptor. The two warpgroups run out of step, so one decodes while the
//   other's wgmmas keep the tensor pipe busy.
// Weight layout (a one-time re-layout, built by scripts/ws_dev/ra_dev.py): 64-row tiles, per tile
// and step 64 rows x 64 bytes; lane t's 16 bytes of a row hold word q = 0..3, whose code i is
// K = 16 (2 q + i / 4) + 2 t + (0, 1, 8, 9)[i % 4] of the step, with the signs placed as in the
// tile-contiguous layout; so word q decodes to the A fragments of k16 tiles 2 q and 2 q + 1 in
// natural K order, codes 0-3 with scale block 2 q, codes 4-7 with block 2 q + 1. The scale bytes
// are the tile-contiguous layout's (nvfp4_kernels.layout.tile_weights).
//
// Bits: each k16 wgmma sums the 16 products of K = 16 j .. 16 j + 15 in order j = 0..7 per step,
// steps in order from +0.0; splits as fused_mma's (equal step ranges, partials summed in split
// order by the same finalize kernel).
// On the H200 these were the bits of fused_ws.cu's -DWS_SS build at the same split count on
// every row checked (the same k16 groups, A and B swapped).
//
// The K loop (the measured build) decodes a whole step, issues its eight wgmmas and waits for
// them before decoding the next, so a warpgroup's decode and wgmmas alternate and only the other
// warpgroup overlaps them. -DRA_PIPELINED is the next step, written and built but not yet run on
// a GPU: two half-step fragment buffers, half 0 of step s decoded while half 1 of step s - 1 runs.
// Both device calls of its first form hung; two bugs were found afterwards and are fixed here (no
// TMA load was issued for step DA - 1, and the release address lacked parentheses).
#include <type_traits>

#include "hopper_async.cuh"
#include "mma_decode.cuh"
#include "wgmma_rs.cuh"

namespace {

using namespace nvfp4::hopper;  // NOLINT: the shared helpers of hopper_async.cuh
using nvfp4::build_table;
using nvfp4::DecodeTable;
using nvfp4::e4m3x2_to_f32;
using nvfp4::OutT;
using nvfp4::prmt;
using nvfp4::table_ok;

constexpr int kStepK = 128;
constexpr int kActRows = 256;
constexpr int kActStageBytes = kActRows * 256;  // 256 rows x 128 values x 2 bytes
#ifndef RA_DA
#define RA_DA 3
#endif

// Word w (signs placed) -> four A-fragment registers: codes 0-3 with table ta, codes 4-7 with tb.
__device__ __forceinline__ void decode_word_two_tables(uint32_t w, const DecodeTable& ta, const DecodeTable& tb,
                                                       uint32_t r[4]) {
  const uint32_t mag = w & 0x77777777u;
  const uint32_t mag47 = mag >> 16;
  const uint32_t lo03 = prmt(ta.lo03, ta.lo47, mag), hi03 = prmt(ta.hi03, ta.hi47, mag) ^ (w & 0x80808080u);
  const uint32_t lo47 = prmt(tb.lo03, tb.lo47, mag47);
  const uint32_t hi47 = prmt(tb.hi03, tb.hi47, mag47) ^ ((w << 4) & 0x80808080u);
  nvfp4::interleave_bytes(lo03, hi03, lo47, hi47, r);
}

// The exact form for blocks outside the table's range: codes 0-3 with scale s0, 4-7 with s1.
template <typename T>
__device__ __forceinline__ void decode_word_multiply(uint32_t w, float s0, float s1, uint32_t r[4]) {
  const uint32_t nat = nvfp4::unplace_signs(w);
  uint32_t lo[4], hi[4];
  const float b0 = s0 * nvfp4::pow2_14(), b1 = s1 * nvfp4::pow2_14();
  const float inf = __uint_as_float(0x7F800000u);
  if (fabsf(b0) == inf && fabsf(s0) != inf) {
    nvfp4::decode_word<T, false>(nat & 0xFFFFu, s0, lo);
  } else {
    nvfp4::decode_word<T, true>(nat & 0xFFFFu, b0, lo);
  }
  if (fabsf(b1) == inf && fabsf(s1) != inf) {
    nvfp4::decode_word<T, false>(nat >> 16, s1, hi);
  } else {
    nvfp4::decode_word<T, true>(nat >> 16, b1, hi);
  }
  r[0] = lo[0], r[1] = lo[1], r[2] = hi[0], r[3] = hi[1];
}

template <typename T, int C, int DA>
__global__ void __launch_bounds__(128 * C, 1)
nvfp4_fused_ra_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                      const float* __restrict__ g_ptr, const unsigned short* __restrict__ bias,
                      unsigned short* __restrict__ out, float* __restrict__ partial, int m, int n, int k,
                      int n_tiles, int m_tiles, int steps_per_split, const __grid_constant__ CUtensorMap act_map) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t act_full = base + DA * kActStageBytes;  // DA, then DA act_empty
  const uint32_t act_empty = act_full + 8 * DA;
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid >> 7, ct = tid & 127, warp = ct >> 5, lane = ct & 31, g = lane >> 2, t = lane & 3;
  const int m_tile = blockIdx.x % m_tiles;
  const int n_tile = (blockIdx.x / m_tiles) % n_tiles;
  const int split = blockIdx.x / (m_tiles * n_tiles);
  const int n0 = n_tile * 64 * C;
  const int m0 = m_tile * kActRows;
  const int total_steps = k / kStepK;
  const int step0 = split * steps_per_split;
  const int steps = max(0, min(step0 + steps_per_split, total_steps) - step0);
  if (tid == 0) {
    for (int i = 0; i < DA; ++i) {
      mbar_init(act_full + 8 * i, 1);
      mbar_init(act_empty + 8 * i, C);
    }
    fence_barrier_init();
  }
  __syncthreads();
  auto load_act = [&](int s_load) {  // thread 0 only
    const int stage = s_load % DA;
    const uint32_t dst = base + stage * kActStageBytes, bar = act_full + 8 * stage;
    mbar_expect_tx(bar, kActStageBytes);
    tma_load_2d(dst, &act_map, (step0 + s_load) * kStepK, m0, bar);
    tma_load_2d(dst + kActStageBytes / 2, &act_map, (step0 + s_load) * kStepK + 64, m0, bar);
  };
  if (tid == 0) {
    for (int s = 0; s < DA - 1 && s < steps; ++s) load_act(s);
  }
  // this thread's weight rows r0 = g, r1 = g + 8 of its warp's 16; rows past the 64-row padding
  // of the layout read nothing (zero codes, zero scale bytes)
  const int row0 = n0 + 64 * wg + 16 * warp + g, row1 = row0 + 8;
  const int rows_padded = 64 * ((n + 63) / 64);
  const bool ok0 = row0 < rows_padded, ok1 = row1 < rows_padded;
  const uint8_t* p0 = packed + (static_cast<int64_t>(row0 >> 6) * total_steps + step0) * 4096 + (row0 & 63) * 64 + t * 16;
  const uint8_t* p1 = packed + (static_cast<int64_t>(row1 >> 6) * total_steps + step0) * 4096 + (row1 & 63) * 64 + t * 16;
  const uint8_t* q0 = scales + (static_cast<int64_t>(row0 >> 6) * total_steps + step0) * 512 + (row0 & 63) * 8;
  const uint8_t* q1 = scales + (static_cast<int64_t>(row1 >> 6) * total_steps + step0) * 512 + (row1 & 63) * 8;
  auto load_raw = [&](int s_load, uint4& w0, uint4& w1, uint2& c0, uint2& c1) {
    const uint4 z4 = make_uint4(0, 0, 0, 0);
    const uint2 z2 = make_uint2(0, 0);
    w0 = ok0 ? __ldg(reinterpret_cast<const uint4*>(p0 + static_cast<int64_t>(s_load) * 4096)) : z4;
    w1 = ok1 ? __ldg(reinterpret_cast<const uint4*>(p1 + static_cast<int64_t>(s_load) * 4096)) : z4;
    c0 = ok0 ? __ldg(reinterpret_cast<const uint2*>(q0 + static_cast<int64_t>(s_load) * 512)) : z2;
    c1 = ok1 ? __ldg(reinterpret_cast<const uint2*>(q1 + static_cast<int64_t>(s_load) * 512)) : z2;
  };
  const float gs = __ldg(g_ptr);
  float acc[128];
#pragma unroll
  for (int x = 0; x < 128; ++x) acc[x] = 0.f;
  uint4 w0, w1;
  uint2 c0, c1;
  if (steps > 0) load_raw(0, w0, w1, c0, c1);
#ifndef RA_PIPELINED
  uint32_t full_phase = 0, empty_phase = 0;
  int full_stage = 0, empty_stage = 0;
  for (int s = 0; s < steps; ++s) {
    // decode step s into the A fragments of its eight k16 tiles
    uint32_t af[8][4];
    {
      const uint32_t wr0[4] = {w0.x, w0.y, w0.z, w0.w}, wr1[4] = {w1.x, w1.y, w1.z, w1.w};
      float s0[8], s1[8];
      const uint32_t cb0[2] = {c0.x, c0.y}, cb1[2] = {c1.x, c1.y};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const float2 f0 = e4m3x2_to_f32(prmt(cb0[h], 0u, b == 0 ? 0x4410u : 0x4432u));
          const float2 f1 = e4m3x2_to_f32(prmt(cb1[h], 0u, b == 0 ? 0x4410u : 0x4432u));
          s0[4 * h + 2 * b] = f0.x * gs, s0[4 * h + 2 * b + 1] = f0.y * gs;
          s1[4 * h + 2 * b] = f1.x * gs, s1[4 * h + 2 * b + 1] = f1.y * gs;
        }
      }
      bool all_table = true;
#pragma unroll
      for (int i = 0; i < 8; ++i) all_table &= table_ok<T>(s0[i]) & table_ok<T>(s1[i]);
      if (all_table) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t f0[4], f1[4];
          decode_word_two_tables(wr0[q], build_table<T>(s0[2 * q]), build_table<T>(s0[2 * q + 1]), f0);
          decode_word_two_tables(wr1[q], build_table<T>(s1[2 * q]), build_table<T>(s1[2 * q + 1]), f1);
          af[2 * q][0] = f0[0], af[2 * q][1] = f1[0], af[2 * q][2] = f0[1], af[2 * q][3] = f1[1];
          af[2 * q + 1][0] = f0[2], af[2 * q + 1][1] = f1[2], af[2 * q + 1][2] = f0[3], af[2 * q + 1][3] = f1[3];
        }
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t f0[4], f1[4];
          decode_word_multiply<T>(wr0[q], s0[2 * q], s0[2 * q + 1], f0);
          decode_word_multiply<T>(wr1[q], s1[2 * q], s1[2 * q + 1], f1);
          af[2 * q][0] = f0[0], af[2 * q][1] = f1[0], af[2 * q][2] = f0[1], af[2 * q][3] = f1[1];
          af[2 * q + 1][0] = f0[2], af[2 * q + 1][1] = f1[2], af[2 * q + 1][2] = f0[3], af[2 * q + 1][3] = f1[3];
        }
      }
    }
    if (s + 1 < steps) load_raw(s + 1, w0, w1, c0, c1);  // in flight while this step's wgmmas run
    mbar_wait(act_full + 8 * full_stage, full_phase);      // step s's activations have landed
    const uint32_t as = base + full_stage * kActStageBytes;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      WgmmaRS<T, 256>::run(acc, af[j], desc_sw128(as + (j >> 2) * (kActStageBytes / 2) + (j & 3) * 32));
    }
    wgmma_commit();
    wgmma_wait_all();  // the A fragments are rewritten next step, and the stage is free
    if (ct == 0) mbar_arrive(act_empty + 8 * full_stage);
    if (++full_stage == DA) full_stage = 0, full_phase ^= 1u;
    // thread 0: step s + DA - 1 into step s - 1's stage, once both warpgroups have released it
    if (tid == 0 && s + DA - 1 < steps) {
      if (s >= 1) {
        mbar_wait(act_empty + 8 * empty_stage, empty_phase);
        if (++empty_stage == DA) empty_stage = 0, empty_phase ^= 1u;
      }
      load_act(s + DA - 1);
    }
  }
#else
  uint32_t full_phase = 0, empty_phase = 0;
  int full_stage = 0, empty_stage = 0;
  // half h of the step in (w0, w1, c0, c1): words 2 h, 2 h + 1 of both rows, scale blocks
  // 4 h .. 4 h + 3 -> the A fragments of k16 tiles 4 h .. 4 h + 3
  auto decode_half = [&](int h, uint32_t (&af)[4][4]) {
    const uint32_t wa0 = h ? w0.z : w0.x, wb0 = h ? w0.w : w0.y, wa1 = h ? w1.z : w1.x, wb1 = h ? w1.w : w1.y;
    const uint32_t cb0 = h ? c0.y : c0.x, cb1 = h ? c1.y : c1.x;
    float s0[4], s1[4];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const float2 f0 = e4m3x2_to_f32(b == 0 ? cb0 : cb0 >> 16);
      const float2 f1 = e4m3x2_to_f32(b == 0 ? cb1 : cb1 >> 16);
      s0[2 * b] = f0.x * gs, s0[2 * b + 1] = f0.y * gs;
      s1[2 * b] = f1.x * gs, s1[2 * b + 1] = f1.y * gs;
    }
    bool all_table = true;
#pragma unroll
    for (int i = 0; i < 4; ++i) all_table &= table_ok<T>(s0[i]) & table_ok<T>(s1[i]);
    const uint32_t wr0[2] = {wa0, wb0}, wr1[2] = {wa1, wb1};
#pragma unroll
    for (int qq = 0; qq < 2; ++qq) {
      uint32_t f0[4], f1[4];
      if (all_table) {
        decode_word_two_tables(wr0[qq], build_table<T>(s0[2 * qq]), build_table<T>(s0[2 * qq + 1]), f0);
        decode_word_two_tables(wr1[qq], build_table<T>(s1[2 * qq]), build_table<T>(s1[2 * qq + 1]), f1);
      } else {
        decode_word_multiply<T>(wr0[qq], s0[2 * qq], s0[2 * qq + 1], f0);
        decode_word_multiply<T>(wr1[qq], s1[2 * qq], s1[2 * qq + 1], f1);
      }
      af[2 * qq][0] = f0[0], af[2 * qq][1] = f1[0], af[2 * qq][2] = f0[1], af[2 * qq][3] = f1[1];
      af[2 * qq + 1][0] = f0[2], af[2 * qq + 1][1] = f1[2], af[2 * qq + 1][2] = f0[3], af[2 * qq + 1][3] = f1[3];
    }
  };
  // Two half-step fragment buffers: half 0 of step s is decoded while half 1 of step s - 1 runs,
  // half 1 while half 0 runs (wgmma.wait_group 1 frees the buffer the group before last read).
  // Step s - 1's activation stage is released once its second half is complete; thread 0 then
  // loads step s + DA - 1 into it, when both warpgroups have released it.
  uint32_t a_lo[4][4], a_hi[4][4];
  for (int s = 0; s < steps; ++s) {
    if (s > 0) wgmma_wait_one();  // half 0 of step s - 1 is complete: a_lo is free
    decode_half(0, a_lo);
    mbar_wait(act_full + 8 * full_stage, full_phase);  // step s's activations have landed
    const uint32_t as = base + full_stage * kActStageBytes;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) WgmmaRS<T, 256>::run(acc, a_lo[j], desc_sw128(as + j * 32));
    wgmma_commit();
    if (s > 0) {
      wgmma_wait_one();  // step s - 1 is complete: a_hi and its activation stage are free
      if (ct == 0) mbar_arrive(act_empty + 8 * ((full_stage + DA - 1) % DA));
    }
    // step s + DA - 1 (into step s - 1's stage; at s = 0 into the last, unused one)
    if (tid == 0 && s + DA - 1 < steps) {
      if (s > 0) {
        mbar_wait(act_empty + 8 * empty_stage, empty_phase);
        if (++empty_stage == DA) empty_stage = 0, empty_phase ^= 1u;
      }
      load_act(s + DA - 1);
    }
    __syncwarp();  // warp 0 converged again before its next warpgroup-wide (.aligned) wgmma
    decode_half(1, a_hi);
    if (s + 1 < steps) load_raw(s + 1, w0, w1, c0, c1);  // in flight while this step's wgmmas run
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      WgmmaRS<T, 256>::run(acc, a_hi[j], desc_sw128(as + kActStageBytes / 2 + j * 32));
    }
    wgmma_commit();
    if (++full_stage == DA) full_stage = 0, full_phase ^= 1u;
  }
  wgmma_wait_all();
#endif
#pragma unroll
  for (int x = 0; x < 128; ++x) fence_acc(acc[x]);
  // D fragment: acc[4 i + c] = weight row 16 warp + g + 8 (c >> 1) of the warpgroup's 64,
  // activation row 8 i + 2 t + (c & 1)
#pragma unroll
  for (int x = 0; x < 128; ++x) {
    const int i8 = x >> 2, c = x & 3;
    const int nn = n0 + 64 * wg + 16 * warp + g + 8 * (c >> 1);
    const int mm = m0 + 8 * i8 + 2 * t + (c & 1);
    if (mm < m && nn < n) {
      float v = acc[x];
      if (partial != nullptr) {
        partial[(static_cast<int64_t>(split) * m + mm) * n + nn] = v;
      } else {
        if (bias != nullptr) v += OutT<T>::to_f32(bias[nn]);
        out[static_cast<int64_t>(mm) * n + nn] = OutT<T>::one(v);
      }
    }
  }
}


template <typename T, int C>
cudaError_t launch_ra(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                      void* out, float* workspace, int m, int n, int k, int splits, cudaStream_t stream) {
  constexpr int kDA = RA_DA;
  const auto kernel = nvfp4_fused_ra_kernel<T, C, kDA>;
  constexpr int kSmem = kDA * kActStageBytes + 16 * kDA + 1024;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  CUtensorMap act_map{};
  err = encode_act_map(&act_map, a, std::is_same_v<T, __nv_bfloat16>, m, k, kActRows);
  if (err != cudaSuccess) return err;
  const int n_tiles = (n + 64 * C - 1) / (64 * C);
  const int m_tiles = (m + kActRows - 1) / kActRows;
  const int steps = k / kStepK;
  const int per = (steps + splits - 1) / splits;
  const unsigned blocks = static_cast<unsigned>(n_tiles) * m_tiles * splits;
  float* part = splits > 1 ? workspace : nullptr;
  kernel<<<blocks, 128 * C, kSmem, stream>>>(static_cast<const uint8_t*>(packed), static_cast<const uint8_t*>(scales),
                                            static_cast<const float*>(g), static_cast<const unsigned short*>(bias),
                                            static_cast<unsigned short*>(out), part, m, n, k, n_tiles, m_tiles, per,
                                            act_map);
  err = cudaGetLastError();
  if (err != cudaSuccess || splits <= 1) return err;
  return nvfp4::launch_splitk_finalize<T>(workspace, static_cast<const unsigned short*>(bias),
                                          static_cast<unsigned short*>(out), m, n, splits, stream);
}

}  // namespace

extern "C" {

// Dev entry: packed in this file's layout (ra_dev.py), scales in the tile-contiguous layout; 128
// weight rows a block (two warpgroups), 256 activation rows a block.
int nvfp4ra_launch(const void* a, const void* packed, const void* scales, const void* g, const void* bias, void* out,
                   float* workspace, int32_t m, int32_t n, int32_t k, int32_t out_bf16, int32_t splits,
                   cudaStream_t stream) {
  if (m < 1 || m > 4096 || n < 1 || k < kStepK || k % kStepK || splits < 1 || splits > k / kStepK ||
      (splits > 1 && workspace == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err =
      out_bf16 ? launch_ra<__nv_bfloat16, 2>(a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream)
               : launch_ra<__half, 2>(a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
  return static_cast<int>(err);
}

}  // extern "C"
