// FA3 forward kernels of head dim 256 (calls with a head dim up to 256 run here; tiles: fwd_plan.h).
// 80 keys per tile: O takes 128 registers; Q and two stages of K, V fill the shared memory.
#include "fa3/fwd_launch.cuh"

namespace flashattn::fa3 {

Status fwd_hdim256(const AttnProblem& p, const FwdPlan& plan, cudaStream_t stream) {
  return launch_plan<256, 256>(p, plan, stream);
}

}  // namespace flashattn::fa3
