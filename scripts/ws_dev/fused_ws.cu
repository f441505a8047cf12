// Development build (not part of the library yet): a warp-specialized fused NVFP4 matmul for
// medium M on Hopper warpgroup MMAs (sm_90a). Y = A @ W^T (+ bias), block size 16, K % 128 == 0,
// weights in the tile-contiguous layout (nvfp4_kernels.layout.tile_weights, signs placed).
//
// Roles. A block owns NT weight rows and 64 C activation rows, and walks its split's 128-value K
// steps. Three kinds of work, three rings in shared memory:
// - the copy warp (the last producer warp) copies each step's packed bytes and scale bytes of the
//   block's rows by 16-byte cp.async, RS - 1 steps ahead, into the raw ring (RS stages); each lane
//   arrives on the stage's full barrier as its copies land (cp.async.mbarrier.arrive.noinc). A
//   first version had one consumer thread issue bulk copies (cp.async.bulk, up to eight runs a
//   step): about 1100 cycles a step of that thread's time, on the consumers' critical path;
// - the decoding warps (P - 1, no accumulators) decode a raw stage into a decoded stage (D
//   stages): a unit is 8 weight rows of one step, the units of a step go to the warps round robin
//   (warp w's units continue where its last step's left off, so every warp has the same share over
//   time), two units side by side; each lane decodes 32 weights of a unit (two scale blocks, four
//   words) with the table decode of mma_decode.cuh (or the exact multiply form where a block's
//   scale leaves the table's range) and stores them as a wgmma B operand (K-major, 128-byte
//   swizzle);
// - the consumer warpgroups (C, 64 activation rows each) copy their activations (cp.async, the
//   mma.sync kernel's swizzle), take their A fragments with 16-byte shared loads and run
//   wgmma.m64nNTk16 with A from registers and B by descriptor; the fragments of step s + 1 are
//   loaded while the wgmmas of step s run (two fragment buffers), and a decoded stage is released
//   once the next step's wgmmas are issued and its own are complete (wgmma.wait_group 1).
// Full / empty mbarriers order the rings; setmaxnreg moves registers from producers to consumers
// (ptxas gives the consumer code the raised budget when the roles are an early-returning branch;
// as two inlined branches of an if / else it spilled, and with 640 threads it refused, C7602).
//
// Bits. Each k16 wgmma of a 128-value step sums exactly the 16 products that the mma.sync kernel's
// MMA of the same index sums, in the same slots: MMA j = 2 q + h takes K = 32 t + 8 q + 4 h + i
// (t, i in 0..3) at slot 2 t + (i & 1) + 8 (i >> 1). The decoded tile puts weight K there, and the
// A fragment is the mma.sync kernel's B fragment of the same activation values. The chain runs j =
// 0..7 per step, steps in order, from +0.0; splits as fused_mma's (equal step ranges, partials
// summed in split order by the same finalize kernel). So at the same split count it gives the
// mma.sync kernel's bits, which the dev script checks.
//
// WS_SS (activations from shared memory) builds, thirteenth session:
// - the activation tiles come by TMA (cp.async.bulk.tensor, 128-byte swizzle, rows past M
//   zero-filled): thread 0 of each consumer warpgroup issues a step's two K-half boxes into the
//   stage that the previous step's wgmmas freed, and the bytes complete the stage's barrier;
// - above M = 128 a block takes 256 activation rows (two consumer warpgroups of two 64-row slices
//   each, MS = 2), so that every weight is decoded once at M = 256: two activation stages of 64 KB,
//   two decoded and three raw stages fill the 227 KB;
// - there the accumulators take more than half the register file (136 a consumer thread), and
//   the consumer warps decode part of every step too (kConsDecode), while their wgmmas run.
// The setmaxnreg split assumes the launch gets kLaunchRegs a thread; ptxas may give a kernel
// fewer than its launch bounds allow (a 448-thread build got 128, not 144, and its consumers'
// setmaxnreg.inc waited forever), so the launcher refuses a build whose count differs.
//
// Build flags (scripts/ws_dev/ws_dev.py builds them): WS_SS takes the activations from shared
// memory by descriptor and lays the decoded tile out in natural K order (other bits than the
// mma.sync kernel's; the consumer then holds only its accumulators), WS_ACT_CPASYNC (with WS_SS)
// copies them by per-thread cp.async instead of TMA, WS_NO_CONS_DECODE leaves all decoding to the
// producer warps, WS_TWO_PER_SM (with WS_SS) runs M <= 64 as two 72-row blocks per SM,
// WS_PRODUCER_WARPS / WS_RS / WS_D / WS_DA size the one-warpgroup build, WS_MS2_P /
// WS_MS2_CONS_REGS the 256-row one, WS_TRACE records per-step clock64 stamps of block 0, and
// WS_PROBE_* leave a stage out (timing probes, wrong by design).
#include <type_traits>

#include "hopper_async.cuh"
#include "mma_decode.cuh"
#include "wgmma_rs.cuh"

// Timing probe (WS_TRACE builds only): clock64 per step of block 0, producer warps 0 and P - 1
// (slots 0..2 and 10..12) and the consumer's thread 0 (slots 4..8), read by nvfp4ws_trace.
#ifdef WS_TRACE
__device__ long long g_ws_trace[256][16];
#define WS_TRACE_AT(i) \
  if (blockIdx.x == 0 && tid == 0 && s < 256) g_ws_trace[s][i] = clock64()
#define WS_PTRACE_AT(i)                                                            \
  if (blockIdx.x == 0 && lane == 0 && (pw == 0 || pw == P - 2) && s < 256) \
  g_ws_trace[s][(i) + (pw == 0 ? 0 : 10)] = clock64()
#else
#define WS_TRACE_AT(i)
#define WS_PTRACE_AT(i)
#endif

// WS_SS builds load the activation tiles with the tensor memory accelerator (one
// cp.async.bulk.tensor per warpgroup and K half, issued by one consumer thread, completing on an
// mbarrier); -DWS_ACT_CPASYNC keeps the per-thread 16-byte cp.async copies of the first SS build.
#if defined(WS_SS) && !defined(WS_ACT_CPASYNC)
#define WS_TMA_ACT 1
#endif
#if defined(WS_STASYNC) && !defined(WS_SS)
#error "WS_STASYNC writes the natural-K-order decoded tile of the WS_SS build"
#endif

