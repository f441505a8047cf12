// The host cost of one launch without Python: the library's packed entry (as the eager fast path
// calls it) against a bare cudaLaunchKernel and cuLaunchKernel of an empty kernel with as many
// parameters, and the runtime calls the launcher makes around its launch. Prints microseconds
// per call (median of 15 loops of 200 calls, one sync per loop).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/launch_floor scripts/launch_floor.cu -ldl && /tmp/launch_floor LIB.so
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "../kernels/cuda/launch_args.h"

__global__ void empty_kernel(const void*, const void*, const void*, const void*, const void*, void*, float*, int,
                             int, int, int, int, int, int*, int) {}

static double per_call_us(const std::function<void()>& call, int calls = 200, int loops = 15) {
  std::vector<double> t;
  for (int l = 0; l < loops + 2; ++l) {
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    if (l >= 2) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s libnvfp4_<hash>.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto packed_launch = reinterpret_cast<int (*)(int32_t, const Nvfp4LaunchArgs*)>(dlsym(lib, "nvfp4_launch_packed"));
  const int m = 1, n = 4096, k = 512;
  void *a, *w, *s, *g, *out, *ws, *cnt;
  cudaMalloc(&a, m * k * 2);
  cudaMalloc(&w, n * k / 2);
  cudaMalloc(&s, n * k / 16);
  cudaMalloc(&g, 4);
  cudaMalloc(&out, m * n * 2);
  cudaMalloc(&ws, 16 * m * n * 4);
  cudaMalloc(&cnt, 1 << 16);
  cudaMemset(w, 0, n * k / 2);
  cudaMemset(s, 0x38, n * k / 16);
  cudaMemset(g, 0, 4);
  cudaMemset(a, 0, m * k * 2);
  cudaMemset(cnt, 0, 1 << 16);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  Nvfp4LaunchArgs args{};
  args.a = a; args.packed = w; args.scales = s; args.g = g; args.out = out; args.workspace = (float*)ws;
  args.stream = stream; args.n = n; args.k = k; args.m = m; args.block_size = 16; args.out_bf16 = 1;
  std::printf("fused M=%d N=%d K=%d; host us per call (median of 15 x 200 calls)\n", m, n, k);
  args.splits = 1; args.counters = nullptr;
  std::printf("%8.3f  packed entry, fused, one split (one launch)\n", per_call_us([&] { packed_launch(3, &args); }));
  args.splits = 2; args.counters = (int*)cnt;
  std::printf("%8.3f  packed entry, fused, 2 splits, last block (one launch)\n",
              per_call_us([&] { packed_launch(3, &args); }));
  args.counters = nullptr;
  std::printf("%8.3f  packed entry, fused, 2 splits + finalize (two launches)\n",
              per_call_us([&] { packed_launch(3, &args); }));
  std::printf("%8.3f  packed entry, GEMV, one split\n", per_call_us([&] { args.splits = 1; packed_launch(0, &args); }));
  std::printf("%8.3f  empty kernel<<<>>> (15 params, 128 threads)\n", per_call_us([&] {
    empty_kernel<<<64, 128, 0, stream>>>(a, w, s, g, nullptr, out, nullptr, m, n, k, 1, 1, 1, nullptr, 1);
  }));
  CUfunction fn;
  cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(empty_kernel));
  PFN_cuLaunchKernel_v4000 cu_launch = nullptr;
  cudaDriverEntryPointQueryResult found;
  cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&cu_launch), 4000, cudaEnableDefault,
                                   &found);
  int mi = m, ni = n, ki = k, one = 1;
  void* null_ptr = nullptr;
  void* params[] = {&a, &w, &s, &g, &null_ptr, &out, &null_ptr, &mi, &ni, &ki, &one, &one, &one, &null_ptr, &one};
  std::printf("%8.3f  empty kernel, cuLaunchKernel (driver API, CUfunction fetched once)\n", per_call_us([&] {
    cu_launch(fn, 64, 1, 1, 128, 1, 1, 0, reinterpret_cast<CUstream>(stream), params, nullptr);
  }));
  int dev;
  std::printf("%8.3f  cudaGetDevice\n", per_call_us([&] { cudaGetDevice(&dev); }));
  std::printf("%8.3f  cudaGetLastError\n", per_call_us([&] { (void)cudaGetLastError(); }));
  return 0;
}
