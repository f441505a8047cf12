// Probe: NVIDIA's own E2M1 conversion, __nv_cvt_fp4x2_to_halfraw2 from cuda_fp4.h, run on the GPU
// for all 256 packed bytes. The result is the independent evidence that the project's E2M1 byte
// table (kernels.nvfp4.E2M1_TABLE, and the bit tricks of the dequant kernels) matches NVIDIA's.
#include <cuda_fp4.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

// out[2*b] = fp16 bits of the low nibble of byte b, out[2*b + 1] = those of the high nibble.
__global__ void nvfp4_fp4_probe_kernel(unsigned short* __restrict__ out) {
  const unsigned b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= 256) return;
  const __half2_raw r = __nv_cvt_fp4x2_to_halfraw2(static_cast<__nv_fp4x2_storage_t>(b), __NV_E2M1);
  out[2 * b] = r.x;
  out[2 * b + 1] = r.y;
}

}  // namespace

extern "C" int nvfp4_launch_fp4_probe(void* out, cudaStream_t stream) {
  nvfp4_fp4_probe_kernel<<<1, 256, 0, stream>>>(static_cast<unsigned short*>(out));
  return static_cast<int>(cudaGetLastError());
}
