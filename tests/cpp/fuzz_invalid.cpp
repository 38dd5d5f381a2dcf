#include "fuzz_invalid.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>

namespace flashattn::test {

bool Breakage::names(const std::string& argument) const {
  return std::find(arguments.begin(), arguments.end(), argument) != arguments.end();
}

void IndexPadding::pad(TensorView& index) {
  if (!index.defined() || index.device != DeviceType::Cpu || index.dtype != DType::I32) return;
  const int64_t n = index.numel();
  static constexpr int32_t kGarbage[] = {INT32_MIN, -7, -1, 0, 1, 3, 1 << 20, INT32_MAX};
  auto buffer = std::make_unique<std::vector<int32_t>>(size_t(2 * n + 64));
  for (size_t i = 0; i < buffer->size(); ++i) (*buffer)[i] = kGarbage[i % 8];
  if (n > 0) std::memcpy(buffer->data(), index.data, size_t(n) * sizeof(int32_t));  // valid calls: contiguous
  index.data = buffer->data();
  buffers_.push_back(std::move(buffer));
}

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr DType kBogusDType = static_cast<DType>(11);

class Random {
 public:
  explicit Random(std::mt19937_64& rng) : rng_(rng) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int64_t uniform64(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  T pick(std::initializer_list<T> values) {
    return *(values.begin() + uniform(0, int(values.size()) - 1));
  }
  template <typename T>
  T pick(const std::vector<T>& values) {
    return values[size_t(uniform(0, int(values.size()) - 1))];
  }

 private:
  std::mt19937_64& rng_;
};

// One tensor argument of a call and what its rules accept.
struct Arg {
  std::string name;
  TensorView* view;
  std::vector<DType> dtypes;       // accepted dtypes
  std::vector<int> ndims;          // accepted ranks
  std::vector<std::string> peers;  // tensors a shape change may be reported on instead (the
                                   // ones compared with this one's sizes)
  bool required = false;           // the call is invalid without it
  bool output = false;             // written by the call
  bool vectorized = false;         // CUDA: 16-byte aligned data and outer strides
  int fixed_dim = -1;              // a dim whose size nothing checks (changing it keeps the call valid)
};

using Mutation = std::function<std::optional<Breakage>()>;

Breakage broke(std::string what, std::vector<std::string> arguments, bool at_dispatch = false) {
  return {std::move(what), std::move(arguments), at_dispatch};
}

std::vector<std::string> with(const Arg& a, std::vector<std::string> more = {}) {
  more.push_back(a.name);
  return more;
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

int64_t numel(const TensorView& t) { return t.defined() ? t.numel() : 0; }

// Breaks one tensor: dtype, rank, a size, a stride, alignment, placement, data, presence.
std::optional<Breakage> break_tensor(std::vector<Arg>& args, Random& r, const BreakScope& scope) {
  Arg& a = args[size_t(r.uniform(0, int(args.size()) - 1))];
  TensorView& t = *a.view;
  const bool is_reference = &a == &args[0];
  if (!t.defined()) return std::nullopt;
  const int64_t elements = t.numel();
  const int last = t.ndim - 1;
  switch (r.uniform(0, 13)) {
    case 0: {  // a dtype the argument does not take
      std::vector<DType> wrong;
      for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::I32, DType::U8, kBogusDType})
        if (std::find(a.dtypes.begin(), a.dtypes.end(), d) == a.dtypes.end()) wrong.push_back(d);
      t.dtype = r.pick(wrong);
      // q in fp8 is a valid dtype on its own: the call breaks where k, v or out disagree with it.
      if (is_reference && t.dtype == DType::F8E4M3)
        return broke("dtype of " + a.name + " set to fp8", with(a, a.peers));
      return broke("dtype of " + a.name + " set to " + std::to_string(int(t.dtype)), {a.name});
    }
    case 1: {  // a rank the argument does not take
      std::vector<int> wrong;
      for (int n : {t.ndim - 1, t.ndim + 1, kMaxDims + 1, -1})
        if (n != 0 && n <= kMaxDims + 1 && !contains(a.ndims, n)) wrong.push_back(n);
      const int n = r.pick(wrong);
      if (n > t.ndim && n <= kMaxDims) {  // a trailing dim of 1
        t.shape[t.ndim] = 1;
        t.stride[t.ndim] = 1;
      }
      t.ndim = n;
      return broke("ndim of " + a.name + " set to " + std::to_string(n), {a.name});
    }
    case 2: {  // a negative size
      t.shape[r.uniform(0, last)] = r.pick<int64_t>({-1, -2, -1000, INT64_MIN});
      return broke("a negative dim in " + a.name, {a.name});
    }
    case 3:
    case 4: {  // a size that disagrees with the tensors it is checked against
      const int d = r.uniform(0, last);
      if (d == a.fixed_dim) return std::nullopt;
      const int64_t size = t.shape[d] + r.pick<int64_t>({-2, -1, 1, 2, 7});
      if (size < 0) return std::nullopt;
      t.shape[d] = size;
      return broke("dim " + std::to_string(d) + " of " + a.name + " set to " + std::to_string(size), with(a, a.peers));
    }
    case 5: {  // a size past int32 or int64
      const int d = r.uniform(0, last);
      if (d == a.fixed_dim) return std::nullopt;
      t.shape[d] = r.pick<int64_t>({int64_t(1) << 31, int64_t(1) << 40, INT64_MAX / 2, INT64_MAX});
      return broke("dim " + std::to_string(d) + " of " + a.name + " set to " + std::to_string(t.shape[d]),
                   with(a, a.peers));
    }
    case 6: {  // a last dim that is not contiguous
      if (elements == 0 || t.shape[last] < 2) return std::nullopt;
      t.stride[last] = r.pick<int64_t>({0, 2, 3, -1});
      return broke("stride of the last dim of " + a.name + " set to " + std::to_string(t.stride[last]), {a.name});
    }
    case 7: {  // a negative stride
      if (elements == 0) return std::nullopt;
      const int d = r.uniform(0, last);
      t.stride[d] = r.pick<int64_t>({-1, -64, INT64_MIN});
      return broke("a negative stride in " + a.name, {a.name});
    }
    case 8: {  // outputs whose elements alias each other; on CUDA, outer strides off 16 bytes
      if (elements < 2) return std::nullopt;
      std::vector<int> outer;
      for (int d = 0; d < last; ++d)
        if (t.shape[d] > 1) outer.push_back(d);
      if (outer.empty()) return std::nullopt;
      const int d = r.pick(outer);
      if (a.output && r.coin()) {
        t.stride[d] = 0;
        return broke("a zero outer stride in output " + a.name, {a.name});
      }
      if (!scope.on_device || !a.vectorized || (t.stride[d] + 1) * int64_t(dtype_size(t.dtype)) % 16 == 0)
        return std::nullopt;
      t.stride[d] += 1;
      return broke("an outer stride of CUDA tensor " + a.name + " that is not a multiple of 16 bytes", {a.name});
    }
    case 9: {  // data misaligned for its dtype (and for 16-byte CUDA loads)
      if (elements == 0 || dtype_size(t.dtype) < 2) return std::nullopt;
      t.data = static_cast<char*>(t.data) + 1;
      return broke("data of " + a.name + " one byte off", {a.name});
    }
    case 10: {  // null data with elements
      if (elements == 0) return std::nullopt;
      t.data = nullptr;
      return broke("null data in " + a.name, {a.name});
    }
    case 11: {  // another device than the reference tensor (q, out_partial), or no device at all
      const std::string blamed = is_reference ? args[1].name : a.name;
      switch (r.uniform(0, 2)) {
        case 0:
          t.device = scope.on_device ? DeviceType::Cpu : DeviceType::Cuda;
          t.device_index = 0;
          return broke(a.name + " moved to another device", {blamed});
        case 1:
          if (!scope.on_device) return std::nullopt;  // (a host tensor's index means nothing)
          t.device_index = r.pick({1, 3});
          return broke(a.name + " moved to another GPU", {blamed});
        default:
          if (r.coin()) {
            t.device = static_cast<DeviceType>(r.pick({2, 7, -1}));
          } else {
            t.device = DeviceType::Cuda;
            t.device_index = r.pick({-1, INT_MIN});
          }
          return broke(a.name + " on a device that does not exist", {a.name});
      }
    }
    case 12: {  // a required tensor left out
      if (!a.required) return std::nullopt;
      t = TensorView{};
      return broke(a.name + " left out", {a.name});
    }
    default: {  // an output over another tensor's memory
      if (!a.output || elements == 0) return std::nullopt;
      Arg& other = args[size_t(r.uniform(0, int(args.size()) - 1))];
      if (&other == &a || numel(*other.view) == 0 || other.view->device != t.device ||
          other.view->device_index != t.device_index)
        return std::nullopt;
      t.data = other.view->data;
      return broke("output " + a.name + " over the memory of " + other.name, {a.name, other.name});
    }
  }
}

// Options every attention entry shares.
std::optional<Breakage> break_options(AttnOptions& o, Random& r, const BreakScope& scope) {
  switch (r.uniform(0, 6)) {
    case 0:
      o.window_left = r.pick({-2, -3, -1000, INT_MIN});
      return broke("window_left < -1", {"window_left"});
    case 1:
      o.window_right = r.pick({-2, -77, INT_MIN});
      return broke("window_right < -1", {"window_right"});
    case 2:
      o.softcap = r.pick({-0.5f, -kInf, kInf, std::nanf("")});
      return broke("softcap negative or not finite", {"softcap"});
    case 3:
      o.softmax_scale = r.pick({std::nanf(""), kInf, -kInf});
      return broke("softmax_scale not finite", {"softmax_scale"});
    case 4:
      o.backend = static_cast<Backend>(r.pick({4, 9, -1}));
      return broke("backend not a Backend", {"backend"});
    default:
      if (scope.on_device) {
        o.backend = Backend::Cpu;
        return broke("the CPU backend for CUDA tensors", {"backend"}, /*at_dispatch=*/true);
      }
      o.backend = r.coin() ? Backend::Fa2 : Backend::Fa3;
      return broke("a GPU backend for host tensors", {"backend"}, /*at_dispatch=*/true);
  }
}

std::optional<Breakage> break_dropout(DropoutArgs& d, Random& r) {
  d.dropout_p = r.pick({-0.1f, 1.f, 1.5f, std::nanf(""), kInf, -kInf});
  return broke("dropout_p outside [0, 1)", {"dropout_p"});
}

std::optional<Breakage> break_num_splits(int& num_splits, Random& r) {
  num_splits = r.pick({-1, -100, 257, 1000, INT_MAX, INT_MIN});
  return broke("num_splits outside [0, 256]", {"num_splits"});
}

int32_t* ints(const TensorView& t) { return static_cast<int32_t*>(t.data); }

// cu_seqlens that are not offsets: a first entry other than 0, a decrease, an end past the rows.
std::optional<Breakage> break_cu_seqlens(TensorView& cu, const char* name, int64_t rows, Random& r) {
  if (!cu.defined()) return std::nullopt;
  int32_t* v = ints(cu);
  const int64_t batch = cu.shape[0] - 1;
  const int kind = batch == 0 ? 0 : r.uniform(0, 2);
  if (kind == 0) {
    v[0] = r.pick({1, -1, 5, INT32_MIN});
    return broke(std::string(name) + "[0] != 0", {name});
  }
  if (kind == 1) {
    const int64_t i = r.uniform64(1, batch);
    v[i] = int32_t(std::max<int64_t>(INT32_MIN, int64_t(v[i - 1]) - r.pick({1, 2, 1000})));
    return broke(std::string(name) + " decreasing at " + std::to_string(i), {name});
  }
  v[batch] = int32_t(std::min<int64_t>(INT32_MAX, rows + r.pick({1, 2, 100000})));
  return broke(std::string(name) + " past the rows of its tensor", {name});
}

// Keys of sequence b in a valid fwd/bwd call (host contents).
int64_t key_length(const TensorView& k, const TensorView& cu_k, int64_t b) {
  if (cu_k.defined()) return int64_t(ints(cu_k)[b + 1]) - ints(cu_k)[b];
  return k.shape[1];
}

std::optional<Breakage> break_seqused(TensorView& seqused, const TensorView& k, const TensorView& cu_k, Random& r) {
  if (!seqused.defined() || seqused.shape[0] == 0) return std::nullopt;
  const int64_t b = r.uniform64(0, seqused.shape[0] - 1);
  ints(seqused)[b] = r.coin() ? r.pick({-1, INT32_MIN})
                              : int32_t(std::min<int64_t>(INT32_MAX, key_length(k, cu_k, b) + r.pick({1, 5})));
  return broke("seqused_k[" + std::to_string(b) + "] outside [0, keys]", {"seqused_k"});
}

// max_seqlen below the longest sequence (host), negative, or 0 where it cannot be derived (CUDA).
std::optional<Breakage> break_max_seqlen(VarlenArgs& v, bool keys, Random& r, const BreakScope& scope) {
  TensorView& cu = keys ? v.cu_seqlens_k : v.cu_seqlens_q;
  int& max_seqlen = keys ? v.max_seqlen_k : v.max_seqlen_q;
  const char* name = keys ? "max_seqlen_k" : "max_seqlen_q";
  if (!cu.defined()) return std::nullopt;
  if (r.coin()) {
    max_seqlen = r.pick({-1, INT_MIN});
    return broke(std::string(name) + " negative", {name});
  }
  if (scope.on_device) {
    if (cu.shape[0] < 2) return std::nullopt;
    max_seqlen = 0;
    return broke(std::string(name) + " 0 with CUDA cu_seqlens", {name});
  }
  int64_t longest = 0;  // (keys: the ones used, with seqused_k)
  const bool used = keys && v.seqused_k.defined();
  for (int64_t b = 0; b + 1 < cu.shape[0]; ++b)
    longest = std::max<int64_t>(longest, used ? ints(v.seqused_k)[b] : ints(cu)[b + 1] - ints(cu)[b]);
  if (longest < 2) return std::nullopt;  // (0 means derive it)
  max_seqlen = int(longest - 1);
  return broke(std::string(name) + " below the longest sequence", {name});
}

// Tries mutations at random until one applies.
Breakage first_that_applies(const std::vector<Mutation>& mutations, Random& r) {
  for (int attempt = 0; attempt < 1000 && !mutations.empty(); ++attempt)
    if (std::optional<Breakage> b = mutations[size_t(r.uniform(0, int(mutations.size()) - 1))]()) return *b;
  return broke("nothing applied", {});  // fails the test: the call was not broken
}

std::vector<std::string> names_of(const std::vector<Arg>& args, const std::string& except) {
  std::vector<std::string> names;
  for (const Arg& a : args)
    if (a.name != except) names.push_back(a.name);
  return names;
}

const std::vector<DType> kAttentionDTypes = {DType::F16, DType::BF16, DType::F32};

// fwd and bwd: the tensors they share, in the order validation compares devices.
std::vector<Arg> attention_args(FwdParams* f, BwdParams* b) {
  AttnOptions& o = f ? static_cast<AttnOptions&>(*f) : static_cast<AttnOptions&>(*b);
  VarlenArgs& v = f ? static_cast<VarlenArgs&>(*f) : static_cast<VarlenArgs&>(*b);
  TensorView& q = f ? f->q : b->q;
  TensorView& k = f ? f->k : b->k;
  TensorView& vt = f ? f->v : b->v;
  TensorView& out = f ? f->out : b->out;
  TensorView& lse = f ? f->softmax_lse : b->softmax_lse;
  const bool varlen = v.cu_seqlens_q.defined();
  const int rank = varlen ? 3 : 4;
  const DType dt = q.dtype;
  std::vector<Arg> args = {
      {"q", &q, kAttentionDTypes, {rank}, {}, true, false, true},
      {"k", &k, {dt}, {rank}, {"v", "cu_seqlens_k"}, true, false, true},
      {"v", &vt, {dt}, {rank}, {"out"}, true, false, true},
      {"out", &out, {dt}, {rank}, {"dout"}, true, f != nullptr, true},
      {"softmax_lse", &lse, {DType::F32}, {varlen ? 2 : 3}, {}, b != nullptr, f != nullptr},
      {"alibi_slopes", &o.alibi_slopes, {DType::F32}, {1, 2}, {}},
      {"cu_seqlens_q", &v.cu_seqlens_q, {DType::I32}, {1}, {"cu_seqlens_k"}, true},
      {"cu_seqlens_k", &v.cu_seqlens_k, {DType::I32}, {1}, {}, true},
      {"seqused_k", &v.seqused_k, {DType::I32}, {1}, {}},
  };
  if (b != nullptr) {
    args.push_back({"dout", &b->dout, {dt}, {rank}, {}, true, false, true});
    args.push_back({"dq", &b->dq, {dt}, {rank}, {}, true, true, true});
    args.push_back({"dk", &b->dk, {dt}, {rank}, {}, true, true, true});
    args.push_back({"dv", &b->dv, {dt}, {rank}, {}, true, true, true});
  }
  args[0].peers = names_of(args, "q");  // every size is checked against q's
  return args;
}

std::vector<Mutation> attention_mutations(std::vector<Arg>& args, AttnOptions& o, VarlenArgs& v, DropoutArgs& d,
                                          const TensorView& q, const TensorView& k, Random& r,
                                          const BreakScope& scope) {
  // Weights: tensors most (many rules each), options and contents a few percent each.
  std::vector<Mutation> m;
  if (!scope.contents_only) {
    for (int i = 0; i < 20; ++i) m.push_back([&] { return break_tensor(args, r, scope); });
    m.push_back([&] { return break_options(o, r, scope); });
    m.push_back([&] { return break_dropout(d, r); });
    m.push_back([&] { return break_max_seqlen(v, r.coin(), r, scope); });
  }
  if (!scope.on_device)
    for (int i = 0; i < 2; ++i) {
      m.push_back([&] { return break_cu_seqlens(v.cu_seqlens_q, "cu_seqlens_q", q.defined() ? q.shape[0] : 0, r); });
      m.push_back([&] { return break_cu_seqlens(v.cu_seqlens_k, "cu_seqlens_k", k.defined() ? k.shape[0] : 0, r); });
      m.push_back([&] { return break_seqused(v.seqused_k, k, v.cu_seqlens_k, r); });
    }
  return m;
}

}  // namespace

