// The tile choice of one FA3 backward: fa3::bwd_plan picks it per call; tests and benchmarks may
// pass their own to fa3::bwd (fa3_backend.h).
#pragma once

namespace flashattn::fa3 {

struct BwdPlan {
  int head_dim = 0;  // the kernel's: 64, 128 or 256
  int block_m = 0;   // query rows per step: 64
  bool general_score = false;  // softcap or ALiBi (must match the call)
};

}  // namespace flashattn::fa3
