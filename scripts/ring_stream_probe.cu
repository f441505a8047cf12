// Weight-stream probe for fused_wgmma's 64-row tile (benchmarks/NOTES.md, twenty-ninth session):
// how fast can a block of 256 threads that owns one 128-row tile and one K split read its
// tile-contiguous weights (per 64-row tile and 128-value step: 4096 code bytes, 512 scale bytes),
// with nothing decoded, multiplied or stored? The library's ring of weight steps (each thread
// cp.asyncs its own 2 x 16 code bytes and 2 x 4 scale bytes RING steps ahead) took 1.55-1.7x the
// copy of the same bytes in the twenty-eighth and twenty-ninth sessions' ablations, at any ring
// depth. The modes below read the same bytes over the same grid (one block per (tile, split),
// `steps` steps each) in other ways, so the difference between them is the loading scheme's:
//   0  the library's ring: per-thread cp.async 16 + 16 + 4 + 4 bytes, wait_group RING - 1
//   1  the same without the scale copies (codes only)
//   2  per-thread register prefetch: plain 16-byte global loads (and the 4-byte scale words),
//      RING steps ahead, no shared memory
//   3  bulk copies: thread 0 copies the step's 2 x 4096 + 2 x 512 bytes with cp.async.bulk into a
//      ring of RING stages, counted on an mbarrier; every thread waits, reads its bytes from shared
//      memory and releases the stage through a second mbarrier (one arrival per warp)
//   4  mode 0 inside the 64-row tile's per-step skeleton: a stream of 64 activation rows a step
//      (16 KB, one bulk copy by thread 0, kActStages stages, kActStages - 1 steps ahead) handed over
//      on full / empty mbarriers as fused_wgmma hands its TMA stages over (without the wgmmas'
//      fences and waits: with no wgmma to wait for, ptxas serializes them in a way the kernel is
//      not), so the difference from mode 0 is the activation handshake's
//   5  mode 4 with a producer warp: a ninth warp's lane 0 copies every step's activations (waiting
//      for each stage's release) and thread 0 only consumes, so a slow warp no longer holds back
//      thread 0's own weight copies
//   6  mode 0 with one 4-byte scale copy a thread instead of two: the scale layout a registered
//      weight could take (a thread's scale bytes of its two rows in one aligned word, so a warp's
//      copies are one contiguous 128-byte run of the step's 512), thirtieth session
//   7  mode 0 over a balanced grid (thirtieth session): per_split is a count of (128-row tile,
//      step) units, and block b reads units b per_split .. (b + 1) per_split - 1 in tile-major
//      order (a run may cross from one tile into the next), so a grid of two blocks an SM gives
//      every block the same number of steps, where the split grids leave part of a wave empty
//   8  mode 0 on a step-major layout (thirtieth session): piece (step, 64-row tile) at
//      step x (2 tiles) + tile instead of tile x total_steps + step, so the blocks, which walk
//      their steps together, read neighbouring 4 KB pieces at any moment (as the grid-stride
//      read does) instead of pieces total_steps x 4 KB apart
//   9  mode 2's register prefetch on the same grid and bytes, but with the chunked read's access
//      pattern (thirtieth session): thread i loads bytes 16 i .. 16 i + 15 of each of the step's
//      two 4 KB code pieces (a block instruction reads a whole piece) and threads 0..63 the two
//      512-byte scale pieces, so each thread's loads are not its rows' but the step's bytes are
//      the same; RING steps in flight in registers
// and a grid-stride read of the same bytes (the read floor), and that read in one contiguous chunk
// a block (ring_probe_read_chunks). Each thread XORs what it reads; the
// result is stored only when `flag` is set (never, at run time), so no load is dead.
#include <cuda_runtime.h>

#include <cstdint>

#include "../kernels/cuda/hopper_async.cuh"

namespace {

using namespace nvfp4::hopper;  // NOLINT

constexpr int kThreads = 256;
constexpr int kCodeBytes = 4096, kScaleBytes = 512;  // one 64-row tile's step

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ uint4 ldg_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t xor4(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

struct Plan {
  int total_steps, tiles, per_split;
};

// `stages` full barriers (one arrival: the producer's, plus the copies' bytes) and as many empty
// ones (one arrival a warp), initialised by thread 0 before any thread uses them
__device__ __forceinline__ void init_stage_barriers(uint32_t full, uint32_t empty, int stages, int tid) {
  if (tid == 0) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(full + 8 * i, 1);
      mbar_init(empty + 8 * i, kThreads / 32);
    }
    fence_barrier_init();
  }
  __syncthreads();
}

