// x W^T for a few rows (a verification call's k + 1 tokens) that reads each weight once.
//
// A decoding step is memory-bound: the weights stream in from memory, and each row uses each
// weight once. Yet through MKL's product a forward over 4 tokens cost SmolLM2 1.34 to 1.44
// one-token steps on a 2-core Intel Xeon, though it reads no more weights than one token does
// (figures/lookup_ceiling_intel.md, figures/kernel_baseline_transposed.md). Here W is stored once
// as (N / 64, K, 64): each block of 64 outputs is one contiguous slab, read in order, while the
// partial sums of R <= 6 rows, 4 x 16 floats a row, stay in 24 of AVX-512's 32 vector registers;
// the slab is prefetched 32 rows ahead, so loads stay in flight while the multiply-adds run.
// Rows beyond 6 take the same slab again from the cache. Each output is summed over k in order, the same for any number of
// rows: the product is batch-invariant (row i of a call equals that row alone, bit for bit).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>

constexpr int64_t B = 64;   // outputs per block: 4 vectors of 16 floats
constexpr int64_t AHEAD = 32;  // prefetch distance, in rows of a slab (32 x 256 bytes)
typedef float v16 __attribute__((vector_size(64)));

template <int R>
static void block(const float* x, int64_t K, const float* slab, float* y, int64_t N) {
  v16 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = v16{};
  for (int64_t k = 0; k < K; ++k) {
    const float* row = slab + k * B;
    const char* ahead = reinterpret_cast<const char*>(row + AHEAD * B);
    for (int line = 0; line < 4; ++line) __builtin_prefetch(ahead + 64 * line);
    v16 w[4];
    __builtin_memcpy(w, row, sizeof(w));
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const float xr = x[r * K + k];
      for (int q = 0; q < 4; ++q) acc[r][q] += xr * w[q];
    }
  }
  for (int r = 0; r < R; ++r) __builtin_memcpy(y + r * N, acc[r], sizeof(acc[r]));
}

torch::Tensor pack(torch::Tensor w) {  // W (N, K) -> (N / 64, K, 64)
  const int64_t N = w.size(0), K = w.size(1);
  TORCH_CHECK(w.dtype() == torch::kFloat32 && N % B == 0, "W must be float32, N a multiple of 64");
  return w.contiguous().view({N / B, B, K}).transpose(1, 2).contiguous();
}

torch::Tensor product(torch::Tensor x, torch::Tensor packed) {  // x (M, K) -> x W^T (M, N)
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), blocks = packed.size(0), N = blocks * B;
  TORCH_CHECK(x.dtype() == torch::kFloat32 && packed.size(1) == K, "x must be float32 (M, K)");
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t end) {
    for (int64_t b = first; b < end; ++b) {
      for (int64_t m = 0; m < M; m += 6) {  // 6 rows at a time, the slab from the cache again
        const float* xm = xp + m * K;
        float* ym = yp + m * N + b * B;
        switch (std::min<int64_t>(6, M - m)) {
          case 6: block<6>(xm, K, wp + b * K * B, ym, N); break;
          case 5: block<5>(xm, K, wp + b * K * B, ym, N); break;
          case 4: block<4>(xm, K, wp + b * K * B, ym, N); break;
          case 3: block<3>(xm, K, wp + b * K * B, ym, N); break;
          case 2: block<2>(xm, K, wp + b * K * B, ym, N); break;
          default: block<1>(xm, K, wp + b * K * B, ym, N);
        }
      }
    }
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "W (N, K) -> (N / 64, K, 64)");
  m.def("product", &product, "x (M, K) -> x W^T (M, N)");
}
