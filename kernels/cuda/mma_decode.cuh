// Tensor-core helpers shared by the fused kernels (gemv.cu, fused_mma.cu): the mma.sync wrapper,
// streaming 16-byte loads, exact E4M3 pair decoding, the exact decode of eight E2M1 codes into
// the A-fragment registers of two m16n8k16 MMAs, and the split-K epilogue both launch. Both kernels give each thread the same 32 values
// of a 128-value K step, so their fragments (and the contract's bits) come from one place.
#pragma once

#include "nvfp4_common.cuh"

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

namespace {  // one copy per translation unit: each kernel file registers its own

// Split-K epilogue: sum the fp32 partials in split order, add the bias in fp32, round once.
template <typename T>
__global__ void nvfp4_splitk_finalize_kernel(const float* __restrict__ partial,
                                             const unsigned short* __restrict__ bias,
                                             unsigned short* __restrict__ out, int m, int n, int splits) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(m) * n;
  if (idx >= total) return;
  float sum = 0.f;
  for (int s = 0; s < splits; ++s) sum += partial[s * total + idx];
  if (bias != nullptr) sum += OutT<T>::to_f32(bias[idx % n]);
  out[idx] = OutT<T>::one(sum);
}

}  // namespace

// Launch the epilogue over the [m, n] output: ``partial`` holds splits * m * n fp32 sums.
template <typename T>
cudaError_t launch_splitk_finalize(const float* partial, const unsigned short* bias, unsigned short* out, int m,
                                   int n, int splits, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(m) * n;
  nvfp4_splitk_finalize_kernel<T><<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
      partial, bias, out, m, n, splits);
  return cudaGetLastError();
}

}  // namespace nvfp4