// Register prefetch RING steps ahead (modes 2 and 9): load(s, r) puts step s's bytes in register
// slot r (nothing past the last step), consume(r) folds slot r into the thread's XOR before the
// slot takes the step RING further on
template <int RING, typename Load, typename Consume>
__device__ __forceinline__ void prefetch_walk(int steps, Load& load, Consume&& consume) {
#pragma unroll
  for (int r = 0; r < RING; ++r) load(r, r);
  for (int s0i = 0; s0i < steps; s0i += RING) {
#pragma unroll
    for (int r = 0; r < RING; ++r) {
      if (s0i + r < steps) {
        consume(r);
        load(s0i + r + RING, r);
      }
    }
  }
}

constexpr int kActStages = 3, kActStepBytes = 64 * 128 * 2;  // fused_wgmma's stages of a 64-row tile

template <int MODE>
constexpr int block_threads() { return MODE == 5 ? kThreads + 32 : kThreads; }

template <int MODE, int RING>
__global__ void __launch_bounds__(block_threads<MODE>()) ring_probe_kernel(const uint8_t* __restrict__ codes,
                                                              const uint8_t* __restrict__ scales,
                                                              const uint8_t* __restrict__ act, Plan plan,
                                                              uint32_t* __restrict__ sink, int flag) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid >> 7, ct = tid & 127, warp = ct >> 5, lane = ct & 31, g = lane >> 2, t = lane & 3;
  const int tile = static_cast<int>(blockIdx.x) % plan.tiles, split = static_cast<int>(blockIdx.x) / plan.tiles;
  const int step0 = split * plan.per_split;
  const int unit0 = static_cast<int>(blockIdx.x) * plan.per_split, units = plan.tiles * plan.total_steps;  // mode 7
  const int steps = MODE == 7 ? max(0, min(plan.per_split, units - unit0))
                              : max(0, min(step0 + plan.per_split, plan.total_steps) - step0);
  const int64_t piece0 = static_cast<int64_t>(2 * tile + wg) * plan.total_steps + step0;  // this warpgroup's tile
  const int row = 16 * warp + g;                                                           // and rows row, row + 8
  const uint8_t* c0 = codes + piece0 * kCodeBytes + row * 64 + t * 16;
  const uint8_t* s0 = scales + piece0 * kScaleBytes + row * 8 + (t >> 1) * 4;
  const uint8_t* s6 = scales + piece0 * kScaleBytes + warp * 128 + lane * 4;  // mode 6's word
  uint32_t acc = 0;
  constexpr bool kHandshake = MODE == 4 || MODE == 5, kProducerWarp = MODE == 5;
  if constexpr (MODE == 0 || MODE == 1 || MODE == 6 || MODE == 7 || MODE == 8 || kHandshake) {
    constexpr int kSlotBytes = 40;  // 2 x 16 code bytes, 2 x 4 scale bytes
    const uint32_t ring = smem_u32(smem);
    auto slot = [&](int s) { return ring + ((s % RING) * kThreads + tid) * 16; };
    auto scale_slot = [&](int s) { return ring + RING * kThreads * 32 + ((s % RING) * kThreads + tid) * 8; };
    // the piece of step s, from piece0: mode 7's unit unit0 + s in its tile, mode 8's step-major piece
    auto piece_offset = [&](int s) -> int64_t {
      if constexpr (MODE == 7) {
        const int u = unit0 + s, tl = u / plan.total_steps;
        return (static_cast<int64_t>(2 * tl + wg) * plan.total_steps + (u - tl * plan.total_steps)) - piece0;
      } else if constexpr (MODE == 8) {
        return static_cast<int64_t>(step0 + s) * (2 * plan.tiles) + (2 * tile + wg) - piece0;
      } else {
        return s;
      }
    };
    auto copy = [&](int s) {
      if (s < steps) {
        const int64_t off = piece_offset(s);
        cp_async16(slot(s), c0 + off * kCodeBytes);
        cp_async16(slot(s) + RING * kThreads * 16, c0 + off * kCodeBytes + 8 * 64);
        if (MODE == 6) {
          cp_async4(scale_slot(s), s6 + s * kScaleBytes);
        } else if (MODE != 1) {
          cp_async4(scale_slot(s), s0 + off * kScaleBytes);
          cp_async4(scale_slot(s) + 4, s0 + off * kScaleBytes + 8 * 8);
        }
      }
      cp_async_commit();
    };
    static_assert(kSlotBytes == 2 * 16 + 2 * 4, "slot layout");
    // MODES 4, 5: the activation stages after the ring, then their full and empty barriers
    const uint32_t act_base = (ring + RING * kThreads * kSlotBytes + 1023u) & ~1023u;
    const uint32_t full = act_base + kActStages * kActStepBytes, empty = full + 8 * kActStages;
    auto load_act = [&](int s) {  // thread 0 (mode 4) or the producer warp's lane 0 (mode 5)
      const uint32_t bar = full + 8 * (s % kActStages);
      mbar_expect_tx(bar, kActStepBytes);
      bulk_load(act_base + (s % kActStages) * kActStepBytes, act + static_cast<int64_t>(step0 + s) * kActStepBytes,
                kActStepBytes, bar);
    };
    if constexpr (kHandshake) {
      init_stage_barriers(full, empty, kActStages, tid);
      if constexpr (kProducerWarp) {
        if (tid >= kThreads) {  // the producer warp copies no weights
          if (lane == 0) {
            for (int s = 0; s < steps; ++s) {
              if (s >= kActStages) mbar_wait(empty + 8 * (s % kActStages), (s / kActStages - 1) & 1);
              load_act(s);
            }
          }
          return;
        }
      } else if (tid == 0) {
        for (int s = 0; s < kActStages - 1 && s < steps; ++s) load_act(s);
      }
    }
    for (int i = 0; i < RING; ++i) copy(i);
    for (int s = 0; s < steps; ++s) {
      cp_async_wait<RING - 1>();
      acc ^= xor4(lds128(slot(s))) ^ xor4(lds128(slot(s) + RING * kThreads * 16));
      if (MODE == 6) {
        acc ^= lds32(scale_slot(s));
      } else if (MODE != 1) {
        const uint2 sc = lds64(scale_slot(s));
        acc ^= sc.x ^ sc.y;
      }
      if constexpr (kHandshake) {
        const int st = s % kActStages;
        mbar_wait(full + 8 * st, (s / kActStages) & 1);
        acc ^= lds64(act_base + st * kActStepBytes + tid * 8).x;
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * st);
        if (!kProducerWarp && tid == 0 && s + kActStages - 1 < steps) {  // refill step s - 1's stage
          if (s > 0) mbar_wait(empty + 8 * ((s - 1) % kActStages), ((s - 1) / kActStages) & 1);
          load_act(s + kActStages - 1);
        }
      }
      copy(s + RING);
    }
  } else if constexpr (MODE == 2) {
    uint4 w[RING][2];
    uint32_t sc[RING][2];
    auto load = [&](int s, int r) {
      if (s < steps) {
        w[r][0] = ldg_stream(reinterpret_cast<const uint4*>(c0 + s * kCodeBytes));
        w[r][1] = ldg_stream(reinterpret_cast<const uint4*>(c0 + s * kCodeBytes + 8 * 64));
        sc[r][0] = __ldg(reinterpret_cast<const uint32_t*>(s0 + s * kScaleBytes));
        sc[r][1] = __ldg(reinterpret_cast<const uint32_t*>(s0 + s * kScaleBytes + 8 * 8));
      }
    };
    prefetch_walk<RING>(steps, load, [&](int r) { acc ^= xor4(w[r][0]) ^ xor4(w[r][1]) ^ sc[r][0] ^ sc[r][1]; });
  } else if constexpr (MODE == 9) {
    const uint8_t* tile_codes = codes + static_cast<int64_t>(2 * tile) * plan.total_steps * kCodeBytes;
    const uint8_t* tile_scales = scales + static_cast<int64_t>(2 * tile) * plan.total_steps * kScaleBytes;
    const int64_t wg_stride = plan.total_steps;  // pieces from one 64-row tile to the next
    uint4 w[RING][2], sc[RING];
    auto load = [&](int s, int r) {
      if (s < steps) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          w[r][h] = ldg_stream(reinterpret_cast<const uint4*>(tile_codes + (h * wg_stride + step0 + s) * kCodeBytes) + tid);
        }
        if (tid < 64) {
          sc[r] = ldg_stream(reinterpret_cast<const uint4*>(
                                 tile_scales + ((tid >> 5) * wg_stride + step0 + s) * kScaleBytes) + (tid & 31));
        }
      }
    };
    prefetch_walk<RING>(steps, load,
                        [&](int r) { acc ^= xor4(w[r][0]) ^ xor4(w[r][1]) ^ (tid < 64 ? xor4(sc[r]) : 0u); });
  } else {  // MODE 3: bulk copies into RING stages
    constexpr int kStage = 2 * kCodeBytes + 2 * kScaleBytes;
    const uint32_t base = smem_u32(smem);
    const uint32_t full = base + RING * kStage, empty = full + 8 * RING;
    init_stage_barriers(full, empty, RING, tid);
    const uint8_t* tile_codes = codes + static_cast<int64_t>(2 * tile) * plan.total_steps * kCodeBytes;
    const uint8_t* tile_scales = scales + static_cast<int64_t>(2 * tile) * plan.total_steps * kScaleBytes;
    const int64_t wg_stride = plan.total_steps;  // pieces from one 64-row tile to the next
    auto issue = [&](int s) {                    // thread 0
      const int st = s % RING;
      const uint32_t dst = base + st * kStage, bar = full + 8 * st;
      mbar_expect_tx(bar, kStage);
      for (int h = 0; h < 2; ++h) {
        const int64_t piece = h * wg_stride + step0 + s;
        bulk_load(dst + h * kCodeBytes, tile_codes + piece * kCodeBytes, kCodeBytes, bar);
        bulk_load(dst + 2 * kCodeBytes + h * kScaleBytes, tile_scales + piece * kScaleBytes, kScaleBytes, bar);
      }
    };
    if (tid == 0) {
      for (int s = 0; s < RING && s < steps; ++s) issue(s);
    }
    for (int s = 0; s < steps; ++s) {
      const int st = s % RING;
      const uint32_t phase = (s / RING) & 1;
      mbar_wait(full + 8 * st, phase);
      const uint32_t stage = base + st * kStage;
      acc ^= xor4(lds128(stage + wg * kCodeBytes + row * 64 + t * 16)) ^
             xor4(lds128(stage + wg * kCodeBytes + (row + 8) * 64 + t * 16));
      const uint2 sc = lds64(stage + 2 * kCodeBytes + wg * kScaleBytes + row * 8);
      acc ^= sc.x ^ sc.y;
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + 8 * st);
      if (tid == 0 && s + RING < steps) {
        mbar_wait(empty + 8 * st, phase);
        issue(s + RING);
      }
    }
  }
  if (flag) sink[blockIdx.x * kThreads + tid] = acc;
}