namespace {

using namespace nvfp4::hopper;  // NOLINT: the shared helpers of hopper_async.cuh
using nvfp4::build_table;
using nvfp4::decode_word;
using nvfp4::DecodeTable;
using nvfp4::e4m3x2_to_f32;
using nvfp4::OutT;
using nvfp4::prmt;
using nvfp4::table_ok;

constexpr int kStepK = 128;
#ifndef WS_PRODUCER_WARPS
#define WS_PRODUCER_WARPS 12
#endif
#ifndef WS_RS
#define WS_RS 4  // raw stages
#endif
#ifndef WS_D
#define WS_D 3  // decoded stages
#endif
#ifndef WS_DA
#define WS_DA 3  // activation stages (one consumer warpgroup)
#endif

template <int NT, int C, int P, int RS, int D, int DA, int MINB = 1, int MS = 1>
struct WsTile {
  static constexpr int kConsumers = 128 * C;
  static constexpr int kProducers = 32 * P;
  static constexpr int kThreads = kConsumers + kProducers;
  static constexpr int kActRows = 64 * C * MS;
  static constexpr int kUnits = NT / 8;          // 8-row decode units per step
  static constexpr int kHalfBytes = NT * 128;    // one K half of a decoded step
  static constexpr int kDecBytes = 2 * kHalfBytes;
  static constexpr int kActBytes = kActRows * 256;
  static constexpr int kRawPacked = NT * 64;     // a raw stage: the rows' packed bytes, then their scales
  static constexpr int kRawBytes = NT * 72;
  static constexpr int kDecOff = 0;
  static constexpr int kActOff = kDecOff + D * kDecBytes;
  static constexpr int kRawOff = kActOff + DA * kActBytes;
  // registers a thread: the launch's even share (65536 / threads, in units of 8), then setmaxnreg
  // moves some from the producers to the consumers (kConsRegs), the producers keeping the rest
  static constexpr int kLaunchRegs =
      (65536 / (kThreads * MINB)) / 8 * 8 > 255 ? 248 : (65536 / (kThreads * MINB)) / 8 * 8;
#ifdef WS_SS
  // the accumulators (NT / 2 a slice) and addresses only
#ifndef WS_MS2_CONS_REGS
#define WS_MS2_CONS_REGS 192  // 176 and 184 spilled, the producers keep 64
#endif
  static constexpr int kConsRegs = MS == 2 ? WS_MS2_CONS_REGS : NT >= 160 ? 144 : 128;
#else
  static constexpr int kConsRegs = NT >= 160 ? 184 : 176;  // no spills in either role (ptxas -v)
#endif
  // two units decoded side by side need about 100 registers: only where the producers keep that
  static constexpr bool kPairs = C == 1 && MINB == 1;
  // With two slices a warpgroup the accumulators take more than half the register file, so few
  // producer warps remain; the consumer warps then decode units too, while their wgmmas run
  // (WS_NO_CONS_DECODE: only the producer warps decode). The producers take the first
  // kProdUnits units of a step, the consumer warps the rest.
#if defined(WS_SS) && !defined(WS_NO_CONS_DECODE)
  static constexpr bool kConsDecode = MS == 2;
#else
  static constexpr bool kConsDecode = false;
#endif
  static constexpr int kDecWarps = (P - 1) + (kConsDecode ? 4 * C : 0);
  static constexpr int kProdUnits =
      kConsDecode ? (kUnits * (P - 1) / kDecWarps > P - 1 ? kUnits * (P - 1) / kDecWarps : P - 1) : kUnits;
  static constexpr int kProdRegs = ((kThreads * kLaunchRegs - kConsumers * kConsRegs) / kProducers) / 8 * 8;
  static constexpr int kBarOff = kRawOff + RS * kRawBytes;
#ifdef WS_TMA_ACT
  static constexpr int kBars = 2 * D + 2 * RS + C * DA;  // + each warpgroup's activation stages
#else
  static constexpr int kBars = 2 * D + 2 * RS;
#endif
  static constexpr int kSmemBytes = kBarOff + 8 * kBars + 1024;  // + the base's alignment to 1024
  static_assert(NT % 8 == 0 && kHalfBytes % 1024 == 0, "whole swizzle atoms per K half");
  static_assert(kProdRegs >= 24 && kConsumers * kConsRegs + kProducers * kProdRegs <= kThreads * kLaunchRegs,
                "setmaxnreg must not ask the pool for more than the launch gave it");
  static_assert(P - 1 <= kProdUnits && kProdUnits <= kUnits, "every producer decoding warp has a unit in every step");
  static_assert(kRawPacked % 16 == 0, "the copy warp copies 16-byte chunks");
#ifdef WS_SS
  static_assert(MS == 1 || MS == 2, "one or two 64-row slices a consumer warpgroup");
#else
  static_assert(MS == 1, "two slices a warpgroup only with activations from shared memory (WS_SS)");
#endif
  static_assert(kSmemBytes <= (MINB == 1 ? 232448 : 233472 / MINB - 1024), "shared memory");
};

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
[[maybe_unused]] __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void sts64(uint32_t addr, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void sts128(uint32_t addr, const uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

[[maybe_unused]] __device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// arrives on the mbarrier once all of this thread's earlier cp.async copies have landed (the
// barrier's expected count includes this arrival: .noinc)
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// WS_STASYNC: a 16-byte store into this CTA's shared memory through st.async, its bytes counted on
// the barrier (both addresses mapped into the cluster window; a launch without clusters is a
// cluster of one)
[[maybe_unused]] __device__ __forceinline__ uint32_t cluster_addr(uint32_t cta_addr) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(r) : "r"(cta_addr));
  return r;
}
[[maybe_unused]] __device__ __forceinline__ void st_async16(uint32_t addr, const uint32_t (&v)[4], uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(addr),
               "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(bar)
               : "memory");
}


