// Fused NVFP4 tensor-core matmul for small and medium M (1 <= M <= 256): Y = A @ W^T (+ bias)
// with block_size 16 and K % 128 == 0. The packed weights and their scale bytes are read from
// device memory once per M tile, decoded in registers to exactly the contract's T bits, and
// multiplied on tensor cores with fp32 accumulators. No bf16 copy of the weights is ever written.
// The decode (mma_decode.cuh) looks each scale block's values up in a table of eight T values
// built from to_T(s) and to_T(1.5 s) (PRMT, about 2 instructions per value) when every block of
// the warp's K step lies in the table's range, and otherwise multiplies each value as the GEMV
// does; both give the contract's bits.
//
// Layout of the work. The MMA is m16n8k16 with the weight rows as its M (16 per row tile) and the
// activation rows as its N (8 per activation tile), as in the GEMV. A block of 4 warps owns
// 64 * RT weight rows (each warp RT row tiles; a small grid's RT = 2 blocks run as 8 warps of one
// row tile instead, see block_warps) and 8 * MT activation rows, and walks its K range
// in steps of 128 values. Each step's operands (64 packed bytes and 8 scale bytes per weight row,
// 256 bytes per activation row) are brought into shared memory by cp.async, kStages steps ahead,
// so several steps of the weight stream are in flight per block without holding them in
// registers. Each thread decodes the 32 values 32t..32t+31 of its weight rows (the GEMV's
// fragment mapping), reuses each decoded fragment for all MT activation tiles, and reads the
// matching activation values with 16-byte shared loads from an XOR-swizzled tile (conflict free).
//
// Weight layout. The same kernel reads the contract's row-major packed weights and scales
// (nvfp4_launch_fused), where a step of a 64-row tile is 64 pieces of 64 bytes K/2 bytes apart, or
// the tile-contiguous copy nvfp4_kernels.layout makes once per weight (nvfp4_launch_fused_tiled),
// where it is one 4 KB piece and one 512-byte piece, with each word's sign bits placed where the
// table decode applies them (mma_decode.cuh, place_signs). The copies (Loader, TiledLoader) and
// the word decode (PLACED) differ; the values reaching each thread are the same, so the bits are
// too. The row-major access pattern alone held the weight stream to about 1.8 TB/s on the H200
// (benchmarks/NOTES.md). A tiled launch may also carry the weight's scale-byte range
// (nvfp4_kernels.layout.scale_byte_range, which layout.register keeps): where both of its ends lie
// in the table's range for the global scale, every block does, and the K loop runs without the
// per-step range test and its vote (scale_bytes_in_table).
//
// Bits. Every output element is accumulated by one thread's fp32 registers, MMA after MMA in the
// same K order whatever MT and RT are. When the grid also splits K (too few tiles to fill the
// GPU), the splits write fp32 partials to a workspace and are summed in split order, starting
// from +0.0, and the bias is added in fp32 before the single rounding to T. Given tile counters
// (single-row decode, where it measured as fast), the tile's last split block does that sum
// inside the launch, so the call is one launch; otherwise the finalize kernel of mma_decode.cuh
// does it after. Both give the same bits. So the bits depend only on the inputs and the split
// count, which the host chooses from the shape and the GPU (nvfp4_kernels.cuda_backend).
#include "mma_decode.cuh"
#include "streamed_launch.cuh"

namespace {

using nvfp4::build_table;
using nvfp4::count_split_acq_rel;
using nvfp4::cp_async16;
using nvfp4::cp_async8;
using nvfp4::cp_async_commit;
using nvfp4::cp_async_wait;
using nvfp4::decode_word;
using nvfp4::decode_word_table;
using nvfp4::decode_word_table_placed;
using nvfp4::unplace_signs;
using nvfp4::device_sms;
using nvfp4::DecodeTable;
using nvfp4::e4m3x2_to_f32;
using nvfp4::Mma;
using nvfp4::table_ok;
using nvfp4::OutT;
using nvfp4::word_of;
using nvfp4::launch_splitk_finalize;

// Tuning knobs, fixed at build time (the defaults are the measured best on an H200; see
// benchmarks/NOTES.md). nvfp4_kernels.tiling mirrors the tile shapes they give.
#ifndef NVFP4_FUSED_WARPS
#define NVFP4_FUSED_WARPS 4
#endif
#ifndef NVFP4_FUSED_STAGES
#define NVFP4_FUSED_STAGES 3
#endif
#ifndef NVFP4_FUSED_RT_SMALL
#define NVFP4_FUSED_RT_SMALL 1
#endif
#ifndef NVFP4_FUSED_RT_LARGE
#define NVFP4_FUSED_RT_LARGE 2
#endif

constexpr int kWarps = NVFP4_FUSED_WARPS;
constexpr int kStepK = 128;                 // values of K per step: 64 packed bytes, 8 scale bytes per row
constexpr int kStages = NVFP4_FUSED_STAGES;  // steps in shared memory at once (kStages - 1 in flight)
constexpr int kRtSmall = NVFP4_FUSED_RT_SMALL;
constexpr int kRtLarge = NVFP4_FUSED_RT_LARGE;

template <int MT, int RT, int WARPS = kWarps>
struct Tile {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRows = WARPS * 16 * RT;  // weight rows per block
  static constexpr int kActRows = 8 * MT;         // activation rows per block
  static constexpr int kWBytes = kRows * 64;
  static constexpr int kSBytes = kRows * 8;
  static constexpr int kABytes = kActRows * 256;
  static constexpr int kStageBytes = kWBytes + kSBytes + kABytes;
  static constexpr int kSmemBytes = kStageBytes * kStages;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Calls visit(value, weight row, activation row) for each accumulator of a warp's tiles, with the
// rows counted from the block's tile: the m16n8k16 MMA's C fragment puts c0, c1 at weight row g,
// activation rows 2t, 2t+1, and c2, c3 at weight row g + 8. The epilogue and every partial store
// go through this one mapping, so a unit stored elsewhere (scripts/ws_dev/fused_walk.cu) puts
// each value where this kernel would.
template <int MT, int RT, typename Visit>
__device__ __forceinline__ void for_each_fragment(float (&acc)[RT][MT][4], int warp, int g, int t, Visit&& visit) {
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        visit(acc[r][i][c], warp * 16 * RT + 16 * r + g + (c >= 2 ? 8 : 0), 8 * i + 2 * t + (c & 1));
      }
    }
  }
}

