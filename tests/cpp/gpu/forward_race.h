// Race check shared by the forward GPU suites: one dense case run repeatedly on the same device
// inputs, outputs poisoned before each run; a race shows as results that move between runs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention_case.h"
#include "device_mirror.h"
#include "gpu_test_util.h"

namespace flashattn::test {

// `call` runs the forward on the device params (default: the public API).
inline void expect_forward_runs_bitwise_equal(const AttentionCase& c, Backend backend, int runs,
                                              const gpu_test::DeviceFwd& call = {}) {
  AttentionRun run(c);
  HostTensor out(c.dtype, {c.batch, c.seqlen_q, c.heads_q, c.dv()}), lse(DType::F32, {c.batch, c.heads_q, c.seqlen_q});
  gpu_test::DeviceMirror m;
  FwdParams d = run.fwd_params(out.view(), lse.view(), backend);
  d.q = m.upload(d.q);
  d.k = m.upload(d.k);
  d.v = m.upload(d.v);
  d.out = m.output(d.out);
  d.softmax_lse = m.output(d.softmax_lse);
  const size_t out_bytes = size_t(out.numel()) * 2, lse_bytes = size_t(lse.numel()) * 4;
  std::vector<uint8_t> first_out, first_lse;
  for (int rep = 0; rep < runs; ++rep) {
    CUDA_CHECK(cudaMemset(d.out.data, 0xff, out_bytes));
    CUDA_CHECK(cudaMemset(d.softmax_lse.data, 0xff, lse_bytes));
    const Status st = call ? call(d) : fwd(d);
    ASSERT_TRUE(st.ok()) << st.message();
    m.download();
    const auto* o_bytes = static_cast<const uint8_t*>(out.data());
    const auto* l_bytes = static_cast<const uint8_t*>(lse.data());
    std::vector<uint8_t> o(o_bytes, o_bytes + out_bytes), l(l_bytes, l_bytes + lse_bytes);
    if (rep == 0) {
      first_out = o;
      first_lse = l;
      continue;
    }
    ASSERT_EQ(first_out, o) << "run " << rep;
    ASSERT_EQ(first_lse, l) << "run " << rep;
  }
}

}  // namespace flashattn::test
