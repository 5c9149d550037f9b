// x W^T that reads each weight once, for a verification call's k + 1 tokens or a prompt's.
//
// A decoding step is memory-bound: the weights stream in from memory, and each row uses each
// weight once. Yet through MKL's product a forward over 4 tokens cost SmolLM2 1.34 to 1.44
// one-token steps on a 2-core Intel Xeon, though it reads no more weights than one token does
// (figures/lookup_ceiling_intel.md, figures/kernel_baseline_transposed.md). Here W is stored once
// as (N / 64, K, 64): each block of 64 outputs is one contiguous slab, read in order. The outputs
// are cut into vectors of 16 floats, split evenly among the threads (SmolLM2's 576 outputs are
// 9 slabs: whole slabs would give one thread 5 and the other 4). A pass takes a slab's 4 vectors
// (Q = 4; fewer where a thread's share starts or ends inside it) and R <= 6 rows at once: their
// R x Q partial sums stay in 24 of AVX-512's 32 vector registers while the slab streams in,
// prefetched 32 rows ahead, so loads stay in flight while the multiply-adds run. More rows (a
// longer draft, a prompt) take the slab again from the cache, 6 rows a pass: each weight is read
// from memory once, and a prompt's multiply-adds run near the CPU's peak. Each output is summed
// over k in order, the same for any number of rows: the product is batch-invariant (row i of a
// call equals that row alone, bit for bit).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>

constexpr int64_t B = 64;      // outputs per slab: 4 vectors of 16 floats
constexpr int64_t AHEAD = 32;  // prefetch distance, in rows of a slab (32 x 256 bytes)
typedef float v16 __attribute__((vector_size(64), aligned(4)));  // 16 floats, any address

template <int R, int Q>  // R rows times Q vectors of one slab's outputs, from `slab` on
static void block(const float* x, int64_t K, const float* slab, float* y, int64_t N) {
  v16 acc[R][Q];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) acc[r][q] = v16{};
  for (int64_t k = 0; k < K; ++k) {
    const float* row = slab + k * B;
    v16 w[Q];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      __builtin_prefetch(row + AHEAD * B + 16 * q);
      w[q] = *reinterpret_cast<const v16*>(row + 16 * q);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const float xr = x[r * K + k];
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) acc[r][q] += xr * w[q];
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) *reinterpret_cast<v16*>(y + r * N + 16 * q) = acc[r][q];
}

template <int Q, int R = 1>  // block<r, Q>, r (at most 6) known only at run time
static void rows(int r, const float* x, int64_t K, const float* slab, float* y, int64_t N) {
  if constexpr (R < 6) {
    if (r > R) return rows<Q, R + 1>(r, x, K, slab, y, N);
  }
  block<R, Q>(x, K, slab, y, N);
}

torch::Tensor pack(torch::Tensor w) {  // W (N, K) -> (N / 64, K, 64)
  const int64_t N = w.size(0), K = w.size(1);
  TORCH_CHECK(w.dtype() == torch::kFloat32 && N % B == 0, "W must be float32, N a multiple of 64");
  return w.contiguous().view({N / B, B, K}).transpose(1, 2).contiguous();
}

torch::Tensor product(torch::Tensor x, torch::Tensor packed) {  // x (M, K) -> x W^T (M, N)
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0) * B;
  TORCH_CHECK(x.dtype() == torch::kFloat32 && packed.size(1) == K, "x must be float32 (M, K)");
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N / 16, 1, [&](int64_t first, int64_t end) {  // vectors of 16 outputs
    for (int64_t v = first; v < end;) {
      const int64_t q = v % 4;  // vector v is the q-th of slab v / 4
      int64_t n = std::min({int64_t{4}, end - v, 4 - q});
      n = n == 3 ? 2 : n;  // where a thread's share starts or ends inside a slab
      const float* slab = wp + (v / 4) * K * B + 16 * q;
      for (int64_t m = 0; m < M; m += 6) {  // 6 rows a pass, the slab from the cache again
        const int r = std::min<int64_t>(6, M - m);
        const float* xm = xp + m * K;
        float* ym = yp + m * N + 16 * v;
        if (n == 4) rows<4>(r, xm, K, slab, ym, N);
        else if (n == 2) rows<2>(r, xm, K, slab, ym, N);
        else rows<1>(r, xm, K, slab, ym, N);
      }
      v += n;
    }
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "W (N, K) -> (N / 64, K, 64)");
  m.def("product", &product, "x (M, K) -> x W^T (M, N)");
}