// Position of 16-byte chunk c (0..15) of activation row r in shared memory. Thread (g, t) reads
// chunk 4t + q of row g; the 8 threads of a quarter warp (g in {2p, 2p+1}, t in 0..3) then hit
// 8 different chunk positions modulo 8, i.e. all 32 banks once.
__device__ __forceinline__ int act_chunk(int c, int r) { return c ^ (((c >> 3) & 1) << 1) ^ (r & 1); }

__device__ __forceinline__ uint4 lds128(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }

// Copy j of `items` 16-byte chunks exists for this thread in a block of `threads` (the last round
// of a count that the threads do not divide is partial).
template <int kThreads>
__device__ __forceinline__ bool copy_exists(int j, int items) {
  return items % kThreads == 0 || static_cast<int>(threadIdx.x) + j * kThreads < items;
}

// One thread's copies of the activation tile (both weight layouts take them alike): 256 bytes per
// activation row and step, XOR-swizzled (act_chunk); a thread's copies are activation rows 8 j
// apart with the same swizzle, so copy 0's destination offset and an immediate stride place them.
// Rows past M copy nothing (cp.async zero-fills) from row 0's addresses.
template <int MT, int RT, int WARPS>
struct ActivationCopies {
  using TL = Tile<MT, RT, WARPS>;
  static constexpr int kChunks = TL::kActRows * 16;  // 16-byte chunks of activations
  static constexpr int kIters = (kChunks + TL::kThreads - 1) / TL::kThreads;
  static constexpr int kDstStride = TL::kThreads / 16 * 256;
  static_assert(TL::kThreads % 32 == 0, "the activation swizzle of copy j must equal copy 0's");
  const uint8_t* src[kIters];
  uint32_t dst;  // copy 0's offset inside a stage
  bool ok[kIters];

  __device__ __forceinline__ void init(const uint8_t* a, int m, int k, int m0, int step0) {
    const int tid = static_cast<int>(threadIdx.x);
    {
      const int r = tid >> 4, c = tid & 15;
      dst = TL::kWBytes + TL::kSBytes + r * 256 + act_chunk(c, r) * 16;
    }
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      const int i = tid + j * TL::kThreads;
      const int r = i >> 4, c = i & 15;
      ok[j] = i < kChunks && m0 + r < m;
      src[j] = a + ((ok[j] ? static_cast<int64_t>(m0 + r) * k : 0) + c * 8 + step0 * 128) * 2;  // 2-byte values
    }
  }

  // Copy the next step into the stage at shared address `stage`, then advance to the step after.
  __device__ __forceinline__ void load(uint32_t stage) {
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      if (copy_exists<TL::kThreads>(j, kChunks)) cp_async16(stage + dst + j * kDstStride, src[j], ok[j]);
      src[j] += 256;
    }
  }
};

// One thread's share of a stage's copies for the whole K walk, on the contract's row-major
// weights. Every copy of a thread lies a fixed distance from its first one inside a stage
// (i = threadIdx.x + j * threads: rows 32 j apart at 64 or 8 bytes, activation rows 8 j apart at
// 256 bytes, with the same swizzle), so a thread keeps one destination offset per operand and its
// copies' offsets are immediates; the sources are the next step's addresses and every load
// advances them by one step (64, 8 and 256 bytes). Rows past N or M copy nothing (cp.async
// zero-fills), and their sources are those of row 0, which stay inside the operand as they
// advance, so tail tiles need no other masking and no copy's address depends on the step.
template <int MT, int RT, int WARPS>
struct Loader {
  using TL = Tile<MT, RT, WARPS>;
  static constexpr int kWChunks = TL::kRows * 4;    // 16-byte chunks of packed weights
  static constexpr int kWIters = (kWChunks + TL::kThreads - 1) / TL::kThreads;
  static constexpr int kSIters = (TL::kRows + TL::kThreads - 1) / TL::kThreads;
  // the distance between a thread's consecutive copies inside a stage
  static constexpr int kWDstStride = TL::kThreads / 4 * 64;
  static constexpr int kSDstStride = TL::kThreads * 8;
  const uint8_t* w_src[kWIters];
  const uint8_t* s_src[kSIters];
  ActivationCopies<MT, RT, WARPS> act;
  uint32_t w_dst, s_dst;  // copy 0's offsets inside a stage
  bool w_ok[kWIters], s_ok[kSIters];

  // byte offset of row `row`'s step-0 packed bytes (per_row: 64, scales 8)
  static __device__ __forceinline__ int64_t row_offset(int row, int k, int per_row) {
    return static_cast<int64_t>(row) * (k / kStepK) * per_row;
  }
  static constexpr int64_t kWStep = 64;  // bytes a step advances the sources
  static constexpr int64_t kSStep = 8;

  static __device__ __forceinline__ bool exists(int j, int items) { return copy_exists<TL::kThreads>(j, items); }

  __device__ __forceinline__ Loader(const uint8_t* packed, const uint8_t* scales, const uint8_t* a, int m, int n,
                                    int k, int n0, int m0, int step0) {
    const int tid = static_cast<int>(threadIdx.x);
    w_dst = (tid >> 2) * 64 + (tid & 3) * 16;
    s_dst = TL::kWBytes + tid * 8;
#pragma unroll
    for (int j = 0; j < kWIters; ++j) {
      const int i = tid + j * TL::kThreads;
      const int r = i >> 2, c = i & 3;
      w_ok[j] = i < kWChunks && n0 + r < n;
      w_src[j] = packed + (w_ok[j] ? row_offset(n0 + r, k, 64) : 0) + c * 16 + step0 * kWStep;
    }
#pragma unroll
    for (int j = 0; j < kSIters; ++j) {
      const int r = tid + j * TL::kThreads;
      s_ok[j] = r < TL::kRows && n0 + r < n;
      s_src[j] = scales + (s_ok[j] ? row_offset(n0 + r, k, 8) : 0) + step0 * kSStep;
    }
    act.init(a, m, k, m0, step0);
  }

  // Copy the next step into the stage at shared address `stage`, then advance to the step after.
  __device__ __forceinline__ void load(uint32_t stage) {
#pragma unroll
    for (int j = 0; j < kWIters; ++j) {
      if (exists(j, kWChunks)) cp_async16(stage + w_dst + j * kWDstStride, w_src[j], w_ok[j]);
      w_src[j] += kWStep;
    }
#pragma unroll
    for (int j = 0; j < kSIters; ++j) {
      if (exists(j, TL::kRows)) cp_async8(stage + s_dst + j * kSDstStride, s_src[j], s_ok[j]);
      s_src[j] += kSStep;
    }
    act.load(stage);
  }
};

