// Invalid calls for the fuzz tests: a valid call with one rule broken at random (dtype, ndim,
// shape, size, stride, alignment, placement, null data, aliasing outputs, missing tensors, option
// ranges, and the contents of index tensors) and the arguments its error may name: the broken
// tensor, or the one the rule compares it with.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::test {

struct Breakage {
  std::string what;                    // the rule broken, for failure messages
  std::vector<std::string> arguments;  // names the error may carry
  bool at_dispatch = false;            // validation accepts it and the entry point refuses it
                                       // (a backend for tensors it cannot use)

  bool names(const std::string& argument) const;
};

// Where the call lives decides which rules apply: the contents of index tensors (cu_seqlens,
// block tables, ...) are read on the host only; on CUDA, data must be 16-byte aligned.
struct BreakScope {
  bool on_device = false;
  // Only the contents of host index tensors (cu_seqlens, seqused_k, cache_seqlens, block tables,
  // cache_batch_idx), for calls whose index tensors are uploaded afterwards: on the GPU nothing
  // reads them before the kernels (the GPU fuzz's contents test).
  bool contents_only = false;
};

// Each breaks params in place. Host index tensors must own spare entries past their length
// (IndexPadding), since a broken length may make validation read further.
Breakage break_fwd(FwdParams& params, std::mt19937_64& rng, const BreakScope& scope);
Breakage break_bwd(BwdParams& params, std::mt19937_64& rng, const BreakScope& scope);
Breakage break_kvcache(KvCacheParams& params, std::mt19937_64& rng, const BreakScope& scope);
Breakage break_combine(CombineParams& params, std::mt19937_64& rng, const BreakScope& scope);

// Copies host int32 tensors into buffers with spare entries (garbage) and points the views there.
class IndexPadding {
 public:
  void pad(TensorView& index);

 private:
  std::vector<std::unique_ptr<std::vector<int32_t>>> buffers_;
};

}  // namespace flashattn::test
