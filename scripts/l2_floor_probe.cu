// Floor probe (benchmarks/NOTES.md, ninth session): how fast can any kernel read N bytes once
// with the bench's L2 flush before it? Read-only kernels over a byte buffer, with 16-byte loads
// (plain, or L2 evict-first by cache hint), launched plain or with a streaming access-policy
// window. Each block XORs what it read and writes one word, so no load is dead.
#include <cuda_runtime.h>
#include <cstdint>

#include "../kernels/cuda/hopper_async.cuh"
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
// step stand in for the decode. WALK (kWalk*): a block per unit; or a grid of at most the resident
// blocks, each walking its units with one pipeline that runs on across unit boundaries (the next
// unit's first steps are in flight while the last steps of this one are computed), taken either
// statically (blockIdx.x, + gridDim.x, ...) or dynamically: a block's first unit is blockIdx.x, and
// each later one comes from a global counter (take[0]; gridDim.x + the count), which thread 0
// bumps when the load side starts a unit, so the atomic's round trip is hidden behind that unit's
// steps and the next unit goes to whichever block frees its pipeline first (as the hardware hands
// a block-per-unit grid's next block to the first free slot). The block that exits last puts the
// counter (and the exit count, take[1]) back to 0 for the next launch. Units of fewer than S steps
// are not walked dynamically (see c_next).
__device__ __forceinline__ void cpa16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cpa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

constexpr int kMimicStage = 4096 + 512 + 256;
constexpr int kWalkNone = 0, kWalkStatic = 1, kWalkDynamic = 2;

template <int S, int WALK>
__global__ void __launch_bounds__(128, 8)
mimic_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sc, const uint8_t* __restrict__ act,
             int tiles, int total_steps, int steps_per_split, int splits, int work, unsigned* __restrict__ out,
             unsigned* __restrict__ take) {
  extern __shared__ __align__(16) uint8_t smem[];
  // the dynamic walk's next unit, written by thread 0 a barrier before it is read; it lies past the
  // ring in the dynamic shared memory (launch_mimic gives 16 bytes more), because a static
  // __shared__ variable would add to every walk's footprint and can cost the eighth block an SM
  int& taken = *reinterpret_cast<int*>(smem + S * kMimicStage);
  const int tid = threadIdx.x;
  const int units = tiles * splits;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // the load side's position: unit and step inside it; c_next (dynamic walk): the unit the load
  // side moved to after the one the compute side is on (units have at least S >= 3 steps, so the
  // compute side is on the unit the load side leaves when it leaves it, and a barrier lies between
  // thread 0's write of `taken` at the unit's second step and every thread's read at its last)
  int l_unit = blockIdx.x, l_step = 0, c_next = units;
  unsigned pending = 0;  // thread 0's take, not yet published
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
      // thread 0 takes at a unit's first step and publishes at its second: the atomic's value is
      // first needed a step later, so its round trip does not hold warp 0 (and with it the block's
      // next barrier)
      if (WALK == kWalkDynamic && tid == 0) {
        if (l_step == 0) pending = atomicAdd(take, 1u);
        if (l_step == 1) taken = static_cast<int>(gridDim.x + pending);
      }
      if (++l_step == unit_steps(l_unit)) {
        l_step = 0;
        l_unit = WALK == kWalkNone ? units : WALK == kWalkStatic ? l_unit + gridDim.x : min(taken, units);
        c_next = l_unit;
      }
    }
    cpa_commit();
  };
  for (int s = 0; s < S - 1; ++s) issue(s);
  int load_slot = S - 1, comp_slot = 0;
  for (int c_unit = blockIdx.x; c_unit < units;
       c_unit = WALK == kWalkDynamic ? c_next : WALK == kWalkStatic ? c_unit + gridDim.x : units) {
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
  if (WALK == kWalkDynamic) {
    // every take of this block is done; the last block out resets the counters for the next launch
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      if (atomicAdd(take + 1, 1u) == gridDim.x - 1) {
        take[0] = 0;
        take[1] = 0;
      }
    }
  }
}

