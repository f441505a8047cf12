// Decode GEMV for NVFP4 weights: Y[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]), 1 <= M <= 8,
// block_size 16, K % 32 == 0. Weights are read once, decoded in registers to the same T bits as
// the dequant kernels (through the fused kernel's per-block tables where a warp's scales allow,
// else by multiplying each value), and multiplied on tensor cores: mma.sync m16n8k16 with 16
// weight rows as the MMA's M, the <= 8 activation rows as its N (missing rows are zeros) and fp32
// accumulators.
//
// k order inside an MMA is free, so thread (group g, lane-in-group t) loads 16 contiguous packed
// bytes (32 values) of weight rows g and g+8 per 128-value step and feeds values 4j..4j+3 to the
// A-fragment k slots {2t, 2t+1, 2t+8, 2t+9} of MMA j (j = 0..7); it loads activation row g at
// exactly the same 32 k positions (64 contiguous bytes) for its B fragment. Every global load is
// contiguous and 16 bytes wide. A block owns one 16-row tile; its 8 warps split the K steps and
// reduce through shared memory in a fixed order. When N/16 tiles do not fill the GPU, K is also
// split across blocks (fp32 partials in a workspace, summed in split order by the tile's last
// block inside the launch when the caller passes tile counters, else by a finalize kernel: the
// same bits), so the bias is added in fp32 and the result rounded to T exactly once either way.
#include "mma_decode.cuh"

namespace {

using nvfp4::build_table;
using nvfp4::decode_word;
using nvfp4::decode_word_table;
using nvfp4::DecodeTable;
using nvfp4::e4m3x2_to_f32;
using nvfp4::table_ok;
using nvfp4::load_stream_v4;
using nvfp4::Mma;
using nvfp4::OutT;
using nvfp4::word_of;
using nvfp4::launch_splitk_finalize;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStepK = 128;  // values of K per warp step (4 threads x 32 values)
#ifndef NVFP4_GEMV_DEPTH
#define NVFP4_GEMV_DEPTH 2
#endif
#ifndef NVFP4_GEMV_ACT_DEPTH
#define NVFP4_GEMV_ACT_DEPTH NVFP4_GEMV_DEPTH
#endif
// Steps a warp holds in registers (the kernel's loop below): the one being decoded and the
// weights of kDepth - 1 more in flight, the activations (L2-resident after the first blocks) of
// kActDepth - 1 more. Build-time knobs for measuring; the defaults are the measured best.
constexpr int kDepth = NVFP4_GEMV_DEPTH;
constexpr int kActDepth = NVFP4_GEMV_ACT_DEPTH;
static_assert(kActDepth >= 1 && kActDepth <= kDepth, "activations are loaded at most as far ahead as weights");

// One thread's operands for one K step: 16 packed bytes of rows g and g+8, their two scale bytes
// each (the weight part, Step::w*), and 32 activation values of row g (zeros where the row or the
// step does not exist). The two parts are loaded at different distances ahead (kDepth, kActDepth).
struct Step {
  uint4 w0, w1;
  uint32_t sc0, sc1;
  uint4 act[4];
};

// One thread's source addresses at step 0, fixed for the whole K walk (a step adds 4 uint4 of
// packed weights, 4 scale pairs and 16 uint4 of activations), and which of its rows exist. Rows
// past N or M point at row 0 and are never loaded: their values are zeros. (Recomputing the
// addresses from the step index every step cost about 60 of a step's ~250 instructions.)
struct Cursor {
  const uint4* w0;
  const uint4* w1;
  const unsigned short* s0;
  const unsigned short* s1;
  const uint4* act;
  bool ok0, ok1, act_ok;
  int k_left;  // k - 32 t: the thread's values of a step exist while step * 128 < k_left