// The same copies on the tile-contiguous layout (nvfp4_launch_fused_tiled), where a 64-row tile's
// 64 packed bytes and 8 scale bytes per row of one K step are one 4 KB and one 512-byte piece, a
// tile's steps one after another. Inside a tile every row exists in memory (rows past N are
// zero padding), so the copies of one tile come from one source at immediate offsets and need
// no mask; only a tile past the last (a 128-row block over N = 130, say) copies nothing, from
// tile 0's addresses. The scale bytes move in 16-byte copies by the first warps (32 threads per
// 512-byte piece: a whole warp copies or none does). The stage's bytes are where Loader puts them
// (row r's packed bytes at 64 r, its scale bytes at kWBytes + 8 r), so compute_stage reads both
// alike.
template <int MT, int RT, int WARPS>
struct TiledLoader {
  using TL = Tile<MT, RT, WARPS>;
  static constexpr int kTiles = TL::kRows / 64;                    // 64-row tiles of a block
  static constexpr int kWPerTile = 64 * 4 / TL::kThreads > 0 ? 64 * 4 / TL::kThreads : 1;  // 16-byte copies
  static constexpr int kTilesPerW = TL::kThreads / (64 * 4) > 0 ? TL::kThreads / (64 * 4) : 1;
  static constexpr int kWSources = kTiles / kTilesPerW;            // tiles one thread copies from
  static constexpr int kSThreads = TL::kRows * 8 / 16;              // threads with a 16-byte scale copy
  static constexpr int64_t kWStep = 64 * 64;  // bytes a step advances the sources
  static constexpr int64_t kSStep = 64 * 8;
  static_assert(TL::kRows % 64 == 0 && kTiles % kTilesPerW == 0, "whole 64-row tiles per block");
  static_assert(kSThreads % 32 == 0 && kSThreads <= TL::kThreads, "whole warps copy the scales, once each");
  const uint8_t* w_src[kWSources];
  const uint8_t* s_src;
  ActivationCopies<MT, RT, WARPS> act;
  bool w_ok[kWSources], s_ok;

  __device__ __forceinline__ TiledLoader(const uint8_t* packed, const uint8_t* scales, const uint8_t* a, int m,
                                         int n, int k, int n0, int m0, int step0) {
    const int tid = static_cast<int>(threadIdx.x);
    const int tiles_n = (n + 63) / 64;
    const int64_t steps = k / kStepK;
    // stage byte tid * 16 + j * threads * 16 = row r's chunk c: tile (tid * 16 + j * threads * 16) / 4096
#pragma unroll
    for (int j = 0; j < kWSources; ++j) {
      const int tile = n0 / 64 + (tid * 16 + j * kWPerTile * TL::kThreads * 16) / 4096;
      w_ok[j] = tile < tiles_n;
      const int64_t offset = (static_cast<int64_t>(w_ok[j] ? tile : 0) * steps + step0) * kWStep;
      w_src[j] = packed + offset + (tid * 16) % 4096;
    }
    {
      const int byte = tid < kSThreads ? tid * 16 : 0;  // stage byte kWBytes + byte: tile byte / 512
      const int tile = n0 / 64 + byte / 512;
      s_ok = tile < tiles_n;
      s_src = scales + (static_cast<int64_t>(s_ok ? tile : 0) * steps + step0) * kSStep + byte % 512;
    }
    act.init(a, m, k, m0, step0);
  }

  __device__ __forceinline__ void load(uint32_t stage) {
    const uint32_t w_dst = static_cast<uint32_t>(threadIdx.x) * 16;
#pragma unroll
    for (int j = 0; j < kWSources; ++j) {
#pragma unroll
      for (int c = 0; c < kWPerTile; ++c) {
        cp_async16(stage + w_dst + (j * kWPerTile + c) * TL::kThreads * 16, w_src[j] + c * TL::kThreads * 16,
                   w_ok[j]);
      }
      w_src[j] += kWStep;
    }
    if (kSThreads == TL::kThreads || static_cast<int>(threadIdx.x) < kSThreads) {
      cp_async16(stage + TL::kWBytes + static_cast<uint32_t>(threadIdx.x) * 16, s_src, s_ok);
    }
    s_src += kSStep;
    act.load(stage);
  }
};

// Word q's activation fragments for every activation tile: 16-byte shared loads of the
// swizzled tile (issued before the decode that they overlap).
template <int MT>
__device__ __forceinline__ void load_act(const uint8_t* a_s, int g, int t, int q, uint4 (&b)[MT]) {
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const int arow = 8 * i + g;
    b[i] = lds128(a_s + arow * 256 + act_chunk(4 * t + q, arow) * 16);
  }
}

template <typename T, int MT, int RT>
__device__ __forceinline__ void mma_word(const uint32_t (&f)[RT][2][4], const uint4 (&b)[MT],
                                         float (&acc)[RT][MT][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      Mma<T>::run(acc[r][i], f[r][0][0], f[r][1][0], f[r][0][1], f[r][1][1], b[i].x, b[i].y);
      Mma<T>::run(acc[r][i], f[r][0][2], f[r][1][2], f[r][0][3], f[r][1][3], b[i].z, b[i].w);
    }
  }
}

// The step's decode by table (mma_decode.cuh, build_table): one table per scale block, built when
// its first word is decoded (block 0 serves words 0 and 1, block 1 words 2 and 3), so at most
// 2 * RT tables are live. PLACED: the words carry their signs placed (the tile-contiguous layout).
template <typename T, int MT, int RT, bool PLACED>
__device__ __forceinline__ void stage_by_table(const uint4 (&w)[RT][2], const float (&sc)[RT][4],
                                               const uint8_t* a_s, int g, int t, float (&acc)[RT][MT][4]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    DecodeTable tb[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      tb[r][0] = build_table<T>(sc[r][half]);      // row g
      tb[r][1] = build_table<T>(sc[r][2 + half]);  // row g + 8
    }
#pragma unroll
    for (int q = 2 * half; q < 2 * half + 2; ++q) {
      uint4 b[MT];
      load_act<MT>(a_s, g, t, q, b);
      uint32_t f[RT][2][4];
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        if constexpr (PLACED) {
          decode_word_table_placed(word_of(w[r][0], q), tb[r][0], f[r][0]);
          decode_word_table_placed(word_of(w[r][1], q), tb[r][1], f[r][1]);
        } else {
          decode_word_table(word_of(w[r][0], q), tb[r][0], f[r][0]);
          decode_word_table(word_of(w[r][1], q), tb[r][1], f[r][1]);
        }
      }
      mma_word<T, MT, RT>(f, b, acc);
    }
  }
}

