// Dev variant (not in the library): fused_mma's tile-contiguous M <= 8 launch as a dynamic walk over
// its (tile, split) units, against the drain that the H200's per-block timeline found at the end of
// each call (benchmarks/NOTES.md, thirty-fifth and thirty-sixth sessions).
//
// The library runs a block per unit; on 5120 x 17408 at M = 1 (80 tiles, 8 splits: 640 blocks, one
// wave of 4-5 an SM) the blocks of one SM start together with the same 17 steps and end 5-11 us
// apart, and no block's K loop goes faster than about 0.5 us a step, so the last third of the
// bytes goes at under half the plateau's rate; meanwhile the SMs given 4 blocks sit idle while
// those given 5 finish. Here a grid of resident blocks walks the units instead: a block's first
// unit is blockIdx.x, each later one comes from a global counter (taken two unit changes before it
// is needed, so the atomic's round trip is never waited on), and the load side moves into the next
// unit while the compute side finishes the current one, so a block's ring never drains between
// units. With finer units (more splits, 4-8 steps each) an SM's early finishers, and the SMs that
// finish first, take the work the late ones would have done alone.
//
// Bits: every unit is the library's block of the same (tile, split), with the same K loop over the
// same steps and the same partial store; the finalize kernel sums the partials in split order. So
// the output is the library's at the same split count (nvfp4_launch_fused_tiled without counters),
// which scripts/fused_walk_ab.py checks word for word before it times anything.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC -I kernels/cuda \
//        -o kernels/_build/walk/libfusedwalk.so scripts/ws_dev/fused_walk.cu
//
// -DNVFP4_WALK_STATIC (an ablation, libfusedwalk_static.so): block b walks units b, b + grid,
// b + 2 grid, ... with no counter and no atomic, the same units and so the same bits; beside the
// walk it says what taking units from the counter costs.
#include "../../kernels/cuda/fused_mma.cu"

// Held to 64 registers, as the library's M <= 8 launch runs (8 blocks an SM); the walk's state
// took 80 registers unbounded, 6 blocks an SM.
#ifndef NVFP4_WALK_MIN_BLOCKS
#define NVFP4_WALK_MIN_BLOCKS 8
#endif