Breakage break_fwd(FwdParams& p, std::mt19937_64& rng, const BreakScope& scope) {
  Random r(rng);
  std::vector<Arg> args = attention_args(&p, nullptr);
  std::vector<Mutation> m = attention_mutations(args, p, p, p, p.q, p.k, r, scope);
  if (!scope.contents_only) m.push_back([&] { return break_num_splits(p.num_splits, r); });
  return first_that_applies(m, r);
}

Breakage break_bwd(BwdParams& p, std::mt19937_64& rng, const BreakScope& scope) {
  Random r(rng);
  std::vector<Arg> args = attention_args(nullptr, &p);
  std::vector<Mutation> m = attention_mutations(args, p, p, p, p.q, p.k, r, scope);
  return first_that_applies(m, r);
}

namespace {

// Pages of sequence b that hold keys (validation checks those entries only).
int64_t pages_in_use(const KvCacheParams& p, int64_t b) {
  const int64_t page = p.k_cache.shape[1], max_blocks = p.block_table.shape[1];
  const int64_t seqlen_new = p.k_new.defined() ? p.k_new.shape[1] : 0;
  const int64_t keys = p.cache_seqlens.defined() ? ints(p.cache_seqlens)[b] + seqlen_new : max_blocks * page;
  return std::min(max_blocks, (keys + page - 1) / page);
}

std::optional<Breakage> break_kv_contents(KvCacheParams& p, Random& r) {
  const int64_t batch = p.q.shape[0];
  if (batch == 0) return std::nullopt;
  const int64_t b = r.uniform64(0, batch - 1);
  const bool appends = p.k_new.defined();
  const int64_t seqlen_new = appends ? p.k_new.shape[1] : 0;
  const bool paged = p.block_table.defined();
  switch (r.uniform(0, 4)) {
    case 0: {
      if (!p.cache_seqlens.defined()) return std::nullopt;
      const int64_t capacity = paged ? p.block_table.shape[1] * p.k_cache.shape[1] : p.k_cache.shape[1];
      ints(p.cache_seqlens)[b] = r.coin() ? r.pick({-1, INT32_MIN})
                                          : int32_t(std::min<int64_t>(INT32_MAX, capacity - seqlen_new + r.pick({1, 9})));
      return broke("cache_seqlens[" + std::to_string(b) + "] outside [0, capacity - seqlen_new]", {"cache_seqlens"});
    }
    case 1: {
      if (!p.cache_batch_idx.defined()) return std::nullopt;
      if (appends && batch >= 2 && r.coin()) {
        const int64_t other = (b + 1) % batch;
        ints(p.cache_batch_idx)[other] = ints(p.cache_batch_idx)[b];
        return broke("cache_batch_idx repeats a row while appending", {"cache_batch_idx"});
      }
      ints(p.cache_batch_idx)[b] = r.coin() ? r.pick({-1, INT32_MIN}) : int32_t(p.k_cache.shape[0] + r.pick({0, 5}));
      return broke("cache_batch_idx[" + std::to_string(b) + "] outside the cache rows", {"cache_batch_idx"});
    }
    case 2: {
      if (!paged || pages_in_use(p, b) == 0) return std::nullopt;
      const int64_t page = r.uniform64(0, pages_in_use(p, b) - 1);
      ints(p.block_table)[b * p.block_table.stride[0] + page] =
          r.coin() ? r.pick({-1, INT32_MIN}) : int32_t(p.k_cache.shape[0] + r.pick({0, 3}));
      return broke("block_table[" + std::to_string(b) + "][" + std::to_string(page) + "] outside the pages",
                   {"block_table"});
    }
    case 3: {  // a page keys are appended into, shared with another sequence
      if (!paged || !appends || batch < 2) return std::nullopt;
      const int64_t page_size = p.k_cache.shape[1];
      const int64_t written = ints(p.cache_seqlens)[b] / page_size;  // the first page written
      const int64_t other = (b + 1 + r.uniform64(0, batch - 2)) % batch;
      const int64_t page = r.uniform64(0, pages_in_use(p, other) - 1);
      ints(p.block_table)[other * p.block_table.stride[0] + page] = ints(p.block_table)[b * p.block_table.stride[0] + written];
      return broke("a page appended into shared with another sequence", {"block_table"});
    }
    default: {  // a rotary table too short for the positions used
      if (!p.rotary_cos.defined()) return std::nullopt;
      const bool q_per_row = p.causal || p.window_left >= 0 || p.window_right >= 0;
      int64_t needed = 0;
      for (int64_t s = 0; s < batch; ++s) {
        const int64_t first = p.cache_seqlens.defined() ? ints(p.cache_seqlens)[s] : 0;
        if (seqlen_new > 0) needed = std::max(needed, first + seqlen_new);
        if (p.q.shape[1] > 0) needed = std::max(needed, first + (q_per_row ? p.q.shape[1] : 1));
      }
      if (needed == 0) return std::nullopt;
      p.rotary_cos.shape[0] = p.rotary_sin.shape[0] = needed - 1;
      return broke("rotary tables shorter than the positions used", {"rotary_cos"});
    }
  }
}

// Rules about the cache's structure: page size, rows, exclusive arguments, the rotary width.
std::optional<Breakage> break_kv_structure(KvCacheParams& p, Random& r) {
  const int64_t batch = p.q.shape[0];
  switch (r.uniform(0, 4)) {
    case 0:
      if (!p.block_table.defined()) return std::nullopt;
      p.k_cache.shape[1] = p.v_cache.shape[1] = 0;
      return broke("a page size of 0", {"k_cache"});
    case 1:
      if (p.block_table.defined() || p.cache_batch_idx.defined() || batch == 0) return std::nullopt;
      p.k_cache.shape[0] = p.v_cache.shape[0] = batch - 1;
      return broke("a dense cache with fewer rows than sequences", {"k_cache"});
    case 2:
      if (!p.block_table.defined()) return std::nullopt;
      p.cache_batch_idx = p.block_table;  // never read: refused before
      p.cache_batch_idx.ndim = 1;
      p.cache_batch_idx.shape[0] = batch;
      p.cache_batch_idx.stride[0] = 1;
      return broke("cache_batch_idx together with block_table", {"cache_batch_idx"});
    case 3:
      if (!p.rotary_cos.defined()) return std::nullopt;
      p.rotary_cos.shape[1] = p.rotary_sin.shape[1] = r.coin() ? 0 : p.q.shape[3] / 2 + r.pick({1, 8});
      return broke("a rotary dim outside [2, head_dim]", {"rotary_cos"});
    default:
      if (!p.rotary_sin.defined() || p.rotary_sin.shape[0] < 2 || p.rotary_sin.shape[1] == 0) return std::nullopt;
      p.rotary_sin.stride[0] += 1;
      return broke("rotary_sin laid out unlike rotary_cos", {"rotary_sin"});
  }
}

}  // namespace