// The step's decode by multiplication (decode_word): for blocks outside the table's range.
// PLACED words are put back into the contract's code order first (this path is rare).
template <typename T, int MT, int RT, bool PLACED>
__device__ __forceinline__ void stage_by_multiply(const uint4 (&w)[RT][2], const float (&sc)[RT][4],
                                                  const uint8_t* a_s, int g, int t, float (&acc)[RT][MT][4]) {
  float big[RT][4];
  bool slow = false;
#pragma unroll
  for (int r = 0; r < RT; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      big[r][i] = sc[r][i] * nvfp4::pow2_14();
      // s * 2^14 overflowed although s is finite: the exact two-multiply form is needed
      slow |= (fabsf(big[r][i]) == __uint_as_float(0x7F800000u)) &&
              (fabsf(sc[r][i]) != __uint_as_float(0x7F800000u));
    }
  }
  // mma.sync.aligned needs the whole warp on one branch (see the GEMV): one overflowing lane
  // sends the warp's step down the exact form, which is exact for every lane.
  slow = __any_sync(0xFFFFFFFFu, slow);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint4 b[MT];
    load_act<MT>(a_s, g, t, q, b);
    uint32_t f[RT][2][4];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const uint32_t w0 = PLACED ? unplace_signs(word_of(w[r][0], q)) : word_of(w[r][0], q);
      const uint32_t w1 = PLACED ? unplace_signs(word_of(w[r][1], q)) : word_of(w[r][1], q);
      if (!slow) {
        decode_word<T, true>(w0, big[r][q >> 1], f[r][0]);
        decode_word<T, true>(w1, big[r][2 + (q >> 1)], f[r][1]);
      } else {
        decode_word<T, false>(w0, sc[r][q >> 1], f[r][0]);
        decode_word<T, false>(w1, sc[r][2 + (q >> 1)], f[r][1]);
      }
    }
    mma_word<T, MT, RT>(f, b, acc);
  }
}

// CHECKED: each warp tests its K step's scales against the table's range and takes the multiply
// decode when one is outside it; without, the launch has shown that every scale of the weight is
// inside it (scale_bytes_in_table, for a registered weight) and the table is taken throughout.
template <typename T, int MT, int RT, int WARPS, bool PLACED, bool CHECKED = true>
__device__ __forceinline__ void compute_stage(const uint8_t* stage, float gs, int warp, int g, int t,
                                              float (&acc)[RT][MT][4]) {
  using TL = Tile<MT, RT, WARPS>;
  const uint8_t* w_s = stage;
  const uint8_t* s_s = stage + TL::kWBytes;
  const uint8_t* a_s = stage + TL::kWBytes + TL::kSBytes;
  uint4 w[RT][2];
  float sc[RT][4];
  bool table = true;
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int row = warp * 16 * RT + 16 * r + g;
    w[r][0] = *reinterpret_cast<const uint4*>(w_s + row * 64 + t * 16);
    w[r][1] = *reinterpret_cast<const uint4*>(w_s + (row + 8) * 64 + t * 16);
    const uint32_t b0 = *reinterpret_cast<const unsigned short*>(s_s + row * 8 + 2 * t);
    const uint32_t b1 = *reinterpret_cast<const unsigned short*>(s_s + (row + 8) * 8 + 2 * t);
    const float2 s0 = e4m3x2_to_f32(b0);
    const float2 s1 = e4m3x2_to_f32(b1);
    sc[r][0] = s0.x * gs;  // row g, values 32t..32t+15
    sc[r][1] = s0.y * gs;  // row g, values 32t+16..32t+31
    sc[r][2] = s1.x * gs;  // row g+8
    sc[r][3] = s1.y * gs;
    if constexpr (CHECKED) {
#pragma unroll
      for (int i = 0; i < 4; ++i) table &= table_ok<T>(sc[r][i]);
    }
  }
  // one branch for the whole warp (mma.sync.aligned): the table when every lane's blocks allow it
  if (!CHECKED || __all_sync(0xFFFFFFFFu, table)) {
    stage_by_table<T, MT, RT, PLACED>(w, sc, a_s, g, t, acc);
  } else {
    stage_by_multiply<T, MT, RT, PLACED>(w, sc, a_s, g, t, acc);
  }
}

// The split-K sum of one tile in the same launch, on any GPU: every split writes its partial
// tile to the workspace, then counts itself in the tile's counter; the block that counts last
// (all other splits' partials are then in device memory) sums the tile's partials in split order
// from +0.0, adds the bias, rounds once, and sets the counter back to 0 for the next launch on
// the stream. The counters start at 0 (the host zeroes them once) and every launch leaves them at
// 0, so the bits are those of the finalize kernel.
//
// It is a called subroutine, not inlined: inlined after the main loop, it changed how the
// compiler scheduled and allocated that loop (a slower loop for a sum of a few hundred values).
// Called, it takes only kernel parameters and blockIdx (it works out its tile again), so the PTX
// of the LAST_BLOCK instantiation up to the call is that of the finalize-path one, and nothing of
// the sum is live across the loop. ptxas still sees the callee: its register and occupancy
// choice for the whole kernel follows the callee's loads (see the unroll below).
//
// Ordering, in the PTX memory model. One thread per block does the GPU-scope synchronisation, as
// the cooperative-groups grid barrier and CUTLASS's GenericBarrier do: the block's bar.sync
// orders every thread's partial stores before thread 0's count, and the count is an acq_rel
// atomic at GPU scope, whose release is cumulative over those stores; in the last block, the same
// atomic's acquire sees every other split's release, and the second barrier orders it before
// every thread's loads. The loads go through L2 (__ldcg), not through a possibly stale L1 line.
// (All threads fencing, __threadfence() being fence.sc.gpu, cost every block 128 full fences.)
// The count is nvfp4::count_split_acq_rel (mma_decode.cuh), which the GEMV's last-block sum shares.
template <typename T, int MT, int RT, int WARPS>
__device__ __noinline__ void last_block_reduce(const float* __restrict__ partial, int* __restrict__ counters,
                                               const unsigned short* __restrict__ bias,
                                               unsigned short* __restrict__ out, int m, int n, int n_tiles,
                                               int m_tiles, int splits) {
  using TL = Tile<MT, RT, WARPS>;
  // the kernel's tile arithmetic again, so that none of it is kept live across the main loop
  const int m_tile = blockIdx.x % m_tiles;
  const int n_tile = (blockIdx.x / m_tiles) % n_tiles;
  int* counter = counters + (n_tile * m_tiles + m_tile);
  const int n0 = n_tile * TL::kRows;
  const int m0 = m_tile * TL::kActRows;
  __syncthreads();  // every thread's partial stores, before thread 0 counts them
  // Thread 0's answer reaches the block through the barrier's reduction, not through a
  // __shared__ flag: a static __shared__ variable moves the dynamic shared memory's base, which
  // costs the main loop an instruction. The barrier also orders thread 0's acquire before every
  // thread's loads of the other splits.
  const bool last_block = __syncthreads_or(threadIdx.x == 0 && count_split_acq_rel(counter) == splits - 1);
  if (!last_block) return;
  const int64_t plane = static_cast<int64_t>(m) * n;
  // weight row fastest: neighbouring threads read neighbouring partials of one activation row
  for (int e = static_cast<int>(threadIdx.x); e < TL::kRows * TL::kActRows; e += TL::kThreads) {
    const int nn = n0 + e % TL::kRows;
    const int mm = m0 + e / TL::kRows;
    if (nn >= n || mm >= m) continue;
    const float* p = partial + static_cast<int64_t>(mm) * n + nn;
    float sum = 0.f;
    // two loads in flight, not four or more: with four (unroll 4, or a batch of four) ptxas gave
    // the whole kernel fewer registers (56, not 64, at MT = 1) and recomputed addresses inside
    // the main loop; with at most two the main loop keeps the finalize path's allocation
#pragma unroll 2
    for (int s = 0; s < splits; ++s) sum += __ldcg(p + s * plane);
    if (bias != nullptr) sum += OutT<T>::to_f32(bias[nn]);
    out[static_cast<int64_t>(mm) * n + nn] = OutT<T>::one(sum);
  }
  // a plain store: the next launch on the stream counts only after this kernel has ended
  if (threadIdx.x == 0) *counter = 0;
}

