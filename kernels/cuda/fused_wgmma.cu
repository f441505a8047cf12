// The fused_wgmma path: NVFP4 matmul for medium M (up to 256 activation rows) on Hopper warpgroup
// MMAs (wgmma, sm_90a), each weight decoded once, straight into the register A operand.
//
// Y = A @ W^T (+ bias), block size 16, K % 128 == 0, from the contract's row-major packed weight
// [n, k/2] and scale bytes [n, k/16], or from a registered weight's tile-contiguous copy of them
// (nvfp4_kernels.layout.tile_weights, signs placed: fused_mma's copy; the same bits, and one copy
// serves both fused paths). Why this shape (benchmarks/NOTES.md, 2026-12-04): at M >= 128 the
// mma.sync kernel (fused_mma.cu) decodes every weight once per 64 activation rows and prefill
// writes and re-reads a bf16 copy of the weights; a kernel that passes decoded weights through
// shared memory is held by those stores. Here no decoded weight touches shared memory.
//
// The K order is fused_mma's (benchmarks/NOTES.md, sixteenth to eighteenth sessions): lane t of a
// quad decodes the 32 consecutive codes 32 t .. 32 t + 31 of each of its two rows a step (two
// scale blocks, so two decode tables a row and step), and k16 MMA j takes at its column c the
// value K = 32 (c % 8 / 2) + 4 j + 2 (c / 8) + c % 2 of the step: exactly the slots of fused_mma.cu's
// MMA j. The activations are read from a copy permuted to match (nvfp4_wgmma_permute_act_kernel,
// launched first; the wgmma kernel is its programmatic dependent). Per element the k16 sums are
// fused_mma's, in the same order, so at the same K ranges the bits are fused_mma's, which a GPU
// suite checks. (The natural K order, whose k16 MMA j takes K = 16 j .. 16 j + 15 as TMA lands it,
// needs eight decode tables a row and step; it was this kernel's first form and measured slower
// at every M; it is retired, benchmarks/NOTES.md, nineteenth session.)
//
// A block owns 128 weight rows (two warpgroups of 64) and one activation tile of NACT rows (the
// narrowest of kMmaOrderActTiles that holds M), and walks its split's 128-value K steps:
// - thread 0 copies each step's permuted activations by TMA (two K-half boxes of NACT rows x 64
//   values, 128-byte swizzle: a wgmma B operand as it lands) into a ring of kStages stages,
//   kStages - 1 steps ahead; each warpgroup releases a stage when its wgmmas that read it are
//   complete;
// - every thread loads the 16 packed bytes and 2 scale bytes of each of its two weight rows of the
//   next step from global memory, decodes them with the table decode of mma_decode.cuh (the exact
//   multiply form where a block's scale leaves the table's range) and its warpgroup runs
//   wgmma.m64nNk16 with A from registers and B by descriptor;
// - the K loop is pipelined by half steps: half 0 of step s is decoded while half 1 of step
//   s - 1 runs (two fragment buffers, wgmma.wait_group 1).
//
// Bits: each k16 wgmma adds its 16 products to the fp32 accumulators, MMAs j = 0..7 of a step in
// order, steps in order from +0.0. The K split is the host's plan (nvfp4_kernels.tiling.wgmma_plan):
// the first `whole_tiles` row tiles of 128 take every step in one block; the remaining tiles are
// split into `splits` equal step ranges whose fp32 partials the finalize kernel sums in split
// order from +0.0 before adding the bias and rounding once. So the bits depend on the plan, which
// depends only on (n, k) and the GPU's SM count. Dev variants (more blocks an SM, staged weights)
// are scripts/ws_dev/mma_order_dev.py's.
#include <type_traits>

#include "hopper_async.cuh"
#include "mma_decode.cuh"
#include "streamed_launch.cuh"
#include "wgmma_rs256.cuh"

