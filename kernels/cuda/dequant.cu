// NVFP4 -> fp16/bf16 dequantization kernels: the scalar baseline and the vectorised vec8 kernel.
//
// Both write W[n, k] = to_T(e2m1(code[n, k]) * (e4m3(scale[n, k / block_size]) * g)) with IEEE
// fp32 multiplies and one round-to-nearest-even to T (docs/contract.md); the CPU backend's
// kernels.reference.dequantize_scalar / dequantize_vec8 follow the same index arithmetic.
#include "nvfp4_common.cuh"

namespace {

using nvfp4::OutT;

// ---- scalar: one packed byte per thread (the measured baseline design) --------------------------
// 1-D grid-stride loop over the N*K/2 packed bytes with 64-bit indices; the row and the two scale
// blocks are found by division (odd block sizes split a byte between two scales; the last block of
// a row may be partial); the global scale is loaded from memory by every thread; two 2-byte stores.
template <typename T>
__global__ void nvfp4_dequant_scalar_kernel(const uint8_t* __restrict__ packed,
                                            const uint8_t* __restrict__ scales,
                                            const float* __restrict__ g_ptr,
                                            unsigned short* __restrict__ out, int64_t total_bytes,
                                            int64_t half_k, int64_t nsc, int64_t block_size) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total_bytes;
       idx += stride) {
    const float g = g_ptr[0];
    const int64_t row = idx / half_k;
    const int64_t k_even = 2 * (idx - row * half_k);
    const uint8_t* srow = scales + row * nsc;
    const float s_lo = nvfp4::e4m3_to_f32(srow[k_even / block_size]) * g;
    const float s_hi = nvfp4::e4m3_to_f32(srow[(k_even + 1) / block_size]) * g;
    const uint32_t byte = packed[idx];
    out[2 * idx] = OutT<T>::one(nvfp4::e2m1_to_f32(byte & 0xFu) * s_lo);
    out[2 * idx + 1] = OutT<T>::one(nvfp4::e2m1_to_f32(byte >> 4) * s_hi);
  }
}

// ---- vec8: 8 values per chunk, one 32-bit load and one 16-byte store per chunk -------------------
// Preconditions (checked by the launcher): K % 8 == 0, block_size even, packed rows 4-byte
// aligned, output 16-byte aligned. Grid: x over the chunks of a row, each thread taking U chunks
// blockDim.x apart (consecutive threads on consecutive chunks, so a warp loads 128 B and stores
// 512 B per step); y over rows with a row-stride loop so N > 65,535 works. The launcher sizes
// blockDim.x to the row (e.g. 160 threads x 4 chunks for K = 5120) so few thread slots idle.
constexpr int kVec8MaxThreads = 256;

__device__ __forceinline__ uint32_t load_nc_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

