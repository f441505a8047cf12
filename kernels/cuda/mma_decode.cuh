// Tensor-core helpers shared by the fused kernels (gemv.cu, fused_mma.cu): the mma.sync wrapper,
// streaming 16-byte loads, exact E4M3 pair decoding, the exact decode of eight E2M1 codes into
// the A-fragment registers of two m16n8k16 MMAs, the same decode through a per-block table (the
// fused kernel's fast path), the split-K epilogue both launch and the device's SM count. Both
// kernels give each thread the same 32 values of a 128-value K step, so their fragments (and the
// contract's bits) come from one place.
#pragma once

#include "nvfp4_common.cuh"
#include "streamed_launch.cuh"

namespace nvfp4 {

template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm(
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
    asm(
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

// Asynchronous global -> shared copies (cp.async, sm_80+; dst a shared-window address), each
// zero-filled when !valid (nothing is read then). 16 bytes bypass L1 (weights are read once);
// the 8- and 4-byte forms go through it. Completed by groups: cp_async_commit closes a group,
// cp_async_wait<N> waits until at most N of the thread's groups are pending.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0));
}

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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

__device__ __forceinline__ uint32_t word_of(const uint4& v, int q) {
  return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// Decode word q of one row into the four A-fragment registers of MMAs 2q and 2q+1.
// FAST: v = f * (s * 2^14), valid whenever s * 2^14 does not overflow; otherwise (f * 2^14) * s.
template <typename T, bool FAST>
__device__ __forceinline__ void decode_word(uint32_t w, float s_or_big, uint32_t r[4]) {
  float f[8];
  nvfp4::e2m1x8_to_f32_scaled(w, f);
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = FAST ? f[i] * s_or_big : (f[i] * nvfp4::pow2_14()) * s_or_big;
  r[0] = OutT<T>::pack2(v[0], v[1]);  // MMA 2q, slots 2t, 2t+1
  r[1] = OutT<T>::pack2(v[2], v[3]);  // MMA 2q, slots 2t+8, 2t+9
  r[2] = OutT<T>::pack2(v[4], v[5]);  // MMA 2q+1, slots 2t, 2t+1
  r[3] = OutT<T>::pack2(v[6], v[7]);  // MMA 2q+1, slots 2t+8, 2t+9
}

// ---- Per-block decode tables (the fused kernel's fast decode) --------------------------------
//
// Inside one 16-value scale block every weight is to_T(fp32(e2m1 * s)), s = fp32(e4m3 * g). The
// E2M1 magnitudes are 0, 0.5, 1, 2, 4 (powers of two) and 1.5, 3, 6 (1.5 times one). When s lies
// in [kLo, kHi] (TableT), the fp32 products are exact, every T rounding happens in T's normal
// range, where rounding commutes with scaling by a power of two, and nothing overflows T; then
// every value of the block is to_T(s) or to_T(fp32(1.5 s)) times 2^e, e in -1..2, whose T bits
// are the base bits plus e binades. So the pair P = (to_T(s), to_T(fp32(1.5 s))), one rounding
// instruction, gives the block's eight positive T values; they are kept as a low-byte table and a
// high-byte table of eight bytes each, and a PRMT looks up four codes' bytes at once. The code's
// sign bit is XORed into the high byte (the table is positive). A block outside [kLo, kHi]
// (zero, negative, NaN, tiny or huge s) must take decode_word instead; suites/test_fused_table_decode.py
// emulates these integer steps and checks them against the reference for every scale byte on a
// grid of g, for both T.
template <typename T>
struct TableT;

template <>
struct TableT<__nv_bfloat16> {
  static constexpr uint32_t kUnit = 0x80u;      // 1 << 7: one binade in bf16 bits
  static constexpr uint32_t kLo = 0x01000000u;  // 2^-125: 0.5 s is an fp32 and bf16 normal
  static constexpr uint32_t kHi = 0x7E000000u;  // 2^125: 6 s is finite in fp32 and bf16
};

template <>
struct TableT<__half> {
  static constexpr uint32_t kUnit = 0x400u;     // 1 << 10: one binade in fp16 bits
  static constexpr uint32_t kLo = 0x39000000u;  // 2^-13: 0.5 s is an fp16 normal
  static constexpr uint32_t kHi = 0x46000000u;  // 2^13: 4 to_T(1.5 s) <= 49152 < 65504
};

// PTX prmt.b32 (default mode): byte j of the result is byte sel[4j+2:4j] of {b, a} (a = bytes
// 0..3), or that byte's sign replicated when sel[4j+3] is set. Only sel's low 16 bits are read.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// s may take the table path: kLo <= s <= kHi as positive floats. Zero, negatives and NaN fail
// the one unsigned compare (their bits lie outside the range).
template <typename T>
__device__ __forceinline__ bool table_ok(float s) {
  return __float_as_uint(s) - TableT<T>::kLo <= TableT<T>::kHi - TableT<T>::kLo;
}

struct DecodeTable {
  uint32_t lo03, lo47, hi03, hi47;  // low / high bytes of the T bits of magnitudes 0..3 and 4..7
};

// Selectors, named so that the CPU emulation (suites/test_fused_table_decode.py) reads the same
// constants. Table entries: 0, t1/2, t1, t15, 2 t1, 2 t15, 4 t1, 4 t15 (t1 = to_T(s), t15 =
// to_T(1.5 s)). Nibble 0xD replicates the sign of P's high byte of t1, which is 0: a zero byte.
constexpr uint32_t kSelLo03 = 0x640Du;  // {q0, P}: 0, lo t1/2, lo t1, lo t15
constexpr uint32_t kSelLo47 = 0x6420u;  // {q1, P}: lo 2t1, lo 2t15, lo t1 (= lo 4t1), lo t15 (= lo 4t15)
constexpr uint32_t kSelHi03 = 0x751Du;  // {q0, P}: 0, hi t1/2, hi t1, hi t15
constexpr uint32_t kSelHi47 = 0x7531u;  // {q1, q2}: hi 2t1, hi 2t15, hi 4t1, hi 4t15
constexpr uint32_t kSelPair01 = 0x5140u;  // {lo, hi} bytes of codes 0, 1 -> T pair (v0, v1)
constexpr uint32_t kSelPair23 = 0x7362u;  // codes 2, 3 -> (v2, v3)

// P = to_T(s) | to_T(fp32(1.5 s)) << 16 (s in [kLo, kHi]) -> the block's table. Adding binades
// to one lane never carries into the other: t1 >= 2 binades (s >= kLo) and 4 t15 stays finite.
template <typename T>
__device__ __forceinline__ DecodeTable build_table(float s) {
  constexpr uint32_t u = TableT<T>::kUnit;
  const uint32_t p = OutT<T>::pack2(s, 1.5f * s);
  const uint32_t q0 = p - u;                     // t1 / 2 (lane 1 is not used from q0's high half)
  const uint32_t q1 = p + (u | (u << 16));       // 2 t1, 2 t15
  const uint32_t q2 = p + 2u * (u | (u << 16));  // 4 t1, 4 t15
  DecodeTable tb;
  tb.lo03 = prmt(q0, p, kSelLo03);
  tb.lo47 = prmt(q1, p, kSelLo47);
  tb.hi03 = prmt(q0, p, kSelHi03);
  tb.hi47 = prmt(q1, q2, kSelHi47);
  return tb;
}

// The looked-up low and high bytes of codes 0..3 and 4..7 -> the four T-value pairs (v0, v1) ..
// (v6, v7) of the A fragment (both table decodes end here).
__device__ __forceinline__ void interleave_bytes(uint32_t lo03, uint32_t hi03, uint32_t lo47, uint32_t hi47,
                                                 uint32_t r[4]) {
  r[0] = prmt(lo03, hi03, kSelPair01);
  r[1] = prmt(lo03, hi03, kSelPair23);
  r[2] = prmt(lo47, hi47, kSelPair01);
  r[3] = prmt(lo47, hi47, kSelPair23);
}

// decode_word's result through the table: the eight codes of w (value i = nibble i) -> the four
// A-fragment registers (v0, v1), (v2, v3), (v4, v5), (v6, v7). The magnitudes index the tables
// (a PRMT reads four selector nibbles, so one lookup serves codes 0..3, another 4..7); the sign
// bits, spread to bit 7 of one byte per code by two PRMTs, are XORed into the high bytes.
__device__ __forceinline__ void decode_word_table(uint32_t w, const DecodeTable& tb, uint32_t r[4]) {
  const uint32_t mag = w & 0x77777777u;
  const uint32_t mag47 = mag >> 16;
  const uint32_t w4 = w << 4;  // the signs of even codes move to bit 7 of their byte
  const uint32_t sign03 = prmt(w4, w, kSelPair01) & 0x80808080u;  // code i's sign at bit 8i + 7
  const uint32_t sign47 = prmt(w4, w, kSelPair23) & 0x80808080u;
  const uint32_t lo03 = prmt(tb.lo03, tb.lo47, mag), hi03 = prmt(tb.hi03, tb.hi47, mag) ^ sign03;
  const uint32_t lo47 = prmt(tb.lo03, tb.lo47, mag47), hi47 = prmt(tb.hi03, tb.hi47, mag47) ^ sign47;
  interleave_bytes(lo03, hi03, lo47, hi47, r);
}

// ---- Codes with their signs placed (the tile-contiguous layout, nvfp4_kernels.layout) ---------
//
// decode_word_table spends two PRMTs and a shift per word moving the eight sign bits (bit 4 i + 3
// of code i) to bit 7 of the byte that the high-byte lookup gives each code. The tile-contiguous
// copy of a weight is made once, so it stores each word's signs there already: code i < 4 keeps
// its magnitude in bits 4 i .. 4 i + 2 and has its sign at bit 8 i + 7, code i >= 4 at bit
// 8 (i - 4) + 3 (every sign bit stays inside the word; the bit-3 positions of the nibbles are
// exactly the sign positions, so the magnitudes' mask is the same). place_signs / unplace_signs
// are the transform and its inverse on one word; nvfp4_kernels.layout.place_signs is the same
// transform on bytes, and suites/test_fused_table_decode.py checks the decode below with both.
__host__ __device__ __forceinline__ uint32_t place_signs(uint32_t w) {
  uint32_t out = w & 0x77777777u;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t sign = (w >> (4 * i + 3)) & 1u;
    out |= sign << (i < 4 ? 8 * i + 7 : 8 * (i - 4) + 3);
  }
  return out;
}

__host__ __device__ __forceinline__ uint32_t unplace_signs(uint32_t w) {
  uint32_t out = w & 0x77777777u;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t sign = (w >> (i < 4 ? 8 * i + 7 : 8 * (i - 4) + 3)) & 1u;
    out |= sign << (4 * i + 3);
  }
  return out;
}

// decode_word_table of a word whose signs are placed (place_signs): the same four registers, with
// the signs XORed straight from the word (codes 0..3) and from the word shifted by one nibble
// (codes 4..7) into the high bytes.
__device__ __forceinline__ void decode_word_table_placed(uint32_t w, const DecodeTable& tb, uint32_t r[4]) {
  const uint32_t mag = w & 0x77777777u;
  const uint32_t mag47 = mag >> 16;
  const uint32_t lo03 = prmt(tb.lo03, tb.lo47, mag), hi03 = prmt(tb.hi03, tb.hi47, mag) ^ (w & 0x80808080u);
  const uint32_t lo47 = prmt(tb.lo03, tb.lo47, mag47);
  const uint32_t hi47 = prmt(tb.hi03, tb.hi47, mag47) ^ ((w << 4) & 0x80808080u);
  interleave_bytes(lo03, hi03, lo47, hi47, r);
}

// The split-K count of a last-block sum (fused_mma.cu explains the ordering): an acq_rel atomic
// add at GPU scope, by one thread per block after the block's barrier; returns the old count.
__device__ __forceinline__ int count_split_acq_rel(int* counter) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;\n" : "=r"(old) : "l"(counter) : "memory");
  return old;
}

