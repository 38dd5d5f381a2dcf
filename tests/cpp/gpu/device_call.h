// A host-described call mirrored onto the device for the invalid fuzz: inputs uploaded, outputs
// poisoned, caches uploaded; afterwards untouched() says whether a refused call left every output
// and cache as it was. The device params are then broken in place (fuzz_invalid.h): validation
// must refuse them before any kernel reads a pointer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "device_mirror.h"
#include "flashattn/flashattn.h"
#include "gpu_test_util.h"

namespace flashattn::gpu_test {

class DeviceCall {
 public:
  TensorView input(const TensorView& host) { return mirror_.upload(host); }
  TensorView output(const TensorView& host) {
    const TensorView dev = mirror_.output(host);  // 0xff bytes
    if (dev.defined()) expect(dev, std::vector<uint8_t>(bytes(host), 0xff));
    return dev;
  }
  TensorView inout(const TensorView& host) {
    const TensorView dev = mirror_.upload(host);
    if (dev.defined()) {
      const auto* p = static_cast<const uint8_t*>(host.data);
      expect(dev, std::vector<uint8_t>(p, p + bytes(host)));
    }
    return dev;
  }
  bool untouched() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (const auto& [data, want] : expected_) {
      std::vector<uint8_t> got(want.size());
      CUDA_CHECK(cudaMemcpy(got.data(), data, got.size(), cudaMemcpyDeviceToHost));
      if (got != want) return false;
    }
    return true;
  }

  FwdParams fwd(const FwdParams& h) {
    FwdParams d = h;
    d.q = input(h.q);
    d.k = input(h.k);
    d.v = input(h.v);
    d.alibi_slopes = input(h.alibi_slopes);
    d.cu_seqlens_q = input(h.cu_seqlens_q);
    d.cu_seqlens_k = input(h.cu_seqlens_k);
    d.seqused_k = input(h.seqused_k);
    d.out = output(h.out);
    d.softmax_lse = output(h.softmax_lse);
    return d;
  }
  BwdParams bwd(const BwdParams& h) {
    BwdParams d = h;
    d.q = input(h.q);
    d.k = input(h.k);
    d.v = input(h.v);
    d.out = input(h.out);
    d.dout = input(h.dout);
    d.softmax_lse = input(h.softmax_lse);
    d.alibi_slopes = input(h.alibi_slopes);
    d.cu_seqlens_q = input(h.cu_seqlens_q);
    d.cu_seqlens_k = input(h.cu_seqlens_k);
    d.seqused_k = input(h.seqused_k);
    d.dq = output(h.dq);
    d.dk = output(h.dk);
    d.dv = output(h.dv);
    return d;
  }
  KvCacheParams kvcache(const KvCacheParams& h) {
    KvCacheParams d = h;
    d.q = input(h.q);
    d.k_cache = inout(h.k_cache);
    d.v_cache = inout(h.v_cache);
    d.k_new = input(h.k_new);
    d.v_new = input(h.v_new);
    d.cache_seqlens = input(h.cache_seqlens);
    d.cache_batch_idx = input(h.cache_batch_idx);
    d.block_table = input(h.block_table);
    d.rotary_cos = input(h.rotary_cos);
    d.rotary_sin = input(h.rotary_sin);
    d.alibi_slopes = input(h.alibi_slopes);
    d.out = output(h.out);
    d.softmax_lse = output(h.softmax_lse);
    return d;
  }
  CombineParams combine(const CombineParams& h) {
    CombineParams d = h;
    d.out_partial = input(h.out_partial);
    d.lse_partial = input(h.lse_partial);
    d.out = output(h.out);
    d.softmax_lse = output(h.softmax_lse);
    return d;
  }

 private:
  static size_t bytes(const TensorView& v) { return size_t(v.numel()) * dtype_size(v.dtype); }
  void expect(const TensorView& dev, std::vector<uint8_t> bytes) { expected_.push_back({dev.data, std::move(bytes)}); }

  DeviceMirror mirror_;
  std::vector<std::pair<const void*, std::vector<uint8_t>>> expected_;
};

}  // namespace flashattn::gpu_test
