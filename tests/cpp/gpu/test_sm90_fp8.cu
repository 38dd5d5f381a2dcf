// The fp8 (e4m3) pieces of the sm90 layer on the device, one at a time, so that a layout mismatch
// shows in the piece that has it: float -> e4m3 conversion, the m64nNk32 e4m3 wgmma with both
// operands K-major in shared memory (128- and 64-byte swizzles, as the TMA lands them), with A from
// registers in the documented fragment layout, the V transpose into the K-major B operand (raw
// bytes, keys past the valid count zeroed), and the whole P V path of the fp8 forward (accumulators
// packed to A fragments times the transposed V). Skips without an sm90 GPU.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "arch/sm90/fp8.cuh"
#include "arch/sm90/mbarrier.cuh"
#include "arch/sm90/tensor_map.h"
#include "arch/sm90/tma.cuh"
#include "arch/sm90/transpose_fp8.cuh"
#include "arch/sm90/wgmma.cuh"
#include "arch/sm90/wgmma_fp8_ops.cuh"
#include "common/numeric.h"
#include "gpu_test_util.h"

namespace flashattn::gpu_test {
namespace {

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90A_DEVICE 1
#endif

// Random e4m3 bytes: normal values times `scale`, rounded (never NaN).
std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = numeric::float_to_e4m3(dist(rng) * scale);
  return v;
}

double e4m3(uint8_t b) { return double(numeric::e4m3_to_float(b)); }

// A 2-D fp8 tensor (rows x cols bytes, row-major) with a (swizzle bytes) x box_rows box.
CUtensorMap map_fp8(const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows, int swizzle) {
  sm90::TensorMapShape shape;
  shape.rank = 2;
  shape.sizes[0] = cols;
  shape.sizes[1] = rows;
  shape.strides_bytes[0] = cols;
  shape.box[0] = uint32_t(swizzle);
  shape.box[1] = box_rows;
  CUtensorMap map;
  const Status st = sm90::encode_tensor_map(&map, base, DType::F8E4M3, shape, swizzle);
  if (!st.ok()) throw CudaCallError(st.message());
  return map;
}

[[maybe_unused]] __device__ unsigned char* aligned_smem(unsigned char* raw) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
}

// Thread 0 loads column blocks of kSwizzle bytes of `rows` rows from each map into its tile
// ([cols / kSwizzle][rows][kSwizzle]) on one barrier; everybody waits.
template <int kSwizzle>
__device__ void load_fp8_tiles(const CUtensorMap* map0, unsigned char* tile0, int rows0, int cols0, const CUtensorMap* map1,
                               unsigned char* tile1, int rows1, int cols1, uint64_t* bar) {
#if defined(FA_SM90A_DEVICE)
  if (threadIdx.x == 0) {
    sm90::mbarrier_init(bar, 1);
    sm90::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier_arrive_expect_tx(bar, uint32_t(rows0 * cols0 + (map1 != nullptr ? rows1 * cols1 : 0)));
    for (int c = 0; c < cols0 / kSwizzle; ++c) sm90::tma_load_2d(tile0 + c * rows0 * kSwizzle, map0, c * kSwizzle, 0, bar);
    if (map1 != nullptr)
      for (int c = 0; c < cols1 / kSwizzle; ++c) sm90::tma_load_2d(tile1 + c * rows1 * kSwizzle, map1, c * kSwizzle, 0, bar);
  }
  sm90::mbarrier_wait(bar, 0);
#endif
}

// Accumulator d[4i + e] of warp w, lane l: row 16w + l/4 + 8(e/2), column 8i + 2(l%4) + e%2.
template <int kN>
__device__ void store_accumulators(const float (&d)[kN / 2], float* c) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[(16 * warp + lane / 4 + 8 * (e / 2)) * kN + 8 * i + 2 * (lane % 4) + e % 2] = d[4 * i + e];
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& magnitude,
                  const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    // Exact products (e4m3 x e4m3 fits in float), but Hopper's fp8 wgmma does not accumulate in
    // full float: it keeps about 13-14 mantissa bits per k32 step (measured here: up to 1.1e-4 of
    // the sum of |products| over 128 keys; DeepSeek-V3's report says ~14 bits). 2^-10 of that sum
    // allows it with room and still fails any layout mistake, which moves whole products.
    const double allowed = 0x1p-10 * magnitude[i] + 1e-30;
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), allowed) << what << ": element " << i << " = " << got[i] << ", want " << want[i];
  }
}