namespace {

// One unit of the walk: the library's block blockIdx.x = u (the weight tile fastest, then the
// split; M <= 8 is one activation tile). Every unit has `per` steps from split * per on (the entry
// takes only split counts that divide the steps). The library's block divides by the tile count
// once; the walk does at every unit change, where a division by a runtime value costs about twenty
// instructions a thread, so it takes the high word of u * inv_tiles, inv_tiles = ceil(2^32 /
// n_tiles) = (2^32 + e) / n_tiles with 0 <= e < n_tiles. That is u / n_tiles + u e / (n_tiles 2^32),
// and the excess stays under 1 / n_tiles (so it never carries u / n_tiles, whose fraction is at
// most 1 - 1 / n_tiles, past an integer) while u * n_tiles < 2^32; the entry checks that, and
// n_tiles >= 2 (for one tile inv_tiles would be 2^32).
struct WalkUnit {
  int n0, split;
};

template <int MT, int RT, int WARPS>
__device__ __forceinline__ WalkUnit walk_unit(int u, int n_tiles, unsigned inv_tiles) {
  using TL = Tile<MT, RT, WARPS>;
  static_assert(TL::kActRows >= 8, "M <= 8 is one activation tile");
  WalkUnit w;
  w.split = static_cast<int>(__umulhi(static_cast<unsigned>(u), inv_tiles));
  w.n0 = (u - w.split * n_tiles) * TL::kRows;
  return w;
}

// The library kernel's partial store of one unit (the same elements, the same values, through its
// fragment mapping), then the accumulators back to zero for the next unit.
template <int MT, int RT, int WARPS>
__device__ __forceinline__ void store_partial(float (&acc)[RT][MT][4], float* __restrict__ partial, const WalkUnit& w,
                                              int m, int n, int warp, int g, int t) {
  for_each_fragment<MT, RT>(acc, warp, g, t, [&](float& v, int row, int act_row) {
    const int nn = w.n0 + row;
    if (nn < n && act_row < m) partial[(static_cast<int64_t>(w.split) * m + act_row) * n + nn] = v;
    v = 0.f;
  });
}

// The walk. Load side: the unit whose steps the ring is filling (lunit), its step (lstep) and the
// count of unit changes (moves). Thread 0 keeps the unit it took last in a register (pending) and
// publishes it in next_unit[(moves + 1) & 1] at a change, where every thread reads it one change
// later: at least `per` barriers apart, so the write is seen and no thread still reads that slot.
// Compute side: the unit it accumulates (cunit) and its step; since a unit has at least kStages steps
// and the load side runs kStages - 1 steps ahead, the load side has moved exactly once past the
// compute side's unit when that unit ends: lunit is then the unit after it.
template <typename T, int MT, int RT, int WARPS, bool CHECKED>
__device__ __forceinline__ void walk(const uint8_t* __restrict__ a, const uint8_t* __restrict__ packed,
                                     const uint8_t* __restrict__ scales, float gs, float* __restrict__ partial, int m,
                                     int n, int k, int n_tiles, unsigned inv_tiles, int per, int units,
                                     unsigned* __restrict__ take, int* next_unit, uint8_t* smem, int warp, int g,
                                     int t) {
  using TL = Tile<MT, RT, WARPS>;
  using Loader = TiledLoader<MT, RT, WARPS>;
  constexpr int kRing = kStages;
  const uint32_t ring = smem_addr(smem);
  const uint32_t ring_last = ring + (kRing - 1) * TL::kStageBytes;

  int lunit = static_cast<int>(blockIdx.x);
  WalkUnit lw = walk_unit<MT, RT, WARPS>(lunit, n_tiles, inv_tiles);
  Loader loader(packed, scales, a, m, n, k, lw.n0, 0, lw.split * per);
  int lstep = 0, moves = 0;
#ifndef NVFP4_WALK_STATIC
  unsigned pending = 0;  // thread 0's unit taken last, published at the next change
#endif
  uint32_t load_slot = ring;

  const auto issue = [&]() {
    if (lunit < units) {
      loader.load(load_slot);
      if (++lstep == per) {
#ifdef NVFP4_WALK_STATIC
        lunit += static_cast<int>(gridDim.x);
#else
        lunit = next_unit[moves & 1];
        if (threadIdx.x == 0) {
          next_unit[(moves + 1) & 1] = static_cast<int>(pending);
          pending = atomicAdd(take, 1u) + gridDim.x;
        }
#endif
        ++moves;
        if (lunit < units) {
          lw = walk_unit<MT, RT, WARPS>(lunit, n_tiles, inv_tiles);
          loader = Loader(packed, scales, a, m, n, k, lw.n0, 0, lw.split * per);
          lstep = 0;
        }
      }
    }
    cp_async_commit();  // empty groups keep the wait count uniform
    load_slot = load_slot == ring_last ? ring : load_slot + TL::kStageBytes;
  };

#pragma unroll
  for (int s = 0; s < kRing - 1; ++s) issue();
  // the block's second unit (published by the loop's first barrier) and its third, taken after the
  // first copies are on their way
#ifndef NVFP4_WALK_STATIC
  if (threadIdx.x == 0) {
    next_unit[0] = static_cast<int>(atomicAdd(take, 1u) + gridDim.x);
    pending = atomicAdd(take, 1u) + gridDim.x;
  }
#endif

  float acc[RT][MT][4] = {};  // store_partial zeroes it again after each unit

  int cunit = lunit;
  int cstep = 0;
  const uint8_t* compute_slot = smem;
  for (;;) {
    cp_async_wait<kRing - 2>();
    __syncthreads();  // this step is in shared memory for every thread; the previous step's buffer is free
    issue();
    compute_stage<T, MT, RT, WARPS, true, CHECKED>(compute_slot, gs, warp, g, t, acc);
    compute_slot = compute_slot == smem + (kRing - 1) * TL::kStageBytes ? smem : compute_slot + TL::kStageBytes;
    if (++cstep == per) {
      store_partial<MT, RT, WARPS>(acc, partial, walk_unit<MT, RT, WARPS>(cunit, n_tiles, inv_tiles), m, n, warp, g, t);
      if (lunit >= units) break;
      cunit = lunit;
      cstep = 0;
    }
  }
  cp_async_wait<0>();
}

template <typename T, int MT, int RT, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, NVFP4_WALK_MIN_BLOCKS)
nvfp4_fused_walk_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ packed,
                        const uint8_t* __restrict__ scales, const float* __restrict__ g_ptr,
                        float* __restrict__ partial, int m, int n, int k, int n_tiles, unsigned inv_tiles, int per,
                        int splits, int scale_bytes, unsigned* __restrict__ take) {
  nvfp4::allow_dependent_launch();  // the finalize kernel may be scheduled now
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int next_unit[2];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int units = n_tiles * splits;
  const float gs = __ldg(g_ptr);
  if (static_cast<int>(blockIdx.x) < units) {
    if (scale_bytes_in_table<T>(scale_bytes, gs)) {
      walk<T, MT, RT, WARPS, false>(a, packed, scales, gs, partial, m, n, k, n_tiles, inv_tiles, per, units, take,
                                    next_unit, smem, warp, g, t);
    } else {
      walk<T, MT, RT, WARPS, true>(a, packed, scales, gs, partial, m, n, k, n_tiles, inv_tiles, per, units, take,
                                   next_unit, smem, warp, g, t);
    }
  }
  // the last block out puts the counter back to 0 for the next launch (every take of every block
  // is ordered before its own count by the fence)
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(take + 1, 1u) == gridDim.x - 1) {
      atomicExch(take, 0u);
      atomicExch(take + 1, 0u);
    }
  }
}

