// The shared host/device code of src/common evaluated on the GPU and compared bit for bit with
// the same functions on the host: numeric conversions, Philox dropout, mask predicates and row
// addressing. The CPU backend is the oracle of every GPU kernel; these tests make sure the pieces
// both sides share really do compute the same bits on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/mask.h"
#include "common/numeric.h"
#include "common/philox.h"
#include "common/rows.h"
#include "gpu/gpu_test_util.h"

namespace flashattn {
namespace {

using gpu_test::DeviceArray;
using gpu_test::grid_for;

// Compares two result arrays element by element; on mismatch names the first few indices, with
// `describe(i)` saying which input produced them.
template <typename T, typename Describe>
::testing::AssertionResult same_results(const char* what, const std::vector<T>& host,
                                        const std::vector<T>& device, Describe describe) {
  if (host.size() != device.size())
    return ::testing::AssertionFailure() << what << ": sizes differ";
  size_t mismatches = 0;
  std::ostringstream report;
  for (size_t i = 0; i < host.size(); ++i) {
    if (host[i] == device[i]) continue;
    if (++mismatches <= 8) report << "\n  [" << i << "] " << describe(i, host[i], device[i]);
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << mismatches << " of " << host.size()
                                       << " results differ between host and device" << report.str();
}

std::string hex(uint64_t x) {
  std::ostringstream s;
  s << "0x" << std::hex << x;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Numeric conversions
// ---------------------------------------------------------------------------------------------

// Decoding every 16-bit pattern as fp16 and as bf16, and every 8-bit pattern as e4m3.
__global__ void decode_patterns_kernel(uint32_t* fp16_bits, uint32_t* bf16_bits, uint32_t* e4m3_bits) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < 65536u; i += gridDim.x * blockDim.x) {
    fp16_bits[i] = numeric::float_bits(numeric::fp16_to_float(uint16_t(i)));
    bf16_bits[i] = numeric::float_bits(numeric::bf16_to_float(uint16_t(i)));
    if (i < 256u) e4m3_bits[i] = numeric::float_bits(numeric::e4m3_to_float(uint8_t(i)));
  }
}

TEST(CommonDevice, DecodesEveryFp16Bf16AndE4m3PatternLikeTheHost) {
  SKIP_WITHOUT_CUDA_DEVICE();
  DeviceArray<uint32_t> fp16(65536), bf16(65536), e4m3(256);
  fp16.poison();
  bf16.poison();
  e4m3.poison();
  decode_patterns_kernel<<<grid_for(65536), 256>>>(fp16.get(), bf16.get(), e4m3.get());
  CUDA_CHECK_LAUNCH();

  std::vector<uint32_t> host_fp16(65536), host_bf16(65536), host_e4m3(256);
  for (uint32_t i = 0; i < 65536u; ++i) {
    host_fp16[i] = numeric::float_bits(numeric::fp16_to_float(uint16_t(i)));
    host_bf16[i] = numeric::float_bits(numeric::bf16_to_float(uint16_t(i)));
    if (i < 256u) host_e4m3[i] = numeric::float_bits(numeric::e4m3_to_float(uint8_t(i)));
  }
  auto describe = [](size_t i, uint32_t h, uint32_t d) {
    return "pattern " + hex(i) + ": host " + hex(h) + ", device " + hex(d);
  };
  EXPECT_TRUE(same_results("fp16_to_float", host_fp16, fp16.download(), describe));
  EXPECT_TRUE(same_results("bf16_to_float", host_bf16, bf16.download(), describe));
  EXPECT_TRUE(same_results("e4m3_to_float", host_e4m3, e4m3.download(), describe));
}

__global__ void encode_floats_kernel(const uint32_t* inputs, size_t n, uint16_t* fp16, uint16_t* bf16,
                                     uint8_t* e4m3) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = numeric::bits_float(inputs[i]);
    fp16[i] = numeric::float_to_fp16(x);
    bf16[i] = numeric::float_to_bf16(x);
    e4m3[i] = numeric::float_to_e4m3(x);
  }
}