// ---- float -> e4m3 ---------------------------------------------------------------------------
__global__ void cvt_kernel(const float* x, uint32_t* out, int words) {
#if defined(FA_SM90A_DEVICE)
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    out[i] = sm90::pack_e4m3x4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
#endif
}

TEST(Sm90Fp8, ConversionRoundsAsTheHost) {
  SKIP_WITHOUT_SM90();
  // Every e4m3 value, the midpoints between neighbours (ties to even), values past 448, tiny ones,
  // infinities and NaN, and random ones over the whole range.
  std::vector<float> x;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = numeric::e4m3_to_float(uint8_t(b));
    x.push_back(v);
    if ((b & 0x7f) < 0x7e) x.push_back(0.5f * (v + numeric::e4m3_to_float(uint8_t(b + 1))));
  }
  for (float v : {448.f, 463.9f, 464.f, 500.f, 1e9f, 1e-3f, 1e-4f, 0x1p-10f, 0x1p-11f, INFINITY, -INFINITY, NAN, -0.f, 256.f})
    x.push_back(v);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> exponent(-14.f, 10.f);
  while (x.size() % 4 != 0 || x.size() < 4096) x.push_back((rng() & 1 ? -1.f : 1.f) * std::exp2(exponent(rng)));
  const int words = int(x.size() / 4);
  DeviceArray<float> dx(x);
  DeviceArray<uint32_t> out{size_t(words)};
  out.poison();
  cvt_kernel<<<8, 128>>>(dx.get(), out.get(), words);
  CUDA_CHECK_LAUNCH();
  const std::vector<uint32_t> got = out.download();
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t byte = uint8_t(got[i / 4] >> (8 * (i % 4))), want = numeric::float_to_e4m3(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_EQ(byte & 0x7f, 0x7f) << "NaN must stay NaN, got " << int(byte);
    } else {
      ASSERT_EQ(int(byte), int(want)) << "x = " << x[i] << " (element " << i << ", byte " << i % 4 << " of its word)";
    }
  }
}

// ---- wgmma e4m3: C (64 x kN) = A (64 x 128) B (kN x 128)^T, both K-major in shared memory ----
template <int kN, int kSwizzle>
__global__ void wgmma_e4m3_ss_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, float* c) {
#if defined(FA_SM90A_DEVICE)
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bar;
  unsigned char* a = aligned_smem(smem_raw);
  unsigned char* b = a + 64 * 128;
  load_fp8_tiles<kSwizzle>(&map_a, a, 64, 128, &map_b, b, kN, 128, &bar);
  float d[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) d[i] = __int_as_float(0x7fc00000);  // NaN: the first step must overwrite
  sm90::wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // k32 step j: column block 32 j / kSwizzle, 32 j % kSwizzle bytes in
    const uint32_t a_step = sm90::smem_u32(a) + (32 * j / kSwizzle) * 64 * kSwizzle + (32 * j) % kSwizzle;
    const uint32_t b_step = sm90::smem_u32(b) + (32 * j / kSwizzle) * kN * kSwizzle + (32 * j) % kSwizzle;
    if (j == 0)
      sm90::WgmmaE4m3<kN>::ss_first(d, sm90::kmajor_descriptor_sw<kSwizzle>(a_step), sm90::kmajor_descriptor_sw<kSwizzle>(b_step));
    else
      sm90::WgmmaE4m3<kN>::ss(d, sm90::kmajor_descriptor_sw<kSwizzle>(a_step), sm90::kmajor_descriptor_sw<kSwizzle>(b_step), 1);
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_accumulators(d);
  store_accumulators<kN>(d, c);
#endif
}

