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
//
// "compact" reads the same weights from fewer bytes where they allow it exactly. SmolLM2's came
// from 4-bit codes c with a scale d and a minimum m per block of 32 inputs (w = d c + m,
// llama.cpp's Q4_1) and, for the embedding, 8-bit codes with a scale (w = d c, Q8_0). With 4 bits d
// is an fp16 value and c below 16, so d c is exact in float32, and one rounding, fused or not,
// gives the very float the file's dequantizer gives; with 8 bits there is no m, and d c is that one
// rounding. So a slab streams 0.75 or 1.125 bytes a weight (d and m as float32) instead of 4, each
// weight is rebuilt in registers (for a prompt's 19 rows or more, once into a float32 copy of the
// slab that the passes share), and the sums run as above, in the same order: the same bits out as
// the float32 slabs (row_kernel.py's `compact` checks every weight before it uses the codes).
// torch/types.h (tensors) and pybind.h (their Python bindings) rather than torch/extension.h,
// which adds torch's whole C++ frontend: the first build took 16-19 s instead of 28-29 here.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <type_traits>
#include <vector>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

constexpr int64_t B = 64;      // outputs per slab: 4 vectors of 16 floats
constexpr int64_t G = 32;      // inputs per block of codes sharing a scale (and a minimum)
constexpr int64_t AHEAD = 32;  // prefetch distance, in rows of a slab
typedef float v16 __attribute__((vector_size(64), aligned(4)));  // 16 floats, any address
typedef int32_t i32x16 __attribute__((vector_size(64)));         // 16 int32