// Blocks per multiprocessor the register allocation is asked to allow. With the called
// last-block sum, ptxas aimed the MT = 2 instantiation at 7 blocks (72 registers) and kept the
// global scale in local memory, reloading it every K step; asking for 6 (the occupancy the
// finalize-path instantiation gets by itself, at 80 registers) keeps it in a register. The SASS
// contract (suites/test_sass_contracts.py: no local memory) holds every instantiation to this.
// 0 leaves the choice to ptxas, as a __launch_bounds__ without the argument does.
constexpr int last_block_min_blocks(int mt, bool last_block) { return last_block && mt == 2 ? 6 : 0; }

// Blocks per SM asked of ptxas for tile-contiguous weights, whose kernels carry two K loops
// (compute_stage's CHECKED) and so more live code. Left to itself (no minimum), ptxas kept the
// wide block (8 warps) at 80 registers and the 128-row, 32-activation-row tile at 128, and moved
// values to local memory, inside the K loop too. Asking for the occupancy the row-major kernel
// has (tiling.FUSED_OCCUPANCY_H200: 3 blocks for that tile, 2 for the 64-row activation tile; one
// for the wide block, which runs where the grid has at most one block per SM) gives them the
// registers instead. Row-major launches keep their allocation.
constexpr int tiled_min_blocks(int warps, int mt, int rt, bool tiled, int otherwise) {
  return !tiled ? otherwise : warps == 2 * kWarps ? 1 : rt == 2 ? (mt == 4 ? 3 : 2) : otherwise;
}

// The K loop over a block's steps: the ring of kStages stages, the slot the next load fills
// (shared-window address) and the slot the next step computes on, each moved on by one stage after
// use, back to the first at the end. CHECKED: compute_stage's per-step range test (see there).
template <typename T, int MT, int RT, int WARPS, bool PLACED, bool CHECKED, typename L>
__device__ __forceinline__ void k_loop(L& loader, uint8_t* smem, int steps, float gs, int warp, int g, int t,
                                       float (&acc)[RT][MT][4]) {
  using TL = Tile<MT, RT, WARPS>;
  constexpr int kRing = kStages;
  const uint32_t ring = smem_addr(smem);
  const uint32_t ring_last = ring + (kRing - 1) * TL::kStageBytes;
  uint32_t load_slot = ring;
#pragma unroll
  for (int s = 0; s < kRing - 1; ++s) {
    if (s < steps) loader.load(load_slot);
    cp_async_commit();  // empty groups keep the wait count uniform
    load_slot += TL::kStageBytes;
  }
  const uint8_t* compute_slot = smem;
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kRing - 2>();
    __syncthreads();  // step s is in shared memory for every thread; step s-1's buffer is free
    if (s + kRing - 1 < steps) loader.load(load_slot);
    cp_async_commit();
    load_slot = load_slot == ring_last ? ring : load_slot + TL::kStageBytes;
    compute_stage<T, MT, RT, WARPS, PLACED, CHECKED>(compute_slot, gs, warp, g, t, acc);
    compute_slot = compute_slot == smem + (kRing - 1) * TL::kStageBytes ? smem : compute_slot + TL::kStageBytes;
  }
}

// Every scale of the launch's weight lies in the table's range: the caller vouches that each scale
// byte of the weight's rows lies in [lo, hi] (scale_bytes = lo | hi << 8, 1 <= lo <= hi <= 0x7E:
// positive, finite, non-zero E4M3 values; 0 when it does not know), and s = fp32(e4m3 * g) is
// monotone in such bytes for every g, so both ends in range put every block of the weight in it.
// The same conversion and product as compute_stage's, so the same s.
template <typename T>
__device__ __forceinline__ bool scale_bytes_in_table(int scale_bytes, float gs) {
  const int lo = scale_bytes & 0xFF, hi = (scale_bytes >> 8) & 0xFF;
  if (scale_bytes >> 16 || lo < 1 || lo > hi || hi > 0x7E) return false;
  const float2 ends = e4m3x2_to_f32(static_cast<uint32_t>(scale_bytes));
  return table_ok<T>(ends.x * gs) && table_ok<T>(ends.y * gs);
}

