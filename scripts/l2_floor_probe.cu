// Floor probe (benchmarks/NOTES.md, ninth session): how fast can any kernel read N bytes once
// with the bench's L2 flush before it? Read-only kernels over a byte buffer, with 16-byte loads
// (plain, or L2 evict-first by cache hint), launched plain or with a streaming access-policy
// window. Each block XORs what it read and writes one word, so no load is dead.
#include <cuda_runtime.h>
#include <cstdint>

#include "../kernels/cuda/streamed_launch.cuh"

template <int kHint>
__global__ void read_kernel(const uint4* __restrict__ p, long long n16, unsigned* __restrict__ out) {
  unsigned acc = 0;
  uint64_t policy = 0;
  if (kHint) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint4* q = p + i + u * stride;
      if (kHint) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(q), "l"(policy));
      } else {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(q));
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) { uint4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if ((threadIdx.x & 31) == 0) atomicXor(out + blockIdx.x, acc);
}

// window: the launch marks the buffer streaming in L2 as every fused_mma launch marks its weights
// (nvfp4::launch_streaming_weights); without, the same launch has no window.
extern "C" int probe_read(const void* p, long long nbytes, unsigned* out, int blocks, int threads, int hint,
                          int window, cudaStream_t stream) {
  const long long n16 = nbytes / 16;
  const uint4* q = static_cast<const uint4*>(p);
  const void* streamed = window ? p : nullptr;
  const cudaError_t err =
      hint ? nvfp4::launch_streaming_weights(read_kernel<1>, dim3(blocks), dim3(threads), 0, stream, streamed,
                                             static_cast<size_t>(nbytes), q, n16, out)
           : nvfp4::launch_streaming_weights(read_kernel<0>, dim3(blocks), dim3(threads), 0, stream, streamed,
                                             static_cast<size_t>(nbytes), q, n16, out);
  return static_cast<int>(err);
}

// A mimic of fused_mma's M = 1 K loop on tile-contiguous weights, without its decode: blocks of 128
// threads, each (tile, split) unit a run of 4 KB weight + 512 B scale + 256 B activation steps
// through a ring of S cp.async stages with one barrier per step; `work` rounds of integer ops per
// step stand in for the decode. PERSIST: a grid of at most the resident blocks, each walking its
// units (blockIdx.x, + gridDim.x, ...) with one pipeline that runs on across unit boundaries (the
// next unit's first steps are in flight while the last steps of this one are computed).
__device__ __forceinline__ void cpa16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cpa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

constexpr int kMimicStage = 4096 + 512 + 256;