template <typename T, int U>
__global__ void __launch_bounds__(kVec8MaxThreads)
nvfp4_dequant_vec8_kernel(const uint32_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                          const float* __restrict__ g_ptr, uint4* __restrict__ out, int64_t n,
                          int32_t chunks_per_row, int64_t nsc, int32_t block_size) {
  const float g = __ldg(g_ptr);  // the global scale lives in a register for the whole kernel
  const int32_t pairs_per_block = block_size >> 1;
  const int32_t threads = static_cast<int32_t>(blockDim.x);
  const int32_t c_first = static_cast<int32_t>(blockIdx.x) * (threads * U) + static_cast<int32_t>(threadIdx.x);
  for (int64_t row = blockIdx.y; row < n; row += gridDim.y) {
    const uint32_t* prow = packed + row * chunks_per_row;
    const uint8_t* srow = scales + row * nsc;
    uint4* orow = out + row * chunks_per_row;
    uint32_t word[U];
    int32_t block[U];
    int32_t remaining[U];
    uint32_t sbyte[U];
    // Issue every load of this thread's chunks before any decode: U words + U scale bytes in flight.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t c = c_first + u * threads;
      const bool ok = c < chunks_per_row;
      const uint32_t k0 = 8u * static_cast<uint32_t>(ok ? c : 0);
      block[u] = static_cast<int32_t>(k0 / static_cast<uint32_t>(block_size));
      remaining[u] = static_cast<int32_t>((static_cast<uint32_t>(block_size) * (block[u] + 1) - k0) >> 1);
      word[u] = ok ? load_nc_u32(prow + c) : 0u;
      sbyte[u] = ok ? __ldg(srow + block[u]) : 0u;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t c = c_first + u * threads;
      if (c >= chunks_per_row) break;
      float f[8];
      nvfp4::e2m1x8_to_f32_scaled(word[u], f);
      float s = nvfp4::e4m3_to_f32(sbyte[u]) * g;
      int32_t blk = block[u];
      int32_t rem = remaining[u];
      uint32_t o[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        if (rem == 0) {  // a scale boundary inside the chunk (block sizes 2, 4, 6, 10, 12, ...)
          ++blk;
          s = nvfp4::e4m3_to_f32(__ldg(srow + blk)) * g;
          rem = pairs_per_block;
        }
        // f = e2m1 * 2^-14 exactly; * 2^14 is exact, so the second multiply is the contract's one.
        const float v0 = (f[2 * p] * nvfp4::pow2_14()) * s;
        const float v1 = (f[2 * p + 1] * nvfp4::pow2_14()) * s;
        o[p] = OutT<T>::pack2(v0, v1);
        --rem;
      }
      orow[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// Launch shape for a row of `chunks` 8-value chunks: 4 chunks per thread (2 or 1 for rows too
// short to keep a warp busy), blocks of at most 256 threads so scheduling stays fine-grained, and
// blockDim.x sized to the row so K = 5120 runs 160 threads x 4 chunks with none idle. Measured on
// the H200 (benchmarks/NOTES.md): 4 chunks per thread reached 0.93-1.00 of copy on every seed shape,
// while 2 per thread gave 0.87 on 5120 x 17408 and one 544-thread block per row 0.84.
struct Vec8Shape {
  int u;
  unsigned blocks_x;
  unsigned threads;
};

constexpr int kVec8BlockCap = 256;

Vec8Shape vec8_shape(int64_t chunks, int forced_u) {
  const int u = forced_u > 0 ? forced_u : chunks >= 128 ? 4 : chunks >= 64 ? 2 : 1;
  const int64_t per_block = static_cast<int64_t>(kVec8BlockCap) * u;
  const int64_t blocks_x = (chunks + per_block - 1) / per_block;
  int64_t threads = (chunks + blocks_x * u - 1) / (blocks_x * u);
  threads = ((threads + 31) / 32) * 32;
  return Vec8Shape{u, static_cast<unsigned>(blocks_x), static_cast<unsigned>(threads)};
}

template <typename T, int U>
cudaError_t launch_vec8(const void* packed, const void* scales, const void* g, void* out, int64_t n,
                        int64_t k, int32_t block_size, const Vec8Shape& shape, cudaStream_t stream) {
  const int32_t chunks = static_cast<int32_t>(k / 8);
  const int64_t nsc = (k + block_size - 1) / block_size;
  dim3 grid(shape.blocks_x, static_cast<unsigned>(n < 65535 ? n : 65535));
  nvfp4_dequant_vec8_kernel<T, U><<<grid, shape.threads, 0, stream>>>(
      static_cast<const uint32_t*>(packed), static_cast<const uint8_t*>(scales),
      static_cast<const float*>(g), static_cast<uint4*>(out), n, chunks, nsc, block_size);
  return cudaGetLastError();
}

}  // namespace

extern "C" {

// Scalar dequant: packed uint8 [n, k/2], scales uint8 [n, ceil(k/block_size)], g: one fp32 in
// device memory, out fp16/bf16 [n, k] contiguous. Returns the cudaError_t of the launch.
int nvfp4_launch_dequant_scalar(const void* packed, const void* scales, const void* g, void* out,
                                int64_t n, int64_t k, int32_t block_size, int32_t out_bf16,
                                cudaStream_t stream) {
  if (n <= 0 || k <= 0) return static_cast<int>(cudaSuccess);
  if (block_size <= 0 || (k & 1)) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t total = n * (k / 2);
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  if (blocks > (int64_t{1} << 20)) blocks = int64_t{1} << 20;  // grid-stride covers the rest
  const int64_t nsc = (k + block_size - 1) / block_size;
  const uint8_t* p = static_cast<const uint8_t*>(packed);
  const uint8_t* s = static_cast<const uint8_t*>(scales);
  const float* gp = static_cast<const float*>(g);
  unsigned short* o = static_cast<unsigned short*>(out);
  if (out_bf16) {
    nvfp4_dequant_scalar_kernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        p, s, gp, o, total, k / 2, nsc, block_size);
  } else {
    nvfp4_dequant_scalar_kernel<__half><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        p, s, gp, o, total, k / 2, nsc, block_size);
  }
  return static_cast<int>(cudaGetLastError());
}

// vec8 dequant; chunks_per_thread is 0 (choose from the shape) or 1, 2, 4 (for A/B timing).
int nvfp4_launch_dequant_vec8(const void* packed, const void* scales, const void* g, void* out,
                              int64_t n, int64_t k, int32_t block_size, int32_t out_bf16,
                              int32_t chunks_per_thread, cudaStream_t stream) {
  if (n <= 0 || k <= 0) return static_cast<int>(cudaSuccess);
  if (block_size <= 0 || (block_size & 1) || (k % 8) || k / 8 > 0x7FFFFFFF ||
      (reinterpret_cast<uintptr_t>(packed) & 3) || (reinterpret_cast<uintptr_t>(out) & 15)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (chunks_per_thread != 0 && chunks_per_thread != 1 && chunks_per_thread != 2 && chunks_per_thread != 4) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const Vec8Shape shape = vec8_shape(k / 8, chunks_per_thread);
  cudaError_t err;
  if (out_bf16) {
    err = shape.u == 4 ? launch_vec8<__nv_bfloat16, 4>(packed, scales, g, out, n, k, block_size, shape, stream)
        : shape.u == 2 ? launch_vec8<__nv_bfloat16, 2>(packed, scales, g, out, n, k, block_size, shape, stream)
                       : launch_vec8<__nv_bfloat16, 1>(packed, scales, g, out, n, k, block_size, shape, stream);
  } else {
    err = shape.u == 4 ? launch_vec8<__half, 4>(packed, scales, g, out, n, k, block_size, shape, stream)
        : shape.u == 2 ? launch_vec8<__half, 2>(packed, scales, g, out, n, k, block_size, shape, stream)
                       : launch_vec8<__half, 1>(packed, scales, g, out, n, k, block_size, shape, stream);
  }
  return static_cast<int>(err);
}

// The error string of a cudaError_t, from this library's own (statically linked) runtime.
const char* nvfp4_error_string(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}

}  // extern "C"