// LAST_BLOCK: this instantiation sums the K splits itself (last_block_reduce). It is its own
// instantiation so that every other launch runs exactly the code it ran before that sum existed.
// TILED: the weights come in the tile-contiguous layout (TiledLoader, placed signs), and a launch
// whose scale_bytes puts every scale in the table's range runs the K loop without the per-step
// range test (row-major launches pass 0).
template <typename T, int MT, int RT, int WARPS, bool LAST_BLOCK, bool TILED = false>
__global__ void __launch_bounds__(WARPS * 32, tiled_min_blocks(WARPS, MT, RT, TILED, last_block_min_blocks(MT, LAST_BLOCK)))
nvfp4_fused_mma_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ packed,
                       const uint8_t* __restrict__ scales, const float* __restrict__ g_ptr,
                       const unsigned short* __restrict__ bias, unsigned short* __restrict__ out,
                       float* __restrict__ partial, int m, int n, int k, int n_tiles, int m_tiles,
                       int steps_per_split, int* __restrict__ counters, int splits, int scale_bytes) {
  using TL = Tile<MT, RT, WARPS>;
  nvfp4::allow_dependent_launch();  // the finalize kernel, if one follows, may be scheduled now
  extern __shared__ __align__(16) uint8_t smem[];
  // m tile fastest: blocks that share weight rows run together and find them in L2
  const int m_tile = blockIdx.x % m_tiles;
  const int n_tile = (blockIdx.x / m_tiles) % n_tiles;
  const int split = blockIdx.x / (m_tiles * n_tiles);
  const int n0 = n_tile * TL::kRows;
  const int m0 = m_tile * TL::kActRows;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int total_steps = k / kStepK;
  const int step_begin = split * steps_per_split;
  const int steps = min(step_begin + steps_per_split, total_steps) - step_begin;
  const float gs = __ldg(g_ptr);

  float acc[RT][MT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][i][c] = 0.f;

  if constexpr (TILED) {
    TiledLoader<MT, RT, WARPS> loader(packed, scales, a, m, n, k, n0, m0, step_begin);
    if (scale_bytes_in_table<T>(scale_bytes, gs)) {
      k_loop<T, MT, RT, WARPS, true, false>(loader, smem, steps, gs, warp, g, t, acc);
    } else {
      k_loop<T, MT, RT, WARPS, true, true>(loader, smem, steps, gs, warp, g, t, acc);
    }
  } else {
    Loader<MT, RT, WARPS> loader(packed, scales, a, m, n, k, n0, m0, step_begin);
    k_loop<T, MT, RT, WARPS, false, true>(loader, smem, steps, gs, warp, g, t, acc);
  }

  for_each_fragment<MT, RT>(acc, warp, g, t, [&](float v, int row, int act_row) {
    const int nn = n0 + row, mm = m0 + act_row;
    if (nn < n && mm < m) {
      if (partial != nullptr) {
        partial[(static_cast<int64_t>(split) * m + mm) * n + nn] = v;
      } else {
        if (bias != nullptr) v += OutT<T>::to_f32(bias[nn]);
        out[static_cast<int64_t>(mm) * n + nn] = OutT<T>::one(v);
      }
    }
  });
  if constexpr (LAST_BLOCK) {
    last_block_reduce<T, MT, RT, WARPS>(partial, counters, bias, out, m, n, n_tiles, m_tiles, splits);
  }
}

// The tile configuration for M: activation tiles of 8, 16, 32 or 64 rows; one weight row tile
// per warp up to M = 16 (more blocks to spread a thin problem), two above it (each activation
// value read from shared memory then feeds twice as many MMAs).
struct Config {
  int mt;
  int rt;
};

__host__ __device__ constexpr Config config_for(int m) {
  return m <= 8 ? Config{1, kRtSmall} : m <= 16 ? Config{2, kRtSmall} : m <= 32 ? Config{4, kRtLarge}
                                                                    : Config{8, kRtLarge};
}

// The wide block: the tiles of two row tiles per warp (M > 16) run as twice the warps with one
// row tile each when their grid is small. Same weight rows per block, same split count (the
// host's, from the narrow block's occupancy) and the same K order for every output, so the same
// bits; only the parallelism inside a block changes. A grid of at most one block per
// multiprocessor leaves each SM one block's warps and makes each block's latency the call's,
// which twice the warps shortens; a grid that fills the GPU runs faster with the narrow block
// (benchmarks/NOTES.md, "wide blocks"). NVFP4_FUSED_WIDE_BLOCKS_PER_SM scales the limit (0: never).
#ifndef NVFP4_FUSED_WIDE_BLOCKS_PER_SM
#define NVFP4_FUSED_WIDE_BLOCKS_PER_SM 1
#endif

// (N, M) tiles of a launch for [m, n], i.e. its blocks per K split (the narrow block's rows).
__host__ __device__ constexpr int64_t grid_tiles(int m, int64_t n) {
  const Config c = config_for(m);
  const int64_t rows = kWarps * 16 * c.rt, act_rows = 8 * c.mt;
  return ((n + rows - 1) / rows) * ((m + act_rows - 1) / act_rows);
}

// Warps per block of the launch for [m, k] x [n, k]^T with `splits` K splits on `sms` SMs.
__host__ __device__ constexpr int block_warps(int m, int64_t n, int splits, int sms) {
  const int64_t blocks = grid_tiles(m, n) * splits;
  return config_for(m).rt == 2 && blocks <= static_cast<int64_t>(sms) * NVFP4_FUSED_WIDE_BLOCKS_PER_SM ? 2 * kWarps
                                                                                                        : kWarps;
}

// The narrow block's occupancy: the one the host's split count is chosen for.
template <int MT, int RT>
int occupancy_of() {
  // the dynamic shared-memory limit is raised first, as a launch does
  if (cudaFuncSetAttribute(nvfp4_fused_mma_kernel<__nv_bfloat16, MT, RT, kWarps, false>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           Tile<MT, RT>::kSmemBytes) != cudaSuccess) {
    return -1;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks,
                                                    nvfp4_fused_mma_kernel<__nv_bfloat16, MT, RT, kWarps, false>,
                                                    Tile<MT, RT>::kThreads, Tile<MT, RT>::kSmemBytes) != cudaSuccess) {
    return -1;
  }
  return blocks;
}

// The dynamic shared memory that holds `kernel` to at most `target` resident blocks per SM:
// `smem`, or more where the kernel alone would fit more. The host's split count is chosen for the
// row-major kernel's occupancy (occupancy_of); a tile-contiguous instantiation that needs fewer
// registers (56 instead of 64 at M = 1 with the last-block sum) would otherwise run 9 blocks per
// SM where the count assumed 8, which measured 3% slower with the L2 flushed (benchmarks/NOTES.md).
// Asked once per kernel and device; on any CUDA error the kernel keeps `smem`.
template <typename Kernel>
int smem_for_occupancy(Kernel kernel, int threads, int smem, int target) {
  int dev = 0, limit = 0;
  if (target < 1 || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    return smem;
  }
  for (int s = smem; s <= limit; s += 256) {
    int blocks = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, s) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, s) != cudaSuccess) {
      return smem;
    }
    if (blocks <= target) return s;
  }
  return smem;
}