// Multiprocessors of the current device (both launchers size grids by it); 1 when unknown.
inline int device_sms() {
  const int sms = cached_device_attribute<cudaDevAttrMultiProcessorCount>();
  return sms > 0 ? sms : 1;
}

// Programmatic dependent launch (sm_90). A split kernel lets the stream's next kernel, the
// finalize kernel launched as its programmatic dependent (launch_splitk_finalize), be scheduled
// once every one of its own blocks has started, instead of after it has ended: the finalize
// blocks then take the SM slots the split blocks leave and wait in wait_for_prerequisite_grid,
// so the second launch's latency overlaps the first kernel's tail. Called at the top of the
// split kernels; a no-op where no dependent was launched so.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Waits until the grids this one depends on have completed and their memory operations are
// visible (griddepcontrol.wait); returns at once for a launch without such a dependency.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// ---- Split-K epilogue ----------------------------------------------------------------------------
//
// Sums the fp32 partials in split order from +0.0, adds the bias in fp32, rounds once. It covers
// output columns col0..n-1 (all of them for the GEMV and fused_mma; fused_wgmma's plan splits only
// its left-over row tiles), their partials [splits][m][n - col0], flattened: output i of the
// covered ones is partial[s * total + i] of every split s.
//
// Each thread sums VEC consecutive outputs of one row (VEC = 4 where the launch allows 16-byte
// partial loads and 8-byte output stores, finalize_vector_width; 1 otherwise) and has the loads of
// up to kFinalizeChunk splits in flight before it adds them. The first form (one output a thread,
// the split loop left to the compiler: four loads in flight, then one) took two rounds of L2 trips
// a thread and, at M = 16 on 17408 x 5120, 1088 blocks, one more than a wave (4.8-5.6 us under
// ncu, benchmarks/NOTES.md). Per output the adds are the same in the same order, so the bits do
// not depend on VEC or the chunk.
constexpr int kFinalizeChunk = 8;
constexpr int kFinalizeThreads = 128;