Breakage break_kvcache(KvCacheParams& p, std::mt19937_64& rng, const BreakScope& scope) {
  Random r(rng);
  const DType dt = p.q.dtype;
  const bool appends = p.k_new.defined(), rotary = p.rotary_cos.defined();
  std::vector<Arg> args = {
      {"q", &p.q, kAttentionDTypes, {4}, {}, true, false, true},
      {"k_cache", &p.k_cache, {dt}, {4}, {"v_cache"}, true, appends, true},
      {"v_cache", &p.v_cache, {dt}, {4}, {"out", "v_new"}, true, appends, true},
      {"k_new", &p.k_new, {dt}, {4}, {"v_new", "cache_seqlens", "rotary_cos", "block_table"}, appends, false, true},
      {"v_new", &p.v_new, {dt}, {4}, {}, appends, false, true},
      {"cache_seqlens", &p.cache_seqlens, {DType::I32}, {1}, {}, appends},
      {"cache_batch_idx", &p.cache_batch_idx, {DType::I32}, {1}, {}},
      {"block_table", &p.block_table, {DType::I32}, {2}, {}, false, false, false, /*fixed_dim=*/1},
      {"rotary_cos", &p.rotary_cos, {dt}, {2}, {"rotary_sin"}, rotary},
      {"rotary_sin", &p.rotary_sin, {dt}, {2}, {}, rotary},
      {"alibi_slopes", &p.alibi_slopes, {DType::F32}, {1, 2}, {}},
      {"out", &p.out, {dt}, {4}, {}, true, true, true},
      {"softmax_lse", &p.softmax_lse, {DType::F32}, {3}, {}, false, true},
  };
  args[0].peers = names_of(args, "q");
  std::vector<Mutation> m;
  if (!scope.contents_only) {
    for (int i = 0; i < 20; ++i) m.push_back([&] { return break_tensor(args, r, scope); });
    m.push_back([&] { return break_options(p, r, scope); });
    m.push_back([&] { return break_num_splits(p.num_splits, r); });
    for (int i = 0; i < 3; ++i) m.push_back([&] { return break_kv_structure(p, r); });
  }
  if (!scope.on_device)
    for (int i = 0; i < 5; ++i) m.push_back([&] { return break_kv_contents(p, r); });
  return first_that_applies(m, r);
}