template <int kN, int kSwizzle>
void check_wgmma_ss(uint64_t seed) {
  const auto a = random_e4m3(64 * 128, seed), b = random_e4m3(size_t(kN) * 128, seed + 1);
  DeviceArray<uint8_t> da(a), db(b);
  DeviceArray<float> dc(size_t(64) * kN);
  dc.poison();
  const int smem = 64 * 128 + kN * 128 + 1024;
  CUDA_CHECK(cudaFuncSetAttribute(wgmma_e4m3_ss_kernel<kN, kSwizzle>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  wgmma_e4m3_ss_kernel<kN, kSwizzle>
      <<<1, 128, smem>>>(map_fp8(da.get(), 64, 128, 64, kSwizzle), map_fp8(db.get(), kN, 128, kN, kSwizzle), dc.get());
  CUDA_CHECK_LAUNCH();
  std::vector<double> want(size_t(64) * kN, 0.0), magnitude(want.size(), 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 128; ++k) {
        const double x = e4m3(a[size_t(m) * 128 + k]) * e4m3(b[size_t(n) * 128 + k]);
        want[size_t(m) * kN + n] += x;
        magnitude[size_t(m) * kN + n] += std::fabs(x);
      }
  expect_close(dc.download(), want, magnitude, "N " + std::to_string(kN) + ", swizzle " + std::to_string(kSwizzle));
}

TEST(Sm90Fp8, WgmmaSharedOperands128ByteSwizzle) {
  SKIP_WITHOUT_SM90();
  check_wgmma_ss<64, 128>(11);
  check_wgmma_ss<224, 128>(12);
}

TEST(Sm90Fp8, WgmmaSharedOperands64ByteSwizzle) {
  SKIP_WITHOUT_SM90();
  check_wgmma_ss<64, 64>(13);
  check_wgmma_ss<160, 64>(14);
}

// ---- wgmma e4m3 with A from registers: C (64 x 64) = A (64 x 128) B (64 x 128)^T ---------------
// The k32 A fragment (as mma.m16n8k32's 8-bit A): register r of lane l in warp w holds row
// 16w + l/4 + 8 (r % 2), K positions 16 (r / 2) + 4 (l % 4) + byte.
__global__ void wgmma_e4m3_rs_kernel(const uint8_t* a, const __grid_constant__ CUtensorMap map_b, float* c) {
#if defined(FA_SM90A_DEVICE)
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bar;
  unsigned char* b = aligned_smem(smem_raw);
  load_fp8_tiles<128>(&map_b, b, 64, 128, nullptr, nullptr, 0, 0, &bar);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  uint32_t frag[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * warp + lane / 4 + 8 * (r % 2), k = 32 * j + 16 * (r / 2) + 4 * (lane % 4);
      frag[j][r] = *reinterpret_cast<const uint32_t*>(a + row * 128 + k);
    }
  sm90::wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j) sm90::WgmmaE4m3<64>::rs(d, frag[j], sm90::kmajor_descriptor_sw<128>(sm90::smem_u32(b) + 32 * j), j > 0);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_accumulators(d);
  store_accumulators<64>(d, c);
#endif
}

TEST(Sm90Fp8, WgmmaRegisterAMatchesTheHost) {
  SKIP_WITHOUT_SM90();
  const auto a = random_e4m3(64 * 128, 21), b = random_e4m3(64 * 128, 22);
  DeviceArray<uint8_t> da(a), db(b);
  DeviceArray<float> dc(64 * 64);
  dc.poison();
  const int smem = 64 * 128 + 1024;
  wgmma_e4m3_rs_kernel<<<1, 128, smem>>>(da.get(), map_fp8(db.get(), 64, 128, 64, 128), dc.get());
  CUDA_CHECK_LAUNCH();
  std::vector<double> want(64 * 64, 0.0), magnitude(want.size(), 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n)
      for (int k = 0; k < 128; ++k) {
        const double x = e4m3(a[size_t(m) * 128 + k]) * e4m3(b[size_t(n) * 128 + k]);
        want[size_t(m) * 64 + n] += x;
        magnitude[size_t(m) * 64 + n] += std::fabs(x);
      }
  expect_close(dc.download(), want, magnitude, "register A");
}

// ---- V (kKeys x kCols, TMA-landed) -> K-major Vt, and O = P V through it ------------------------
// One warpgroup: kWorkers of its warps transpose (the forward runs three), then P (float, laid
// out as wgmma accumulators) is packed to e4m3 A fragments and multiplied by Vt. `dump`
// (optional) receives Vt's raw bytes.
template <int kKeys, int kCols, int kSwizzle, int kInFlight, int kWorkers>
__global__ void pv_kernel(const __grid_constant__ CUtensorMap map_v, const float* p, int valid_keys, float* out, uint8_t* dump) {
#if defined(FA_SM90A_DEVICE)
  extern __shared__ unsigned char smem_raw[];
  __shared__ uint64_t bar;
  unsigned char* v = aligned_smem(smem_raw);
  unsigned char* vt = v + kKeys * kCols;
  constexpr int kVtBytes = sm90::kTransposedBytes<kKeys, kCols>;
  for (int i = threadIdx.x; i < kVtBytes; i += blockDim.x) vt[i] = 0xA5;  // bytes the transpose must not need
  load_fp8_tiles<kSwizzle>(&map_v, v, kKeys, kCols, nullptr, nullptr, 0, 0, &bar);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < kWorkers)
    sm90::transpose_e4m3_to_kmajor<kKeys, kCols, kSwizzle, kWorkers, kInFlight>(sm90::smem_u32(v), sm90::smem_u32(vt), valid_keys, warp,
                                                                                 lane);
  sm90::fence_async_shared();
  __syncthreads();
  if (dump != nullptr)
    for (int i = threadIdx.x; i < kVtBytes; i += blockDim.x) dump[i] = vt[i];
  float s[kKeys / 2];
#pragma unroll
  for (int i = 0; i < kKeys / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[4 * i + e] = p[(16 * warp + lane / 4 + 8 * (e / 2)) * kKeys + 8 * i + 2 * (lane % 4) + e % 2];
  uint32_t frag[kKeys / 32][4];
  sm90::pack_fragments_e4m3(frag, s);
  float o[kCols / 2];
#pragma unroll
  for (int i = 0; i < kCols / 2; ++i) o[i] = 0.f;
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
    sm90::WgmmaE4m3<kCols>::rs(o, frag[kk], sm90::kmajor_descriptor_sw<128>(sm90::smem_u32(vt) + (kk / 4) * kCols * 128 + (kk % 4) * 32),
                               1);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_accumulators(o);
  store_accumulators<kCols>(o, out);
#endif
}

// The byte of Vt that holds (row n, key), as the header of transpose_fp8.cuh defines it, computed
// here independently: key position c within its 16-key group stands for key kmajor_p_column(c).
int vt_offset(int n, int key, int cols) {
  int position = -1;
  for (int c = 0; c < 16; ++c)
    if (sm90::kmajor_p_column(c) == key % 16) position = key / 16 * 16 + c;
  const int block = position / 128, in_row = position % 128;
  return block * cols * 128 + n * 128 + (((in_row / 16) ^ (n % 8)) * 16) + in_row % 16;
}

template <int kKeys, int kCols, int kSwizzle, int kInFlight = 1, int kWorkers = 4>
void check_pv(int valid_keys, uint64_t seed) {
  SCOPED_TRACE("keys " + std::to_string(kKeys) + " (valid " + std::to_string(valid_keys) + "), columns " + std::to_string(kCols) +
               ", source swizzle " + std::to_string(kSwizzle) + ", in flight " + std::to_string(kInFlight) + ", workers " +
               std::to_string(kWorkers));
  std::vector<uint8_t> v = random_e4m3(size_t(kKeys) * kCols, seed);
  for (int k = valid_keys; k < kKeys; ++k)
    for (int n = 0; n < kCols; ++n) v[size_t(k) * kCols + n] = 0x7f;  // NaN: must be zeroed
  // P: unnormalised weights in [0, 256] as the forward makes them (P shifted by 2^8).
  std::mt19937_64 rng(seed + 7);
  std::uniform_real_distribution<float> logit(-12.f, 8.f);
  std::vector<float> p(size_t(64) * kKeys);
  for (auto& x : p) x = std::exp2(logit(rng));
  DeviceArray<uint8_t> dv(v), dump(size_t(sm90::kTransposedBytes<kKeys, kCols>));
  DeviceArray<float> dp(p), dout(size_t(64) * kCols);
  dout.poison();
  const int smem = kKeys * kCols + sm90::kTransposedBytes<kKeys, kCols> + 1024;
  auto kernel = pv_kernel<kKeys, kCols, kSwizzle, kInFlight, kWorkers>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(map_fp8(dv.get(), kKeys, kCols, kKeys, kSwizzle), dp.get(), valid_keys, dout.get(), dump.get());
  CUDA_CHECK_LAUNCH();
  // The transpose alone first: every valid key's byte where the layout puts it, zeros past them.
  const std::vector<uint8_t> vt = dump.download();
  for (int n = 0; n < kCols; ++n)
    for (int key = 0; key < kKeys; ++key) {
      const uint8_t want = key < valid_keys ? v[size_t(key) * kCols + n] : 0;
      ASSERT_EQ(int(vt[size_t(vt_offset(n, key, kCols))]), int(want)) << "Vt row " << n << ", key " << key;
    }
  // Then O = e4m3(P) V over the valid keys.
  std::vector<double> want(size_t(64) * kCols, 0.0), magnitude(want.size(), 0.0);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < valid_keys; ++k) {
      const double pk = e4m3(numeric::float_to_e4m3(p[size_t(m) * kKeys + k]));
      for (int n = 0; n < kCols; ++n) {
        const double x = pk * e4m3(v[size_t(k) * kCols + n]);
        want[size_t(m) * kCols + n] += x;
        magnitude[size_t(m) * kCols + n] += std::fabs(x);
      }
    }
  expect_close(dout.download(), want, magnitude, "O = P V");
}