template <int VEC>
__host__ __device__ __forceinline__ void load_partials(const float* p, float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = p[j];
  }
}

// VEC 16-bit values: one 8-byte access for VEC = 4 (the address 8-byte aligned), else one each.
template <int VEC>
__host__ __device__ __forceinline__ void load_halves(const unsigned short* p, unsigned short (&v)[VEC]) {
  if constexpr (VEC == 4) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    v[0] = static_cast<unsigned short>(q.x);
    v[1] = static_cast<unsigned short>(q.x >> 16);
    v[2] = static_cast<unsigned short>(q.y);
    v[3] = static_cast<unsigned short>(q.y >> 16);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = p[j];
  }
}

template <int VEC>
__host__ __device__ __forceinline__ void store_halves(unsigned short* p, const unsigned short (&v)[VEC]) {
  if constexpr (VEC == 4) {
    uint2 q;
    q.x = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
    q.y = static_cast<uint32_t>(v[2]) | (static_cast<uint32_t>(v[3]) << 16);
    *reinterpret_cast<uint2*>(p) = q;
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) p[j] = v[j];
  }
}

// The outputs of thread `thread` of the finalize grid (none past the covered ones). On the device
// the kernel below runs it; suites/test_splitk_finalize.py runs it on the host for every thread of
// the launch's grid and checks the outputs against numpy's fp32 sums in split order.
template <typename T, int VEC>
__host__ __device__ __forceinline__ void splitk_finalize_thread(const float* __restrict__ partial,
                                                                const unsigned short* __restrict__ bias,
                                                                unsigned short* __restrict__ out, int m, int n,
                                                                int splits, int col0, int64_t thread) {
  const int64_t cols = n - col0;
  const int64_t total = static_cast<int64_t>(m) * cols;
  const int64_t idx = thread * VEC;
  if (idx >= total) return;
  float sum[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) sum[j] = 0.f;
  for (int s0 = 0; s0 < splits; s0 += kFinalizeChunk) {
    float part[kFinalizeChunk][VEC];
#pragma unroll
    for (int l = 0; l < kFinalizeChunk; ++l)
      if (s0 + l < splits) load_partials<VEC>(partial + (s0 + l) * total + idx, part[l]);
#pragma unroll
    for (int c = 0; c < kFinalizeChunk; ++c)
      if (s0 + c < splits) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) sum[j] += part[c][j];
      }
  }
  const int64_t row = idx / cols;
  const int nn = col0 + static_cast<int>(idx - row * cols);
  if (bias != nullptr) {
    unsigned short b[VEC];
    load_halves<VEC>(bias + nn, b);
#pragma unroll
    for (int j = 0; j < VEC; ++j) sum[j] += OutT<T>::to_f32(b[j]);
  }
  unsigned short rounded[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) rounded[j] = OutT<T>::one(sum[j]);
  store_halves<VEC>(out + row * n + nn, rounded);
}