  __device__ __forceinline__ Cursor(const uint4* __restrict__ packed, const uint8_t* __restrict__ scales,
                                    const uint4* __restrict__ a, int m, int n, int k, int row0, int g, int t) {
    const int row1 = row0 + 8;
    ok0 = row0 < n;
    ok1 = row1 < n;
    act_ok = g < m;
    const int64_t wcols = k / 32;  // uint4 per packed row
    const int64_t scols = k / 32;  // scale pairs per row
    const unsigned short* s16 = reinterpret_cast<const unsigned short*>(scales);
    w0 = packed + (ok0 ? row0 : 0) * wcols + t;
    w1 = packed + (ok1 ? row1 : 0) * wcols + t;
    s0 = s16 + (ok0 ? row0 : 0) * scols + t;
    s1 = s16 + (ok1 ? row1 : 0) * scols + t;
    act = a + (act_ok ? static_cast<int64_t>(g) * (k / 8) : 0) + 4 * t;  // 8 values per uint4
    k_left = k - 32 * t;
  }

  __device__ __forceinline__ bool step_ok(int step) const { return step * kStepK < k_left; }
};

__device__ __forceinline__ void load_weights(Step& s, const Cursor& c, int step) {
  const bool k_ok = c.step_ok(step);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  s.w0 = k_ok && c.ok0 ? load_stream_v4(c.w0 + 4 * step) : zero;
  s.w1 = k_ok && c.ok1 ? load_stream_v4(c.w1 + 4 * step) : zero;
  s.sc0 = k_ok && c.ok0 ? __ldg(c.s0 + 4 * step) : 0u;
  s.sc1 = k_ok && c.ok1 ? __ldg(c.s1 + 4 * step) : 0u;
}

__device__ __forceinline__ void load_activations(Step& s, const Cursor& c, int step) {
  const bool ok = c.act_ok && c.step_ok(step);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int i = 0; i < 4; ++i) s.act[i] = ok ? __ldg(c.act + 16 * step + i) : zero;
}

template <typename T, bool FAST>
__device__ __forceinline__ void compute_step(const Step& s, const float sc[4], float acc[4]) {
  // sc: row g words 0-1, row g words 2-3, row g+8 words 0-1, row g+8 words 2-3
  const uint32_t* act = reinterpret_cast<const uint32_t*>(s.act);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t r0[4], r1[4];
    decode_word<T, FAST>(word_of(s.w0, q), sc[q >> 1], r0);
    decode_word<T, FAST>(word_of(s.w1, q), sc[2 + (q >> 1)], r1);
    Mma<T>::run(acc, r0[0], r1[0], r0[1], r1[1], act[4 * q + 0], act[4 * q + 1]);
    Mma<T>::run(acc, r0[2], r1[2], r0[3], r1[3], act[4 * q + 2], act[4 * q + 3]);
  }
}

// The step's decode through per-block tables (mma_decode.cuh, build_table: the fused kernel's
// decode), for a warp whose every scale of the step lies in the table's exact range: about 2
// instructions per value instead of about 4. The same T values, so the same bits.
template <typename T>
__device__ __forceinline__ void compute_step_table(const Step& s, const float sc[4], float acc[4]) {
  const uint32_t* act = reinterpret_cast<const uint32_t*>(s.act);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const DecodeTable t0 = build_table<T>(sc[half]);      // row g, words 2 half and 2 half + 1
    const DecodeTable t1 = build_table<T>(sc[2 + half]);  // row g + 8
#pragma unroll
    for (int q = 2 * half; q < 2 * half + 2; ++q) {
      uint32_t r0[4], r1[4];
      decode_word_table(word_of(s.w0, q), t0, r0);
      decode_word_table(word_of(s.w1, q), t1, r1);
      Mma<T>::run(acc, r0[0], r1[0], r0[1], r1[1], act[4 * q + 0], act[4 * q + 1]);
      Mma<T>::run(acc, r0[2], r1[2], r0[3], r1[3], act[4 * q + 2], act[4 * q + 3]);
    }
  }
}