// Float bit patterns that exercise every rounding decision: each of the 65536 upper halves
// (every sign, exponent, and the bf16 and e4m3 mantissas) combined with lower halves that sit
// exactly on, just below and just above the fp16 and bf16 rounding midpoints, with both parities
// of the last kept bit, plus a random lower half. Covers zeros, subnormals of every format,
// overflow to inf/saturation, infinities and NaNs.
std::vector<uint32_t> conversion_inputs() {
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000, 0x3000, 0x3001,
                           0x5000, 0x7fff, 0x8000, 0x8001, 0x9000, 0xb000, 0xe000, 0xffff};
  std::mt19937 rng(1234);
  std::vector<uint32_t> inputs;
  inputs.reserve(65536 * 17);
  for (uint32_t hi = 0; hi < 65536u; ++hi) {
    for (uint32_t lo : lows) inputs.push_back(hi << 16 | lo);
    inputs.push_back(hi << 16 | (rng() & 0xffffu));
  }
  return inputs;
}

TEST(CommonDevice, EncodesFloatsToFp16Bf16AndE4m3LikeTheHost) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<uint32_t> inputs = conversion_inputs();
  const size_t n = inputs.size();
  DeviceArray<uint32_t> d_inputs(inputs);
  DeviceArray<uint16_t> fp16(n), bf16(n);
  DeviceArray<uint8_t> e4m3(n);
  fp16.poison();
  bf16.poison();
  e4m3.poison();
  encode_floats_kernel<<<grid_for(n), 256>>>(d_inputs.get(), n, fp16.get(), bf16.get(), e4m3.get());
  CUDA_CHECK_LAUNCH();

  std::vector<uint16_t> host_fp16(n), host_bf16(n);
  std::vector<uint8_t> host_e4m3(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = numeric::bits_float(inputs[i]);
    host_fp16[i] = numeric::float_to_fp16(x);
    host_bf16[i] = numeric::float_to_bf16(x);
    host_e4m3[i] = numeric::float_to_e4m3(x);
  }
  auto describe = [&](size_t i, uint32_t h, uint32_t d) {
    return "input " + hex(inputs[i]) + ": host " + hex(h) + ", device " + hex(d);
  };
  EXPECT_TRUE(same_results("float_to_fp16", host_fp16, fp16.download(), describe));
  EXPECT_TRUE(same_results("float_to_bf16", host_bf16, bf16.download(), describe));
  EXPECT_TRUE(same_results("float_to_e4m3", host_e4m3, e4m3.download(), describe));
}

// ---------------------------------------------------------------------------------------------
// Philox dropout
// ---------------------------------------------------------------------------------------------

struct DropoutInput {
  uint64_t seed, offset;
  int64_t batch, heads, head, row, key;
  float dropout_p;
};

struct DropoutOutput {
  uint32_t x, y, z, w;  // dropout_bits
  uint32_t threshold;   // dropout_threshold(dropout_p)
  uint32_t keep;        // dropout_keep with that threshold
  bool operator==(const DropoutOutput& o) const {
    return x == o.x && y == o.y && z == o.z && w == o.w && threshold == o.threshold && keep == o.keep;
  }
};

__host__ __device__ DropoutOutput evaluate_dropout(const DropoutInput& in) {
  const Philox4 r = dropout_bits(in.seed, in.offset, in.batch, in.heads, in.head, in.row, in.key);
  const uint32_t threshold = dropout_threshold(in.dropout_p);
  const bool keep =
      dropout_keep(in.seed, in.offset, in.batch, in.heads, in.head, in.row, in.key, threshold);
  return DropoutOutput{r.x, r.y, r.z, r.w, threshold, keep ? 1u : 0u};
}

__global__ void dropout_kernel(const DropoutInput* inputs, size_t n, DropoutOutput* outputs) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    outputs[i] = evaluate_dropout(inputs[i]);
}