namespace nvfp4 {
namespace {

// Dev ablations (scripts/ws_dev/ra_dev.py --prebuild --ablations builds the dev library with each;
// the library's build never defines it, so its kernels are the ones checked and shipped): bit 1
// skips the decode (a lane's raw code words are its A fragments), bit 2 the MMAs (the fragments
// are folded into the accumulators by a few integer operations instead, so the decode stays
// live), bit 4 the weight loads after the first step (the decode reads the same registers every
// step; a kernel with a ring keeps copying), bit 8 the activation stream after the first kStages
// steps (the prologue fills every stage, the loop waits on each stage's first fill only and then
// reuses what is there, and thread 0 issues no more copies), bit 16 the epilogue (no partial or
// output stores, unless k == -1, which no launch passes, so that the accumulators stay live; and
// no finalize launch), bit 32 the activation permutation (the launch does not run it; the kernel
// reads whatever the workspace holds). The timings of the ablated kernels say which part holds a
// launch (benchmarks/NOTES.md, nineteenth, twenty-sixth and twenty-seventh sessions); their
// outputs are meaningless.
#ifndef NVFP4_WGMMA_ABLATE
#define NVFP4_WGMMA_ABLATE 0
#endif
constexpr int kAblateDecode = 1, kAblateMma = 2, kAblateLoads = 4, kAblateActStream = 8, kAblateEpilogue = 16,
              kAblatePermute = 32;
__host__ __device__ constexpr bool ablated(int bit) { return (NVFP4_WGMMA_ABLATE & bit) != 0; }
constexpr bool kActStream = !ablated(kAblateActStream), kEpilogue = !ablated(kAblateEpilogue),
               kPermute = !ablated(kAblatePermute);

constexpr int kWgStepK = 128;
constexpr int kWgActRows = 256;                        // activation rows a block (wgmma N), at most
constexpr int kWgRows = 128;                           // weight rows a block: two warpgroups of 64
constexpr int kWgThreads = 256;
constexpr int kWgStages = 3;                           // activation stages (64 KB each at 256 rows)
// a staged step's weights (STAGED, dev only): two 64-row tiles' 4 KB of codes, then their 512 scale bytes
constexpr int kWgWeightStageBytes = 2 * 4096 + 2 * 512;
// one stage: the activations (NACT rows of a 128-value step), then the staged weights if any; a
// block's dynamic shared memory
__host__ __device__ constexpr int act_stage_bytes(int nact) { return nact * kWgStepK * 2; }
__host__ __device__ constexpr int stage_bytes(int nact, bool staged) {
  return act_stage_bytes(nact) + (staged ? kWgWeightStageBytes : 0);
}
// RING: each thread's own bytes of a step (two rows' 16 code bytes, two 4-byte scale
// words) in a ring of RING steps after the barriers (16-byte aligned: the barriers' 16 bytes a
// stage follow the 1024-byte-aligned stages)
constexpr int kRingThreadBytes = 2 * 16 + 2 * 4;
__host__ __device__ constexpr int ring_bytes(int ring) { return ring * kWgThreads * kRingThreadBytes; }
__host__ __device__ constexpr int wgmma_smem_bytes(int nact, bool staged = false, int stages = kWgStages,
                                                   int ring = 0) {
  return stages * stage_bytes(nact, staged) + 16 * stages + ring_bytes(ring) + 1024;
}

// Word w of a lane's codes, all in one scale block of scale s, by
// multiplication (decode_word's two forms, as fused_mma.cu chooses them; PLACED words unplaced).
template <typename T, bool PLACED>
__device__ __forceinline__ void decode_word_one_scale(uint32_t placed_or_natural, float s, uint32_t r[4]) {
  const uint32_t w = PLACED ? unplace_signs(placed_or_natural) : placed_or_natural;
  const float big = s * pow2_14();
  if (fabsf(big) == __uint_as_float(0x7F800000u) && fabsf(s) != __uint_as_float(0x7F800000u)) {
    decode_word<T, false>(w, s, r);
  } else {
    decode_word<T, true>(w, big, r);
  }
}

// Half step h of one lane: words 2 h and 2 h + 1 of rows g and g + 8 (codes
// 16 h .. 16 h + 15 of the lane's 32 a row, scale block 2 t + h: byte h of c0 / c1) -> the A
// fragments of k16 MMAs 4 h .. 4 h + 3, the registers fused_mma.cu's decode gives its MMAs of the
// same index: one table a row (build_table), or multiplication where a scale leaves its range.
template <typename T, bool PLACED>
__device__ __forceinline__ void decode_half_mma_order(const uint32_t (&wr0)[2], const uint32_t (&wr1)[2], uint32_t c0,
                                                      uint32_t c1, int h, float gs, uint32_t (&af)[4][4]) {
  const float2 b0 = e4m3x2_to_f32(c0), b1 = e4m3x2_to_f32(c1);
  const float s0 = (h ? b0.y : b0.x) * gs, s1 = (h ? b1.y : b1.x) * gs;
  uint32_t f[2][2][4];  // [word][row]
  if (table_ok<T>(s0) & table_ok<T>(s1)) {
    const DecodeTable t0 = build_table<T>(s0), t1 = build_table<T>(s1);
#pragma unroll
    for (int qq = 0; qq < 2; ++qq) {
      if constexpr (PLACED) {
        decode_word_table_placed(wr0[qq], t0, f[qq][0]);
        decode_word_table_placed(wr1[qq], t1, f[qq][1]);
      } else {
        decode_word_table(wr0[qq], t0, f[qq][0]);
        decode_word_table(wr1[qq], t1, f[qq][1]);
      }
    }
  } else {
#pragma unroll
    for (int qq = 0; qq < 2; ++qq) {
      decode_word_one_scale<T, PLACED>(wr0[qq], s0, f[qq][0]);
      decode_word_one_scale<T, PLACED>(wr1[qq], s1, f[qq][1]);
    }
  }
#pragma unroll
  for (int qq = 0; qq < 2; ++qq) {
#pragma unroll
    for (int x = 0; x < 2; ++x) {  // MMA 4 h + 2 qq + x: the word's codes 4 x .. 4 x + 3
      af[2 * qq + x][0] = f[qq][0][2 * x], af[2 * qq + x][1] = f[qq][1][2 * x];
      af[2 * qq + x][2] = f[qq][0][2 * x + 1], af[2 * qq + x][3] = f[qq][1][2 * x + 1];
    }
  }
}

// The kernel's activations: a [m, k] (k % 128 == 0, 2-byte values, 16-byte aligned) -> out
// [rows_out, k], each 128-value step permuted so that out[16 j + c] = a[32 (c % 8 / 2) + 4 j +
// 2 (c / 8) + c % 2], and the rows from m to rows_out (the last activation tile's) zero: the
// kernel's TMA boxes then never reach past the tensor (a partly out-of-bounds box measured slow:
// the 256-row kernel took 145 us at M = 1 against 88 at M = 256, benchmarks/NOTES.md). In 4-byte
// pairs, out pair 8 j + 4 h + t = a pair 16 t + 2 j + h: thread i writes out chunk i (16 bytes,
// c4 = i % 16 of its step) from the pairs 16 t + c4, t = 0..3, which the 16 threads of a step read
// as four 64-byte runs. The fused_wgmma kernel that reads `out` is its programmatic dependent and
// waits for it before its first activation copy. (A template, so that only the launches that use
// it build it: the library's do not.)
constexpr int kPermuteThreads = 256;
template <int THREADS = kPermuteThreads>
__global__ void __launch_bounds__(THREADS)
nvfp4_wgmma_permute_act_kernel(const uint32_t* __restrict__ a, uint4* __restrict__ out, int64_t chunks_in,
                               int64_t chunks_out) {
  allow_dependent_launch();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks_out) return;
  if (i >= chunks_in) {
    out[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint32_t* src = a + ((i >> 4) << 6) + (i & 15);
  out[i] = make_uint4(__ldg(src), __ldg(src + 16), __ldg(src + 32), __ldg(src + 48));
}

// Activation rows of the permuted copy: m rounded up to whole tiles of nact rows.
[[maybe_unused]] __host__ __device__ constexpr int64_t permuted_rows(int m, int nact) {
  return (static_cast<int64_t>(m) + nact - 1) / nact * nact;
}

// Launches the permutation of a [m, k] into out [rows_out, k] (rows_out >= m) on the stream.
template <int THREADS = kPermuteThreads>
cudaError_t launch_permute_act(const void* a, void* out, int m, int64_t rows_out, int k, cudaStream_t stream) {
  const int64_t chunks_in = static_cast<int64_t>(m) * k / 8, chunks_out = rows_out * k / 8;
  nvfp4_wgmma_permute_act_kernel<THREADS><<<static_cast<unsigned>((chunks_out + THREADS - 1) / THREADS), THREADS, 0,
                                            stream>>>(static_cast<const uint32_t*>(a), static_cast<uint4*>(out),
                                                      chunks_in, chunks_out);
  return cudaGetLastError();
}

struct WgmmaPlan {
  int whole_tiles;  // leading 128-row tiles that take every step in one block
  int tiles;        // all 128-row tiles
  int splits;       // K splits of each remaining tile
  int per_split;    // steps per split
};

// The kernel's RING: a thread's ring of RING step slots starting at shared address `ring`,
// in three arrays indexed by slot (s % RING) * kWgThreads + tid: row 0's 16 code bytes, row 1's,
// and the two rows' 4-byte scale words (16-byte slots for the 16-byte copies and conflict-free
// 16-byte reads). copy puts step s's bytes in its slot (p0, p1: the rows' code bytes; q0, q1: the
// lane's 2 scale bytes, copied as the aligned 4-byte word that holds them) and closes a cp.async
// group, an empty one past the last step so that one group a step keeps the wait count uniform;
// read takes them back into registers. Free
// functions, not lambdas in the kernel: defining lambdas there moved six of the register-prefetch
// (RING = 0) kernels' instructions, while these leave their SASS unchanged.
template <int RING>
struct ThreadRing {
  static constexpr uint32_t kSlots = RING * kWgThreads;
  static __device__ __forceinline__ uint32_t slot(int s, int tid) {
    return static_cast<uint32_t>((s % RING) * kWgThreads + tid);
  }
  static __device__ __forceinline__ void copy(uint32_t ring, int s, int steps, int tid, int t, const uint4* p0,
                                              const uint4* p1, const unsigned short* q0, const unsigned short* q1,
                                              bool ok0, bool ok1) {
    if (s < steps) {
      const uint32_t i = slot(s, tid), scale = ring + 32 * kSlots + 8 * i;
      cp_async16(ring + 16 * i, p0, ok0);
      cp_async16(ring + 16 * (kSlots + i), p1, ok1);
      cp_async4(scale, reinterpret_cast<const uint8_t*>(q0) - 2 * (t & 1), ok0);
      cp_async4(scale + 4, reinterpret_cast<const uint8_t*>(q1) - 2 * (t & 1), ok1);
    }
    cp_async_commit();
  }
  static __device__ __forceinline__ void read(uint32_t ring, int s, int tid, int t, uint4& w0, uint4& w1,
                                              unsigned short& c0, unsigned short& c1) {
    const uint32_t i = slot(s, tid), scale = ring + 32 * kSlots + 8 * i + 2 * (t & 1);
    w0 = hopper::lds128(ring + 16 * i), w1 = hopper::lds128(ring + 16 * (kSlots + i));
    c0 = hopper::lds16(scale), c1 = hopper::lds16(scale + 4);
  }
};

// RELAYOUT = false: the contract's row-major weights. RELAYOUT = true: a registered weight's
// tile-contiguous copy (nvfp4_kernels.layout.tile_weights, signs placed: fused_mma's copy). Either
// way one 16-byte load of the lane's own bytes a row and step, and its 2 scale bytes in one 16-bit
// load.
// NACT (activation rows a block, the wgmma's N) and MIN_BLOCKS (resident blocks an SM, by the
// launch bounds): the library launches one block an SM and the narrowest of kMmaOrderActTiles
// that holds M (mma_order_act_tile); more blocks an SM are the dev measurements of
// scripts/ws_dev/mma_order_dev.py (same bits at the same plan; benchmarks/NOTES.md, seventeenth
// session).
// STAGES and STAGED (dev only; the library launches 3 and false): STAGED needs the tile-contiguous
// layout (RELAYOUT), whose step of a 64-row tile is one 4 KB piece of codes and one of 512 scale
// bytes. Thread 0 then copies each step's two pieces of the block's tiles into the stage with its
// activations (bulk copies on the same barrier), and the threads read their bytes from shared
// memory, so STAGES - 1 steps of weights are in flight instead of the one that the register
// prefetch holds.
// RING: each thread copies its own bytes of a step (cp.async, no barrier: no other thread reads
// them) into a ring of RING steps in shared memory, RING steps ahead, and reads them back when it
// decodes the step, so RING steps of weights are in flight with no thread waiting on another
// (STAGED's bulk copies wait for both warpgroups to release a stage). Nothing changes in what is
// decoded or multiplied, so the bits are those of RING = 0. The library's rings: library_ring.
template <typename T, bool RELAYOUT, int NACT = kWgActRows, int MIN_BLOCKS = 1, int STAGES = kWgStages,
          bool STAGED = false, int RING = 0>
__global__ void __launch_bounds__(kWgThreads, MIN_BLOCKS)
nvfp4_fused_wgmma_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                         const float* __restrict__ g_ptr, const unsigned short* __restrict__ bias,
                         unsigned short* __restrict__ out, float* __restrict__ partial, int m, int n, int k,
                         int m_tiles, WgmmaPlan plan, const __grid_constant__ CUtensorMap act_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace hopper;  // NOLINT: barriers, TMA and wgmma helpers
  allow_dependent_launch();
  static_assert(!STAGED || RELAYOUT, "only a tile-contiguous layout's pieces are staged");
  static_assert(RING == 0 || (RING >= 2 && !STAGED), "a ring of two or more steps, and not with STAGED");
  constexpr int kWgActStageBytes = act_stage_bytes(NACT);
  constexpr int kStageBytes = stage_bytes(NACT, STAGED);
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t act_full = base + STAGES * kStageBytes;  // STAGES barriers, then STAGES act_empty
  const uint32_t act_empty = act_full + 8 * STAGES;
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid >> 7, ct = tid & 127, warp = ct >> 5, lane = ct & 31, g = lane >> 2, t = lane & 3;
  const int total_steps = k / kWgStepK;
  // this block's (row tile, activation tile, K split) under the plan
  int block = static_cast<int>(blockIdx.x), n_tile, split = 0, step0 = 0, steps = total_steps;
  const int whole_blocks = plan.whole_tiles * m_tiles;
  const int m_tile = block % m_tiles;
  float* part = nullptr;  // this block's partial sums, [m][n - col0], when its tile is split
  int col0 = 0;
  if (block < whole_blocks) {
    n_tile = block / m_tiles;
  } else {
    block -= whole_blocks;
    const int split_tiles = plan.tiles - plan.whole_tiles;
    n_tile = plan.whole_tiles + (block / m_tiles) % split_tiles;
    split = block / (m_tiles * split_tiles);
    step0 = split * plan.per_split;
    steps = max(0, min(step0 + plan.per_split, total_steps) - step0);
    if (plan.splits > 1) {
      col0 = plan.whole_tiles * kWgRows;
      part = partial + static_cast<int64_t>(split) * m * (n - col0);
    }
  }
  const int n0 = n_tile * kWgRows;
  const int m0 = m_tile * NACT;
  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(act_full + 8 * i, 1);
      mbar_init(act_empty + 8 * i, 2);  // both warpgroups release a stage
    }
    fence_barrier_init();
  }
  __syncthreads();
  auto load_act = [&](int s_load) {  // thread 0 only
    const int stage = s_load % STAGES;
    const uint32_t dst = base + stage * kStageBytes, bar = act_full + 8 * stage;
    if constexpr (STAGED) {
      const int tile0 = 2 * n_tile, have = min(2, (n + 63) / 64 - tile0);  // the block's 64-row tiles
      mbar_expect_tx(bar, kWgActStageBytes + have * (4096 + 512));
      for (int tt = 0; tt < have; ++tt) {
        const int64_t piece = static_cast<int64_t>(tile0 + tt) * total_steps + step0 + s_load;
        bulk_load(dst + kWgActStageBytes + tt * 4096, packed + piece * 4096, 4096, bar);
        bulk_load(dst + kWgActStageBytes + 8192 + tt * 512, scales + piece * 512, 512, bar);
      }
    } else {
      mbar_expect_tx(bar, kWgActStageBytes);
    }
    tma_load_2d(dst, &act_map, (step0 + s_load) * kWgStepK, m0, bar);
    tma_load_2d(dst + kWgActStageBytes / 2, &act_map, (step0 + s_load) * kWgStepK + 64, m0, bar);
  };
  if (tid == 0) {
    wait_for_prerequisite_grid();  // the permuted activations are written
    for (int s = 0; s < (kActStream ? STAGES - 1 : STAGES) && s < steps; ++s) load_act(s);
  }
  // this thread's weight rows: g and g + 8 of its warp's 16; rows past n read nothing (zero codes
  // and scale bytes, whose products never reach the output)
  const int row0 = n0 + 64 * wg + 16 * warp + g, row1 = row0 + 8;
  const bool ok0 = row0 < n, ok1 = row1 < n;
  // a row's bytes of step s: the lane's 16 t .. 16 t + 15 of the row (one 16-byte load) and its
  // scale bytes 2 t and 2 t + 1 of the row's 8; row-major at K/2 and K/16 bytes a row,
  // tile-contiguous in a 4 KB piece of codes and 512 scale bytes per 64-row tile and step
  auto packed_at = [&](int64_t row) {
    return reinterpret_cast<const uint4*>(
        RELAYOUT ? packed + ((row >> 6) * total_steps + step0) * 4096 + (row & 63) * 64 + t * 16
                 : packed + row * (k / 2) + step0 * 64 + t * 16);
  };
  auto scales_at = [&](int64_t row) {
    return reinterpret_cast<const unsigned short*>(
        (RELAYOUT ? scales + ((row >> 6) * total_steps + step0) * 512 + (row & 63) * 8
                  : scales + row * (k / 16) + step0 * 8) +
        2 * t);
  };
  constexpr int kPackedStep = RELAYOUT ? 256 : 4;                // in uint4 a step
  constexpr int kScaleStep = (RELAYOUT ? 512 : 8) / 2;           // in 16-bit pairs a step
  const uint4 *p0 = packed_at(ok0 ? row0 : 0), *p1 = packed_at(ok1 ? row1 : 0);
  const unsigned short *q0 = scales_at(ok0 ? row0 : 0), *q1 = scales_at(ok1 ? row1 : 0);
  uint4 w0, w1;               // the step's bytes of rows 0 and 1
  unsigned short c0, c1;      // their scale bytes (the lane's 2)
  auto load_raw = [&](int s_load) {
    const uint4 z4 = make_uint4(0, 0, 0, 0);
    w0 = ok0 ? __ldg(p0 + kPackedStep * s_load) : z4;
    w1 = ok1 ? __ldg(p1 + kPackedStep * s_load) : z4;
    c0 = ok0 ? __ldg(q0 + kScaleStep * s_load) : static_cast<unsigned short>(0);
    c1 = ok1 ? __ldg(q1 + kScaleStep * s_load) : static_cast<unsigned short>(0);
  };
  // STAGED: the step's bytes of rows 0 and 1 from its stage (rows past n read nothing)
  auto read_stage = [&](uint32_t stage_base) {
    const uint32_t wb = stage_base + kWgActStageBytes + wg * 4096 + (16 * warp + g) * 64 + t * 16;
    const uint32_t sb = stage_base + kWgActStageBytes + 8192 + wg * 512 + (16 * warp + g) * 8;
    w0 = ok0 ? lds128(wb) : make_uint4(0, 0, 0, 0);
    w1 = ok1 ? lds128(wb + 8 * 64) : make_uint4(0, 0, 0, 0);
    c0 = ok0 ? lds16(sb + 2 * t) : static_cast<unsigned short>(0);
    c1 = ok1 ? lds16(sb + 8 * 8 + 2 * t) : static_cast<unsigned short>(0);
  };
  const float gs = __ldg(g_ptr);
  float acc[NACT / 2];
#pragma unroll
  for (int x = 0; x < NACT / 2; ++x) acc[x] = 0.f;
  if (!STAGED && RING == 0 && steps > 0) load_raw(0);
  const uint32_t ring = act_empty + 8 * STAGES;  // RING: the ring follows the barriers
  if constexpr (RING > 0) {
    for (int i = 0; i < RING; ++i) {
      ThreadRing<RING>::copy(ring, i, steps, tid, t, p0 + kPackedStep * i, p1 + kPackedStep * i, q0 + kScaleStep * i,
                             q1 + kScaleStep * i, ok0, ok1);
    }
  }
  // half h of the step: words 2 h, 2 h + 1 of both rows (the lane's codes 16 h .. 16 h + 15 of
  // each, in scale block 2 t + h) -> the A fragments of k16 MMAs 4 h .. 4 h + 3
  auto decode_half = [&](int h, uint32_t (&af)[4][4]) {
    const uint32_t wr0[2] = {h ? w0.z : w0.x, h ? w0.w : w0.y};
    const uint32_t wr1[2] = {h ? w1.z : w1.x, h ? w1.w : w1.y};
    if constexpr (ablated(kAblateDecode)) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        af[j][0] = wr0[j >> 1] ^ c0, af[j][1] = wr1[j >> 1] ^ c1;
        af[j][2] = wr0[j >> 1] >> j, af[j][3] = wr1[j >> 1] >> j;
      }
    } else {
      decode_half_mma_order<T, RELAYOUT>(wr0, wr1, c0, c1, h, gs, af);
    }
  };
  // ablated MMAs: a half step's fragments folded into the accumulators instead
  auto fold_half = [&](const uint32_t (&af)[4][4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] += __uint_as_float((af[j][0] ^ af[j][1] ^ af[j][2] ^ af[j][3]) & 0x3F7FFFFFu);
  };
  // Step s - 1's activation stage is released once its second half is complete; thread 0 then
  // loads step s + kWgStages - 1 into it, once both warpgroups have released it.
  uint32_t full_phase = 0, empty_phase = 0;
  int full_stage = 0, empty_stage = 0;
  uint32_t a_lo[4][4], a_hi[4][4];
  for (int s = 0; s < steps; ++s) {
    // a stage has landed to wait for: every step's, or only each stage's first fill (ablation bit 8)
    const bool stage_landing = kActStream || s < STAGES;
    if (s > 0) wgmma_wait_one();  // half 0 of step s - 1 is complete: a_lo is free
    if constexpr (STAGED) {
      if (stage_landing) mbar_wait(act_full + 8 * full_stage, full_phase);  // step s's weights, activations
      read_stage(base + full_stage * kStageBytes);
    }
    if constexpr (RING > 0) {
      cp_async_wait<RING - 1>();  // this thread's step s has landed (one group a step)
      ThreadRing<RING>::read(ring, s, tid, t, w0, w1, c0, c1);
    }
    decode_half(0, a_lo);
    if constexpr (!STAGED) {
      if (stage_landing) mbar_wait(act_full + 8 * full_stage, full_phase);  // step s's activations
    }
    const uint32_t as = base + full_stage * kStageBytes;
    wgmma_fence();
    if constexpr (ablated(kAblateMma)) {
      fold_half(a_lo);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) WgmmaRS<T, NACT>::run(acc, a_lo[j], desc_sw128(as + j * 32));
    }
    wgmma_commit();
    if (s > 0) {
      wgmma_wait_one();  // step s - 1 is complete: a_hi and its activation stage are free
      if (ct == 0) mbar_arrive(act_empty + 8 * ((full_stage + STAGES - 1) % STAGES));
    }
    if (kActStream && tid == 0 && s + STAGES - 1 < steps) {  // into step s - 1's stage (at s = 0 the unused one)
      if (s > 0) {
        mbar_wait(act_empty + 8 * empty_stage, empty_phase);
        if (++empty_stage == STAGES) empty_stage = 0, empty_phase ^= 1u;
      }
      load_act(s + STAGES - 1);
    }
    __syncwarp();  // warp 0 converged again before its next warpgroup-wide (.aligned) wgmma
    decode_half(1, a_hi);
    if (!STAGED && RING == 0 && s + 1 < steps && !ablated(kAblateLoads)) {
      load_raw(s + 1);  // in flight while this step's wgmmas run
    }
    if constexpr (RING > 0) {  // into step s's slot, whose bytes are in registers (decoded) now
      const int next = s + RING;
      ThreadRing<RING>::copy(ring, next, steps, tid, t, p0 + kPackedStep * next, p1 + kPackedStep * next,
                             q0 + kScaleStep * next, q1 + kScaleStep * next, ok0, ok1);
    }
    wgmma_fence();
    if constexpr (ablated(kAblateMma)) {
      fold_half(a_hi);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) WgmmaRS<T, NACT>::run(acc, a_hi[j], desc_sw128(as + kWgActStageBytes / 2 + j * 32));
    }
    wgmma_commit();
    if (++full_stage == STAGES) full_stage = 0, full_phase ^= 1u;
  }
  wgmma_wait_all();