template <typename T>
__device__ __forceinline__ void run_step(const Step& s, float g, float acc[4]) {
  const float2 s0 = e4m3x2_to_f32(s.sc0);
  const float2 s1 = e4m3x2_to_f32(s.sc1);
  const float sc[4] = {s0.x * g, s0.y * g, s1.x * g, s1.y * g};
  // one branch per warp (mma.sync.aligned): the table when every lane's four blocks allow it
  // (a lane past K or N holds zero scales, which send its warp's step to the multiply form)
  const bool table = table_ok<T>(sc[0]) && table_ok<T>(sc[1]) && table_ok<T>(sc[2]) && table_ok<T>(sc[3]);
  if (__all_sync(0xFFFFFFFFu, table)) {
    compute_step_table<T>(s, sc, acc);
    return;
  }
  float big[4];
  bool slow = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    big[i] = sc[i] * nvfp4::pow2_14();
    // s * 2^14 overflowed although s is finite: take the exact two-multiply form instead
    slow |= (fabsf(big[i]) == __uint_as_float(0x7F800000u)) && (fabsf(sc[i]) != __uint_as_float(0x7F800000u));
  }
  // mma.sync.aligned needs the whole warp in one branch: one lane whose scale overflows sends
  // the warp down the exact two-multiply form, which is exact for every lane (only slower).
  slow = __any_sync(0xFFFFFFFFu, slow);
  if (!slow) {
    compute_step<T, true>(s, big, acc);
  } else {
    compute_step<T, false>(s, sc, acc);
  }
}

// The split-K sum of one 16-row tile inside the launch (the fused kernel's last-block sum, see
// fused_mma.cu for the memory ordering): every split block has written its partial tile; the one
// that counts last sums the tile's partials in split order from +0.0, adds the bias, rounds once
// and sets the tile's counter back to 0. The same bits as the finalize kernel. Not inlined, and
// given only kernel parameters and blockIdx, so that the main loop is compiled as without it.
template <typename T>
__device__ __noinline__ void gemv_last_block_sum(const float* __restrict__ partial, int* __restrict__ counters,
                                                 const unsigned short* __restrict__ bias,
                                                 unsigned short* __restrict__ out, int m, int n, int tiles) {
  const int tile = blockIdx.x % tiles;
  const int splits = gridDim.x / tiles;
  __syncthreads();  // every thread's partial stores, before thread 0 counts them
  const bool last_block =
      __syncthreads_or(threadIdx.x == 0 && nvfp4::count_split_acq_rel(counters + tile) == splits - 1);
  if (!last_block) return;
  const int64_t plane = static_cast<int64_t>(m) * n;
  for (int e = static_cast<int>(threadIdx.x); e < 16 * m; e += kThreads) {
    const int nn = tile * 16 + (e & 15);
    const int col = e >> 4;
    if (nn >= n) continue;
    const float* p = partial + static_cast<int64_t>(col) * n + nn;
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += __ldcg(p + s * plane);
    if (bias != nullptr) sum += OutT<T>::to_f32(bias[nn]);
    out[static_cast<int64_t>(col) * n + nn] = OutT<T>::one(sum);
  }
  if (threadIdx.x == 0) counters[tile] = 0;  // the next launch on the stream starts from 0
}

