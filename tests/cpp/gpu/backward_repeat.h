// Repeated backward runs on one device copy of the inputs, shared by the backward GPU suites
// (bitwise determinism, race checks): outputs poisoned before each run, each run's gradients
// handed to a check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "attention_case.h"
#include "device_mirror.h"
#include "gpu_test_util.h"

namespace flashattn::test {

inline std::vector<uint8_t> bytes_of(const HostTensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.numel() * int64_t(dtype_size(t.dtype())));
}

// A batch of two sequences of the given lengths, heads and head dim (the repeated-run tests).
inline AttentionCase two_sequences(int seqlen_q, int seqlen_k, int heads_q, int heads_k, int head_dim) {
  AttentionCase c;
  c.batch = 2;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  c.heads_q = heads_q;
  c.heads_k = heads_k;
  c.head_dim = head_dim;
  return c;
}

// Runs the backward on `backend` `runs` times (out and lse from that backend's forward; dense
// cases), poisoning the gradients before each run, and hands each run's gradients to `check`.
// `call` runs the backward on the device params (default: the public API).
using RunCheck = std::function<void(int run, const HostTensor& dq, const HostTensor& dk, const HostTensor& dv)>;
inline void repeat_backward(const AttentionCase& c, Backend backend, bool deterministic, int runs, const RunCheck& check,
                            const gpu_test::DeviceBwd& call = {}) {
  AttentionRun run(c);
  run.out = HostTensor(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.dv()});
  run.lse = HostTensor(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
  const Status fwd_status = gpu_test::fwd_on_device(run.fwd_params(run.out.view(), run.lse.view(), backend));
  ASSERT_TRUE(fwd_status.ok()) << fwd_status.message();
  HostTensor dq(c.dtype, run.q.shape()), dk(c.dtype, run.k.shape()), dv(c.dtype, run.v.shape());
  gpu_test::DeviceMirror m;
  BwdParams d = run.bwd_params(dq.view(), dk.view(), dv.view(), backend);
  d.deterministic = deterministic;
  d.q = m.upload(d.q);
  d.k = m.upload(d.k);
  d.v = m.upload(d.v);
  d.out = m.upload(d.out);
  d.dout = m.upload(d.dout);
  d.softmax_lse = m.upload(d.softmax_lse);
  d.dq = m.output(d.dq);
  d.dk = m.output(d.dk);
  d.dv = m.output(d.dv);
  for (int rep = 0; rep < runs; ++rep) {
    for (const TensorView* t : {&d.dq, &d.dk, &d.dv})
      CUDA_CHECK(cudaMemset(t->data, 0xff, size_t(t->numel()) * dtype_size(t->dtype)));
    const Status st = call ? call(d) : bwd(d);
    ASSERT_TRUE(st.ok()) << st.message();
    m.download();
    check(rep, dq, dk, dv);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// `runs` runs whose gradients are bitwise equal.
inline void expect_backward_runs_bitwise_equal(const AttentionCase& c, Backend backend, bool deterministic, int runs,
                                               const gpu_test::DeviceBwd& call = {}) {
  std::vector<uint8_t> first[3];
  repeat_backward(c, backend, deterministic, runs, [&](int rep, const HostTensor& dq, const HostTensor& dk, const HostTensor& dv) {
    const std::vector<uint8_t> now[3] = {bytes_of(dq), bytes_of(dk), bytes_of(dv)};
    for (int i = 0; i < 3; ++i) {
      if (rep == 0) {
        first[i] = now[i];
        continue;
      }
      ASSERT_EQ(first[i], now[i]) << "gradient " << "qkv"[i] << ", run " << rep;
    }
  }, call);
}

// Atomic dQ adds reorder the float sums between runs, so dQ may move by a rounding step of its
// dtype; dK and dV are owned by one CTA each and must not move at all. A race (a lost or doubled
// contribution, a stale read) moves values far more.
inline void expect_backward_runs_agree(const AttentionCase& c, Backend backend, int runs,
                                       const gpu_test::DeviceBwd& call = {}) {
  std::vector<float> first_dq;
  std::vector<uint8_t> first_dk, first_dv;
  repeat_backward(c, backend, /*deterministic=*/false, runs, [&](int rep, const HostTensor& dq, const HostTensor& dk, const HostTensor& dv) {
    if (rep == 0) {
      first_dq = dq.to_float();
      first_dk = bytes_of(dk);
      first_dv = bytes_of(dv);
      for (float x : first_dq) ASSERT_TRUE(std::isfinite(x));
      return;
    }
    ASSERT_EQ(first_dk, bytes_of(dk)) << "dk, run " << rep;
    ASSERT_EQ(first_dv, bytes_of(dv)) << "dv, run " << rep;
    const std::vector<float> now = dq.to_float();
    const double bound = 2 * rounding_floor(c.dtype, max_abs(first_dq));
    ASSERT_LE(max_abs_diff(now, first_dq), bound) << "dq, run " << rep;
  }, call);
}

}  // namespace flashattn::test
