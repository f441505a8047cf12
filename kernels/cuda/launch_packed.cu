// nvfp4_launch_packed: the launchers of gemv.cu, fused_mma.cu, fused_wgmma.cu and dequant.cu behind one
// entry that takes its arguments as a struct (launch_args.h), for the dispatcher's eager fast path.
#include "launch_args.h"

namespace {

// An empty kernel with the fused kernel's parameter list: the benchmark times eager calls against
// launches of it (kernel 4), the host-time floor of a call that launches kernels through this entry.
__global__ void nvfp4_empty_kernel(const void*, const void*, const void*, const void*, const void*, void*, float*,
                                   int, int, int, int, int, int, int*, int) {}

}  // namespace

extern "C" {

int nvfp4_launch_gemv(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                      void* out, float* workspace, int* counters, int32_t m, int64_t n, int64_t k,
                      int32_t out_bf16, int32_t splits, cudaStream_t stream);
int nvfp4_launch_fused(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                       void* out, float* workspace, int* counters, int32_t m, int64_t n, int64_t k,
                       int32_t out_bf16, int32_t splits, cudaStream_t stream);
int nvfp4_launch_fused_tiled(const void* a, const void* packed, const void* scales, const void* g, const void* bias,
                             void* out, float* workspace, int* counters, int32_t m, int64_t n, int64_t k,
                             int32_t out_bf16, int32_t splits, cudaStream_t stream, int32_t scale_bytes);
int nvfp4_launch_fused_wgmma_mma_order(const void* a, void* act_ws, const void* packed, const void* scales,
                                       const void* g, const void* bias, void* out, float* workspace, int32_t m,
                                       int64_t n, int64_t k, int32_t out_bf16, int32_t whole_tiles, int32_t splits,
                                       int32_t tiled, cudaStream_t stream);
int nvfp4_launch_dequant_vec8(const void* packed, const void* scales, const void* g, void* out, int64_t n,
                              int64_t k, int32_t block_size, int32_t out_bf16, int32_t chunks_per_thread,
                              cudaStream_t stream);
int nvfp4_launch_dequant_scalar(const void* packed, const void* scales, const void* g, void* out, int64_t n,
                                int64_t k, int32_t block_size, int32_t out_bf16, cudaStream_t stream);

int nvfp4_launch_args_size(void) { return static_cast<int>(sizeof(Nvfp4LaunchArgs)); }

int nvfp4_launch_packed(int32_t kernel, const Nvfp4LaunchArgs* p) {
  if (p == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  switch (kernel) {
    case 0:
      return nvfp4_launch_gemv(p->a, p->packed, p->scales, p->g, p->bias, p->out, p->workspace, p->counters,
                               p->m, p->n, p->k, p->out_bf16, p->splits, p->stream);
    case 1:
      return nvfp4_launch_dequant_vec8(p->packed, p->scales, p->g, p->out, p->n, p->k, p->block_size,
                                       p->out_bf16, p->splits, p->stream);
    case 2:
      return nvfp4_launch_dequant_scalar(p->packed, p->scales, p->g, p->out, p->n, p->k, p->block_size,
                                         p->out_bf16, p->stream);
    case 3:
      return nvfp4_launch_fused(p->a, p->packed, p->scales, p->g, p->bias, p->out, p->workspace, p->counters,
                                p->m, p->n, p->k, p->out_bf16, p->splits, p->stream);
    case 4:
      nvfp4_empty_kernel<<<1, 32, 0, p->stream>>>(p->a, p->packed, p->scales, p->g, p->bias, p->out, p->workspace,
                                                  p->m, static_cast<int>(p->n), static_cast<int>(p->k), 0, 0,
                                                  p->splits, p->counters, p->splits);
      return static_cast<int>(cudaGetLastError());
    case 5:
      return nvfp4_launch_fused_tiled(p->a, p->packed, p->scales, p->g, p->bias, p->out, p->workspace, p->counters,
                                      p->m, p->n, p->k, p->out_bf16, p->splits, p->stream, p->scale_bytes);
    case 8:
    case 9:
      return nvfp4_launch_fused_wgmma_mma_order(p->a, p->counters, p->packed, p->scales, p->g, p->bias, p->out,
                                                p->workspace, p->m, p->n, p->k, p->out_bf16, p->whole_tiles,
                                                p->splits, kernel == 9, p->stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // extern "C"
