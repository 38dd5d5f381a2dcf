// FA3 backward configurations of head dim 256 (calls with head dims 129..256 run here, d192
// padded): 64 query rows per step, the head dim split between the two consumer warpgroups for dK,
// dV and dQ; plain scores on 80 keys per CTA with the rows on the wgmma M side
// (bwd_consumer_rows.cuh), softcap and ALiBi on 64 keys (BwdConfig::kWide, bwd_consumer_wide.cuh).
#include "fa3/bwd_launch.cuh"

namespace flashattn::fa3 {

Status bwd_hdim256(const BwdArgs& args, const BwdPlan& plan, cudaStream_t stream) {
  return launch_bwd_variant<256, kBwdKernels256>(args, plan, stream);
}

}  // namespace flashattn::fa3