// the mma.sync kernel's activation swizzle (fused_mma.cu act_chunk): conflict-free 16-byte loads
[[maybe_unused]] __device__ __forceinline__ int act_chunk(int c, int r) { return c ^ (((c >> 3) & 1) << 1) ^ (r & 1); }

// A ring position: the stage and the parity of its current use, advanced one step at a time.
template <int STAGES>
struct RingPos {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void next() {
    if (++stage == STAGES) stage = 0, phase ^= 1u;
  }
};

template <typename T, int NT, int C, int P, int RS, int D, int DA, int MINB, int MS>
__global__ void __launch_bounds__(WsTile<NT, C, P, RS, D, DA, MINB, MS>::kThreads, MINB)
nvfp4_fused_ws_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ packed,
                      const uint8_t* __restrict__ scales, const float* __restrict__ g_ptr,
                      const unsigned short* __restrict__ bias, unsigned short* __restrict__ out,
                      float* __restrict__ partial, int m, int n, int k, int n_tiles, int m_tiles,
                      int steps_per_split, const __grid_constant__ CUtensorMap act_map) {
  using TL = WsTile<NT, C, P, RS, D, DA, MINB, MS>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t dec_full = base + TL::kBarOff;  // D, then D dec_empty, RS raw_full, RS raw_empty
  const uint32_t dec_empty = dec_full + 8 * D;
  const uint32_t raw_full = dec_empty + 8 * D;
  const uint32_t raw_empty = raw_full + 8 * RS;
  [[maybe_unused]] const uint32_t act_full = raw_empty + 8 * RS;  // WS_TMA_ACT: DA per warpgroup
  const int tid = static_cast<int>(threadIdx.x);
  const int m_tile = blockIdx.x % m_tiles;
  const int n_tile = (blockIdx.x / m_tiles) % n_tiles;
  const int split = blockIdx.x / (m_tiles * n_tiles);
  const int n0 = n_tile * NT;
  const int m0 = m_tile * TL::kActRows;
  const int total_steps = k / kStepK;
  const int step0 = split * steps_per_split;
  const int steps = max(0, min(step0 + steps_per_split, total_steps) - step0);
  if (tid == 0) {
    for (int i = 0; i < D; ++i) {
      mbar_init(dec_full + 8 * i, TL::kDecWarps);
      mbar_init(dec_empty + 8 * i, C);
    }
    for (int i = 0; i < RS; ++i) {
      mbar_init(raw_full + 8 * i, 32);      // the copy warp's lanes, as their copies land
      mbar_init(raw_empty + 8 * i, TL::kDecWarps);  // the decoding warps
    }
#ifdef WS_TMA_ACT
    for (int i = 0; i < C * DA; ++i) mbar_init(act_full + 8 * i, 1);  // thread 0 of the warpgroup + bytes
#endif
    fence_barrier_init();
  }
  __syncthreads();

  // Decoding a unit (the producer warps, and with kConsDecode the consumer warps too).
  const int dlane = tid & 31;
  const int urow = dlane & 7, th = (dlane >> 3) & 1, p = dlane >> 4;
  const float gs = __ldg(g_ptr);
  const uint32_t rd0 = urow * 64 + (((2 * th) ^ ((urow >> 1) & 3)) << 4) + 8 * p;  // quarter 2 th
  const uint32_t rd1 = urow * 64 + (((2 * th + 1) ^ ((urow >> 1) & 3)) << 4) + 8 * p;  // quarter 2 th + 1
  const uint32_t rds = TL::kRawPacked + urow * 8 + 4 * th;
  const uint32_t sel = 0x20u + 0x11u * static_cast<uint32_t>(p);
  const uint32_t wr = p * TL::kHalfBytes + urow * 128 + 8 * th;
  const uint32_t wr_ss = th * TL::kHalfBytes + urow * 128;
  // WS_STASYNC: the decoded stage's full barrier (cluster window) the stores count on, and the
  // units this thread decoded in the step (its warp's bytes: 2048 a unit)
  [[maybe_unused]] uint32_t st_bar = 0;
  [[maybe_unused]] int units_done = 0;
  // NU units (u0, u0 + ustride, ...) of one step: loads, decode and stores, the units side by side
  auto decode_units = [&](auto nu_tag, uint32_t raw, uint32_t dec, int u0, int ustride) {
    constexpr int NU = decltype(nu_tag)::value;
    units_done += NU;
    uint32_t words[NU][2][2], sw[NU];
#pragma unroll
    for (int v = 0; v < NU; ++v) {
      const int u = u0 + v * ustride;
      const uint2 wa = lds64(raw + u * 512 + rd0);  // quarter 2 th: words 2p, 2p + 1
      const uint2 wb = lds64(raw + u * 512 + rd1);  // quarter 2 th + 1
      sw[v] = lds32(raw + u * 64 + rds);
      words[v][0][0] = wa.x, words[v][0][1] = wa.y, words[v][1][0] = wb.x, words[v][1][1] = wb.y;
    }
    float sc[NU][2];
    bool all_table = true;
#pragma unroll
    for (int v = 0; v < NU; ++v) {
      const float2 s01 = e4m3x2_to_f32(prmt(sw[v], 0u, sel));
      sc[v][0] = s01.x * gs, sc[v][1] = s01.y * gs;
      all_table &= table_ok<T>(sc[v][0]) & table_ok<T>(sc[v][1]);
    }
    uint32_t r[NU][2][2][4];
    [[maybe_unused]] auto each_r = [&](auto fn) {  // the probes' walk over every decoded register
#pragma unroll
      for (int v = 0; v < NU; ++v)
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int qq = 0; qq < 2; ++qq)
#pragma unroll
            for (int c = 0; c < 4; ++c) fn(v, t, qq, c);
    };
#ifdef WS_PROBE_NO_DECODE
    each_r([&](int v, int t, int qq, int c) { r[v][t][qq][c] = words[v][t][qq] ^ c ^ __float_as_uint(sc[v][t]); });
#else
    if (all_table) {
#pragma unroll
      for (int v = 0; v < NU; ++v) {
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const DecodeTable tb = build_table<T>(sc[v][t]);
          nvfp4::decode_word_table_placed(words[v][t][0], tb, r[v][t][0]);
          nvfp4::decode_word_table_placed(words[v][t][1], tb, r[v][t][1]);
        }
      }
    } else {
#pragma unroll
      for (int v = 0; v < NU; ++v) {
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          const uint32_t w0 = nvfp4::unplace_signs(words[v][t][0]), w1 = nvfp4::unplace_signs(words[v][t][1]);
          const float big = sc[v][t] * nvfp4::pow2_14();
          const bool slow =
              fabsf(big) == __uint_as_float(0x7F800000u) && fabsf(sc[v][t]) != __uint_as_float(0x7F800000u);
          if (!slow) {
            decode_word<T, true>(w0, big, r[v][t][0]);
            decode_word<T, true>(w1, big, r[v][t][1]);
          } else {
            decode_word<T, false>(w0, sc[v][t], r[v][t][0]);
            decode_word<T, false>(w1, sc[v][t], r[v][t][1]);
          }
        }
      }
    }
