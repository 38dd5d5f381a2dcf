// FA3 backward configurations of head dim 64 (calls with head dims up to 64 run here), 128 keys
// per CTA: 128 query rows per step with plain scores (FA3's d64 tile), 64 with softcap or ALiBi
// (the warpgroups take turns computing a step's dQ); bwd_variants.h lists them.
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim64(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<64, kBwdKernels64>(args, plan, stream);
}

}  // namespace flashattn::fa3
