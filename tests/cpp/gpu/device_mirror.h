// Mirrors host-described API calls onto the GPU: every input tensor is copied to a fresh device
// buffer, every output gets a poisoned device buffer (0xff bytes: NaN in every float type), the
// call runs on the device, and the outputs come back into the host tensors.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "flashattn/flashattn.h"
#include "gpu_test_util.h"

namespace flashattn::gpu_test {

class DeviceMirror {
 public:
  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror() {
    for (void* p : allocations_) cudaFree(p);
  }

  // Host views here are contiguous (test::HostTensor), so the byte span is numel * size.
  TensorView upload(const TensorView& host) {
    if (!host.defined()) return host;
    TensorView dev = allocate_like(host);
    CUDA_CHECK(cudaMemcpy(dev.data, host.data, bytes(host), cudaMemcpyHostToDevice));
    return dev;
  }
  TensorView output(const TensorView& host) {
    if (!host.defined()) return host;
    TensorView dev = allocate_like(host);
    CUDA_CHECK(cudaMemset(dev.data, 0xff, bytes(host)));
    outputs_.push_back({dev, host});
    return dev;
  }
  // An input the call also writes (a KV cache it appends to): uploaded and downloaded.
  TensorView inout(const TensorView& host) {
    if (!host.defined()) return host;
    TensorView dev = upload(host);
    outputs_.push_back({dev, host});
    return dev;
  }
  // Waits for the device and copies every output back to its host view.
  void download() {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [dev, host] : outputs_) CUDA_CHECK(cudaMemcpy(host.data, dev.data, bytes(host), cudaMemcpyDeviceToHost));
  }

 private:
  static size_t bytes(const TensorView& v) { return size_t(v.numel()) * dtype_size(v.dtype); }
  TensorView allocate_like(const TensorView& host) {
    TensorView dev = host;
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes(host) + 16));
    allocations_.push_back(p);
    dev.data = p;
    dev.device = DeviceType::Cuda;
    dev.device_index = 0;
    return dev;
  }
  std::vector<void*> allocations_;
  std::vector<std::pair<TensorView, TensorView>> outputs_;
};

// An entry point called on params whose tensors are on the device: the public API by default,
// a backend entry with a forced plan in the plan tests (forced_plans.h).
using DeviceFwd = std::function<Status(const FwdParams&)>;
using DeviceBwd = std::function<Status(const BwdParams&)>;
using DeviceKvCache = std::function<Status(const KvCacheParams&)>;

inline Status fwd_on_device_via(const FwdParams& host, const DeviceFwd& call) {
  DeviceMirror m;
  FwdParams d = host;
  d.q = m.upload(host.q);
  d.k = m.upload(host.k);
  d.v = m.upload(host.v);
  d.alibi_slopes = m.upload(host.alibi_slopes);
  d.cu_seqlens_q = m.upload(host.cu_seqlens_q);
  d.cu_seqlens_k = m.upload(host.cu_seqlens_k);
  d.seqused_k = m.upload(host.seqused_k);
  d.block_table = m.upload(host.block_table);
  d.q_descale = m.upload(host.q_descale);
  d.k_descale = m.upload(host.k_descale);
  d.v_descale = m.upload(host.v_descale);
  d.out = m.output(host.out);
  d.softmax_lse = m.output(host.softmax_lse);
  const Status st = call(d);
  m.download();
  return st;
}

inline Status fwd_on_device(const FwdParams& host) {
  return fwd_on_device_via(host, [](const FwdParams& d) { return fwd(d); });
}

inline Status kvcache_on_device_via(const KvCacheParams& host, const DeviceKvCache& call) {
  DeviceMirror m;
  KvCacheParams d = host;
  d.q = m.upload(host.q);
  d.k_cache = m.inout(host.k_cache);
  d.v_cache = m.inout(host.v_cache);
  d.k_new = m.upload(host.k_new);
  d.v_new = m.upload(host.v_new);
  d.cu_seqlens_q = m.upload(host.cu_seqlens_q);
  d.cache_seqlens = m.upload(host.cache_seqlens);
  d.cache_batch_idx = m.upload(host.cache_batch_idx);
  d.cache_leftpad = m.upload(host.cache_leftpad);
  d.block_table = m.upload(host.block_table);
  d.rotary_cos = m.upload(host.rotary_cos);
  d.rotary_sin = m.upload(host.rotary_sin);
  d.alibi_slopes = m.upload(host.alibi_slopes);
  d.q_descale = m.upload(host.q_descale);
  d.k_descale = m.upload(host.k_descale);
  d.v_descale = m.upload(host.v_descale);
  d.out = m.output(host.out);
  d.softmax_lse = m.output(host.softmax_lse);
  const Status st = call(d);
  m.download();
  return st;
}

inline Status kvcache_on_device(const KvCacheParams& host) {
  return kvcache_on_device_via(host, [](const KvCacheParams& d) { return fwd_kvcache(d); });
}

inline Status combine_on_device(const CombineParams& host) {
  DeviceMirror m;
  CombineParams d = host;
  d.out_partial = m.upload(host.out_partial);
  d.lse_partial = m.upload(host.lse_partial);
  d.out = m.output(host.out);
  d.softmax_lse = m.output(host.softmax_lse);
  const Status st = combine(d);
  m.download();
  return st;
}

inline Status bwd_on_device_via(const BwdParams& host, const DeviceBwd& call) {
  DeviceMirror m;
  BwdParams d = host;
  d.q = m.upload(host.q);
  d.k = m.upload(host.k);
  d.v = m.upload(host.v);
  d.out = m.upload(host.out);
  d.dout = m.upload(host.dout);
  d.softmax_lse = m.upload(host.softmax_lse);
  d.alibi_slopes = m.upload(host.alibi_slopes);
  d.cu_seqlens_q = m.upload(host.cu_seqlens_q);
  d.cu_seqlens_k = m.upload(host.cu_seqlens_k);
  d.seqused_k = m.upload(host.seqused_k);
  d.dq = m.output(host.dq);
  d.dk = m.output(host.dk);
  d.dv = m.output(host.dv);
  const Status st = call(d);
  m.download();
  return st;
}

inline Status bwd_on_device(const BwdParams& host) {
  return bwd_on_device_via(host, [](const BwdParams& d) { return bwd(d); });
}

}  // namespace flashattn::gpu_test