std::vector<DropoutInput> dropout_inputs() {
  std::mt19937_64 rng(42);
  const uint64_t awkward_offsets[] = {0, 1, 0xffffffffull, 0x100000000ull, 0xfffffffffffffff0ull};
  const float probabilities[] = {0.f, 0.1f, 0.5f, 0.9f, 0.99999994f, 1e-7f};
  std::vector<DropoutInput> inputs;
  // A dense block: every (row, key) of a few heads, as a kernel tile would draw them.
  for (int64_t head = 0; head < 3; ++head)
    for (int64_t row = 0; row < 33; ++row)
      for (int64_t key = 0; key < 67; ++key)
        inputs.push_back({0x0123456789abcdefull, 7, 1, 3, head, row, key, 0.25f});
  // Random tuples over the whole input range, with offsets that carry into the high word.
  for (int i = 0; i < 200000; ++i) {
    DropoutInput in;
    in.seed = rng();
    in.offset = i % 4 == 0 ? awkward_offsets[(i / 4) % 5] : rng();
    in.heads = int64_t(rng() % 128) + 1;
    in.batch = int64_t(rng() % 4096);
    in.head = int64_t(rng() % uint64_t(in.heads));
    in.row = i % 3 == 0 ? int64_t(rng() % 64) : int64_t(rng() % (1ull << 31));
    in.key = i % 5 == 0 ? int64_t(rng() % 64) : int64_t(rng() % (1ull << 31));
    in.dropout_p = i % 2 ? probabilities[(i / 2) % 6] : float(double(rng() >> 11) * 0x1p-53);
    inputs.push_back(in);
  }
  return inputs;
}

TEST(CommonDevice, PhiloxDropoutBitsAndKeepMatchTheHost) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<DropoutInput> inputs = dropout_inputs();
  const size_t n = inputs.size();
  DeviceArray<DropoutInput> d_inputs(inputs);
  DeviceArray<DropoutOutput> d_outputs(n);
  d_outputs.poison();
  dropout_kernel<<<grid_for(n), 256>>>(d_inputs.get(), n, d_outputs.get());
  CUDA_CHECK_LAUNCH();

  std::vector<DropoutOutput> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = evaluate_dropout(inputs[i]);
  const std::vector<DropoutOutput> device = d_outputs.download();
  EXPECT_TRUE(same_results("dropout", host, device, [&](size_t i, const DropoutOutput& h,
                                                        const DropoutOutput& d) {
    const DropoutInput& in = inputs[i];
    std::ostringstream s;
    s << "seed " << hex(in.seed) << " offset " << hex(in.offset) << " b " << in.batch << " heads "
      << in.heads << " h " << in.head << " row " << in.row << " key " << in.key << " p "
      << in.dropout_p << ": host (" << hex(h.x) << "," << hex(h.y) << "," << hex(h.z) << ","
      << hex(h.w) << " t " << hex(h.threshold) << " keep " << h.keep << ") device (" << hex(d.x)
      << "," << hex(d.y) << "," << hex(d.z) << "," << hex(d.w) << " t " << hex(d.threshold)
      << " keep " << d.keep << ")";
    return s.str();
  }));
  // The mask must actually depend on its inputs: a constant generator would pass the above.
  size_t kept = 0, half_inputs = 0;
  for (size_t i = 0; i < n; ++i)
    if (inputs[i].dropout_p == 0.5f) {
      ++half_inputs;
      kept += host[i].keep;
    }
  ASSERT_GT(half_inputs, 1000u);
  EXPECT_NEAR(double(kept) / double(half_inputs), 0.5, 0.05);
}

// ---------------------------------------------------------------------------------------------
// Masks
// ---------------------------------------------------------------------------------------------

struct MaskInput {
  MaskParams mask;
  int64_t seqlen_q, seqlen_k;
  int64_t row, key;                  // for key_visible
  int64_t row_begin, row_end;        // for visible_keys and tile_fully_visible
  int64_t key_begin, key_end;        // for visible_rows and tile_fully_visible
};

struct MaskOutput {
  int64_t keys_begin, keys_end;  // visible_keys
  int64_t rows_begin, rows_end;  // visible_rows
  uint32_t visible;              // key_visible
  uint32_t tile_full;            // tile_fully_visible
  bool operator==(const MaskOutput& o) const {
    return keys_begin == o.keys_begin && keys_end == o.keys_end && rows_begin == o.rows_begin &&
           rows_end == o.rows_end && visible == o.visible && tile_full == o.tile_full;
  }
};