// The kernel a launch of this configuration takes (LAST_BLOCK: with the in-launch split-K sum).
template <typename T, int MT, int RT, int WARPS, bool TILED>
auto kernel_of(bool last_block) {
  return last_block ? nvfp4_fused_mma_kernel<T, MT, RT, WARPS, true, TILED>
                    : nvfp4_fused_mma_kernel<T, MT, RT, WARPS, false, TILED>;
}

// The dynamic shared memory a launch of the configuration uses on the current device, its limit
// raised there once (a negative cudaError_t on failure): the stages' bytes, held to the split
// model's occupancy on tile-contiguous weights (smem_for_occupancy).
template <typename T, int MT, int RT, int WARPS, bool TILED>
int configured_smem(bool last_block) {
  using TL = Tile<MT, RT, WARPS>;
  static int configured_for[2] = {-1, -1};  // the device whose shared-memory limit was raised last
  static int smem_of[2] = {TL::kSmemBytes, TL::kSmemBytes};
  int dev = 0;
  cudaGetDevice(&dev);
  if (configured_for[last_block] != dev) {
    const auto kernel = kernel_of<T, MT, RT, WARPS, TILED>(last_block);
    int smem = TL::kSmemBytes;
    if constexpr (TILED && WARPS == kWarps) {
      smem = smem_for_occupancy(kernel, TL::kThreads, smem, occupancy_of<MT, RT>());
    }
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return -static_cast<int>(err);
    smem_of[last_block] = smem;
    configured_for[last_block] = dev;
  }
  return smem_of[last_block];
}

template <typename T, int MT, int RT, int WARPS, bool TILED>
cudaError_t launch_config(const void* a, const void* packed, const void* scales, const void* g,
                          const void* bias, void* out, float* workspace, int* counters, int m, int n, int k,
                          int splits, cudaStream_t stream, int scale_bytes) {
  using TL = Tile<MT, RT, WARPS>;
  const bool last_block = splits > 1 && counters != nullptr;
  const auto kernel = kernel_of<T, MT, RT, WARPS, TILED>(last_block);
  const int smem = configured_smem<T, MT, RT, WARPS, TILED>(last_block);
  if (smem < 0) return static_cast<cudaError_t>(-smem);
  const int n_tiles = (n + TL::kRows - 1) / TL::kRows;
  const int m_tiles = (m + TL::kActRows - 1) / TL::kActRows;
  const int total_steps = k / kStepK;
  const int steps_per_split = (total_steps + splits - 1) / splits;
  const unsigned blocks = static_cast<unsigned>(n_tiles) * m_tiles * splits;
  const unsigned short* b = static_cast<const unsigned short*>(bias);
  unsigned short* o = static_cast<unsigned short*>(out);
  float* part = splits > 1 ? workspace : nullptr;
  const uint8_t* a8 = static_cast<const uint8_t*>(a);
  const uint8_t* p8 = static_cast<const uint8_t*>(packed);
  const uint8_t* s8 = static_cast<const uint8_t*>(scales);
  const float* gf = static_cast<const float*>(g);
  int* count = last_block ? counters : nullptr;
  // the packed weights' bytes: N rows of K / 2 bytes, or whole 64-row tiles in the tiled layout
  const int64_t weight_rows = TILED ? (static_cast<int64_t>(n) + 63) / 64 * 64 : n;
  const size_t weight_bytes = static_cast<size_t>(weight_rows) * static_cast<size_t>(k / 2);
  const cudaError_t err = nvfp4::launch_streaming_weights(
      kernel, dim3(blocks), dim3(TL::kThreads), static_cast<size_t>(smem), stream, p8, weight_bytes, a8, p8, s8,
      gf, b, o, part, m, n, k, n_tiles, m_tiles, steps_per_split, count, splits, scale_bytes);
  if (err != cudaSuccess || splits <= 1 || last_block) return err;
  return launch_splitk_finalize<T>(workspace, b, o, m, n, splits, stream);
}

template <typename T, int MT, bool TILED>
cudaError_t launch_large(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                         void* out, float* workspace, int* counters, int m, int n, int k, int splits,
                         cudaStream_t stream, int scale_bytes) {
  static_assert(kRtLarge == 2, "the wide block halves two row tiles per warp");
  if (block_warps(m, n, splits, device_sms()) == 2 * kWarps) {
    return launch_config<T, MT, 1, 2 * kWarps, TILED>(a, packed, scales, g, bias, out, workspace, counters, m, n, k,
                                                      splits, stream, scale_bytes);
  }
  return launch_config<T, MT, kRtLarge, kWarps, TILED>(a, packed, scales, g, bias, out, workspace, counters, m, n,
                                                       k, splits, stream, scale_bytes);
}

template <typename T, bool TILED>
cudaError_t launch_fused(const void* a, const void* packed, const void* scales, const void* g,
                         const void* bias, void* out, float* workspace, int* counters, int m, int n, int k,
                         int splits, cudaStream_t stream, int scale_bytes) {
  const Config c = config_for(m);
  if (c.mt == 1) {
    return launch_config<T, 1, kRtSmall, kWarps, TILED>(a, packed, scales, g, bias, out, workspace, counters, m, n,
                                                        k, splits, stream, scale_bytes);
  }
  if (c.mt == 2) {
    return launch_config<T, 2, kRtSmall, kWarps, TILED>(a, packed, scales, g, bias, out, workspace, counters, m, n,
                                                        k, splits, stream, scale_bytes);
  }
  if (c.mt == 4) {
    return launch_large<T, 4, TILED>(a, packed, scales, g, bias, out, workspace, counters, m, n, k, splits, stream, scale_bytes);
  }
  return launch_large<T, 8, TILED>(a, packed, scales, g, bias, out, workspace, counters, m, n, k, splits, stream, scale_bytes);
}

// Resident blocks per SM that a launch of the narrow configuration for M gets (bf16, at the
// shared memory configured_smem gives it), or -1 on a CUDA error.
template <int MT, int RT, bool TILED>
int launch_occupancy(bool last_block) {
  const int smem = configured_smem<__nv_bfloat16, MT, RT, kWarps, TILED>(last_block);
  int blocks = 0;
  if (smem < 0 || cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                      &blocks, kernel_of<__nv_bfloat16, MT, RT, kWarps, TILED>(last_block), Tile<MT, RT>::kThreads,
                      smem) != cudaSuccess) {
    return -1;
  }
  return blocks;
}