#pragma unroll
  for (int x = 0; x < NACT / 2; ++x) fence_acc(acc[x]);
  // D fragment: acc[4 i + c] = weight row 16 warp + g + 8 (c >> 1) of the warpgroup's 64,
  // activation row 8 i + 2 t + (c & 1)
  const int part_cols = n - col0;
#pragma unroll
  for (int x = 0; x < NACT / 2; ++x) {
    const int i8 = x >> 2, c = x & 3;
    const int nn = n0 + 64 * wg + 16 * warp + g + 8 * (c >> 1);
    const int mm = m0 + 8 * i8 + 2 * t + (c & 1);
    if (mm < m && nn < n && (kEpilogue || k == -1)) {
      float v = acc[x];
      if (part != nullptr) {
        part[static_cast<int64_t>(mm) * part_cols + (nn - col0)] = v;
      } else {
        if (bias != nullptr) v += OutT<T>::to_f32(bias[nn]);
        out[static_cast<int64_t>(mm) * n + nn] = OutT<T>::one(v);
      }
    }
  }
#else
  __trap();  // built without sm_90a code: the launcher refuses other GPUs before this can run
#endif
}

// The launch first permutes the activations into act_ws (permuted_rows(m, NACT) x k 2-byte
// values, 16-byte aligned; the caller provides it), then the kernel as that launch's programmatic
// dependent, its TMA boxes inside the permuted copy.
template <typename T, bool RELAYOUT = false, int NACT = kWgActRows, int MIN_BLOCKS = 1, int STAGES = kWgStages,
          bool STAGED = false, int RING = 0>