__host__ __device__ MaskOutput evaluate_mask(const MaskInput& in) {
  MaskOutput out{};
  const KeyRange keys = visible_keys(in.mask, in.row_begin, in.row_end, in.seqlen_q, in.seqlen_k);
  const KeyRange rows = visible_rows(in.mask, in.key_begin, in.key_end, in.seqlen_q, in.seqlen_k);
  out.keys_begin = keys.begin;
  out.keys_end = keys.end;
  out.rows_begin = rows.begin;
  out.rows_end = rows.end;
  out.visible = key_visible(in.mask, in.row, in.key, in.seqlen_q, in.seqlen_k) ? 1u : 0u;
  out.tile_full = tile_fully_visible(in.mask, in.row_begin, in.row_end, in.key_begin, in.key_end,
                                     in.seqlen_q, in.seqlen_k)
                      ? 1u
                      : 0u;
  return out;
}

__global__ void mask_kernel(const MaskInput* inputs, size_t n, MaskOutput* outputs) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    outputs[i] = evaluate_mask(inputs[i]);
}

std::vector<MaskInput> mask_inputs() {
  std::vector<MaskInput> inputs;
  // Every (row, key) of small score matrices, sq < sk, sq == sk and sq > sk, every window kind
  // (none, causal, local, left-only, right-only), including positions just outside the matrix.
  const int windows[] = {-1, 0, 1, 3};
  for (int64_t sq = 0; sq <= 8; ++sq)
    for (int64_t sk = 0; sk <= 8; ++sk)
      for (int left : windows)
        for (int right : windows)
          for (int64_t row = -1; row <= sq; ++row)
            for (int64_t key = -1; key <= sk; ++key) {
              MaskInput in{};
              in.mask = MaskParams{left, right};
              in.seqlen_q = sq;
              in.seqlen_k = sk;
              in.row = row;
              in.key = key;
              // Ranges derived from the point: empty, single and multi-element, clipped or not.
              in.row_begin = std::max<int64_t>(row, 0);
              in.row_end = std::min<int64_t>(in.row_begin + (key & 3), sq);
              in.key_begin = std::max<int64_t>(key, 0);
              in.key_end = std::min<int64_t>(in.key_begin + (row & 3), sk);
              inputs.push_back(in);
            }
  // Long sequences and wide windows, where an int32 slip would show.
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
  for (int i = 0; i < 100000; ++i) {
    MaskInput in{};
    in.seqlen_q = pick(1, 3000000);
    in.seqlen_k = i % 4 == 0 ? in.seqlen_q : pick(1, 3000000);
    in.mask.window_left = i % 3 == 0 ? -1 : int(pick(0, 200000));
    in.mask.window_right = i % 5 == 0 ? -1 : int(pick(0, 200000));
    in.row = pick(-2, in.seqlen_q + 1);
    in.key = pick(-2, in.seqlen_k + 1);
    in.row_begin = pick(0, in.seqlen_q);
    in.row_end = std::min(in.seqlen_q, in.row_begin + pick(0, 256));
    in.key_begin = pick(0, in.seqlen_k);
    in.key_end = std::min(in.seqlen_k, in.key_begin + pick(0, 256));
    inputs.push_back(in);
  }
  return inputs;
}

TEST(CommonDevice, MaskPredicatesAndRangesMatchTheHost) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<MaskInput> inputs = mask_inputs();
  const size_t n = inputs.size();
  DeviceArray<MaskInput> d_inputs(inputs);
  DeviceArray<MaskOutput> d_outputs(n);
  d_outputs.poison();
  mask_kernel<<<grid_for(n), 256>>>(d_inputs.get(), n, d_outputs.get());
  CUDA_CHECK_LAUNCH();

  std::vector<MaskOutput> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = evaluate_mask(inputs[i]);
  EXPECT_TRUE(same_results("mask", host, d_outputs.download(), [&](size_t i, const MaskOutput& h,
                                                                   const MaskOutput& d) {
    const MaskInput& in = inputs[i];
    std::ostringstream s;
    s << "window (" << in.mask.window_left << "," << in.mask.window_right << ") sq " << in.seqlen_q
      << " sk " << in.seqlen_k << " row " << in.row << " key " << in.key << " rows [" << in.row_begin
      << "," << in.row_end << ") keys [" << in.key_begin << "," << in.key_end << "): host keys ["
      << h.keys_begin << "," << h.keys_end << ") rows [" << h.rows_begin << "," << h.rows_end
      << ") visible " << h.visible << " full " << h.tile_full << "; device keys [" << d.keys_begin
      << "," << d.keys_end << ") rows [" << d.rows_begin << "," << d.rows_end << ") visible "
      << d.visible << " full " << d.tile_full;
    return s.str();
  }));
}