#endif
#ifdef WS_PROBE_NO_DEC_STORE  // timing probe only: the decoded tile is never written
    each_r([&](int v, int t, int qq, int c) { asm volatile("" : "+r"(r[v][t][qq][c])::"memory"); });
#elif defined(WS_SS)
    // natural K order: word (t, q = 2p + qq) holds K = 32 (2 th + t) + 8 q .. + 7, chunk 4 t + q of
    // K half th of the row, one 16-byte store (conflict free: 4 lanes per 16-byte bank slot)
#pragma unroll
    for (int v = 0; v < NU; ++v) {
      const uint32_t row_base = dec + (u0 + v * ustride) * 1024 + wr_ss;
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int qq = 0; qq < 2; ++qq) {
          const uint32_t chunk = static_cast<uint32_t>((4 * t + 2 * p + qq) ^ urow);
#ifdef WS_STASYNC
          st_async16(cluster_addr(row_base + (chunk << 4)), r[v][t][qq], st_bar);
#else
          sts128(row_base + (chunk << 4), r[v][t][qq]);
#endif
        }
      }
    }
#else
    // word (t, q = 2p + qq) register c holds K = 32 t + 8 q + 2 c, +1: byte 64 qq + 16 c + 4 t of
    // K half p of the row (MMA 2 q + (c >> 1), slot 2 t, + 8 for odd c); quarters 2 th, 2 th + 1
    // are the two words of one 8-byte store
#pragma unroll
    for (int v = 0; v < NU; ++v) {
      const uint32_t row_base = dec + (u0 + v * ustride) * 1024 + wr;
#pragma unroll
      for (int qq = 0; qq < 2; ++qq) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const uint32_t chunk = static_cast<uint32_t>((4 * qq + c) ^ urow);
          sts64(row_base + (chunk << 4), r[v][0][qq][c], r[v][1][qq][c]);
        }
      }
    }
