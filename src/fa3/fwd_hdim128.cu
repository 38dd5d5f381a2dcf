// FA3 forward kernels of head dim 128 (calls with a head dim of 65..128 run here; tiles: fwd_plan.h).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim128(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream) {
  return launch_plan<128, 128>(p, plan, stream);
}

}  // namespace flashattn::fa3