template <typename T>
cudaError_t launch_walk(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                        void* out, float* workspace, unsigned* take, int m, int n, int k, int splits,
                        cudaStream_t stream, int scale_bytes, int blocks_per_sm, int* grid_out) {
  constexpr int MT = 1, RT = kRtSmall, WARPS = kWarps;
  using TL = Tile<MT, RT, WARPS>;
  const auto kernel = nvfp4_fused_walk_kernel<T, MT, RT, WARPS>;
  const int smem = TL::kSmemBytes;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  int resident = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, TL::kThreads, smem);
  if (err != cudaSuccess) return err;
  if (blocks_per_sm > 0 && blocks_per_sm < resident) resident = blocks_per_sm;
  const int n_tiles = (n + TL::kRows - 1) / TL::kRows;
  const int per = k / kStepK / splits;
  const int units = n_tiles * splits;
  const unsigned inv_tiles = static_cast<unsigned>(((uint64_t{1} << 32) + n_tiles - 1) / n_tiles);
  const int grid = std::min(units, resident * device_sms());
  if (grid_out != nullptr) *grid_out = grid;
  const int64_t weight_rows = (static_cast<int64_t>(n) + 63) / 64 * 64;
  const size_t weight_bytes = static_cast<size_t>(weight_rows) * static_cast<size_t>(k / 2);
  const uint8_t* p8 = static_cast<const uint8_t*>(packed);
  err = nvfp4::launch_streaming_weights(kernel, dim3(static_cast<unsigned>(grid)), dim3(TL::kThreads),
                                        static_cast<size_t>(smem), stream, p8, weight_bytes,
                                        static_cast<const uint8_t*>(a), p8, static_cast<const uint8_t*>(scales),
                                        static_cast<const float*>(g), workspace, m, n, k, n_tiles, inv_tiles, per,
                                        splits, scale_bytes, take);
  if (err != cudaSuccess) return err;
  return launch_splitk_finalize<T>(workspace, static_cast<const unsigned short*>(bias),
                                   static_cast<unsigned short*>(out), m, n, splits, stream);
}

}  // namespace

extern "C" {

// nvfp4_launch_fused_tiled's arguments for 1 <= m <= 8 and n > 64, as a dynamic walk: splits must divide
// k / 128 into units of at least NVFP4_FUSED_STAGES steps (so 2 <= splits), workspace holds
// splits * m * n fp32 partials, take is two device words, both 0 (the launch leaves them 0);
// blocks_per_sm caps the resident blocks an SM (0: the kernel's occupancy). The grid's size is
// written to *grid (if not null). Returns a cudaError_t.
int nvfp4_dev_launch_fused_walk(const void* a, const void* packed, const void* scales, const void* g,
                                const void* bias, void* out, float* workspace, unsigned* take, int32_t m, int64_t n,
                                int64_t k, int32_t out_bf16, int32_t splits, cudaStream_t stream,
                                int32_t scale_bytes, int32_t blocks_per_sm, int32_t* grid) {
  const int64_t n_tiles = (n + Tile<1, kRtSmall>::kRows - 1) / Tile<1, kRtSmall>::kRows;
  if (m < 1 || m > 8 || n_tiles < 2 || n > 0x7FFFFFFF || k < kStepK || k > 0x7FFFFFFF || (k % kStepK) || splits < 2 ||
      (k / kStepK) % splits || (k / kStepK) / splits < kStages || n_tiles * splits * n_tiles >= (int64_t{1} << 32) ||
      workspace == nullptr || take == nullptr ||
      (reinterpret_cast<uintptr_t>(a) & 15) || (reinterpret_cast<uintptr_t>(packed) & 15) ||
      (reinterpret_cast<uintptr_t>(scales) & 7)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int lo = scale_bytes & 0xFF, hi = (scale_bytes >> 8) & 0xFF;
  if (scale_bytes != 0 && ((scale_bytes >> 16) || lo < 1 || lo > hi || hi > 0x7E)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const cudaError_t err =
      out_bf16 ? launch_walk<__nv_bfloat16>(a, packed, scales, g, bias, out, workspace, take, m, static_cast<int>(n),
                                            static_cast<int>(k), splits, stream, scale_bytes, blocks_per_sm, grid)
               : launch_walk<__half>(a, packed, scales, g, bias, out, workspace, take, m, static_cast<int>(n),
                                     static_cast<int>(k), splits, stream, scale_bytes, blocks_per_sm, grid);
  return static_cast<int>(err);
}

}  // extern "C"
