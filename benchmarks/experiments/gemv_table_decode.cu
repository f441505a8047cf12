// Decode GEMV for NVFP4 weights: Y[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]), 1 <= M <= 8,
// block_size 16, K % 32 == 0. Weights are read once, decoded in registers to the same T bits as
// the dequant kernels, and multiplied on tensor cores: mma.sync m16n8k16 with 16 weight rows as
// the MMA's M, the <= 8 activation rows as its N (missing rows are zeros) and fp32 accumulators.
//
// k order inside an MMA is free, so thread (group g, lane-in-group t) loads 16 contiguous packed
// bytes (32 values) of weight rows g and g+8 per 128-value step and feeds values 4j..4j+3 to the
// A-fragment k slots {2t, 2t+1, 2t+8, 2t+9} of MMA j (j = 0..7); it loads activation row g at
// exactly the same 32 k positions (64 contiguous bytes) for its B fragment. Every global load is
// contiguous and 16 bytes wide. A block owns one 16-row tile; its 8 warps split the K steps and
// reduce through shared memory in a fixed order. When N/16 tiles do not fill the GPU, K is also
// split across blocks (fp32 partials in a workspace, summed in a fixed order by a finalize kernel),
// so the bias is added in fp32 and the result rounded to T exactly once either way.
#include "nvfp4_common.cuh"

#ifndef NVFP4_GEMV_MIN_BLOCKS
#define NVFP4_GEMV_MIN_BLOCKS 2  // blocks per SM the register budget is sized for
#endif