#endif
  };
  // A decoding warp's end of a step: its stores before the async proxy (the wgmmas) reads them,
  // then lane 0's arrivals: the raw stage is free, the warp's share of the decoded stage is in.
  auto finish_decode_step = [&](int raw_stage, int dec_stage, bool fence) {
    if (fence) fence_proxy_async();
    __syncwarp();
    if (dlane == 0) {
      mbar_arrive(raw_empty + 8 * raw_stage);
#ifdef WS_STASYNC
      mbar_expect_tx(dec_full + 8 * dec_stage, 2048u * static_cast<uint32_t>(units_done));
#else
      mbar_arrive(dec_full + 8 * dec_stage);
#endif
    }
  };

  if (tid >= TL::kConsumers) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(TL::kProdRegs) : "memory");
    // ---- producers: decode each raw stage into a decoded stage ------------------------------------
    // Lane l decodes row 8 u + l % 8 of its unit u, words q = 2p, 2p + 1 (p = l / 16) of quarters
    // 2 th, 2 th + 1 (th = l / 8 % 2): two scale blocks, four words, eight 8-byte stores (conflict
    // free: the 16 lanes of one p hit 16 different 8-byte slots of a 128-byte row span).
    const int pw = (tid - TL::kConsumers) >> 5;
    const int lane = tid & 31;
    if (pw == P - 1) {
      // ---- the copy warp: each step's packed bytes and scale bytes of the block's rows, RS - 1
      // steps ahead, by 16-byte cp.async per lane; each lane's copies arrive on the stage's full
      // barrier as they land (cp.async.mbarrier.arrive.noinc). Packed chunk j of lane l is row
      // l / 4 + 8 j, quarter l % 4, stored at quarter (l % 4) ^ (row / 2 % 4) of the row's 64 bytes
      // (the decoders' reads are then conflict free); scale chunk j is rows 2 (l + 32 j), + 1.
      const int rows_padded = 64 * ((n + 63) / 64);
      const int crow = lane >> 2, cq = lane & 3;
      RingPos<RS> copy_pos;
      for (int sn = 0; sn < steps; ++sn) {
        if (sn >= RS) mbar_wait(raw_empty + 8 * copy_pos.stage, copy_pos.phase ^ 1u);
        const uint32_t raw = base + TL::kRawOff + copy_pos.stage * TL::kRawBytes;
#ifndef WS_PROBE_NO_COPY  // timing probe only: the raw stages are never filled
#pragma unroll
        for (int j = 0; j < TL::kUnits; ++j) {
          const int r = crow + 8 * j, grow = n0 + r;
          const uint32_t off = static_cast<uint32_t>(((grow >> 6) * total_steps + step0 + sn) * 4096 + (grow & 63) * 64 + cq * 16);
          cp_async16(raw + r * 64 + ((cq ^ ((r >> 1) & 3)) << 4), packed + off, grow < rows_padded);
        }
#pragma unroll
        for (int j = 0; j < (NT / 2 + 31) / 32; ++j) {
          const int r = 2 * (lane + 32 * j), grow = n0 + r;
          if (r < NT) {
            const uint32_t off = static_cast<uint32_t>(((grow >> 6) * total_steps + step0 + sn) * 512 + (grow & 63) * 8);
            cp_async16(raw + TL::kRawPacked + r * 8, scales + off, grow < rows_padded);
          }
        }
#endif
        cp_async_arrive_noinc(raw_full + 8 * copy_pos.stage);
        copy_pos.next();
      }
      cp_async_wait<0>();
      return;
    }
    // ---- the decoding warps (P - 1): each raw stage into a decoded stage
    RingPos<RS> raw_pos;
    RingPos<D> dec_pos;
    int u = pw;
    for (int s = 0; s < steps; ++s) {
      mbar_wait(raw_full + 8 * raw_pos.stage, raw_pos.phase);
      WS_PTRACE_AT(0);
      if (s >= D) mbar_wait(dec_empty + 8 * dec_pos.stage, dec_pos.phase ^ 1u);
      WS_PTRACE_AT(1);
      const uint32_t raw = base + TL::kRawOff + raw_pos.stage * TL::kRawBytes;
      const uint32_t dec = base + TL::kDecOff + dec_pos.stage * TL::kDecBytes;
#ifdef WS_STASYNC
      st_bar = cluster_addr(dec_full + 8 * dec_pos.stage);
      units_done = 0;
#endif
      // the warp's units of this step, two at a time so that their independent chains interleave
      if constexpr (TL::kPairs) {
        for (; u + (P - 1) < TL::kProdUnits; u += 2 * (P - 1)) {
          decode_units(std::integral_constant<int, 2>{}, raw, dec, u, P - 1);
        }
      } else {
        for (; u + (P - 1) < TL::kProdUnits; u += P - 1) {
          decode_units(std::integral_constant<int, 1>{}, raw, dec, u, P - 1);
        }
      }
      if (u < TL::kProdUnits) {
        decode_units(std::integral_constant<int, 1>{}, raw, dec, u, P - 1);
        u += P - 1;
      }
      u -= TL::kProdUnits;
      WS_PTRACE_AT(2);
#ifdef WS_PROBE_NO_FENCE  // timing probe only: without it the wgmma may read stale values
      finish_decode_step(raw_pos.stage, dec_pos.stage, false);
#else
      finish_decode_step(raw_pos.stage, dec_pos.stage, true);
#endif
      raw_pos.next();
      dec_pos.next();
    }
    return;
  }

  // ---- consumer warpgroup(s): copies issued, activations in, wgmma out ---------------------------
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(TL::kConsRegs) : "memory");
  const int wg = tid >> 7;  // 0 .. C - 1: activation rows 64 MS wg .. 64 MS (wg + 1) - 1 of the tile
  const int ct = tid & 127;
  const int warp = ct >> 5, lane = ct & 31, g = lane >> 2, t = lane & 3;
  // Activation copies: 64 rows x 16 chunks of 16 bytes a step, 8 per thread; copy jj is row
  // r0c + 8 jj, chunk cc, at a destination whose swizzle is the same for every jj (it depends on the
  // row modulo 8 or 2 only), so one source pointer, one destination offset and a validity mask
  // serve all eight. WS_SS: K half cc / 8, chunk cc % 8 of the row's 128 bytes there, stored at
  // chunk (cc % 8) ^ (row % 8) (the canonical K-major 128-byte swizzle the wgmmas read by
  // descriptor). Otherwise: the mma.sync kernel's swizzle (act_chunk), for 16-byte fragment loads.
  // With MS = 2 slices a warpgroup (WS_SS), K half h of the warpgroup's 128 rows is 16 KB at
  // h * 16 KB, and slice sl (rows 64 sl ..) 8 KB into it: one TMA box of 128 rows a K half.
  constexpr uint32_t kSliceBytes = 64 * 256;
  const uint32_t act = base + TL::kActOff + MS * wg * kSliceBytes;
  const int r0c = ct >> 4, cc = ct & 15;
  const int64_t row_stride = static_cast<int64_t>(k) * 2;
  const int arow0 = m0 + 64 * MS * wg + r0c;
  const uint8_t* asrc[MS];
#pragma unroll
  for (int sl = 0; sl < MS; ++sl) {
    asrc[sl] = a + (static_cast<int64_t>(min(arow0 + 64 * sl, m - 1)) * k + cc * 8 +
                    static_cast<int64_t>(step0) * kStepK) * 2;
  }
#ifdef WS_SS
  constexpr uint32_t kHalfAct = MS * 8192;  // one K half of the warpgroup's rows
  constexpr uint32_t kSliceOff = 8192;      // slice sl's rows within a K half
  const uint32_t adst = (cc >> 3) * kHalfAct + r0c * 128 + (((cc & 7) ^ r0c) << 4);
  constexpr uint32_t kEightRows = 8 * 128;
#else
  constexpr uint32_t kSliceOff = kSliceBytes;
  const uint32_t adst = r0c * 256 + act_chunk(cc, r0c) * 16;
  constexpr uint32_t kEightRows = 8 * 256;
#endif
  uint32_t amask = 0;  // bit 8 sl + jj: row arow0 + 64 sl + 8 jj is inside M
#pragma unroll
  for (int sl = 0; sl < MS; ++sl)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) amask |= static_cast<uint32_t>(arow0 + 64 * sl + 8 * jj < m) << (8 * sl + jj);
  auto load_act = [&](int stage) {
#ifdef WS_PROBE_NO_ACT  // timing probe only: the activations are never copied
    return;
#endif
#pragma unroll
    for (int sl = 0; sl < MS; ++sl) {
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        const bool ok = (amask >> (8 * sl + jj)) & 1u;
        cp_async16(act + stage * TL::kActBytes + sl * kSliceOff + adst + jj * kEightRows,
                   asrc[sl] + (ok ? jj * 8 * row_stride : 0), ok);
      }
      asrc[sl] += 256;
    }
  };
  float acc[MS][NT / 2];
#pragma unroll
  for (int sl = 0; sl < MS; ++sl)
#pragma unroll
    for (int x = 0; x < NT / 2; ++x) acc[sl][x] = 0.f;
