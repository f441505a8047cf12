// The split-K finalize kernel's body (kernels/cuda/mma_decode.cuh: splitk_finalize_thread) run on
// the host, for suites/test_splitk_finalize.py: every thread of the grid that
// launch_splitk_finalize would launch at a vector width, one after another. The kernel itself only
// adds the wait for its split kernel in front (griddepcontrol.wait), so this is the code a GPU
// runs, less that wait, compiled for the host. Built by the test with nvcc -shared.
#include "mma_decode.cuh"

namespace {

template <typename T, int VEC>
int64_t run_grid(const float* partial, const unsigned short* bias, unsigned short* out, int m, int n, int splits,
                 int col0) {
  const int64_t threads = nvfp4::finalize_blocks(m, n, col0, VEC) * nvfp4::kFinalizeThreads;
  for (int64_t t = 0; t < threads; ++t) nvfp4::splitk_finalize_thread<T, VEC>(partial, bias, out, m, n, splits, col0, t);
  return threads;
}

}  // namespace

// The vector width launch_splitk_finalize picks for these addresses and columns.
extern "C" int nvfp4_test_finalize_vector_width(const float* partial, const unsigned short* bias,
                                                const unsigned short* out, int n, int col0) {
  return nvfp4::finalize_vector_width(partial, bias, out, n, col0);
}

// Runs the grid at width `vec` (1 or 4) for bf16 (bf16 != 0) or fp16 outputs; returns its thread
// count, or -1 for a width the kernel does not have.
extern "C" long long nvfp4_test_finalize_on_host(int bf16, int vec, const float* partial, const unsigned short* bias,
                                                 unsigned short* out, int m, int n, int splits, int col0) {
  if (vec == 4) {
    return bf16 ? run_grid<__nv_bfloat16, 4>(partial, bias, out, m, n, splits, col0)
                : run_grid<__half, 4>(partial, bias, out, m, n, splits, col0);
  }
  if (vec == 1) {
    return bf16 ? run_grid<__nv_bfloat16, 1>(partial, bias, out, m, n, splits, col0)
                : run_grid<__half, 1>(partial, bias, out, m, n, splits, col0);
  }
  return -1;
}