template <int S, int WALK>
static int launch_mimic(int blocks, const uint8_t* w, const uint8_t* sc, const uint8_t* act, int tiles, int total_steps,
                        int steps_per_split, int splits, int work, unsigned* out, unsigned* take, cudaStream_t stream,
                        int smem_min) {
  const int smem = S * kMimicStage + 16 > smem_min ? S * kMimicStage + 16 : smem_min;
  cudaFuncSetAttribute(mimic_kernel<S, WALK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  mimic_kernel<S, WALK><<<blocks, 128, smem, stream>>>(w, sc, act, tiles, total_steps, steps_per_split, splits, work,
                                                        out, take);
  return static_cast<int>(cudaGetLastError());
}

// One launch of mimic_kernel: blocks_or_0 = 0 launches a block per unit, else a grid of that many
// blocks (at most the units) walking as `walk` says; stages 3, 4 or 6 (the dynamic walk 3 or 4;
// -1 for any other pair). smem_min: dynamic shared memory per block at least this (to hold the
// mimic to the real kernel's 8 blocks per SM).
static int mimic_walk(const void* w, const void* sc, const void* act, int tiles, int total_steps, int splits, int work,
                      int stages, int blocks_or_0, int walk, unsigned* out, unsigned* take, cudaStream_t stream,
                      int smem_min) {
  const int per = (total_steps + splits - 1) / splits;
  const int units = tiles * splits;
  auto W = static_cast<const uint8_t*>(w);
  auto SC = static_cast<const uint8_t*>(sc);
  auto A = static_cast<const uint8_t*>(act);
  const int blocks = blocks_or_0 ? (blocks_or_0 < units ? blocks_or_0 : units) : units;
#define MIMIC(S, WALK)                                                                                       \
  if (stages == S && walk == WALK) {                                                                          \
    return launch_mimic<S, WALK>(blocks, W, SC, A, tiles, total_steps, per, splits, work, out, take, stream, \
                                 smem_min);                                                                  \
  }
  MIMIC(3, kWalkNone)
  MIMIC(4, kWalkNone)
  MIMIC(6, kWalkNone)
  MIMIC(3, kWalkStatic)
  MIMIC(4, kWalkStatic)
  MIMIC(6, kWalkStatic)
  MIMIC(3, kWalkDynamic)
  MIMIC(4, kWalkDynamic)
#undef MIMIC
  return -1;
}

// persist: 0 a block per unit; else a grid of `persist` blocks walking statically.
extern "C" int probe_mimic(const void* w, const void* sc, const void* act, int tiles, int total_steps, int splits,
                           int work, int stages, int persist, unsigned* out, cudaStream_t stream, int smem_min) {
  return mimic_walk(w, sc, act, tiles, total_steps, splits, work, stages, persist, persist ? kWalkStatic : kWalkNone,
                    out, nullptr, stream, smem_min);
}

extern "C" int probe_mimic_occupancy(int stages, int smem_min);

// The dynamic walk: a grid of `blocks` blocks (stages 3 or 4); `take` is two device words, 0 before
// the first launch (every launch leaves them 0). -1 for no blocks or where a unit has fewer than
// `stages` steps, -2 for more blocks than fit on the device at once; nothing is launched then.
extern "C" int probe_mimic_dynamic(const void* w, const void* sc, const void* act, int tiles, int total_steps,
                                   int splits, int work, int stages, int blocks, unsigned* out, unsigned* take,
                                   cudaStream_t stream, int smem_min) {
  const int per = (total_steps + splits - 1) / splits;
  if (blocks < 1 || per < stages || total_steps - (splits - 1) * per < stages) return -1;
  // every block must be resident at once: a block waiting for a slot would hold its first unit
  // until the walk had taken every other one
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (blocks > probe_mimic_occupancy(stages, smem_min) * sms) return -2;
  return mimic_walk(w, sc, act, tiles, total_steps, splits, work, stages, blocks, kWalkDynamic, out, take, stream,
                    smem_min);
}

extern "C" int probe_mimic_occupancy(int stages, int smem_min) {
  int b = 0;
  const int smem = stages * kMimicStage + 16 > smem_min ? stages * kMimicStage + 16 : smem_min;
  if (stages == 3) {
    cudaFuncSetAttribute(mimic_kernel<3, kWalkDynamic>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mimic_kernel<3, kWalkDynamic>, 128, smem);
  } else if (stages == 4) {
    cudaFuncSetAttribute(mimic_kernel<4, kWalkDynamic>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mimic_kernel<4, kWalkDynamic>, 128, smem);
  } else {
    cudaFuncSetAttribute(mimic_kernel<6, kWalkStatic>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mimic_kernel<6, kWalkStatic>, 128, smem);
  }
  return b;
}

// ---------------------------------------------------------------------------------------------
// Warp-specialized mimic (benchmarks/NOTES.md, thirty-second session). The same units, steps,
// bytes and stand-in work per consumer thread as mimic_kernel, but a block is one producer warp
// and C consumer warps over a ring of R stages in shared memory. The producer fills a stage as
// soon as the consumers have released it (its "empty" mbarrier, one arrival per consumer warp),
// so the copies never wait behind the consumers' work the way mimic_kernel's copies wait for the
// barrier of the step being computed. BULK: the producer's lane 0 copies a step's 4096 + 512 + 256
// bytes with three cp.async.bulk copies counted on the stage's "full" mbarrier; else all 32 lanes
// issue 16-byte cp.async copies, each lane's completion arriving on "full" (noinc), as mimic_kernel's
// threads copy. The grid is either a block per unit (as mimic_kernel's) or persistent
// (blocks_per_sm blocks on every SM), taking its units statically (blockIdx.x, + gridDim.x, ...)
// or dynamically from a global counter (the next unit taken one unit ahead, so the atomic's round
// trip is hidden). With C = 4 each consumer thread reads exactly what mimic_kernel's thread of the
// same index reads, so the two kernels' partials must be equal word for word (the probe checks
// that before it times). Each wait spins at most 2^22 times and then traps, so a broken handshake
// ends the run with an error instead of hanging the device.
// The barrier and bulk-copy helpers are fused_wgmma's (hopper_async.cuh); this wait is bounded.
using nvfp4::hopper::bulk_load;
using nvfp4::hopper::mbar_arrive;
using nvfp4::hopper::mbar_expect_tx;
using nvfp4::hopper::mbar_init;

__device__ __forceinline__ void mbar_wait_or_trap(uint32_t bar, unsigned parity) {
  unsigned done = 0;
  for (unsigned spins = 0;; ++spins) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    if (spins > (1u << 22)) __trap();
  }
}