#ifdef WS_SS
#ifdef WS_TMA_ACT
  // Activation stages by TMA: thread 0 of the warpgroup issues step s's two K-half boxes (64 MS
  // rows x 64 values each, 128-byte swizzle: the canonical K-major layout) with the bytes expected
  // on the warpgroup's barrier of the stage; step s + DA - 1 goes into step s - 1's stage once step
  // s's wgmmas are issued and s - 1's are complete (wgmma.wait_group 1).
  const uint32_t act_bar = act_full + 8 * DA * wg;
  auto load_act_tma = [&](int s_load) {
#ifdef WS_PROBE_NO_ACT  // timing probe only: the stage's barrier completes with no bytes
    mbar_arrive(act_bar + 8 * (s_load % DA));
    return;
#endif
    const int stage = s_load % DA;
    const uint32_t dst = act + stage * TL::kActBytes, bar = act_bar + 8 * stage;
    const int kcol = (step0 + s_load) * kStepK, row = m0 + 64 * MS * wg;
    mbar_expect_tx(bar, 2 * kHalfAct);
    tma_load_2d(dst, &act_map, kcol, row, bar);
    tma_load_2d(dst + kHalfAct, &act_map, kcol + 64, row, bar);
  };
  if (ct == 0) {
    for (int s = 0; s < DA - 1 && s < steps; ++s) load_act_tma(s);
  }
  RingPos<DA> act_pos;
#endif
  // kConsDecode: this consumer warp's units of step sd (units kProdUnits + warp, + 4 C, ...,
  // continuing where its last step's left off), decoded while the wgmmas of step sd - 1 run
  [[maybe_unused]] RingPos<RS> craw_pos;
  [[maybe_unused]] RingPos<D> cdec_pos;
  [[maybe_unused]] int cu = TL::kProdUnits + (tid >> 5);
  auto consumer_decode = [&](int sd) {
    if constexpr (TL::kConsDecode) {
      mbar_wait(raw_full + 8 * craw_pos.stage, craw_pos.phase);
      if (sd >= D) mbar_wait(dec_empty + 8 * cdec_pos.stage, cdec_pos.phase ^ 1u);
      const uint32_t raw = base + TL::kRawOff + craw_pos.stage * TL::kRawBytes;
      const uint32_t dec = base + TL::kDecOff + cdec_pos.stage * TL::kDecBytes;
#ifdef WS_STASYNC
      st_bar = cluster_addr(dec_full + 8 * cdec_pos.stage);
      units_done = 0;
#endif
      for (; cu < TL::kUnits; cu += 4 * C) decode_units(std::integral_constant<int, 1>{}, raw, dec, cu, 4 * C);
      cu -= TL::kUnits - TL::kProdUnits;
      finish_decode_step(craw_pos.stage, cdec_pos.stage, true);
      craw_pos.next();
      cdec_pos.next();
    }
  };
  if (steps > 0) consumer_decode(0);
#ifndef WS_TMA_ACT
  // Activation stages: the copies of step s are commit group s (DA - 1 in flight); the decoded and
  // activation stages of step s - 1 are released once step s's wgmmas are issued and s - 1's are
  // complete (wgmma.wait_group 1); then step s + DA - 1's activations go into s - 1's stage.
#pragma unroll
  for (int s = 0; s < DA - 1; ++s) {
    if (s < steps) load_act(s);
    cp_async_commit();
  }
#endif
  RingPos<D> dec_pos;
  uint32_t prev_stage = 0;
  for (int s = 0; s < steps; ++s) {
    WS_TRACE_AT(4);
#ifdef WS_TMA_ACT
    mbar_wait(act_bar + 8 * act_pos.stage, act_pos.phase);  // step s's boxes have landed
    act_pos.next();
#else
    cp_async_wait<DA - 2>();
    fence_proxy_async();         // this thread's copies of step s, before the wgmmas read them
    named_barrier(1 + wg, 128);  // every thread's copies of step s are in
#endif
    WS_TRACE_AT(8);
    mbar_wait(dec_full + 8 * dec_pos.stage, dec_pos.phase);
    WS_TRACE_AT(5);
    const uint32_t dec = base + TL::kDecOff + dec_pos.stage * TL::kDecBytes;
    const uint32_t as = act + (s % DA) * TL::kActBytes;
    wgmma_fence();
#ifndef WS_PROBE_NO_MMA
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int sl = 0; sl < MS; ++sl) {
        WgmmaSS<T, NT>::run(acc[sl], desc_sw128(as + (j >> 2) * kHalfAct + sl * kSliceOff + (j & 3) * 32),
                            desc_sw128(dec + (j >> 2) * TL::kHalfBytes + (j & 3) * 32));
      }
    }
#endif
    wgmma_commit();
    wgmma_wait_one();  // step s - 1's wgmmas are complete: its decoded and activation stages are free
    WS_TRACE_AT(6);
    if (s > 0 && ct == 0) mbar_arrive(dec_empty + 8 * prev_stage);
    prev_stage = dec_pos.stage;
    dec_pos.next();
#ifdef WS_TMA_ACT
    if (ct == 0 && s + DA - 1 < steps) load_act_tma(s + DA - 1);
#else
    if (s + DA - 1 < steps) load_act((s + DA - 1) % DA);
    cp_async_commit();
#endif
    if (s + 1 < steps) consumer_decode(s + 1);
    WS_TRACE_AT(7);
  }
  wgmma_wait_all();
#pragma unroll
  for (int sl = 0; sl < MS; ++sl)
#pragma unroll
    for (int x = 0; x < NT / 2; ++x) fence_acc(acc[sl][x]);
  cp_async_wait<0>();
#else
  // Activation stages: the copies of step s are commit group s; the A fragments of step s + 1 are
  // loaded while the wgmmas of step s run (two fragment buffers), and the decoded stage of step
  // s - 1 is released once the wgmmas of step s are issued and those of s - 1 are complete.
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  uint32_t af0[8][4], af1[8][4];
  auto load_fragments = [&](int s, uint32_t (&f)[8][4]) {
    const uint32_t as = act + (s % DA) * TL::kActBytes;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 x0 = lds128(as + r0 * 256 + act_chunk(4 * t + q, r0) * 16);
      const uint4 x1 = lds128(as + r1 * 256 + act_chunk(4 * t + q, r1) * 16);
      f[2 * q][0] = x0.x, f[2 * q][1] = x1.x, f[2 * q][2] = x0.y, f[2 * q][3] = x1.y;
      f[2 * q + 1][0] = x0.z, f[2 * q + 1][1] = x1.z, f[2 * q + 1][2] = x0.w, f[2 * q + 1][3] = x1.w;
    }
  };
