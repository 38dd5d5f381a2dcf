// FA3 forward kernels of head dim 192 (calls with a head dim up to 192 run here), with head_dim_v
// 192 or up to 128 (tiles: fwd_plan.h). head_dim_v 192 on 112 keys fills the registers (O 96,
// S 56, P 28) and Q + two stages of K, V the shared memory.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim192(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream) {
  return plan.head_dim_v == 128 ? launch_plan<192, 128>(p, plan, stream) : launch_plan<192, 192>(p, plan, stream);
}

}  // namespace flashattn::fa3