// 4 where every thread's four outputs lie in one row and its loads and store are aligned: the
// covered columns and the row length are multiples of 4, the partials 16-byte aligned, the output
// and bias 8-byte aligned; otherwise 1. (The workspaces of nvfp4_kernels.cuda_backend are
// allocations of their own, so the partials are aligned.)
inline int finalize_vector_width(const float* partial, const unsigned short* bias, const unsigned short* out, int n,
                                 int col0) {
  const bool aligned = reinterpret_cast<uintptr_t>(partial) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(bias) % 8 == 0;
  return aligned && n % 4 == 0 && col0 % 4 == 0 ? 4 : 1;
}

// Threads of the finalize grid: one for every VEC covered outputs, rounded up to whole blocks.
inline int64_t finalize_blocks(int m, int n, int col0, int vec) {
  const int64_t threads = (static_cast<int64_t>(m) * (n - col0) + vec - 1) / vec;
  return (threads + kFinalizeThreads - 1) / kFinalizeThreads;
}

namespace {  // one copy per translation unit: each kernel file registers its own

// Launched as the split kernel's programmatic dependent, it reads no partial before that kernel
// has completed (wait_for_prerequisite_grid).
template <typename T, int VEC>
__global__ void nvfp4_splitk_finalize_kernel(const float* __restrict__ partial,
                                             const unsigned short* __restrict__ bias,
                                             unsigned short* __restrict__ out, int m, int n, int splits, int col0) {
  wait_for_prerequisite_grid();
  splitk_finalize_thread<T, VEC>(partial, bias, out, m, n, splits, col0,
                                 static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
}

}  // namespace

// Launches `kernel` as the programmatic dependent of the work before it on `stream` (see
// allow_dependent_launch: it may be scheduled once that kernel's blocks have all started, and
// waits in wait_for_prerequisite_grid for its results), with no L2 window: the streamed launch of
// streamed_launch.cuh over no weight bytes. Leaves no launch error behind.
template <typename... Params, typename... Args>
cudaError_t launch_programmatic_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                          cudaStream_t stream, Args... args) {
  return launch_streaming_weights_as(true, kernel, grid, block, smem, stream, nullptr, 0, args...);
}

// Launch the epilogue over columns col0..n-1 of the [m, n] output (default: all): ``partial``
// holds splits * m * (n - col0) fp32 sums written by the kernel launched just before on
// ``stream``, whose programmatic dependent it is (see allow_dependent_launch): the same sums in
// the same order, started earlier.
template <typename T>
cudaError_t launch_splitk_finalize(const float* partial, const unsigned short* bias, unsigned short* out, int m,
                                   int n, int splits, cudaStream_t stream, int col0 = 0) {
  const int vec = finalize_vector_width(partial, bias, out, n, col0);
  const dim3 grid(static_cast<unsigned>(finalize_blocks(m, n, col0, vec)));
  const auto kernel = vec == 4 ? nvfp4_splitk_finalize_kernel<T, 4> : nvfp4_splitk_finalize_kernel<T, 1>;
  return launch_programmatic_dependent(kernel, grid, dim3(kFinalizeThreads), 0, stream, partial, bias, out, m, n,
                                       splits, col0);
}

}  // namespace nvfp4