#pragma unroll
  for (int s = 0; s < DA; ++s) {
    if (s < steps) load_act(s);
    cp_async_commit();
  }
  cp_async_wait<DA - 1>();
  named_barrier(1 + wg, 128);  // step 0's activations are in for the warpgroup
  load_fragments(0, af0);
  RingPos<D> dec_pos;
  uint32_t prev_stage = 0;
  // one step: its wgmmas from fragments `cur`, then step s + 1's fragments into `nxt` (the two
  // buffers alternate, so the loop below runs two steps per iteration with fixed registers)
  auto step = [&](int s, uint32_t (&cur)[8][4], uint32_t (&nxt)[8][4]) {
    WS_TRACE_AT(4);
    mbar_wait(dec_full + 8 * dec_pos.stage, dec_pos.phase);
    WS_TRACE_AT(5);
    const uint32_t dec = base + TL::kDecOff + dec_pos.stage * TL::kDecBytes;
    wgmma_fence();
#ifndef WS_PROBE_NO_MMA
#pragma unroll
    for (int jmma = 0; jmma < 8; ++jmma) {
      WgmmaRS<T, NT>::run(acc[0], cur[jmma], desc_sw128(dec + (jmma >> 2) * TL::kHalfBytes + (jmma & 3) * 32));
    }
#endif
    wgmma_commit();
    wgmma_wait_one();  // step s - 1's wgmmas are complete: its decoded stage and fragments are free
    WS_TRACE_AT(6);
    if (s > 0 && ct == 0) mbar_arrive(dec_empty + 8 * prev_stage);
    prev_stage = dec_pos.stage;
    dec_pos.next();
    if (s + 1 < steps) {
      cp_async_wait<DA - 2>();
      named_barrier(1 + wg, 128);  // step s + 1's activations are in; step s's stage was read by all
      WS_TRACE_AT(8);
      if (s + DA < steps) load_act(s % DA);
      cp_async_commit();
      load_fragments(s + 1, nxt);
    }
    WS_TRACE_AT(7);
  };
  for (int s = 0; s < steps; s += 2) {
    step(s, af0, af1);
    if (s + 1 < steps) step(s + 1, af1, af0);
  }
  wgmma_wait_all();
#pragma unroll
  for (int x = 0; x < NT / 2; ++x) fence_acc(acc[0][x]);
  cp_async_wait<0>();
#endif
  // D fragment: acc[sl][4 i + c] = activation row 64 sl + 16 warp + g + 8 (c >> 1) of the
  // warpgroup's rows, weight row 8 i + 2 t + (c & 1)
#pragma unroll
  for (int sl = 0; sl < MS; ++sl)
#pragma unroll
  for (int x = 0; x < NT / 2; ++x) {
    const int i8 = x >> 2, c = x & 3;
    const int mm = m0 + 64 * (MS * wg + sl) + 16 * warp + g + 8 * (c >> 1);
    const int nn = n0 + 8 * i8 + 2 * t + (c & 1);
    if (mm < m && nn < n) {
      float v = acc[sl][x];
      if (partial != nullptr) {
        partial[(static_cast<int64_t>(split) * m + mm) * n + nn] = v;
      } else {
        if (bias != nullptr) v += OutT<T>::to_f32(bias[nn]);
        out[static_cast<int64_t>(mm) * n + nn] = OutT<T>::one(v);
      }
    }
  }
}


template <typename T, int NT, int C, int P, int RS, int D, int DA, int MINB = 1, int MS = 1>
cudaError_t launch_ws(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                      void* out, float* workspace, int m, int n, int k, int splits, cudaStream_t stream) {
  using TL = WsTile<NT, C, P, RS, D, DA, MINB, MS>;
  const auto kernel = nvfp4_fused_ws_kernel<T, NT, C, P, RS, D, DA, MINB, MS>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TL::kSmemBytes);
  if (err == cudaSuccess && MINB > 1) {  // the whole shared memory, so that MINB blocks fit
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  }
  if (err != cudaSuccess) return err;
  // setmaxnreg hands out the registers of the launch: if ptxas gave the kernel fewer than kLaunchRegs
  // a thread (it may, whatever the launch bounds allow), the consumers' setmaxnreg.inc would wait
  // forever for registers that do not exist, so refuse such a build instead of hanging
  cudaFuncAttributes attr{};
  err = cudaFuncGetAttributes(&attr, kernel);
  if (err != cudaSuccess) return err;
  if (attr.numRegs != TL::kLaunchRegs) return cudaErrorInvalidConfiguration;
  const int n_tiles = (n + NT - 1) / NT;
  const int m_tiles = (m + TL::kActRows - 1) / TL::kActRows;
  CUtensorMap act_map{};
#ifdef WS_TMA_ACT
  // A [m, k] row-major as a 2-D tensor (k innermost), boxes of 64 values x the warpgroup's rows
  err = encode_act_map(&act_map, a, std::is_same_v<T, __nv_bfloat16>, m, k, TL::kActRows / C);
  if (err != cudaSuccess) return err;
#endif
  const int steps = k / kStepK;
  const int per = (steps + splits - 1) / splits;
  const unsigned blocks = static_cast<unsigned>(n_tiles) * m_tiles * splits;
  float* part = splits > 1 ? workspace : nullptr;
#ifdef WS_STASYNC
  // st.async addresses the cluster window: launched as clusters of one block
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(TL::kThreads);
  cfg.dynamicSmemBytes = TL::kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr_cluster[1];
  attr_cluster[0].id = cudaLaunchAttributeClusterDimension;
  attr_cluster[0].val.clusterDim.x = 1;
  attr_cluster[0].val.clusterDim.y = 1;
  attr_cluster[0].val.clusterDim.z = 1;
  cfg.attrs = attr_cluster;
  cfg.numAttrs = 1;
  err = cudaLaunchKernelEx(&cfg, kernel, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(packed),
                           static_cast<const uint8_t*>(scales), static_cast<const float*>(g),
                           static_cast<const unsigned short*>(bias), static_cast<unsigned short*>(out), part, m, n, k,
                           n_tiles, m_tiles, per, act_map);
  if (err == cudaSuccess) err = cudaGetLastError();