// LAST_BLOCK: this instantiation sums the K splits itself (gemv_last_block_sum); the other one
// writes partials for the finalize kernel, or the output when K is not split.
template <typename T, bool LAST_BLOCK>
__global__ void __launch_bounds__(kThreads, 2)
nvfp4_gemv_kernel(const uint4* __restrict__ a, const uint4* __restrict__ packed,
                  const uint8_t* __restrict__ scales, const float* __restrict__ g_ptr,
                  const unsigned short* __restrict__ bias, unsigned short* __restrict__ out,
                  float* __restrict__ partial, int m, int n, int k, int tiles, int steps_per_split,
                  int* __restrict__ counters) {
  nvfp4::allow_dependent_launch();  // the finalize kernel, if one follows, may be scheduled now
  __shared__ float red[kWarps][4][32];
  const int tile = blockIdx.x % tiles;
  const int split = blockIdx.x / tiles;  // split-major order: concurrent blocks share an A slice
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int row0 = tile * 16 + g;
  const int total_steps = (k + kStepK - 1) / kStepK;
  const int step_begin = split * steps_per_split;
  const int step_end = min(step_begin + steps_per_split, total_steps);
  const float gs = __ldg(g_ptr);

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  // Warp `warp` takes steps warp, warp + 8, ... in that order (so the bits do not depend on
  // kDepth). A ring of kDepth steps in registers, unrolled so that every slot is a fixed set of
  // registers, keeps the next steps' loads in flight while one step is decoded. Measured on the
  // H200 against the loop it replaced (one step in flight, the next step's operands copied into
  // the current one's registers after every step): depth 2 1.035x faster (median of 48 rows,
  // 0.99-1.07x; benchmarks/NOTES.md), depth 3 no faster, depth 4 spills (0.65-0.83x). An older
  // variant keeping 3 weight steps in flight and loading activations just in time measured 10%
  // slower (39.3 against 35.7 us at 17408 x 5120, M = 1).
  const Cursor cursor(packed, scales, a, m, n, k, row0, g, t);
  Step ring[kDepth];
#pragma unroll
  for (int j = 0; j < kDepth - 1; ++j) {
    const int s = step_begin + warp + j * kWarps;
    if (s < step_end) load_weights(ring[j], cursor, s);
    if (j < kActDepth - 1 && s < step_end) load_activations(ring[j], cursor, s);
  }
  for (int base = step_begin + warp; base < step_end; base += kDepth * kWarps) {
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      const int s = base + j * kWarps;
      if (s >= step_end) break;  // the same for the whole warp
      const int ahead = s + (kDepth - 1) * kWarps;
      if (ahead < step_end) load_weights(ring[(j + kDepth - 1) % kDepth], cursor, ahead);
      const int act_ahead = s + (kActDepth - 1) * kWarps;
      if (act_ahead < step_end) load_activations(ring[(j + kActDepth - 1) % kDepth], cursor, act_ahead);
      run_step<T>(ring[j], gs, acc);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][i][lane] = acc[i];
  __syncthreads();
  if (threadIdx.x < 16 * 8) {
    const int r = threadIdx.x & 15;   // row within the tile
    const int col = threadIdx.x >> 4;  // activation row m
    const int src_lane = (r & 7) * 4 + (col >> 1);
    const int src_i = (r >= 8 ? 2 : 0) + (col & 1);
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][src_i][src_lane];
    const int nn = tile * 16 + r;
    if (col < m && nn < n) {
      if (partial != nullptr) {
        partial[(static_cast<int64_t>(split) * m + col) * n + nn] = sum;
      } else {
        if (bias != nullptr) sum += OutT<T>::to_f32(bias[nn]);
        out[static_cast<int64_t>(col) * n + nn] = OutT<T>::one(sum);
      }
    }
  }
  if constexpr (LAST_BLOCK) gemv_last_block_sum<T>(partial, counters, bias, out, m, n, tiles);
}

struct DeviceInfo {
  int sms = 0;
  int blocks_per_sm = 0;
};

DeviceInfo device_info() {
  static DeviceInfo cache[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return DeviceInfo{132, 2};
  DeviceInfo& info = cache[dev];
  if (info.sms == 0) {
    int bps = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, nvfp4_gemv_kernel<__nv_bfloat16, false>, kThreads, 0);
    info.blocks_per_sm = bps > 0 ? bps : 1;
    info.sms = nvfp4::device_sms();
  }
  return info;
}

template <typename T>
cudaError_t launch_gemv(const void* a, const void* packed, const void* scales, const void* g,
                        const void* bias, void* out, float* workspace, int* counters, int m, int n, int k,
                        int splits, cudaStream_t stream) {
  const int tiles = (n + 15) / 16;
  const int total_steps = (k + kStepK - 1) / kStepK;
  const int steps_per_split = (total_steps + splits - 1) / splits;
  const unsigned short* b = static_cast<const unsigned short*>(bias);
  unsigned short* o = static_cast<unsigned short*>(out);
  const unsigned blocks = static_cast<unsigned>(tiles) * splits;
  const uint4* a4 = static_cast<const uint4*>(a);
  const uint4* p4 = static_cast<const uint4*>(packed);
  const uint8_t* s8 = static_cast<const uint8_t*>(scales);
  const float* gp = static_cast<const float*>(g);
  float* part = splits > 1 ? workspace : nullptr;
  const bool last_block = splits > 1 && counters != nullptr;
  auto kernel = last_block ? nvfp4_gemv_kernel<T, true> : nvfp4_gemv_kernel<T, false>;
  kernel<<<blocks, kThreads, 0, stream>>>(a4, p4, s8, gp, b, o, part, m, n, k, tiles, steps_per_split, counters);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || splits <= 1 || last_block) return err;
  return launch_splitk_finalize<T>(workspace, b, o, m, n, splits, stream);
}

}  // namespace