constexpr int kWsMaxRing = 16;

__device__ __forceinline__ void cpa_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

template <int C, bool BULK>
__global__ void ws_mimic_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ sc,
                                const uint8_t* __restrict__ act, int tiles, int total_steps, int steps_per_split,
                                int splits, int work, int ring, int dynamic, unsigned* __restrict__ counter,
                                unsigned base, unsigned* __restrict__ out) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kWsMaxRing], empty[kWsMaxRing];
  __shared__ int header[kWsMaxRing];  // unit * 2 + (1 if the step is its unit's last); -1: no more work
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int units = tiles * splits;
  const uint32_t stages = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto full_bar = [&](int s) { return static_cast<uint32_t>(__cvta_generic_to_shared(&full[s])); };
  auto empty_bar = [&](int s) { return static_cast<uint32_t>(__cvta_generic_to_shared(&empty[s])); };
  if (threadIdx.x == 0) {
    for (int s = 0; s < ring; ++s) {
      mbar_init(full_bar(s), BULK ? 1 : 33);  // warp copies: each lane's copies, and lane 0's header
      mbar_init(empty_bar(s), C);
    }
    nvfp4::hopper::fence_barrier_init();
  }
  __syncthreads();
  auto unit_steps = [&](int u) {
    const int b = (u / tiles) * steps_per_split;
    return min(b + steps_per_split, total_steps) - b;
  };
  if (warp == 0) {  // the producer
    if (BULK && lane != 0) return;
    // the block's first unit, and the one after `u` (dynamic: whatever the counter gives next)
    auto take = [&](int u) -> int {
      int v = u + static_cast<int>(gridDim.x);
      if (dynamic && lane == 0) v = static_cast<int>(atomicAdd(counter, 1u) - base);
      return v;
    };
    auto shared_value = [&](int v) { return BULK ? v : __shfl_sync(0xffffffffu, v, 0); };
    int unit = dynamic ? shared_value(take(0)) : static_cast<int>(blockIdx.x);
    int next = unit < units ? take(unit) : units;  // taken one unit ahead (read at the unit's end)
    int step = 0;
    for (int it = 0;; ++it) {
      const int s = it % ring;
      if (it >= ring) mbar_wait_or_trap(empty_bar(s), ((it / ring) + 1) & 1);
      if (unit >= units) {
        if (lane == 0) header[s] = -1;
        mbar_arrive(full_bar(s));                          // bulk: lane 0 alone; warp: every lane
        if (!BULK && lane == 0) mbar_arrive(full_bar(s));  // warp: and lane 0's header arrival
        return;
      }
      const int steps = unit_steps(unit);
      const int tile = unit % tiles, kstep = (unit / tiles) * steps_per_split + step;
      const uint32_t st = stages + s * kMimicStage;
      const uint8_t* wp = w + (static_cast<int64_t>(tile) * total_steps + kstep) * 4096;
      const uint8_t* sp = sc + (static_cast<int64_t>(tile) * total_steps + kstep) * 512;
      if constexpr (BULK) {
        header[s] = unit * 2 + (step + 1 == steps ? 1 : 0);
        mbar_expect_tx(full_bar(s), kMimicStage);
        bulk_load(st, wp, 4096, full_bar(s));
        bulk_load(st + 4096, sp, 512, full_bar(s));
        bulk_load(st + 4608, act + kstep * 256, 256, full_bar(s));
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) cpa16(st + (i * 32 + lane) * 16, wp + (i * 32 + lane) * 16);
        cpa16(st + 4096 + lane * 16, sp + lane * 16);
        if (lane < 16) cpa16(st + 4608 + lane * 16, act + kstep * 256 + lane * 16);
        cpa_arrive_noinc(full_bar(s));
        if (lane == 0) {
          header[s] = unit * 2 + (step + 1 == steps ? 1 : 0);
          mbar_arrive(full_bar(s));
        }
      }
      if (++step == steps) {
        step = 0;
        unit = dynamic ? shared_value(next) : next;
        next = unit < units ? take(unit) : units;
      }
    }
  }
  // the consumers: thread t (0 .. 32 C - 1) reads 4096 / (32 C) weight bytes and 512 / (32 C) scale bytes of a step
  const int t = threadIdx.x - 32;
  constexpr int kWBytes = 4096 / (32 * C);
  const int rounds = work * kWBytes / 32;
  unsigned acc = 0;
  for (int it = 0;; ++it) {
    const int s = it % ring;
    mbar_wait_or_trap(full_bar(s), (it / ring) & 1);
    const int h = header[s];
    if (h < 0) return;
    const uint8_t* st = smem + s * kMimicStage;
    unsigned x, y;
    if constexpr (C == 4) {  // mimic_kernel's reads, exactly
      const uint4 a0 = *reinterpret_cast<const uint4*>(st + (t >> 2) * 64 + (t & 3) * 16);
      const uint4 a1 = *reinterpret_cast<const uint4*>(st + 2048 + (t >> 2) * 64 + (t & 3) * 16);
      const unsigned s0 = *reinterpret_cast<const unsigned*>(st + 4096 + t * 4);
      x = a0.x ^ a0.y ^ a0.z ^ a0.w ^ a1.x ^ a1.y ^ a1.z ^ a1.w ^ s0;
      y = a0.x + a1.w;
    } else {
      const uint4 a0 = *reinterpret_cast<const uint4*>(st + t * kWBytes);
      const unsigned s0 = *reinterpret_cast<const unsigned short*>(st + 4096 + t * 2);
      x = a0.x ^ a0.y ^ a0.z ^ a0.w ^ s0;
      y = a0.x + a0.w;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty_bar(s));  // the stage's bytes are in registers: release it
    for (int i = 0; i < rounds; ++i) {
      x = __byte_perm(x, y, 0x3210 + i) ^ (y >> 3);
      y = __byte_perm(y, x, 0x7531) + x;
    }
    acc ^= x ^ y;
    if (h & 1) {  // the unit's last step: its "partial"
      out[static_cast<int64_t>(h >> 1) * (32 * C) + t] = acc;
      acc = 0;
    }
  }
}