// The fp8 forward's shapes: d64 (64-byte source rows) with 128 and 160 keys, d128 with 128 and 224,
// d256 (two source column blocks) with 96 and 128.
TEST(Sm90Fp8, TransposedVTimesPackedP) {
  SKIP_WITHOUT_SM90();
  check_pv<128, 64, 64>(128, 31);
  check_pv<160, 64, 64>(160, 32);
  check_pv<128, 128, 128>(128, 33);
  check_pv<224, 128, 128>(224, 34);
  check_pv<96, 256, 128>(96, 35);
  check_pv<128, 256, 128>(128, 36);
  check_pv<128, 64, 64, 2>(128, 37);  // two units in flight, as the forward runs it
  check_pv<224, 128, 128, 2>(224, 38);
  check_pv<160, 64, 64, 2>(160, 39);
  check_pv<128, 256, 128, 2>(128, 40);
  // Three workers, as the forward's transposing warps (key groups shared unevenly).
  check_pv<128, 64, 64, 2, 3>(128, 47);
  check_pv<160, 64, 64, 2, 3>(160, 48);
  check_pv<224, 128, 128, 2, 3>(224, 49);
  check_pv<128, 128, 128, 2, 3>(128, 50);
  check_pv<128, 256, 128, 1, 3>(128, 51);
  check_pv<64, 256, 128, 1, 3>(64, 52);
}

// A ragged last tile: keys past the valid count (NaN in V) come out as zeros.
TEST(Sm90Fp8, TransposeZeroesKeysPastTheValidCount) {
  SKIP_WITHOUT_SM90();
  check_pv<160, 64, 64>(77, 41);
  check_pv<224, 128, 128>(129, 42);
  check_pv<128, 256, 128>(1, 43);
  check_pv<128, 128, 128>(0, 44);
  check_pv<160, 64, 64, 2>(77, 45);
  check_pv<128, 128, 128, 2>(100, 46);
  check_pv<224, 128, 128, 2, 3>(200, 53);
  check_pv<128, 256, 128, 1, 3>(127, 54);
}

}  // namespace
}  // namespace flashattn::gpu_test
