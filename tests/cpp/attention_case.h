// One attention test case: shapes, features and the tensors for it, runnable through the public
// API (any backend) and through the naive reference, with the tolerance rule of the project:
//   max|fast - ref64| <= 2 * max|same_precision_ref - ref64| + floor
// (ref64: the naive reference in double; same_precision_ref: the naive reference that rounds like
// a framework computing in the input dtype).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/problem.h"
#include "flashattn/flashattn.h"
#include "test_util.h"

namespace flashattn::test {

struct AttentionCase {
  int batch = 2;
  int seqlen_q = 64, seqlen_k = 64;
  int heads_q = 2, heads_k = 2;
  int head_dim = 64;
  int head_dim_v = 0;  // 0 = head_dim
  DType dtype = DType::BF16;
  bool causal = false;
  int window_left = -1, window_right = -1;
  float softcap = 0.f;
  int alibi = 0;  // 0 off, 1 slopes (heads_q), 2 slopes (batch, heads_q)
  float dropout_p = 0.f;
  std::vector<int> varlen_q, varlen_k;  // non-empty: varlen layout with these lengths
  bool varlen_layout = false;           // varlen layout even without sequences (batch 0)
  std::vector<int> seqused_k;           // non-empty: keys used per sequence
  bool tight_max_seqlen_k = false;      // varlen with seqused_k: max_seqlen_k = the longest used
                                        //   (not stored) key sequence, the bound validation asks
  int num_splits = 1;
  std::optional<float> softmax_scale;  // unset: the API's default 1/sqrt(head_dim)
  uint64_t seed = 1;
  DType fp8_out = DType::BF16;  // out's dtype with fp8 inputs: bfloat16 (FlashAttention-3's) or float16

  int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  bool fp8() const { return dtype == DType::F8E4M3; }
  // fp8 inputs write bfloat16 (as FlashAttention-3) unless fp8_out says float16.
  DType out_dtype() const { return fp8() ? fp8_out : dtype; }
  bool varlen() const { return varlen_layout || !varlen_q.empty(); }
  std::string name() const;
};

// GoogleTest prints parameters with this (instead of a byte dump).
inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name(); }

// Errors of the fast path and of the same-precision reference against the float64 reference.
struct Errors {
  double fast = 0, same_precision = 0, reference_max = 0;
};

struct FwdResult {
  Errors out, lse;
};
struct BwdResult {
  Errors dq, dk, dv;
};

// Runs an entry point on host-described params; GPU tests pass one that mirrors the tensors to
// the device and copies the outputs back. Empty = call the API directly.
using FwdRunner = std::function<Status(const FwdParams&)>;
using BwdRunner = std::function<Status(const BwdParams&)>;

// The tensors of a case with fresh random data; runs everything above.
class AttentionRun {
 public:
  explicit AttentionRun(const AttentionCase& c);

  FwdParams fwd_params(TensorView out, TensorView lse, Backend backend) const;
  BwdParams bwd_params(TensorView dq, TensorView dk, TensorView dv, Backend backend) const;

  // Runs the forward on `backend` and the two references; fails the test on API errors.
  FwdResult check_fwd(Backend backend, const FwdRunner& runner = {});
  // Runs the backward (after a forward on the same backend) and the two references.
  BwdResult check_bwd(Backend backend, const FwdRunner& fwd_runner = {}, const BwdRunner& runner = {});

  // The absolute floor of the tolerance rule for one result (`e` from check_fwd/check_bwd): one
  // unit in the last place at its magnitude (lse: 8), plus, for float32 inputs, the roundings a
  // tiled FlashAttention makes that the naive float32 reference does not (see the definition).
  enum class Result { Out, Lse, Dq, Dk, Dv };
  double floor(Result which, const Errors& e) const;
  // max over the visible (row, key) pairs of sum_c |rows_ic keys_jc| (rows: q or dout; keys: k or
  // v): the magnitude at which their dot product is rounded.
  double max_dot_magnitude(const HostTensor& rows, const HostTensor& keys) const;

  // The call the API makes of this case's forward (host tensors), for choosing a kernel plan: its
  // out and lse point nowhere.
  AttnProblem problem() const;

  const AttentionCase& config() const { return c_; }
  HostTensor q, k, v, dout, alibi_slopes, cu_q, cu_k, seqused;
  // fp8 cases: float32 (batch, heads_k), a distinct factor per (sequence, kv head), so that a
  // backend mixing up the batch and head indexing (or q's group mapping) fails.
  HostTensor q_descale, k_descale, v_descale;
  HostTensor out, lse;  // from the last check_fwd

 private:
  std::vector<int64_t> qkv_shape(bool is_q, int dim) const;
  // A hash of every input tensor's bytes: the forward references are reused while it is unchanged
  // (tests check many plans of one run; a test that edits an input gets new references).
  uint64_t inputs_hash() const;
  struct FwdReferences {
    uint64_t inputs;
    HostTensor out64, lse64, out_lp, lse_lp;
  };
  std::optional<FwdReferences> fwd_refs_;
  AttentionCase c_;
  int total_q_ = 0, total_k_ = 0, max_q_ = 0, max_k_ = 0;
};

// Shapes that break kernels and every feature alone and in pairs (see the definition).
std::vector<AttentionCase> feature_sweep();
// fp8 (float8_e4m3fn, with descales) over the features FlashAttention-3's fp8 forward has.
std::vector<AttentionCase> fp8_sweep();
// An fp8 (e4m3) case of these shapes, every other field at its default.
AttentionCase fp8_case(int batch, int heads_q, int heads_k, int head_dim, int seqlen_q, int seqlen_k);

// One unit in the last place of dtype at `magnitude`: the floor that covers an output's final
// rounding.
double rounding_floor(DType dtype, double magnitude);

// The tolerance rule; floor is absolute.
void expect_within(const Errors& e, double factor, double floor, const std::string& what);

}  // namespace flashattn::test