template <bool TILED>
int launch_occupancy_for(int32_t m, bool last_block) {
  const Config c = config_for(m);
  if (c.mt == 1) return launch_occupancy<1, kRtSmall, TILED>(last_block);
  if (c.mt == 2) return launch_occupancy<2, kRtSmall, TILED>(last_block);
  if (c.mt == 4) return launch_occupancy<4, kRtLarge, TILED>(last_block);
  return launch_occupancy<8, kRtLarge, TILED>(last_block);
}

template <bool TILED>
int launch_checked(const void* a, const void* packed, const void* scales, const void* g, const void* bias, void* out,
                   float* workspace, int* counters, int32_t m, int64_t n, int64_t k, int32_t out_bf16, int32_t splits,
                   cudaStream_t stream, int32_t scale_bytes) {
  if (m <= 0 || n <= 0 || k <= 0) return static_cast<int>(cudaSuccess);
  if (m > 256 || (k % kStepK) || n > 0x7FFFFFFF || k > 0x7FFFFFFF || splits < 1 ||
      splits > k / kStepK || (splits > 1 && workspace == nullptr) || (counters != nullptr && workspace == nullptr) ||
      (reinterpret_cast<uintptr_t>(a) & 15) ||
      (reinterpret_cast<uintptr_t>(packed) & 15) || (reinterpret_cast<uintptr_t>(scales) & 7)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int lo = scale_bytes & 0xFF, hi = (scale_bytes >> 8) & 0xFF;
  if (scale_bytes != 0 && (!TILED || (scale_bytes >> 16) || lo < 1 || lo > hi || hi > 0x7E)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err =
      out_bf16 ? launch_fused<__nv_bfloat16, TILED>(a, packed, scales, g, bias, out, workspace, counters, m,
                                                    static_cast<int>(n), static_cast<int>(k), splits, stream, scale_bytes)
               : launch_fused<__half, TILED>(a, packed, scales, g, bias, out, workspace, counters, m,
                                             static_cast<int>(n), static_cast<int>(k), splits, stream, scale_bytes);
  return static_cast<int>(err);
}

}  // namespace

extern "C" {

// Tiles (blocks per split) of a launch for [m, n]: the counters a last-block reduction needs.
int64_t nvfp4_fused_tiles(int32_t m, int64_t n) {
  if (m < 1 || m > 256 || n < 1) return 0;
  return grid_tiles(m, n);
}

// The fused kernel's tile shape for M: packed as (weight rows per block) << 16 | (activation rows
// per block). The host's split-K choice (nvfp4_kernels.cuda_backend.fused_splits) reads it.
int nvfp4_fused_tile(int32_t m) {
  if (m < 1) return 0;
  const Config c = config_for(m);
  return ((kWarps * 16 * c.rt) << 16) | (8 * c.mt);
}

// Warps per block of the launch for [m, n] with `splits` K splits on a GPU of `sms` SMs: 8 where a
// tile of two row tiles per warp runs as the wide block (block_warps), else 4; 0 for bad
// arguments. nvfp4_kernels.tiling mirrors it.
int nvfp4_fused_block_warps(int32_t m, int64_t n, int32_t splits, int32_t sms) {
  if (m < 1 || m > 256 || n < 1 || splits < 1 || sms < 1) return 0;
  return block_warps(m, n, splits, sms);
}

// Resident blocks per multiprocessor of the configuration for M on the current device (raising
// the dynamic shared-memory limit first, as a launch does); negative on a CUDA error.
int nvfp4_fused_occupancy(int32_t m) {
  if (m < 1 || m > 256) return -1;
  const Config c = config_for(m);
  if (c.mt == 1) return occupancy_of<1, kRtSmall>();
  if (c.mt == 2) return occupancy_of<2, kRtSmall>();
  if (c.mt == 4) return occupancy_of<4, kRtLarge>();
  return occupancy_of<8, kRtLarge>();
}

// Resident blocks per multiprocessor that a launch for M gets on the current device (the narrow
// block, bf16), on row-major (tiled = 0) or tile-contiguous weights, with the in-launch split-K sum
// (last_block = 1) or without; negative on bad arguments or a CUDA error. Every one of them is held
// to nvfp4_fused_occupancy(m), the occupancy the host's split count is chosen for.
int nvfp4_fused_launch_occupancy(int32_t m, int32_t tiled, int32_t last_block) {
  if (m < 1 || m > 256) return -1;
  return tiled ? launch_occupancy_for<true>(m, last_block != 0) : launch_occupancy_for<false>(m, last_block != 0);
}

// a: [m, k] fp16/bf16, packed: [n, k/2], scales: [n, k/16], each 16-, 16- and 8-byte aligned;
// g: one fp32 in device memory; bias: [n] or null; out: [m, n]; 1 <= m <= 256, k % 128 == 0.
// When splits > 1, workspace holds splits * m * n fp32 partials; with counters (one int per tile
// of the launch, all 0: nvfp4_fused_tiles) the tile's last split block sums them in the launch
// and leaves the counters at 0, without them the finalize kernel runs after.
int nvfp4_launch_fused(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                       void* out, float* workspace, int* counters, int32_t m, int64_t n, int64_t k,
                       int32_t out_bf16, int32_t splits, cudaStream_t stream) {
  return launch_checked<false>(a, packed, scales, g, bias, out, workspace, counters, m, n, k, out_bf16, splits,
                               stream, 0);
}

// As nvfp4_launch_fused, with the weights in the tile-contiguous layout (the same bits): packed is
// [ceil(n / 64)][k / 128][64][64] bytes, element [t][s][r][c] = packed byte (64 t + r, 64 s + c) with
// every aligned 4-byte word's sign bits placed (place_signs, mma_decode.cuh), and scales
// [ceil(n / 64)][k / 128][64][8], element [t][s][r][j] = scale byte (64 t + r, 8 s + j); rows past n
// are padding (any bytes: they are read, but never reach the output). nvfp4_kernels.layout makes
// them. scale_bytes: 0, or lo | hi << 8 with 1 <= lo <= hi <= 0x7E when the caller knows that
// every scale byte of rows 0..n-1 lies in [lo, hi]; where the table's range then holds for the
// global scale, the kernel skips its per-step range test (the same bits). A range that the bytes
// do not keep gives wrong results; an ill-formed one is refused (cudaErrorInvalidValue).
int nvfp4_launch_fused_tiled(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                             void* out, float* workspace, int* counters, int32_t m, int64_t n, int64_t k,
                             int32_t out_bf16, int32_t splits, cudaStream_t stream, int32_t scale_bytes) {
  return launch_checked<true>(a, packed, scales, g, bias, out, workspace, counters, m, n, k, out_bf16, splits,
                              stream, scale_bytes);
}

}  // extern "C"