template <int S, bool PERSIST>
__global__ void __launch_bounds__(128, 8)
mimic_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sc, const uint8_t* __restrict__ act,
             int tiles, int total_steps, int steps_per_split, int splits, int work, unsigned* __restrict__ out) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x;
  const int units = tiles * splits;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // the load side's position: unit and step inside it
  int l_unit = blockIdx.x, l_step = 0;
  auto unit_steps = [&](int u) {
    const int split = u / tiles;
    const int b = split * steps_per_split;
    return min(b + steps_per_split, total_steps) - b;
  };
  auto issue = [&](int slot) {
    if (l_unit < units) {
      const int tile = l_unit % tiles, split = l_unit / tiles;
      const int step = split * steps_per_split + l_step;
      const uint32_t st = ring + slot * kMimicStage;
      const uint8_t* wp = w + (static_cast<int64_t>(tile) * total_steps + step) * 4096;
      cpa16(st + tid * 16, wp + tid * 16);
      cpa16(st + 2048 + tid * 16, wp + 2048 + tid * 16);
      if (tid < 32) cpa16(st + 4096 + tid * 16, sc + (static_cast<int64_t>(tile) * total_steps + step) * 512 + tid * 16);
      if (tid < 16) cpa16(st + 4608 + tid * 16, act + step * 256 + tid * 16);
      if (++l_step == unit_steps(l_unit)) {
        l_step = 0;
        l_unit = PERSIST ? l_unit + gridDim.x : units;
      }
    }
    cpa_commit();
  };
  for (int s = 0; s < S - 1; ++s) issue(s);
  int load_slot = S - 1, comp_slot = 0;
  for (int c_unit = blockIdx.x; c_unit < units; c_unit = PERSIST ? c_unit + gridDim.x : units) {
    const int steps = unit_steps(c_unit);
    unsigned acc = 0;
    for (int s = 0; s < steps; ++s) {
      cpa_wait<S - 2>();
      __syncthreads();
      issue(load_slot);
      load_slot = load_slot == S - 1 ? 0 : load_slot + 1;
      const uint8_t* st = smem + comp_slot * kMimicStage;
      const uint4 a0 = *reinterpret_cast<const uint4*>(st + (tid >> 2) * 64 + (tid & 3) * 16);
      const uint4 a1 = *reinterpret_cast<const uint4*>(st + 2048 + (tid >> 2) * 64 + (tid & 3) * 16);
      const unsigned s0 = *reinterpret_cast<const unsigned*>(st + 4096 + (tid & 127) * 4);
      unsigned x = a0.x ^ a0.y ^ a0.z ^ a0.w ^ a1.x ^ a1.y ^ a1.z ^ a1.w ^ s0;
      unsigned y = a0.x + a1.w;
      for (int i = 0; i < work; ++i) {
        x = __byte_perm(x, y, 0x3210 + i) ^ (y >> 3);
        y = __byte_perm(y, x, 0x7531) + x;
      }
      acc ^= x ^ y;
      comp_slot = comp_slot == S - 1 ? 0 : comp_slot + 1;
    }
    out[static_cast<int64_t>(c_unit) * 128 + tid] = acc;  // the unit's "partial"
  }
}

template <int S, bool P>
static int launch_mimic(int blocks, const uint8_t* w, const uint8_t* sc, const uint8_t* act, int tiles, int total_steps,
                        int steps_per_split, int splits, int work, unsigned* out, cudaStream_t stream, int smem_min) {
  const int smem = S * kMimicStage > smem_min ? S * kMimicStage : smem_min;
  cudaFuncSetAttribute(mimic_kernel<S, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  mimic_kernel<S, P><<<blocks, 128, smem, stream>>>(w, sc, act, tiles, total_steps, steps_per_split, splits, work, out);
  return static_cast<int>(cudaGetLastError());
}

// persist: 0 a block per unit; else a grid of `persist` blocks. stages 3, 4 or 6.
// smem_min: dynamic shared memory per block at least this (to hold the mimic to the real kernel's
// 8 blocks per SM).
extern "C" int probe_mimic(const void* w, const void* sc, const void* act, int tiles, int total_steps, int splits,
                           int work, int stages, int persist, unsigned* out, cudaStream_t stream, int smem_min) {
  const int per = (total_steps + splits - 1) / splits;
  const int units = tiles * splits;
  auto W = static_cast<const uint8_t*>(w);
  auto SC = static_cast<const uint8_t*>(sc);
  auto A = static_cast<const uint8_t*>(act);
  const int blocks = persist ? (persist < units ? persist : units) : units;
#define MIMIC(S)                                                                                     \
  if (stages == S) {                                                                                 \
    return persist ? launch_mimic<S, true>(blocks, W, SC, A, tiles, total_steps, per, splits, work, out, stream, smem_min) \
                   : launch_mimic<S, false>(blocks, W, SC, A, tiles, total_steps, per, splits, work, out, stream, smem_min); \
  }
  MIMIC(3)
  MIMIC(4)
  MIMIC(6)
#undef MIMIC
  return -1;
}

extern "C" int probe_mimic_occupancy(int stages, int smem_min) {
  int b = 0;
  const int smem = stages * kMimicStage > smem_min ? stages * kMimicStage : smem_min;
  if (stages == 3) {
    cudaFuncSetAttribute(mimic_kernel<3, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mimic_kernel<3, true>, 128, smem);
  } else if (stages == 4) {
    cudaFuncSetAttribute(mimic_kernel<4, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mimic_kernel<4, true>, 128, smem);
  } else {
    cudaFuncSetAttribute(mimic_kernel<6, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mimic_kernel<6, true>, 128, smem);
  }
  return b;
}