// The XOR of the 16-byte words p[i], p[i + stride], ... below `end`, four loads in flight a thread
__device__ __forceinline__ uint32_t xor_strided(const uint4* __restrict__ p, int64_t i, int64_t end, int64_t stride) {
  uint32_t acc = 0;
  for (; i + 3 * stride < end; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = ldg_stream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= xor4(v[u]);
  }
  for (; i < end; i += stride) acc ^= xor4(ldg_stream(p + i));
  return acc;
}

__global__ void __launch_bounds__(kThreads) read_floor_kernel(const uint4* __restrict__ p, int64_t n16,
                                                              uint32_t* __restrict__ sink, int flag) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint32_t acc = xor_strided(p, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, n16, stride);
  if (flag) sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// The read floor's loads, but block b reads only its own contiguous chunk b of the bytes (its 256
// threads 16 bytes apart, four loads in flight each): hundreds of separate sequential streams, as
// the ring's blocks read, instead of one sweep of the whole buffer (thirtieth session)
__global__ void __launch_bounds__(kThreads) read_chunks_kernel(const uint4* __restrict__ p, int64_t n16,
                                                               int64_t chunk16, uint32_t* __restrict__ sink,
                                                               int flag) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk16;
  const uint32_t acc = xor_strided(p, begin + threadIdx.x, min(begin + chunk16, n16), kThreads);
  if (flag) sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

