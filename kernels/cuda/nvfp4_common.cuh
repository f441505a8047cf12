// Shared device helpers for the NVFP4 kernels: exact scale and code decoding, output packing.
//
// Every helper reproduces docs/contract.md bit for bit:
//   s = fp32(e4m3(scale_byte) * g),  v = fp32(e2m1(code) * s),  out = round_to_nearest_even_T(v)
// Nothing here may be compiled with --use_fast_math or -ftz=true: the decoders rely on fp32
// subnormals being kept (both as operands and results).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace nvfp4 {

// A device attribute of the current device, asked once per device and attribute (the launchers
// ask for the SM count and the access-policy window size on every call); 0 when the query fails,
// which is not kept, so a later call asks again.
template <cudaDeviceAttr Attr>
inline int cached_device_attribute() {
  static int value[64];
  static bool known[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  if (!known[dev]) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, Attr, dev) != cudaSuccess) return 0;
    value[dev] = v;
    known[dev] = true;
  }
  return value[dev];
}

// 2^14, 2^120 and 2^126 as exact fp32 constants (built from bits to avoid hex-float literals).
__device__ __forceinline__ float pow2_14() { return __uint_as_float(0x46800000u); }
__device__ __forceinline__ float pow2_120() { return __uint_as_float(0x7B800000u); }
__device__ __forceinline__ float pow2_126() { return __uint_as_float(0x7E800000u); }

// E4M3FN byte -> exact fp32. The 7 magnitude bits are placed at fp32 bits 26..20, which makes
// an fp32 whose value is e4m3 * 2^-120 (an fp32 subnormal for e4m3 subnormals); the multiply by
// 2^120 is exact. 0x7F / 0xFF are NaN; the sign bit is copied so 0x80 gives -0.0.
__device__ __forceinline__ float e4m3_to_f32(uint32_t byte) {
  const uint32_t mag = byte & 0x7Fu;
  float f = __uint_as_float(mag << 20) * pow2_120();
  f = (mag == 0x7Fu) ? __uint_as_float(0x7FC00000u) : f;
  return __uint_as_float(__float_as_uint(f) | ((byte & 0x80u) << 24));
}

// One E2M1 code (0..15) -> exact fp32, for the scalar kernel. Sign to bit 31 and the three
// magnitude bits to fp32 bits 24..22 give e2m1 * 2^-126 (subnormal for codes 0/1); scale back.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  const uint32_t bits = ((code & 8u) << 28) | ((code & 7u) << 22);
  return __uint_as_float(bits) * pow2_126();
}

// Bitwise select: bits of a where mask is 1, bits of b elsewhere (one LOP3).
__device__ __forceinline__ uint32_t select_bits(uint32_t mask, uint32_t a, uint32_t b) {
  return (a & mask) | (b & ~mask);
}

// Eight E2M1 codes of one 32-bit word (element i = nibble i, low nibble first) -> eight fp32
// values equal to e2m1 * 2^-14, exactly, in natural order.
//
// Each nibble s|e1 e0 m becomes the fp16 bit pattern s<<15 | (e1 e0 m)<<9, i.e. an fp16 with
// exponent field e1e0 and top mantissa bit m: that is e2m1 * 2^-14 for every code, the codes
// 0 and 1 landing on fp16 zero / subnormal. Two nibbles four apart sit 16 bits apart in the
// word, so one shift + one AND builds an fp16x2 for the pair (n, n+4). XE / XO merge the sign
// and magnitude bits of the even / odd nibbles so that no other bit lands in the kept fields.
// Cost: 11 integer ops and 8 fp16->fp32 conversions per 8 values, no branches, no tables.
__device__ __forceinline__ void e2m1x8_to_f32_scaled(uint32_t w, float f[8]) {
  const uint32_t keep = 0x8E008E00u;  // fp16x2: sign bit 15 and bits 11..9, in both halves
  const uint32_t xe = select_bits(0x07070707u, w, w << 3);  // even nibbles: sign at 6/14/22/30
  const uint32_t xo = select_bits(0x80808080u, w, w >> 3);  // odd nibbles: eem at 1-3/9-11/..
  const uint32_t h04 = (xe << 9) & keep;                     // nibbles 0 and 4
  const uint32_t h26 = (xe << 1) & keep;                     // nibbles 2 and 6
  const uint32_t h15 = (xo << 8) & keep;                     // nibbles 1 and 5
  const uint32_t h37 = xo & keep;                            // nibbles 3 and 7
  const float2 p04 = __half22float2(*reinterpret_cast<const __half2*>(&h04));
  const float2 p26 = __half22float2(*reinterpret_cast<const __half2*>(&h26));
  const float2 p15 = __half22float2(*reinterpret_cast<const __half2*>(&h15));
  const float2 p37 = __half22float2(*reinterpret_cast<const __half2*>(&h37));
  f[0] = p04.x; f[4] = p04.y;
  f[2] = p26.x; f[6] = p26.y;
  f[1] = p15.x; f[5] = p15.y;
  f[3] = p37.x; f[7] = p37.y;
}

// Output-type traits: the rounding conversions (RN; NaN -> canonical 0x7FFF from the hardware).
// one and to_f32 also run on the host, where suites/test_splitk_finalize.py runs the split-K
// finalize kernel's body (mma_decode.cuh); on the device they are the same instructions.
template <typename T>
struct OutT;

template <>
struct OutT<__half> {
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __host__ __device__ __forceinline__ unsigned short one(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
  static __host__ __device__ __forceinline__ float to_f32(unsigned short bits) {
    return __half2float(__ushort_as_half(bits));
  }
};

template <>
struct OutT<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __host__ __device__ __forceinline__ unsigned short one(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
  static __host__ __device__ __forceinline__ float to_f32(unsigned short bits) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
#else
    return __bfloat162float(__ushort_as_bfloat16(bits));
#endif
  }
};

}  // namespace nvfp4
