// FA3 backward configurations of head dim 64 (calls with head dims up to 64 run here): 64 query
// rows per step, 128 keys per CTA; the two consumer warpgroups split dQ = dS K by keys. (FA3's
// 128 x 128 spilled here: its S^T and dP^T tiles take 128 of the consumers' registers.)
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim64(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<64, kBwdKernels64>(args, plan, stream);
}

}  // namespace flashattn::fa3