template <int MODE, int RING>
int launch_mode(const void* codes, const void* scales, const void* act, Plan plan, int blocks, int smem,
                uint32_t* sink, cudaStream_t stream) {
  const auto kernel = ring_probe_kernel<MODE, RING>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return static_cast<int>(err);
  kernel<<<blocks, block_threads<MODE>(), smem, stream>>>(static_cast<const uint8_t*>(codes), static_cast<const uint8_t*>(scales),
                                             static_cast<const uint8_t*>(act), plan, sink, 0);
  return static_cast<int>(cudaGetLastError());
}

template <int MODE>
int launch_ring(int ring, const void* codes, const void* scales, const void* act, Plan plan, int blocks, int smem,
                uint32_t* sink, cudaStream_t stream) {
  switch (ring) {
    case 2: return launch_mode<MODE, 2>(codes, scales, act, plan, blocks, smem, sink, stream);
    case 4: return launch_mode<MODE, 4>(codes, scales, act, plan, blocks, smem, sink, stream);
    case 6: return launch_mode<MODE, 6>(codes, scales, act, plan, blocks, smem, sink, stream);
    case 8: return launch_mode<MODE, 8>(codes, scales, act, plan, blocks, smem, sink, stream);
    default: return -2;
  }
}

}  // namespace