// The dynamic shared memory of a launch with `ring` stages (at least smem_min), allowed for the kernel.
template <int C, bool BULK>
static int ws_set_smem(int ring, int smem_min) {
  const int smem = ring * kMimicStage > smem_min ? ring * kMimicStage : smem_min;
  cudaFuncSetAttribute(ws_mimic_kernel<C, BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return smem;
}

template <int C, bool BULK>
static int ws_occupancy(int ring, int smem_min) {
  int blocks_per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, ws_mimic_kernel<C, BULK>, 32 * (C + 1),
                                                ws_set_smem<C, BULK>(ring, smem_min));
  return blocks_per_sm;
}

template <int C, bool BULK>
static int launch_ws(int blocks, int ring, const uint8_t* w, const uint8_t* sc, const uint8_t* act, int tiles,
                     int total_steps, int per, int splits, int work, int dynamic, unsigned* counter, unsigned base,
                     unsigned* out, cudaStream_t stream, int smem_min) {
  const int smem = ws_set_smem<C, BULK>(ring, smem_min);
  ws_mimic_kernel<C, BULK><<<blocks, 32 * (C + 1), smem, stream>>>(w, sc, act, tiles, total_steps, per, splits, work,
                                                                    ring, dynamic, counter, base, out);
  return static_cast<int>(cudaGetLastError());
}