cudaError_t launch_wgmma(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                         void* out, float* workspace, int m, int n, int k, const WgmmaPlan& plan,
                         cudaStream_t stream, void* act_ws = nullptr) {
  const auto kernel = nvfp4_fused_wgmma_kernel<T, RELAYOUT, NACT, MIN_BLOCKS, STAGES, STAGED, RING>;
  constexpr int kSmem = wgmma_smem_bytes(NACT, STAGED, STAGES, RING);
  static_assert(kSmem <= 227 * 1024, "more shared memory than an SM has for one block");
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  // A dev variant whose promised blocks (MIN_BLOCKS >= 2, with the 1 KB each that the SM
  // reserves) take more than 220 KB of the SM's 228, three 64-row blocks with two stages or two
  // with a ring of 6: ask for all of it. The library's launches (one block promised) and the dev
  // variants below that mark keep the driver's own choice, under which they were measured.
  if constexpr (MIN_BLOCKS >= 2 && MIN_BLOCKS * (kSmem + 1024) > 220 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (err != cudaSuccess) return err;
  }
  if (act_ws == nullptr || reinterpret_cast<uintptr_t>(act_ws) % 16 != 0) return cudaErrorInvalidValue;
  const int act_rows = static_cast<int>(permuted_rows(m, NACT));
  if constexpr (kPermute) {
    err = launch_permute_act(a, act_ws, m, act_rows, k, stream);
    if (err != cudaSuccess) return err;
  }
  CUtensorMap act_map{};
  err = hopper::encode_act_map(&act_map, act_ws, std::is_same_v<T, __nv_bfloat16>, act_rows, k, NACT);
  if (err != cudaSuccess) return err;
  const int m_tiles = (m + NACT - 1) / NACT;
  const int64_t blocks = (static_cast<int64_t>(plan.whole_tiles) +
                          static_cast<int64_t>(plan.tiles - plan.whole_tiles) * plan.splits) * m_tiles;
  const bool split = plan.whole_tiles < plan.tiles && plan.splits > 1;
  const auto* packed_b = static_cast<const uint8_t*>(packed);
  const auto* scales_b = static_cast<const uint8_t*>(scales);
  const auto* g_f = static_cast<const float*>(g);
  const auto* bias_s = static_cast<const unsigned short*>(bias);
  auto* out_s = static_cast<unsigned short*>(out);
  float* partial = split ? workspace : nullptr;
  // The permutation's programmatic dependent. A row-major weight's packed bytes are streamed through
  // L2 (streamed_launch.cuh: evicted first, so that the split's fp32 partials and the activations
  // stay): that took 2-6% off M = 33..64 on both large shapes on the H200 (2-9% on an H100) and
  // left M = 96..128 within 2%. A registered copy gets no window: with one, the 64-row tile on
  // 17408 x 5120 ran 48-76 us from one timing to the next on an H100, where it runs 47-49 without
  // (benchmarks/NOTES.md, thirty-first session).
  const size_t weight_bytes = RELAYOUT ? 0 : static_cast<size_t>(n) * static_cast<size_t>(k / 2);
  err = launch_streaming_weights_as(true, kernel, dim3(static_cast<unsigned>(blocks)), dim3(kWgThreads), kSmem,
                                    stream, packed_b, weight_bytes, packed_b, scales_b, g_f, bias_s, out_s, partial, m,
                                    n, k, m_tiles, plan, act_map);
  if (err != cudaSuccess || !split || !kEpilogue) return err;
  return launch_splitk_finalize<T>(workspace, bias_s, out_s, m, n, plan.splits, stream, plan.whole_tiles * kWgRows);
}

bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The activation tile (the wgmma's N, rows of the permuted copy a block reads) for m rows: the narrowest of kMmaOrderActTiles that holds them. A block takes one
// activation tile and every K step of its weight rows' range either way, so the plan and the bits
// do not depend on it (the dev variants had fused_mma's bits at every width); the narrower tile
// does fewer MMAs and decodes the same weights: 64.3 us instead of 75.6 at M = 128 on a
// registered 17408 x 5120 weight, 72.3 instead of 79.1 at M = 192 (benchmarks/NOTES.md).
//
// kMmaOrderActTiles is the one list of widths: mma_order_act_tile picks from it and
// launch_mma_order instantiates a kernel for each of its entries, so the two cannot disagree.
constexpr int kMmaOrderActTiles[] = {64, 128, 192, kWgActRows};  // ascending; the last holds every M
constexpr int kMmaOrderActTileCount = static_cast<int>(sizeof(kMmaOrderActTiles) / sizeof(kMmaOrderActTiles[0]));
static_assert(kMmaOrderActTiles[kMmaOrderActTileCount - 1] == kWgActRows, "the widest tile must hold every M");

constexpr int mma_order_act_tile(int m) {
  for (int i = 0; i + 1 < kMmaOrderActTileCount; ++i) {
    if (m <= kMmaOrderActTiles[i]) return kMmaOrderActTiles[i];
  }
  return kWgActRows;
}

// The ring of weight steps (RING) the library launches for an activation tile, on either layout,
// from the H200 measurements of the dev variants at the library's plans (benchmarks/NOTES.md,
// twenty-first and twenty-third sessions; same bits at every plan), 17408 x 5120 / 5120 x 17408:
// - 128-row tile, ring of 4: 64.6 / 70.3 us -> 55.9 / 59.1 at M = 128 on the registered
//   (tile-contiguous) copy, 73.0 / 78.6 -> 57.5 / 61.3 on the row-major weight;
// - 256-row tile, ring of 2 (the most its shared memory holds): 81.9 / 88.6 -> 77.9 / 83.7 at
//   M = 256 registered, 87.3 / 93.7 -> 80.1 / 84.7 row-major;
// - 64-row tile, ring of 4, at fused_mma's split plan (nvfp4_kernels.tiling.wgmma_call_plan):
//   52.6 / 45.1 us registered and 55.3 / 49.5 row-major at M = 64, against fused_mma's 57.9 /
//   48.1 and 65.7 / 54.4 (70.3 / 78.3 without the ring at the whole-tile plan).
// - 192-row tile, ring of 4 (same bits; first measured on an H100 80GB HBM3): 74.0 / 79.6 ->
//   65.5 / 71.0 us at M = 160 and 74.9 / 81.4 -> 69.3 / 71.9 at M = 192 registered, 79.6 / 86.5
//   -> 68.7 / 73.2 and 79.6 / 87.2 -> 71.9 / 75.0 row-major, where the 256-row tile's ring of 2
//   took 74.2-81.1 (twenty-fourth session); the H200 bench at 1892ebe then timed the registered
//   M = 160 / 192 launches 1.10-1.14x faster than the e5e90f0 bench without it.
constexpr int library_ring(int nact) {
  return nact == 64 || nact == 128 || nact == 192 ? 4 : nact == kWgActRows ? 2 : 0;
}

// The activation stages (STAGES) the library launches for an activation tile. The 64-row tile
// takes four (106 KB of shared memory, still two blocks an SM): in two H100 runs of the dev
// variants at the library's plans (benchmarks/NOTES.md, twenty-ninth session; same bits, 340 and
// 136 launches checked against fused_mma) its ring of 4 took 4-10% less time at M = 33..64 than
// with three, 47.3-49.6 us against 50.6-52.0 on 17408 x 5120 and 43.5-44.6 against 47.5-48.8 on
// 5120 x 17408 (row-major 4-7%). The stream probe had put the three stages' handshake at 2.7-5 us
// of the weight stream. Five stages (121 KB, one block an SM) were slower on 5120 x 17408. The
// 128-row tile takes four as well (169 KB, one block an SM as with three): 1-5% faster than its
// three-stage dev twin at M = 96 and 128 on both shapes and layouts, all eight rows the same way
// (H100, same bits). The 192- and 256-row tiles keep three: four of their 48-64 KB stages and the
// ring do not fit an SM's shared memory.
constexpr int library_stages(int nact) { return nact == 64 || nact == 128 ? 4 : kWgStages; }

// launch_wgmma for either output type, one block a multiprocessor (the plan's waves), with the
// library's ring and activation stages for the tile
template <bool RELAYOUT, int NACT>
cudaError_t launch_either_type(int32_t out_bf16, const void* a, const void* packed, const void* scales, const void* g,
                               const void* bias, void* out, float* workspace, int m, int n, int k,
                               const WgmmaPlan& plan, cudaStream_t stream, void* act_ws) {
  constexpr int kRing = library_ring(NACT), kStages = library_stages(NACT);
  return out_bf16 ? launch_wgmma<__nv_bfloat16, RELAYOUT, NACT, 1, kStages, false, kRing>(
                        a, packed, scales, g, bias, out, workspace, m, n, k, plan, stream, act_ws)
                  : launch_wgmma<__half, RELAYOUT, NACT, 1, kStages, false, kRing>(
                        a, packed, scales, g, bias, out, workspace, m, n, k, plan, stream, act_ws);
}

// launch_either_type with the activation tile mma_order_act_tile(m), searched for in
// kMmaOrderActTiles from index I on
template <bool RELAYOUT, int I = 0>
cudaError_t launch_mma_order(int32_t out_bf16, const void* a, const void* packed, const void* scales, const void* g,
                             const void* bias, void* out, float* workspace, int m, int n, int k,
                             const WgmmaPlan& plan, cudaStream_t stream, void* act_ws) {
  constexpr int kTile = kMmaOrderActTiles[I];
  if constexpr (I + 1 < kMmaOrderActTileCount) {
    if (mma_order_act_tile(m) != kTile) {
      return launch_mma_order<RELAYOUT, I + 1>(out_bf16, a, packed, scales, g, bias, out, workspace, m, n, k, plan,
                                               stream, act_ws);
    }
  }
  return launch_either_type<RELAYOUT, kTile>(out_bf16, a, packed, scales, g, bias, out, workspace, m, n, k, plan,
                                             stream, act_ws);
}

// The export's argument checks (cudaErrorInvalidValue for anything the kernel cannot take), then
// the launch on the layout RELAYOUT names.
template <bool RELAYOUT>
int launch_checked(const void* a, void* act_ws, const void* packed, const void* scales, const void* g,
                   const void* bias, void* out, float* workspace, int32_t m, int64_t n, int64_t k, int32_t out_bf16,
                   int32_t whole_tiles, int32_t splits, cudaStream_t stream) {
  const int64_t steps = k / kWgStepK;
  const int64_t tiles = (n + kWgRows - 1) / kWgRows;
  if (a == nullptr || packed == nullptr || scales == nullptr || g == nullptr || out == nullptr || m < 1 ||
      m > kWgActRows || n < 1 || n > (int64_t{1} << 30) || k < kWgStepK || k % kWgStepK || k > (int64_t{1} << 30) ||
      whole_tiles < 0 || whole_tiles > tiles || splits < 1 || splits > steps || !aligned_to(a, 16) ||
      !aligned_to(packed, 16) || !aligned_to(scales, 8)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const bool split = whole_tiles < tiles && splits > 1;
  if (split && workspace == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  if (act_ws == nullptr || !aligned_to(act_ws, 16)) return static_cast<int>(cudaErrorInvalidValue);
  const int per = static_cast<int>((steps + splits - 1) / splits);
  // equal ranges with none empty: the plan's splits must be ceil(steps / per)
  if ((steps + per - 1) / per != splits) return static_cast<int>(cudaErrorInvalidValue);
  const WgmmaPlan plan{whole_tiles, static_cast<int>(tiles), splits, per};
  const int ni = static_cast<int>(n), ki = static_cast<int>(k);
  return static_cast<int>(launch_mma_order<RELAYOUT>(out_bf16, a, packed, scales, g, bias, out, workspace, m, ni, ki,
                                                      plan, stream, act_ws));
}

}  // namespace
}  // namespace nvfp4

extern "C" {

// Weight rows a block of the fused_wgmma kernel owns (its row tile); the host's plan counts tiles
// of this many rows (nvfp4_kernels.tiling.wgmma_plan).
int nvfp4_fused_wgmma_tile_rows() { return nvfp4::kWgRows; }

// The fused_wgmma launch, in fused_mma's K order (with fused_mma's bits at the same K ranges).
// a: [m, k] fp16/bf16, 16-byte aligned; act_ws: nvfp4_fused_wgmma_act_rows(m) x k values of a's
// type, 16-byte aligned, which the launch fills with the permuted activations (a kernel before the
// wgmma kernel, on the stream; the TMA source); packed: [n, k/2] row-major, 16-byte aligned, and
// scales: [n, k/16], 8-byte aligned, or with `tiled` fused_mma's tile-contiguous copy of both
// (nvfp4_kernels.layout.tile_weights, signs placed); g: one fp32 in device memory; bias: [n] or
// null; out: [m, n]; 1 <= m <= 256, k % 128 == 0. The plan: the first whole_tiles tiles of 128 rows
// take every K step in one block, the rest are split into `splits` ranges of
// ceil((k / 128) / splits) steps each; then workspace holds splits * m * (n - 128 whole_tiles) fp32
// partials. Needs an sm_90 GPU (the kernel is built for sm_90a only); elsewhere the launch fails
// with CUDA's error. (The name keeps "mma_order" from when a natural-order launch stood beside it.)
int nvfp4_launch_fused_wgmma_mma_order(const void* a, void* act_ws, const void* packed, const void* scales,
                                       const void* g, const void* bias, void* out, float* workspace, int32_t m,
                                       int64_t n, int64_t k, int32_t out_bf16, int32_t whole_tiles, int32_t splits,
                                       int32_t tiled, cudaStream_t stream) {
  return tiled ? nvfp4::launch_checked<true>(a, act_ws, packed, scales, g, bias, out, workspace, m, n, k, out_bf16,
                                             whole_tiles, splits, stream)
               : nvfp4::launch_checked<false>(a, act_ws, packed, scales, g, bias, out, workspace, m, n, k, out_bf16,
                                              whole_tiles, splits, stream);
}

// Steps of weights each thread of the fused_wgmma launch for m rows keeps in flight in its own
// shared-memory ring (0: the register prefetch's one step), on the tile-contiguous copy (`tiled`)
// or the row-major weight (the same since the twenty-third session; the argument stays so that
// the export's callers need not change); 0 for m outside 1..256.
int32_t nvfp4_fused_wgmma_ring_steps(int32_t m, int32_t /*tiled*/) {
  if (m < 1 || m > nvfp4::kWgActRows) return 0;
  return nvfp4::library_ring(nvfp4::mma_order_act_tile(m));
}

// Rows of the permuted activations nvfp4_launch_fused_wgmma_mma_order needs for m rows (one
// whole activation tile of the width the launch takes for m; 0 for m < 1).
int64_t nvfp4_fused_wgmma_act_rows(int32_t m) {
  return m < 1 ? 0 : nvfp4::permuted_rows(m, nvfp4::mma_order_act_tile(m));
}

}  // extern "C"
