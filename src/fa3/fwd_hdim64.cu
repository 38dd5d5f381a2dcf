// FA3 forward kernels of head dim 64 (calls with a head dim up to 64 run here; tiles: fwd_plan.h).
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim64(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream) {
  return launch_plan<64, 64>(p, plan, stream);
}

}  // namespace flashattn::fa3