// consumers: 4 or 8 warps; ring: 2..16 stages; blocks: the persistent grid; dynamic: take units
// from *counter (which the caller advances: `base` is its value before this launch, and every
// launch takes exactly units + blocks values from it); bulk: the producer is one lane issuing
// cp.async.bulk copies, else a whole warp issuing 16-byte cp.async copies. blocks = the unit count
// with static takes is a block per unit, as mimic_kernel launches; smem_min then holds the blocks
// an SM to mimic_kernel's 8 (dynamic shared memory at least this).
extern "C" int probe_ws_mimic(const void* w, const void* sc, const void* act, int tiles, int total_steps, int splits,
                              int work, int consumers, int ring, int blocks, int dynamic, int bulk,
                              unsigned* counter, unsigned base, unsigned* out, cudaStream_t stream, int smem_min) {
  if (ring < 2 || ring > kWsMaxRing) return -2;
  const int per = (total_steps + splits - 1) / splits;
  auto W = static_cast<const uint8_t*>(w);
  auto SC = static_cast<const uint8_t*>(sc);
  auto A = static_cast<const uint8_t*>(act);
#define WS(C, B)                                                                                                   \
  if (consumers == C && (bulk != 0) == B)                                                                          \
    return launch_ws<C, B>(blocks, ring, W, SC, A, tiles, total_steps, per, splits, work, dynamic, counter, base, \
                           out, stream, smem_min);
  WS(4, true)
  WS(4, false)
  WS(8, true)
  WS(8, false)
#undef WS
  return -3;
}

extern "C" int probe_ws_mimic_occupancy(int consumers, int ring, int bulk, int smem_min) {
  if (consumers == 4) return bulk ? ws_occupancy<4, true>(ring, smem_min) : ws_occupancy<4, false>(ring, smem_min);
  if (consumers == 8) return bulk ? ws_occupancy<8, true>(ring, smem_min) : ws_occupancy<8, false>(ring, smem_min);
  return 0;
}
