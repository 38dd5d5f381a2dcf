// The FA3 backward with a forced kernel (fa3/bwd_variants.h), for tests and benchmarks only (not
// part of the public API): the kernel variants that bwd_plan never picks are reached here.
#pragma once

#include "fa3/bwd_variants.h"
#include "flashattn/flashattn.h"

namespace flashattn::api {

// bwd(params) on the FA3 path (params.backend is not consulted) with bwd_plan's choice for the
// call changed to `kernel`: validated as bwd validates; Unsupported when the FA3 backward does not
// cover the call, the kernel is not built at the call's head dim, or the build has no CUDA.
Status bwd_fa3_forced(const BwdParams& params, const fa3::BwdKernel& kernel);

}  // namespace flashattn::api
