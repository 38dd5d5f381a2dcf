// Uses only the installed public header: one key, so the output must equal v exactly.
#include <flashattn/flashattn.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace flashattn;
  std::vector<float> q(2 * 8, 0.5f), k(8, 0.25f), v(8), out(2 * 8, -1.f);
  for (int i = 0; i < 8; ++i) v[i] = float(i) - 3.5f;
  FwdParams p;
  p.q = TensorView::contiguous(q.data(), DType::F32, {1, 2, 1, 8});
  p.k = TensorView::contiguous(k.data(), DType::F32, {1, 1, 1, 8});
  p.v = TensorView::contiguous(v.data(), DType::F32, {1, 1, 1, 8});
  p.out = TensorView::contiguous(out.data(), DType::F32, {1, 2, 1, 8});
  const Status st = fwd(p);
  if (!st.ok()) {
    std::fprintf(stderr, "fwd failed: %s\n", st.message().c_str());
    return 1;
  }
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 8; ++i)
      if (out[r * 8 + i] != v[i]) {
        std::fprintf(stderr, "out[%d][%d] = %g, expected %g\n", r, i, out[r * 8 + i], v[i]);
        return 1;
      }
  std::printf("flashattn %s found and working\n", version());
  return 0;
}