// The shared memory a mode's ring needs (the caller may ask for more, to hold the blocks an SM
// down to the library's two).
extern "C" int ring_probe_min_smem(int mode, int ring) {
  if (mode == 0 || mode == 1 || mode == 6 || mode == 7 || mode == 8) return ring * kThreads * 40;
  if (mode == 2 || mode == 9) return 0;
  if (mode == 3) return ring * (2 * kCodeBytes + 2 * kScaleBytes) + 16 * ring + 1024;
  if (mode == 4 || mode == 5) return ring * kThreads * 40 + 1024 + kActStages * (kActStepBytes + 16) + 1024;
  return -1;
}

// One launch of `mode` with a ring of `ring` steps over `tiles` 128-row tiles of `total_steps`
// steps, split into ceil(total_steps / per_split) ranges: tiles x splits blocks (mode 7: runs of
// per_split (tile, step) units, ceil(tiles total_steps / per_split) blocks). `act`: mode 4's
// activation steps (total_steps x 16 KB; unused by the other modes).
extern "C" int ring_probe_launch(int mode, int ring, const void* codes, const void* scales, const void* act,
                                 int total_steps, int tiles, int per_split, int smem, void* sink, void* stream) {
  if (per_split < 1 || tiles < 1 || total_steps < 1) return -3;
  const Plan plan{total_steps, tiles, per_split};
  const int blocks = mode == 7 ? (tiles * total_steps + per_split - 1) / per_split
                                : tiles * ((total_steps + per_split - 1) / per_split);
  const auto s = static_cast<cudaStream_t>(stream);
  auto* out = static_cast<uint32_t*>(sink);
  switch (mode) {
    case 0: return launch_ring<0>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 1: return launch_ring<1>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 2: return launch_ring<2>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 3: return launch_ring<3>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 4: return launch_ring<4>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 5: return launch_ring<5>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 6: return launch_ring<6>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 7: return launch_ring<7>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 8: return launch_ring<8>(ring, codes, scales, act, plan, blocks, smem, out, s);
    case 9: return launch_ring<9>(ring, codes, scales, act, plan, blocks, smem, out, s);
    default: return -1;
  }
}

// The read floor: a grid-stride read of nbytes (a multiple of 16) by blocks x 256 threads.
extern "C" int ring_probe_read_floor(const void* p, long long nbytes, int blocks, void* sink, void* stream) {
  read_floor_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(p), nbytes / 16, static_cast<uint32_t*>(sink), 0);
  return static_cast<int>(cudaGetLastError());
}

// The chunked read: nbytes (a multiple of 16) in `blocks` contiguous chunks, one a block.
extern "C" int ring_probe_read_chunks(const void* p, long long nbytes, int blocks, void* sink, void* stream) {
  const int64_t n16 = nbytes / 16, chunk16 = (n16 + blocks - 1) / blocks;
  read_chunks_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(p), n16, chunk16, static_cast<uint32_t*>(sink), 0);
  return static_cast<int>(cudaGetLastError());
}