template <bool SIGNED>  // 16 bytes from any address, each widened to 32 bits
static i32x16 widen(const void* p) {
#ifdef __AVX512F__  // GCC 12 widens a byte vector byte by byte: say the instruction outright
  const __m128i b = _mm_loadu_si128(static_cast<const __m128i*>(p));
  return reinterpret_cast<i32x16>(SIGNED ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
#else
  typedef uint8_t u8x16 __attribute__((vector_size(16)));
  typedef int8_t s8x16 __attribute__((vector_size(16)));
  if constexpr (SIGNED) {
    s8x16 v;
    __builtin_memcpy(&v, p, 16);
    return __builtin_convertvector(v, i32x16);
  }
  u8x16 v;
  __builtin_memcpy(&v, p, 16);
  return __builtin_convertvector(v, i32x16);
#endif
}

struct Dense {  // float32 slabs (N / 64, K, 64)
  const float* w;
  v16 at(int64_t k, int i) const { return *reinterpret_cast<const v16*>(w + k * B + 16 * i); }
  const void* ahead(int64_t k, int i) const { return w + (k + AHEAD) * B + 16 * i; }
};

struct Four {  // a slab's 4-bit codes at input k: 32 bytes, vectors 0 | 1 << 4, then 2 | 3 << 4
  const uint8_t* c;  // (N / 64, K, 32)
  const float* d;    // (N / 64, K / 32, 64), as m
  const float* m;
  v16 at(int64_t k, int i) const {
    i32x16 q = widen<false>(c + k * 32 + i / 2 * 16);
    q = (q >> (4 * (i % 2))) & 15;
    const int64_t s = k / G * B + 16 * i;
    return __builtin_convertvector(q, v16) * *reinterpret_cast<const v16*>(d + s)
           + *reinterpret_cast<const v16*>(m + s);  // d c exact: one rounding, fused or not
  }
  const void* ahead(int64_t k, int) const { return c + (k + AHEAD) * 32; }
};

struct Eight {  // a slab's 8-bit codes at input k: 64 signed bytes
  const int8_t* c;  // (N / 64, K, 64)
  const float* d;   // (N / 64, K / 32, 64)
  v16 at(int64_t k, int i) const {
    const i32x16 q = widen<true>(c + k * B + 16 * i);
    return __builtin_convertvector(q, v16) * *reinterpret_cast<const v16*>(d + k / G * B + 16 * i);
  }
  const void* ahead(int64_t k, int) const { return c + (k + AHEAD) * B; }
};

template <int R, int Q, class W>  // R rows times Q vectors (from vector i0) of one slab's outputs
static void block(const float* x, int64_t K, W slab, int i0, float* y, int64_t N) {
  v16 acc[R][Q];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) acc[r][q] = v16{};
  const int first = Q == 4 ? 0 : i0;  // a whole slab: the compiler knows which bytes are whose
  for (int64_t k = 0; k < K; ++k) {
    v16 w[Q];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      __builtin_prefetch(slab.ahead(k, first + q));
      w[q] = slab.at(k, first + q);
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

template <int Q, class W, int R = 1>  // block<r, Q>, r (at most 6) known only at run time
static void rows(int r, const float* x, int64_t K, W slab, int i0, float* y, int64_t N) {
  if constexpr (R < 6) {
    if (r > R) return rows<Q, W, R + 1>(r, x, K, slab, i0, y, N);
  }
  block<R, Q>(x, K, slab, i0, y, N);
}

template <class Slab>  // x (M, K) -> x W^T (M, N), slab(s) the weights of outputs 64 s .. 64 s + 63
static torch::Tensor run(torch::Tensor x, int64_t N, Slab slab) {
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(x.dtype() == torch::kFloat32, "x must be float32 (M, K)");
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N / 16, 1, [&](int64_t first, int64_t end) {  // vectors of 16 outputs
    for (int64_t v = first; v < end;) {
      const int i0 = v % 4;  // vector v is the i0-th of slab v / 4
      int64_t n = std::min({int64_t{4}, end - v, int64_t{4 - i0}});
      n = n == 3 ? 2 : n;  // where a thread's share starts or ends inside a slab
      auto passes = [&](auto w) {
        for (int64_t m = 0; m < M; m += 6) {  // 6 rows a pass, the slab from the cache again
          const int r = std::min<int64_t>(6, M - m);
          const float* xm = xp + m * K;
          float* ym = yp + m * N + 16 * v;
          if (n == 4) rows<4>(r, xm, K, w, i0, ym, N);
          else if (n == 2) rows<2>(r, xm, K, w, i0, ym, N);
          else rows<1>(r, xm, K, w, i0, ym, N);
        }
      };
      const auto w = slab(v / 4);
      if constexpr (std::is_same_v<decltype(w), const Dense>) {
        passes(w);
      } else if (M <= 18) {  // up to 3 passes: each rebuilds the weights again, in registers
        passes(w);
      } else {  // a prompt: rebuild this share once, as float32 (by hand: slower at 12 rows, faster
                // at 24; SmolLM2's products for 96 rows: 106 ms against 148)
        thread_local std::vector<float> rebuilt;
        rebuilt.resize(K * B);
        for (int64_t k = 0; k < K; ++k)
          for (int i = i0; i < i0 + n; ++i)
            *reinterpret_cast<v16*>(rebuilt.data() + k * B + 16 * i) = w.at(k, i);
        passes(Dense{rebuilt.data()});
      }
      v += n;
    }
  });
  return y;
}

torch::Tensor pack(torch::Tensor w) {  // W (N, K) -> (N / 64, K, 64)
  const int64_t N = w.size(0), K = w.size(1);
  TORCH_CHECK(w.dtype() == torch::kFloat32 && N % B == 0, "W must be float32, N a multiple of 64");
  return w.contiguous().view({N / B, B, K}).transpose(1, 2).contiguous();
}

torch::Tensor product(torch::Tensor x, torch::Tensor packed) {  // from pack's slabs
  const int64_t K = packed.size(1);
  TORCH_CHECK(x.size(1) == K, "x must be (M, K)");
  const float* p = packed.data_ptr<float>();
  return run(x, packed.size(0) * B, [=](int64_t s) { return Dense{p + s * K * B}; });
}

// codes, d and m as row_kernel.py's `compact` lays them out (m empty: 8-bit codes, w = d c)
torch::Tensor product_codes(torch::Tensor x, torch::Tensor codes, torch::Tensor d,
                            torch::Tensor m) {
  const int64_t K = codes.size(1), S = codes.size(0);
  TORCH_CHECK(x.size(1) == K && K % G == 0 && d.dtype() == torch::kFloat32, "x must be (M, K)");
  const float* dp = d.data_ptr<float>();
  if (m.numel() == 0) {
    const int8_t* c = codes.data_ptr<int8_t>();
    return run(x, S * B, [=](int64_t s) { return Eight{c + s * K * B, dp + s * K * 2}; });
  }
  const uint8_t* c = codes.data_ptr<uint8_t>();
  const float* mp = m.data_ptr<float>();
  return run(x, S * B, [=](int64_t s) {
    return Four{c + s * K * 32, dp + s * K * 2, mp + s * K * 2};
  });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "W (N, K) -> (N / 64, K, 64)");
  m.def("product", &product, "x (M, K) -> x W^T (M, N)");
  m.def("product_codes", &product_codes, "x (M, K) -> x W^T (M, N), W from its codes");
}