namespace {

using nvfp4::OutT;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStepK = 128;  // values of K per warp step (4 threads x 32 values)

template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint4 load_stream_v4(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Two E4M3 bytes (low byte first) -> exact fp32 pair. Hardware cvt on sm_89+, bit trick elsewhere.
__device__ __forceinline__ float2 e4m3x2_to_f32(uint32_t two_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  const unsigned short in = static_cast<unsigned short>(two_bytes);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
  return __half22float2(*reinterpret_cast<const __half2*>(&h2));
#else
  return make_float2(nvfp4::e4m3_to_f32(two_bytes & 0xFFu), nvfp4::e4m3_to_f32(two_bytes >> 8));
#endif
}

// ---- Per-block decode tables -------------------------------------------------------------
//
// Within one 16-value scale block every weight is to_T(fp32(e2m1 * s)), s = fp32(e4m3 * g). The
// magnitudes 0.5, 1, 2, 4 are powers of two and 1.5, 3, 6 are 1.5 times one, so when s lies in
// [kLo, kHi] (see TableT) every value is to_T(s) or to_T(fp32(1.5 * s)) times 2^e, e in -1..2:
// the fp32 products are exact (no fp32 underflow or overflow), the T roundings happen in T's
// normal range, where rounding commutes with power-of-two scaling, and nothing overflows T. The
// T bits of such a value are the base bits plus e * (1 << mantissa bits). So two rounded values
// P = (to_T(s), to_T(1.5 s)) give the whole block: a table of eight positive T values, kept as
// a low-byte table L (8 bytes) and a high-byte table H (8 bytes), each looked up by one PRMT per
// four codes; the code's sign bit is XORed in afterwards (s > 0, so the table has no sign).
// Blocks whose s is outside [kLo, kHi] (zero, negative, NaN, tiny or huge) take the exact
// per-value path instead; suites/test_gemv_table_decode.py checks the table against the
// reference for every scale byte on a grid of g.
template <typename T>
struct TableT;

template <>
struct TableT<__nv_bfloat16> {
  static constexpr uint32_t kUnit = 0x80u;        // 1 << 7: one binade in bf16 bits
  static constexpr uint32_t kLo = 0x01000000u;    // 2^-125: 0.5 s is an fp32 / bf16 normal
  static constexpr uint32_t kHi = 0x7E000000u;    // 2^125: 6 s stays finite in fp32 and bf16
};

template <>
struct TableT<__half> {
  static constexpr uint32_t kUnit = 0x400u;       // 1 << 10: one binade in fp16 bits
  static constexpr uint32_t kLo = 0x39000000u;    // 2^-13: 0.5 s is an fp16 normal
  static constexpr uint32_t kHi = 0x46000000u;    // 2^13: to_T(1.5 s) * 4 <= 49152 < 65504
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// s (fp32 bits) takes the table path: kLo <= s <= kHi as positive floats (NaN, negatives and
// zero fail the unsigned compare).
template <typename T>
__device__ __forceinline__ bool table_ok(float s) {
  return __float_as_uint(s) - TableT<T>::kLo <= TableT<T>::kHi - TableT<T>::kLo;
}

struct Table {
  uint32_t l0, l1, h0, h1;  // bytes of magnitudes 0..3 / 4..7, low and high halves of the T bits
};

// P = to_T(s) | to_T(1.5 s) << 16 -> the eight entries 0, t1/2, t1, t15, 2 t1, 2 t15, 4 t1, 4 t15.
template <typename T>
__device__ __forceinline__ Table build_table(uint32_t p) {
  constexpr uint32_t u = TableT<T>::kUnit;
  const uint32_t q0 = p - u;                      // lane 0: t1 / 2 (lane 1 untouched: t1 >= 2u)
  const uint32_t q1 = p + (u | (u << 16));        // 2 t1, 2 t15
  const uint32_t q2 = p + 2u * (u | (u << 16));   // 4 t1, 4 t15
  Table tb;
  // selector nibble 0xD copies the sign of byte 5 (P's high byte of t1, sign 0): a zero byte
  tb.l0 = prmt(q0, p, 0x640Du);  // lo: 0, t1/2, t1, t15
  tb.l1 = prmt(q1, p, 0x6420u);  // lo: 2t1, 2t15, 4t1 (= lo t1), 4t15 (= lo t15)
  tb.h0 = prmt(q0, p, 0x751Du);  // hi: 0, t1/2, t1, t15
  tb.h1 = prmt(q1, q2, 0x7531u); // hi: 2t1, 2t15, 4t1, 4t15
  return tb;
}

// Eight codes of one word (value i = nibble i) -> four T pairs (v0,v4), (v1,v5), (v2,v6), (v3,v7).
__device__ __forceinline__ void lookup_word(uint32_t w, const Table& tb, uint32_t r[4]) {
  const uint32_t x = prmt(w, 0u, 0x3120u) & 0x77777777u;  // nibbles n0 n1 n4 n5 | n2 n3 n6 n7
  const uint32_t y = x >> 16;
  const uint32_t la = prmt(tb.l0, tb.l1, x), ha = prmt(tb.h0, tb.h1, x);  // n0 n1 n4 n5
  const uint32_t lb = prmt(tb.l0, tb.l1, y), hb = prmt(tb.h0, tb.h1, y);  // n2 n3 n6 n7
  const uint32_t sg = 0x80008000u;
  r[0] = prmt(la, ha, 0x6240u) ^ ((w << 12) & sg);  // n0, n4: signs at bits 3, 19
  r[1] = prmt(la, ha, 0x7351u) ^ ((w << 8) & sg);   // n1, n5
  r[2] = prmt(lb, hb, 0x6240u) ^ ((w << 4) & sg);   // n2, n6
  r[3] = prmt(lb, hb, 0x7351u) ^ (w & sg);          // n3, n7
}

// The exact per-value path for one word, same output pairing: to_T(fp32(e2m1 * s)).
template <typename T>
__device__ __forceinline__ void exact_word(uint32_t w, float s, uint32_t r[4]) {
  float f[8];
  nvfp4::e2m1x8_to_f32_scaled(w, f);  // e2m1 * 2^-14, exact
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = (f[i] * nvfp4::pow2_14()) * s;  // e2m1 exact, then one multiply
  r[0] = OutT<T>::pack2(v[0], v[4]);
  r[1] = OutT<T>::pack2(v[1], v[5]);
  r[2] = OutT<T>::pack2(v[2], v[6]);
  r[3] = OutT<T>::pack2(v[3], v[7]);
}

// One thread's operands for one K step: 16 packed bytes (32 values, two scale blocks) of rows g
// and g+8, their two scale bytes each, and the 32 activations of row g at the same k.
struct Step {
  uint4 w0, w1;
  uint32_t sc0, sc1;
  uint4 act[4];
};

struct Ptrs {
  const uint4* w0;
  const uint4* w1;
  const unsigned short* s0;
  const unsigned short* s1;
  const uint4* a;
};

// Full step: every address is valid (rows and activation rows are clamped by the caller).
__device__ __forceinline__ void load_full(Step& s, const Ptrs& p, int step) {
  s.w0 = load_stream_v4(p.w0 + step * 4);
  s.w1 = load_stream_v4(p.w1 + step * 4);
  s.sc0 = __ldg(p.s0 + step * 4);
  s.sc1 = __ldg(p.s1 + step * 4);
#pragma unroll
  for (int i = 0; i < 4; ++i) s.act[i] = __ldg(p.a + step * 16 + i);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int q) {
  return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// Word q of both rows -> A fragments, activations paired like the weights ((a0,a4), (a1,a5),
// (a2,a6), (a3,a7)), and the two MMAs: slots {2t, 2t+1, 2t+8, 2t+9} <- values {0, 4, 1, 5}, then
// {2, 6, 3, 7}. `zero` (K tail only) feeds zeros instead of this thread's operands.
template <typename T>
__device__ __forceinline__ void mma_word(const uint32_t r0[4], const uint32_t r1[4], const uint4& x,
                                         bool zero, float acc[4]) {
  uint32_t b04 = prmt(x.x, x.z, 0x5410u), b15 = prmt(x.x, x.z, 0x7632u);
  uint32_t b26 = prmt(x.y, x.w, 0x5410u), b37 = prmt(x.y, x.w, 0x7632u);
  uint32_t a0[4], a1[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a0[i] = zero ? 0u : r0[i];
    a1[i] = zero ? 0u : r1[i];
  }
  if (zero) b04 = b15 = b26 = b37 = 0u;
  Mma<T>::run(acc, a0[0], a1[0], a0[1], a1[1], b04, b15);
  Mma<T>::run(acc, a0[2], a1[2], a0[3], a1[3], b26, b37);
}

template <typename T, bool FAST>
__device__ __forceinline__ void run_blocks(const Step& s, const float sc[4], bool zero, float acc[4]) {
#pragma unroll
  for (int bi = 0; bi < 2; ++bi) {  // scale block bi of rows g and g+8: words 2bi, 2bi+1
    Table t0, t1;
    if (FAST) {
      t0 = build_table<T>(OutT<T>::pack2(sc[bi], 1.5f * sc[bi]));
      t1 = build_table<T>(OutT<T>::pack2(sc[2 + bi], 1.5f * sc[2 + bi]));
    }
#pragma unroll
    for (int q = 2 * bi; q < 2 * bi + 2; ++q) {
      uint32_t r0[4], r1[4];
      if (FAST) {
        lookup_word(word_of(s.w0, q), t0, r0);
        lookup_word(word_of(s.w1, q), t1, r1);
      } else {
        exact_word<T>(word_of(s.w0, q), sc[bi], r0);
        exact_word<T>(word_of(s.w1, q), sc[2 + bi], r1);
      }
      mma_word<T>(r0, r1, s.act[q], zero, acc);
    }
  }
}

// Decode the step (table path when all four blocks allow it, else the exact path) and run its
// eight MMAs.
template <typename T>
__device__ __forceinline__ void run_step(const Step& s, float g, bool zero, float acc[4]) {
  const float2 e0 = e4m3x2_to_f32(s.sc0);
  const float2 e1 = e4m3x2_to_f32(s.sc1);
  const float sc[4] = {e0.x * g, e0.y * g, e1.x * g, e1.y * g};  // row g blocks 0,1; row g+8
  const bool fast = table_ok<T>(sc[0]) & table_ok<T>(sc[1]) & table_ok<T>(sc[2]) & table_ok<T>(sc[3]);
  if (fast) {
    run_blocks<T, true>(s, sc, zero, acc);
  } else {
    run_blocks<T, false>(s, sc, zero, acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, NVFP4_GEMV_MIN_BLOCKS)
nvfp4_gemv_kernel(const uint4* __restrict__ a, const uint4* __restrict__ packed,
                  const uint8_t* __restrict__ scales, const float* __restrict__ g_ptr,
                  const unsigned short* __restrict__ bias, unsigned short* __restrict__ out,
                  float* __restrict__ partial, int m, int n, int k, int tiles, int steps_per_split) {
  __shared__ float red[kWarps][4][32];
  const int tile = blockIdx.x % tiles;
  const int split = blockIdx.x / tiles;  // split-major order: concurrent blocks share an A slice
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int total_steps = (k + kStepK - 1) / kStepK;
  const int step_begin = split * steps_per_split;
  const int step_end = min(step_begin + steps_per_split, total_steps);
  const int full_end = min(step_end, k / kStepK);  // steps that lie wholly inside K
  const float gs = __ldg(g_ptr);

  // Rows past N and activation rows past M read row N-1 / M-1 instead: their MMA rows / columns
  // are computed and never stored, so the full steps need no predicates.
  const int r0 = min(tile * 16 + g, n - 1);
  const int r1 = min(tile * 16 + g + 8, n - 1);
  const int ar = min(g, m - 1);
  Ptrs p;
  p.w0 = packed + static_cast<int64_t>(r0) * (k / 32) + t;
  p.w1 = packed + static_cast<int64_t>(r1) * (k / 32) + t;
  p.s0 = reinterpret_cast<const unsigned short*>(scales + static_cast<int64_t>(r0) * (k / 16)) + t;
  p.s1 = reinterpret_cast<const unsigned short*>(scales + static_cast<int64_t>(r1) * (k / 16)) + t;
  p.a = a + static_cast<int64_t>(ar) * (k / 8) + 4 * t;

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  // Warp `warp` takes steps warp, warp + 8, ...; the next step's loads are issued before the
  // current step is decoded.
  int step = step_begin + warp;
  Step cur;
  if (step < full_end) load_full(cur, p, step);
  for (; step < full_end; step += kWarps) {
    Step nxt;
    const bool more = step + kWarps < full_end;
    if (more) load_full(nxt, p, step + kWarps);
    run_step<T>(cur, gs, false, acc);
    if (more) cur = nxt;
  }
  if (step < step_end) {
    // the partial last step (K % 128 != 0): threads past K load nothing and feed zeros
    const bool k_ok = step * kStepK + 32 * t < k;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    cur.w0 = k_ok ? load_stream_v4(p.w0 + step * 4) : z;
    cur.w1 = k_ok ? load_stream_v4(p.w1 + step * 4) : z;
    cur.sc0 = k_ok ? __ldg(p.s0 + step * 4) : 0u;
    cur.sc1 = k_ok ? __ldg(p.s1 + step * 4) : 0u;
#pragma unroll
    for (int i = 0; i < 4; ++i) cur.act[i] = k_ok ? __ldg(p.a + step * 16 + i) : z;
    run_step<T>(cur, gs, !k_ok, acc);
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
}

// Split-K epilogue: sum the fp32 partials in split order, add the bias in fp32, round once.
template <typename T>
__global__ void nvfp4_gemv_splitk_finalize_kernel(const float* __restrict__ partial,
                                                  const unsigned short* __restrict__ bias,
                                                  unsigned short* __restrict__ out, int m, int n,
                                                  int splits) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(m) * n;
  if (idx >= total) return;
  float sum = 0.f;
  for (int s = 0; s < splits; ++s) sum += partial[s * total + idx];
  if (bias != nullptr) sum += OutT<T>::to_f32(bias[idx % n]);
  out[idx] = OutT<T>::one(sum);
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
    int sms = 0, bps = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, nvfp4_gemv_kernel<__nv_bfloat16>, kThreads, 0);
    info.blocks_per_sm = bps > 0 ? bps : 1;
    info.sms = sms > 0 ? sms : 1;
  }
  return info;
}

template <typename T>
cudaError_t launch_gemv(const void* a, const void* packed, const void* scales, const void* g,
                        const void* bias, void* out, float* workspace, int m, int n, int k,
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
  nvfp4_gemv_kernel<T><<<blocks, kThreads, 0, stream>>>(a4, p4, s8, gp, b, o, part, m, n, k, tiles,
                                                       steps_per_split);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || splits <= 1) return err;
  const int64_t total = static_cast<int64_t>(m) * n;
  nvfp4_gemv_splitk_finalize_kernel<T><<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      workspace, b, o, m, n, splits);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

// How many blocks K is split across for an [n, k] weight: 1 when the 16-row tiles fill the GPU,
// more when they do not (each warp still keeps at least 3 K steps). The caller sizes the fp32
// workspace as splits * m * n floats when this is > 1.
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
    if (per_split < 3 * kWarps) break;
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
// workspace: splits * m * n floats when splits > 1 (else may be null).
int nvfp4_launch_gemv(const void* a, const void* packed, const void* scales, const void* g,
                      const void* bias, void* out, float* workspace, int32_t m, int64_t n,
                      int64_t k, int32_t out_bf16, int32_t splits, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return static_cast<int>(cudaSuccess);
  if (m > 8 || (k % 32) || n > 0x7FFFFFFF || k > 0x7FFFFFFF || splits < 1 ||
      (splits > 1 && workspace == nullptr) || (reinterpret_cast<uintptr_t>(a) & 15) ||
      (reinterpret_cast<uintptr_t>(packed) & 15) || (reinterpret_cast<uintptr_t>(scales) & 1)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err =
      out_bf16 ? launch_gemv<__nv_bfloat16>(a, packed, scales, g, bias, out, workspace, m,
                                            static_cast<int>(n), static_cast<int>(k), splits, stream)
               : launch_gemv<__half>(a, packed, scales, g, bias, out, workspace, m,
                                     static_cast<int>(n), static_cast<int>(k), splits, stream);
  return static_cast<int>(err);
}

}  // extern "C"