// ---------------------------------------------------------------------------------------------
// Row addressing
// ---------------------------------------------------------------------------------------------

enum class Layout : int32_t { Dense, BatchIndexed, Varlen, Paged };

struct RowQuery {
  Layout layout;
  int64_t b, row, h;
};

// The same four views, one with host pointers and one with device pointers.
struct Views {
  RowsView dense, batch_indexed, varlen, paged;
  LseView lse_dense, lse_varlen;
};

__host__ __device__ int64_t evaluate_offset(const Views& v, const RowQuery& q, bool lse) {
  switch (q.layout) {
    case Layout::Dense:
      return lse ? v.lse_dense.offset(q.b, q.row, q.h) : v.dense.offset(q.b, q.row, q.h);
    case Layout::BatchIndexed: return v.batch_indexed.offset(q.b, q.row, q.h);
    case Layout::Varlen:
      return lse ? v.lse_varlen.offset(q.b, q.row, q.h) : v.varlen.offset(q.b, q.row, q.h);
    case Layout::Paged: return v.paged.offset(q.b, q.row, q.h);
  }
  return -1;
}

__global__ void offsets_kernel(Views views, const RowQuery* queries, size_t n, int64_t* rows,
                               int64_t* lse) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    rows[i] = evaluate_offset(views, queries[i], false);
    lse[i] = evaluate_offset(views, queries[i], true);
  }
}