extern "C" {

// The fewest K steps each warp of a split keeps (nvfp4_gemv_splits). 3 was chosen while a split
// call needed the finalize kernel's second launch; with the split-K sum in the launch, smaller
// values would let layers of few tiles (1024 x 4096: 64 blocks for 132 SMs) fill the GPU. A build
// knob for that measurement: another value changes those layers' split counts, so their bits and
// GPU goldens (benchmarks/NOTES.md).
#ifndef NVFP4_GEMV_MIN_WARP_STEPS
#define NVFP4_GEMV_MIN_WARP_STEPS 3
#endif

// How many blocks K is split across for an [n, k] weight: 1 when the 16-row tiles fill the GPU,
// more when they do not (each warp still keeps at least NVFP4_GEMV_MIN_WARP_STEPS K steps). The
// caller sizes the fp32 workspace as splits * m * n floats when this is > 1.
int nvfp4_gemv_splits(int64_t n, int64_t k) {
  const DeviceInfo info = device_info();
  const int64_t tiles = (n + 15) / 16;
  const int64_t steps = (k + kStepK - 1) / kStepK;
  const int64_t slots = static_cast<int64_t>(info.sms) * info.blocks_per_sm;
  auto efficiency = [&](int64_t s) {
    const int64_t blocks = tiles * s;
    const int64_t waves = (blocks + slots - 1) / slots;
    return static_cast<double>(blocks) / static_cast<double>(waves * slots);
  };
  int best = 1;
  double best_eff = efficiency(1);
  for (int s = 2; s <= 16; ++s) {
    const int64_t per_split = (steps + s - 1) / s;
    if (per_split < NVFP4_GEMV_MIN_WARP_STEPS * kWarps) break;
    const double eff = efficiency(s);
    if (eff > best_eff + 0.05) {
      best = s;
      best_eff = eff;
    }
  }
  return best;
}

// a: [m, k] fp16/bf16 (16-byte aligned), packed: [n, k/2] (16-byte aligned), scales [n, k/16]
// (2-byte aligned), g: one fp32 in device memory, bias: [n] or null, out: [m, n].
// workspace: splits * m * n floats when splits > 1 (else may be null). counters: with splits > 1,
// ceil(n / 16) ints, all 0, for the split-K sum in the launch (they are 0 again after it); null
// sums the splits with the finalize kernel (a second launch). Both give the same bits.
int nvfp4_launch_gemv(const void* a, const void* packed, const void* scales, const void* g,
                      const void* bias, void* out, float* workspace, int* counters, int32_t m, int64_t n,
                      int64_t k, int32_t out_bf16, int32_t splits, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return static_cast<int>(cudaSuccess);
  if (m > 8 || (k % 32) || n > 0x7FFFFFFF || k > 0x7FFFFFFF || splits < 1 ||
      (splits > 1 && workspace == nullptr) || (reinterpret_cast<uintptr_t>(a) & 15) ||
      (reinterpret_cast<uintptr_t>(packed) & 15) || (reinterpret_cast<uintptr_t>(scales) & 1)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err =
      out_bf16 ? launch_gemv<__nv_bfloat16>(a, packed, scales, g, bias, out, workspace, counters, m,
                                            static_cast<int>(n), static_cast<int>(k), splits, stream)
               : launch_gemv<__half>(a, packed, scales, g, bias, out, workspace, counters, m,
                                     static_cast<int>(n), static_cast<int>(k), splits, stream);
  return static_cast<int>(err);
}

}  // extern "C"