#else
  kernel<<<blocks, TL::kThreads, TL::kSmemBytes, stream>>>(
      static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(packed), static_cast<const uint8_t*>(scales),
      static_cast<const float*>(g), static_cast<const unsigned short*>(bias), static_cast<unsigned short*>(out),
      part, m, n, k, n_tiles, m_tiles, per, act_map);
  err = cudaGetLastError();
#endif
  if (err != cudaSuccess || splits <= 1) return err;
  return nvfp4::launch_splitk_finalize<T>(workspace, static_cast<const unsigned short*>(bias),
                                          static_cast<unsigned short*>(out), m, n, splits, stream);
}

// two consumer warpgroups: fewer producers (registers) and activation stages (shared memory); with
// two 64-row slices each (MS = 2, 256 activation rows a block, WS_SS only) also one raw stage less:
// two 64 KB activation stages, two decoded stages and three raw stages fill the 227 KB
#ifndef WS_MS2_P
#define WS_MS2_P 8  // 512 threads: ptxas gives the launch 128 registers a thread, the pool setmaxnreg shares
#endif
template <int C, int MS>
struct Config {
  static constexpr int kP = MS == 2 ? WS_MS2_P : C == 2 ? 8 : WS_PRODUCER_WARPS;
  static constexpr int kRS = MS == 2 ? 3 : C == 2 ? 4 : WS_RS;
  static constexpr int kDA = MS == 2 ? 2 : C == 2 ? 3 : WS_DA;
  static constexpr int kD = C == 2 ? 2 : WS_D;
};

// The tile widths (weight rows a block) this build instantiates for C consumer warpgroups of MS
// slices: 72 only in the two-blocks-per-SM build (one warpgroup); 160 not with 640 threads, where
// the m64n160 wgmma needs more than the 96 registers a thread starts with, nor with two slices,
// whose shared memory it would overfill.
template <int C, int MS>
bool has_tile(int nt) {
#ifdef WS_TWO_PER_SM
  if constexpr (C == 1) return nt == 72;
#endif
#ifndef WS_SS
  if constexpr (MS == 2) {
    return false;
  } else
#endif
  {
    return nt == 128 || nt == 136 || (nt == 160 && MS == 1 && 32 * Config<C, MS>::kP + 128 * C <= 512);
  }
}

template <typename T, int C, int MS = 1>
cudaError_t launch_nt(int nt, const void* a, const void* packed, const void* scales, const void* g,
                      const void* bias, void* out, float* workspace, int m, int n, int k, int splits,
                      cudaStream_t stream) {
  if (!has_tile<C, MS>(nt)) return cudaErrorInvalidValue;
#ifdef WS_TWO_PER_SM
  // two blocks per SM of 72 weight rows (one consumer warpgroup, 7 decoding warps and a copy warp,
  // 384 threads at 80 registers, two activation stages): one block's handshakes behind the other's work
  if constexpr (C == 1) {
    return launch_ws<T, 72, 1, 8, 4, 3, 2, 2>(a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
  }
#endif
#ifndef WS_SS
  if constexpr (MS == 2) {
    return cudaErrorInvalidValue;  // not reached: has_tile said no
  } else
#endif
  {
    using Cf = Config<C, MS>;
    if (nt == 128) return launch_ws<T, 128, C, Cf::kP, Cf::kRS, Cf::kD, Cf::kDA, 1, MS>(a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
    if (nt == 136) return launch_ws<T, 136, C, Cf::kP, Cf::kRS, Cf::kD, Cf::kDA, 1, MS>(a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
    if constexpr (MS == 1 && 32 * Cf::kP + 128 * C <= 512) {
      return launch_ws<T, 160, C, Cf::kP, Cf::kRS, Cf::kD, Cf::kDA>(a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
    }
    return cudaErrorInvalidValue;  // not reached: has_tile said no
  }
}

// The tile of activation rows an m-row call takes: one warpgroup of 64 rows up to m = 64, two
// above; with activations from shared memory (WS_SS), two warpgroups of two slices each (256 rows,
// every weight decoded once) above m = 128.
#ifdef WS_SS
constexpr bool kTwoSlices = true;
#else
constexpr bool kTwoSlices = false;
#endif
template <typename T>
cudaError_t launch_m(int nt, const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                     void* out, float* workspace, int m, int n, int k, int splits, cudaStream_t stream) {
  if (kTwoSlices && m > 128) return launch_nt<T, 2, 2>(nt, a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
  if (m > 64) return launch_nt<T, 2>(nt, a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
  return launch_nt<T, 1>(nt, a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
}

}  // namespace

extern "C" {

// Dev entry, tile-contiguous weights (nvfp4_kernels.layout.tile_weights): nt in {128, 136, 160};
// the activation tile by launch_m (a call with more rows than one tile takes several, each decoding
// the weights again).
int nvfp4ws_launch_tiled(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                         void* out, float* workspace, int32_t m, int32_t n, int32_t k, int32_t out_bf16, int32_t splits,
                         int32_t nt, cudaStream_t stream) {
  if (m < 1 || m > 4096 || n < 1 || k < kStepK || k % kStepK || splits < 1 || splits > k / kStepK ||
      (splits > 1 && workspace == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err =
      out_bf16 ? launch_m<__nv_bfloat16>(nt, a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream)
               : launch_m<__half>(nt, a, packed, scales, g, bias, out, workspace, m, n, k, splits, stream);
  return static_cast<int>(err);
}

// Whether this build has a tile of nt weight rows for an M-row call (the dev script asks before it
// launches, so that a launch error is never taken for a missing width).
int nvfp4ws_has_tile(int32_t nt, int32_t m) {
  if (kTwoSlices && m > 128) return has_tile<2, 2>(nt);
  return m > 64 ? has_tile<2, 1>(nt) : has_tile<1, 1>(nt);
}

#ifdef WS_TRACE
int nvfp4ws_trace(void* host) { return static_cast<int>(cudaMemcpyFromSymbol(host, g_ws_trace, sizeof(g_ws_trace))); }
#endif

}  // extern "C"