Breakage break_combine(CombineParams& p, std::mt19937_64& rng, const BreakScope& scope) {
  Random r(rng);
  const bool varlen = p.out_partial.ndim == 4;
  std::vector<Arg> args = {
      {"out_partial", &p.out_partial, {DType::F32}, {4, 5}, {"lse_partial", "out", "softmax_lse"}, true, false, true},
      {"lse_partial", &p.lse_partial, {DType::F32}, {varlen ? 3 : 4}, {}, true},
      {"out", &p.out, {DType::F32, DType::F16, DType::BF16}, {varlen ? 3 : 4}, {}, true, true, true},
      {"softmax_lse", &p.softmax_lse, {DType::F32}, {varlen ? 2 : 3}, {}, false, true},
  };
  std::vector<Mutation> m;
  for (int i = 0; i < 20; ++i) m.push_back([&] { return break_tensor(args, r, scope); });
  m.push_back([&]() -> std::optional<Breakage> {
    p.out_partial.shape[0] = p.lse_partial.shape[0] = 0;
    return broke("no splits", {"out_partial"});
  });
  m.push_back([&]() -> std::optional<Breakage> {
    AttnOptions o;
    o.backend = p.backend;
    std::optional<Breakage> b = break_options(o, r, scope);
    if (!b || b->arguments[0] != "backend") return std::nullopt;
    p.backend = o.backend;
    return b;
  });
  return first_that_applies(m, r);
}

}  // namespace flashattn::test