TEST(CommonDevice, RowsViewOffsetsMatchTheHostForEveryLayout) {
  SKIP_WITHOUT_CUDA_DEVICE();
  constexpr int64_t kBatch = 6, kHeads = 5, kDim = 72;
  constexpr int64_t kPageSize = 48, kMaxPages = 9, kTableStride = 11;  // padded table rows
  std::mt19937_64 rng(99);

  // Varlen: random sequence lengths (some empty).
  std::vector<int32_t> cu_seqlens{0};
  for (int64_t b = 0; b < kBatch; ++b) cu_seqlens.push_back(cu_seqlens.back() + int32_t(rng() % 300) * (b != 2));
  // Batch-indexed cache: batch entry b lives in cache row batch_index[b] of 2 * kBatch rows.
  std::vector<int32_t> batch_index(2 * kBatch);
  std::iota(batch_index.begin(), batch_index.end(), 0);
  std::shuffle(batch_index.begin(), batch_index.end(), rng);
  batch_index.resize(kBatch);
  // Paged: pages shuffled over a pool larger than needed; unused table slots hold -1.
  std::vector<int32_t> pages(kBatch * kMaxPages + 7);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> block_table(kBatch * kTableStride, -1);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t p = 0; p < kMaxPages; ++p) block_table[b * kTableStride + p] = pages[b * kMaxPages + p];

  DeviceArray<int32_t> d_cu_seqlens(cu_seqlens), d_batch_index(batch_index), d_block_table(block_table);

  auto make_views = [&](const int32_t* cu, const int32_t* bidx, const int32_t* table) {
    Views v;
    // Dense with a batch stride past 2^32 elements, so a 32-bit product would wrap.
    v.dense.batch_stride = (int64_t(1) << 32) + 12345;
    v.dense.row_stride = kHeads * kDim * 3;  // a q slice of a packed qkv tensor
    v.dense.head_stride = kDim;
    v.batch_indexed = v.dense;
    v.batch_indexed.batch_index = bidx;
    v.batch_indexed.extent = 2 * kBatch;  // (the bounds the entries are clamped to: rows.h)
    v.varlen.row_stride = kHeads * kDim;
    v.varlen.head_stride = kDim;
    v.varlen.cu_seqlens = cu;
    v.varlen.extent = cu_seqlens.back();
    v.paged.batch_stride = kPageSize * kHeads * kDim;
    v.paged.row_stride = kHeads * kDim;
    v.paged.head_stride = kDim;
    v.paged.block_table = table;
    v.paged.block_table_stride = kTableStride;
    v.paged.page_size = kPageSize;
    v.paged.extent = int64_t(pages.size());
    v.lse_dense.batch_stride = kHeads * 100000;
    v.lse_dense.head_stride = 100000;
    v.lse_varlen.head_stride = cu_seqlens.back();
    v.lse_varlen.cu_seqlens = cu;
    v.lse_varlen.total = cu_seqlens.back();
    return v;
  };
  const Views host_views = make_views(cu_seqlens.data(), batch_index.data(), block_table.data());
  const Views device_views = make_views(d_cu_seqlens.get(), d_batch_index.get(), d_block_table.get());

  std::vector<RowQuery> queries;
  for (int i = 0; i < 100000; ++i) {
    RowQuery q;
    q.layout = Layout(i % 4);
    q.h = int64_t(rng() % kHeads);
    do q.b = int64_t(rng() % kBatch);
    while (q.layout == Layout::Varlen && cu_seqlens[q.b + 1] == cu_seqlens[q.b]);
    switch (q.layout) {
      case Layout::Varlen: q.row = int64_t(rng() % uint64_t(cu_seqlens[q.b + 1] - cu_seqlens[q.b])); break;
      case Layout::Paged: q.row = int64_t(rng() % (kPageSize * kMaxPages)); break;
      default: q.row = int64_t(rng() % 100000); break;
    }
    queries.push_back(q);
  }
  const size_t n = queries.size();
  DeviceArray<RowQuery> d_queries(queries);
  DeviceArray<int64_t> d_rows(n), d_lse(n);
  d_rows.poison();
  d_lse.poison();
  offsets_kernel<<<grid_for(n), 256>>>(device_views, d_queries.get(), n, d_rows.get(), d_lse.get());
  CUDA_CHECK_LAUNCH();

  std::vector<int64_t> host_rows(n), host_lse(n);
  for (size_t i = 0; i < n; ++i) {
    host_rows[i] = evaluate_offset(host_views, queries[i], false);
    host_lse[i] = evaluate_offset(host_views, queries[i], true);
  }
  auto describe = [&](size_t i, int64_t h, int64_t d) {
    const RowQuery& q = queries[i];
    std::ostringstream s;
    s << "layout " << int(q.layout) << " b " << q.b << " row " << q.row << " h " << q.h << ": host "
      << h << ", device " << d;
    return s.str();
  };
  EXPECT_TRUE(same_results("RowsView::offset", host_rows, d_rows.download(), describe));
  EXPECT_TRUE(same_results("LseView::offset", host_lse, d_lse.download(), describe));

  // The host side itself addresses what the layouts promise (so agreement means correctness).
  for (const RowQuery& q : queries) {
    if (q.layout == Layout::Paged) {
      const int64_t page = block_table[q.b * kTableStride + q.row / kPageSize];
      ASSERT_EQ(host_views.paged.offset(q.b, q.row, q.h),
                ((page * kPageSize) + q.row % kPageSize) * kHeads * kDim + q.h * kDim);
    } else if (q.layout == Layout::Varlen) {
      ASSERT_EQ(host_views.varlen.offset(q.b, q.row, q.h), (cu_seqlens[q.b] + q.row) * kHeads * kDim + q.h * kDim);
    } else if (q.layout == Layout::BatchIndexed) {
      ASSERT_EQ(host_views.batch_indexed.offset(q.b, q.row, q.h),
                batch_index[q.b] * host_views.dense.batch_stride + q.row * host_views.dense.row_stride + q.h * kDim);
    }
  }
}

}  // namespace
}  // namespace flashattn
