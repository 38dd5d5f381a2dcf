// The checks of each entry point, composed from the rules in rules.h, and the normalised
// problems built from the parameters once every check passed.
#include "api/validate.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "api/rules.h"

namespace flashattn::api {

namespace {

// A tensor argument and the name errors give it. Optional arguments may be undefined.
struct Named {
  const TensorView& view;
  const char* name;
};
using NamedList = std::initializer_list<Named>;

Status check_all_well_formed(NamedList list) {
  for (const Named& n : list) FA_CHECK(check_well_formed(n.view, n.name));
  return {};
}

Status check_all_same_device(NamedList list, const TensorView& reference, const char* reference_name) {
  for (const Named& n : list)
    if (n.view.defined()) FA_CHECK(check_same_device(n.view, n.name, reference, reference_name));
  return {};
}

Status check_all_dims_fit_int32(NamedList list) {
  for (const Named& n : list) FA_CHECK(check_dims_fit_int32(n.view, n.name));
  return {};
}

Status check_all_last_dim_contiguous(NamedList list) {
  for (const Named& n : list) FA_CHECK(check_last_dim_contiguous(n.view, n.name));
  return {};
}

Status check_all_contiguous(NamedList list) {
  for (const Named& n : list)
    if (n.view.defined()) FA_CHECK(check_contiguous(n.view, n.name));
  return {};
}

Status check_all_aligned(NamedList list, Alignment kind) {
  for (const Named& n : list)
    if (n.view.defined()) FA_CHECK(check_alignment(n.view, n.name, kind));
  return {};
}

Status check_all_data(NamedList list) {
  for (const Named& n : list) FA_CHECK(check_data(n.view, n.name));
  return {};
}

Status check_all_dtype(NamedList list, DType dtype) {
  for (const Named& n : list)
    if (n.view.defined()) FA_CHECK(check_dtype(n.view, n.name, dtype));
  return {};
}

// Outputs alias neither themselves, nor each other, nor any input they would clobber.
Status check_outputs_disjoint(NamedList outputs, NamedList inputs) {
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    if (!out->view.defined()) continue;
    FA_CHECK(check_no_self_overlap(out->view, out->name));
    for (auto other = outputs.begin(); other != out; ++other)
      FA_CHECK(check_no_overlap(out->view, out->name, other->view, other->name));
    for (const Named& in : inputs) FA_CHECK(check_no_overlap(out->view, out->name, in.view, in.name));
  }
  return {};
}

const int32_t* int_pointer(const TensorView& t) {
  return t.defined() ? static_cast<const int32_t*>(t.data) : nullptr;
}

// (batch, seq, heads, dim) with any strides.
RowsView dense_rows(const TensorView& t) {
  RowsView rows;
  rows.data = t.data;
  rows.batch_stride = t.stride[0];
  rows.row_stride = t.stride[1];
  rows.head_stride = t.stride[2];
  return rows;
}

// (total, heads, dim): sequence b starts at row cu_seqlens[b].
RowsView varlen_rows(const TensorView& t, const TensorView& cu_seqlens) {
  RowsView rows;
  rows.data = t.data;
  rows.row_stride = t.stride[0];
  rows.head_stride = t.stride[1];
  rows.cu_seqlens = int_pointer(cu_seqlens);
  rows.extent = t.shape[0];  // cu_seqlens entries are clamped to the rows
  return rows;
}

// (num_blocks, page_size, heads, dim) pages, sequence b's page p at block_table[b][p].
RowsView paged_rows(const TensorView& t, const TensorView& block_table) {
  RowsView rows = dense_rows(t);  // batch_stride is the page stride; rows within a page use row_stride
  rows.block_table = int_pointer(block_table);
  rows.block_table_stride = block_table.stride[0];
  rows.page_size = t.shape[1];
  rows.extent = t.shape[0];  // block_table entries are clamped to the pages
  rows.positions = block_table.shape[1] * t.shape[1];
  return rows;
}

// (batch, heads, seqlen) dense, or (heads, total) with cu_seqlens.
LseView lse_view(const TensorView& t, const TensorView& cu_seqlens_q) {
  LseView lse;
  if (!t.defined()) return lse;
  lse.data = static_cast<float*>(t.data);
  if (cu_seqlens_q.defined()) {
    lse.head_stride = t.stride[0];
    lse.row_stride = t.stride[1];
    lse.cu_seqlens = int_pointer(cu_seqlens_q);
    lse.total = t.shape[1];
  } else {
    lse.batch_stride = t.stride[0];
    lse.head_stride = t.stride[1];
    lse.row_stride = t.stride[2];
  }
  return lse;
}

// fp8 descales: float32 (batch, heads_k) on q's device, any strides, only with fp8 inputs.
// `heads_from` names the tensor heads_k comes from (k, or k_cache).
Status check_descales(const Fp8Descales& d, const TensorView& q, int64_t batch, int64_t heads_k,
                      std::string_view heads_from) {
  const std::string heads_meaning = "heads_k of " + std::string(heads_from);
  for (const Named& n : NamedList{{d.q_descale, "q_descale"}, {d.k_descale, "k_descale"}, {d.v_descale, "v_descale"}}) {
    if (!n.view.defined()) continue;
    FA_CHECK(check_descale_needs_fp8(n.view, n.name, q.dtype));
    FA_CHECK(check_same_device(n.view, n.name, q, "q"));
    FA_CHECK(check_dtype(n.view, n.name, DType::F32));
    FA_CHECK(check_ndim(n.view, n.name, 2, "(batch, heads_k)"));
    FA_CHECK(check_shape(n.view, n.name, {{batch, "the batch"}, {heads_k, heads_meaning}}));
    FA_CHECK(check_alignment(n.view, n.name, Alignment::Element));
    FA_CHECK(check_data(n.view, n.name));
  }
  return {};
}

DescaleView descale_view(const TensorView& t) {
  DescaleView view;
  if (!t.defined()) return view;
  view.data = static_cast<const float*>(t.data);
  view.batch_stride = t.stride[0];
  view.head_stride = t.stride[1];
  return view;
}

void fill_descales(const Fp8Descales& d, AttnProblem* p) {
  p->q_descale = descale_view(d.q_descale);
  p->k_descale = descale_view(d.k_descale);
  p->v_descale = descale_view(d.v_descale);
}

Status check_options(const AttnOptions& options) {
  FA_CHECK(check_workspace(options.workspace));
  FA_CHECK(check_window(options.window_left, "window_left"));
  FA_CHECK(check_window(options.window_right, "window_right"));
  FA_CHECK(check_softcap(options.softcap));
  FA_CHECK(check_softmax_scale(options.softmax_scale));
  return {};
}

// Scale, softcap, mask and ALiBi of a validated call.
void fill_options(const AttnOptions& options, int64_t head_dim, AttnProblem* p) {
  p->score.scale = options.softmax_scale ? *options.softmax_scale : float(1.0 / std::sqrt(double(head_dim)));
  p->score.softcap = options.softcap;
  // Causal is the window (left, 0); a window_left given with it still applies. Windows wider
  // than the sequence are left as given: the mask predicates treat them like -1.
  p->mask.window_left = options.window_left;
  p->mask.window_right = options.causal ? 0 : options.window_right;
  const TensorView& alibi = options.alibi_slopes;
  if (alibi.defined()) {
    p->alibi_slopes = static_cast<const float*>(alibi.data);
    p->alibi_batch_stride = alibi.ndim == 2 ? alibi.stride[0] : 0;
  }
}

// What fwd and bwd share: q, k, v, out, softmax_lse, the varlen arguments and the options.
struct AttentionArgs {
  const AttnOptions& options;
  const VarlenArgs& varlen;
  const DropoutArgs& dropout;
  const TensorView& q;
  const TensorView& k;
  const TensorView& v;
  const TensorView& out;
  const TensorView& lse;
  const TensorView& block_table;  // forward only: a paged k/v under varlen queries
  bool lse_required;
  bool allow_f32_outputs;
};

// Checks the shared rules (the views must already be well formed) and fills everything of the
// problem but num_splits.
Status build_attention(const AttentionArgs& a, AttnProblem* problem) {
  const TensorView &q = a.q, &k = a.k, &v = a.v, &out = a.out, &lse = a.lse;
  const TensorView &cu_q = a.varlen.cu_seqlens_q, &cu_k = a.varlen.cu_seqlens_k, &seqused = a.varlen.seqused_k;
  const TensorView& alibi = a.options.alibi_slopes;
  const TensorView& table = a.block_table;
  const bool paged = table.defined();

  // Presence.
  FA_CHECK(check_defined(q, "q"));
  FA_CHECK(check_defined(k, "k"));
  FA_CHECK(check_defined(v, "v"));
  FA_CHECK(check_defined(out, "out"));
  if (a.lse_required) FA_CHECK(check_defined(lse, "softmax_lse"));
  FA_CHECK(check_paired(cu_q, "cu_seqlens_q", cu_k, "cu_seqlens_k"));
  const bool varlen = cu_q.defined();
  if (paged) FA_CHECK(check_paged_needs_varlen(varlen));

  // Placement and dtypes.
  FA_CHECK(check_all_same_device({{k, "k"}, {v, "v"}, {out, "out"}, {lse, "softmax_lse"}, {alibi, "alibi_slopes"},
                                  {cu_q, "cu_seqlens_q"}, {cu_k, "cu_seqlens_k"}, {seqused, "seqused_k"},
                                  {table, "block_table"}},
                                 q, "q"));
  FA_CHECK(check_attention_dtype(q, "q"));
  FA_CHECK(check_dtype_matches(k, "k", q.dtype, "q"));
  FA_CHECK(check_dtype_matches(v, "v", q.dtype, "q"));
  FA_CHECK(check_output_dtype(out, "out", q.dtype, a.allow_f32_outputs));
  FA_CHECK(check_all_dtype({{lse, "softmax_lse"}, {alibi, "alibi_slopes"}}, DType::F32));
  FA_CHECK(check_all_dtype(
      {{cu_q, "cu_seqlens_q"}, {cu_k, "cu_seqlens_k"}, {seqused, "seqused_k"}, {table, "block_table"}}, DType::I32));

  // Ranks: 4 dense, 3 varlen (rows of all sequences packed); a paged k/v is 4 (pages of rows).
  const int rank = varlen ? 3 : 4, rank_k = paged ? 4 : rank;
  FA_CHECK(check_ndim(q, "q", rank,
                      varlen ? "(total_q, heads_q, head_dim) with cu_seqlens" : "(batch, seqlen_q, heads_q, head_dim)"));
  FA_CHECK(check_ndim(k, "k", rank_k,
                      paged    ? "(num_blocks, page_size, heads_k, head_dim) with block_table"
                      : varlen ? "(total_k, heads_k, head_dim) with cu_seqlens"
                               : "(batch, seqlen_k, heads_k, head_dim)"));
  FA_CHECK(check_ndim(v, "v", rank_k,
                      paged    ? "(num_blocks, page_size, heads_k, head_dim_v) with block_table"
                      : varlen ? "(total_k, heads_k, head_dim_v) with cu_seqlens"
                               : "(batch, seqlen_k, heads_k, head_dim_v)"));
  if (paged) FA_CHECK(check_ndim(table, "block_table", 2, "(batch, max_blocks_per_seq)"));
  FA_CHECK(check_ndim(out, "out", rank,
                      varlen ? "(total_q, heads_q, head_dim_v) with cu_seqlens"
                             : "(batch, seqlen_q, heads_q, head_dim_v)"));
  if (lse.defined())
    FA_CHECK(check_ndim(lse, "softmax_lse", varlen ? 2 : 3,
                        varlen ? "(heads_q, total_q) with cu_seqlens" : "(batch, heads_q, seqlen_q)"));
  if (varlen) {
    FA_CHECK(check_ndim(cu_q, "cu_seqlens_q", 1, "(batch + 1)"));
    FA_CHECK(check_ndim(cu_k, "cu_seqlens_k", 1, "(batch + 1)"));
    FA_CHECK(check_cu_seqlens_length(cu_q, "cu_seqlens_q"));
  }
  if (seqused.defined()) FA_CHECK(check_ndim(seqused, "seqused_k", 1, "(batch)"));

  // Sizes and their consistency across tensors.
  const int64_t batch = varlen ? cu_q.shape[0] - 1 : q.shape[0];
  // seqlen (dense) or total (varlen); a paged k/v holds max_blocks_per_seq * page_size per sequence
  const int64_t rows_q = q.shape[rank - 3];
  const int64_t rows_k = paged ? table.shape[1] * k.shape[1] : k.shape[rank_k - 3];
  const int64_t heads_q = q.shape[rank - 2], heads_k = k.shape[rank_k - 2];
  const int64_t head_dim = q.shape[rank - 1], head_dim_v = v.shape[rank_k - 1];
  FA_CHECK(check_heads_positive(heads_q, "q", "heads_q"));
  FA_CHECK(check_heads_positive(heads_k, "k", "heads_k"));
  FA_CHECK(check_gqa(heads_q, heads_k, "k"));
  FA_CHECK(check_head_dim(head_dim, "q", "head_dim"));
  FA_CHECK(check_head_dim(head_dim_v, "v", "head_dim_v"));
  if (paged) {
    FA_CHECK(check_page_size(k.shape[1], "k"));
    FA_CHECK(check_dim(k, "k", 3, {head_dim, "the head_dim of q"}));
    FA_CHECK(check_shape(v, "v",
                         {{k.shape[0], "dim 0 of k"}, {k.shape[1], "dim 1 of k"}, {heads_k, "heads_k of k"},
                          {head_dim_v, "head_dim_v"}}));
    FA_CHECK(check_dim(table, "block_table", 0, {batch, "the batch (len(cu_seqlens_q) - 1)"}));
    FA_CHECK(check_cache_capacity(rows_k, "block_table", "max_blocks_per_seq * page_size"));
  } else if (varlen) {
    FA_CHECK(check_dim(k, "k", 2, {head_dim, "the head_dim of q"}));
    FA_CHECK(check_shape(v, "v", {{rows_k, "the total_k of k"}, {heads_k, "heads_k of k"}, {head_dim_v, "head_dim_v"}}));
  }
  if (varlen) {
    FA_CHECK(check_shape(out, "out",
                         {{rows_q, "the total_q of q"}, {heads_q, "heads_q of q"}, {head_dim_v, "the head_dim_v of v"}}));
    if (lse.defined())
      FA_CHECK(check_shape(lse, "softmax_lse", {{heads_q, "heads_q of q"}, {rows_q, "the total_q of q"}}));
    FA_CHECK(check_dim(cu_k, "cu_seqlens_k", 0, {batch + 1, "the length of cu_seqlens_q"}));
  } else {
    FA_CHECK(check_dim(k, "k", 0, {batch, "the batch of q"}));
    FA_CHECK(check_dim(k, "k", 3, {head_dim, "the head_dim of q"}));
    FA_CHECK(check_shape(v, "v",
                         {{batch, "the batch of q"}, {rows_k, "the seqlen_k of k"}, {heads_k, "heads_k of k"},
                          {head_dim_v, "head_dim_v"}}));
    FA_CHECK(check_shape(out, "out",
                         {{batch, "the batch of q"}, {rows_q, "the seqlen_q of q"}, {heads_q, "heads_q of q"},
                          {head_dim_v, "the head_dim_v of v"}}));
    if (lse.defined())
      FA_CHECK(check_shape(lse, "softmax_lse",
                           {{batch, "the batch of q"}, {heads_q, "heads_q of q"}, {rows_q, "the seqlen_q of q"}}));
  }
  if (seqused.defined()) FA_CHECK(check_dim(seqused, "seqused_k", 0, {batch, "the batch"}));
  if (alibi.defined()) FA_CHECK(check_alibi_shape(alibi, batch, heads_q));
  FA_CHECK(check_all_dims_fit_int32({{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "softmax_lse"},
                                     {cu_q, "cu_seqlens_q"}, {cu_k, "cu_seqlens_k"}, {seqused, "seqused_k"},
                                     {alibi, "alibi_slopes"}, {table, "block_table"}}));

  // Memory layout.
  FA_CHECK(check_all_last_dim_contiguous({{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "softmax_lse"},
                                          {alibi, "alibi_slopes"}, {table, "block_table"}}));
  FA_CHECK(check_all_contiguous({{cu_q, "cu_seqlens_q"}, {cu_k, "cu_seqlens_k"}, {seqused, "seqused_k"}}));
  FA_CHECK(check_all_aligned({{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}}, Alignment::Vectorized));
  FA_CHECK(check_all_aligned({{lse, "softmax_lse"}, {alibi, "alibi_slopes"}, {cu_q, "cu_seqlens_q"},
                              {cu_k, "cu_seqlens_k"}, {seqused, "seqused_k"}, {table, "block_table"}},
                             Alignment::Element));
  FA_CHECK(check_all_data({{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}, {lse, "softmax_lse"}, {alibi, "alibi_slopes"},
                           {cu_q, "cu_seqlens_q"}, {cu_k, "cu_seqlens_k"}, {seqused, "seqused_k"},
                           {table, "block_table"}}));

  // Sequence lengths (contents of host tensors only).
  SeqLens lens;
  lens.seqlen_q = rows_q;
  lens.seqlen_k = rows_k;
  lens.cu_seqlens_q = varlen ? int_pointer(cu_q) : nullptr;
  lens.total_q = varlen ? rows_q : batch * rows_q;
  lens.cu_seqlens_k = varlen ? int_pointer(cu_k) : nullptr;
  lens.total_k = paged ? 0 : varlen ? rows_k : batch * rows_k;
  // (No pages: no sequence can have keys, whatever the CUDA contents say.)
  lens.k_capacity = paged && k.shape[0] > 0 ? rows_k : 0;
  lens.seqused_k = int_pointer(seqused);
  if (varlen) {
    FA_CHECK(check_cu_seqlens_contents(cu_q, "cu_seqlens_q", batch, rows_q, "rows of q (total_q)"));
    if (paged)
      FA_CHECK(check_paged_seqlens_contents(cu_k, batch, rows_k));
    else
      FA_CHECK(check_cu_seqlens_contents(cu_k, "cu_seqlens_k", batch, rows_k, "rows of k (total_k)"));
  }
  if (seqused.defined())
    FA_CHECK(check_seqused_contents(seqused, "seqused_k", batch, varlen ? int_pointer(cu_k) : nullptr, rows_k));
  if (varlen) {
    const int max_q = a.varlen.max_seqlen_q, max_k = a.varlen.max_seqlen_k;
    FA_CHECK(check_max_seqlen_value(max_q, "max_seqlen_q"));
    FA_CHECK(check_max_seqlen_value(max_k, "max_seqlen_k"));
    if (q.device == DeviceType::Cpu) {
      int64_t longest_q = 0, longest_k = 0;
      for (int64_t b = 0; b < batch; ++b) {
        longest_q = std::max(longest_q, lens.q(b));
        longest_k = std::max(longest_k, lens.k(b));
      }
      FA_CHECK(check_max_seqlen_bound(max_q, "max_seqlen_q", longest_q));
      FA_CHECK(check_max_seqlen_bound(max_k, "max_seqlen_k", longest_k));
      lens.seqlen_q = max_q > 0 ? max_q : longest_q;
      lens.seqlen_k = max_k > 0 ? max_k : longest_k;
    } else {
      if (batch > 0) {
        FA_CHECK(check_max_seqlen_derivable(max_q, "max_seqlen_q", cu_q, "cu_seqlens_q"));
        FA_CHECK(check_max_seqlen_derivable(max_k, "max_seqlen_k", cu_k, "cu_seqlens_k"));
      }
      lens.seqlen_q = max_q;
      lens.seqlen_k = max_k;
    }
    if (paged) FA_CHECK(check_paged_max_seqlen(max_k, rows_k));
  }
  if (paged && table.device == DeviceType::Cpu) {
    std::vector<PositionRange> used(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) used[size_t(b)] = {0, lens.k(b)};
    FA_CHECK(check_block_table_contents(table, k.shape[0], k.shape[1], used, "k"));
  }

  FA_CHECK(check_options(a.options));
  FA_CHECK(check_dropout(a.dropout.dropout_p));

  AttnProblem& p = *problem;
  p.dtype = q.dtype;
  p.out_dtype = out.dtype;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_k = heads_k;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.q = varlen ? varlen_rows(q, cu_q) : dense_rows(q);
  p.k = paged ? paged_rows(k, table) : varlen ? varlen_rows(k, cu_k) : dense_rows(k);
  p.v = paged ? paged_rows(v, table) : varlen ? varlen_rows(v, cu_k) : dense_rows(v);
  p.out = varlen ? varlen_rows(out, cu_q) : dense_rows(out);
  p.lse = lse_view(lse, varlen ? cu_q : TensorView{});
  p.lens = lens;
  fill_options(a.options, head_dim, &p);
  p.dropout_p = a.dropout.dropout_p;
  p.dropout_seed = a.dropout.dropout_seed;
  p.dropout_offset = a.dropout.dropout_offset;
  return {};
}

Status check_problem_pointer(const void* problem) {
  if (problem == nullptr) return invalid_argument("problem", "must point to the problem to fill", "nullptr");
  return {};
}

}  // namespace

Status make_fwd_problem(const FwdParams& params, AttnProblem* problem, ProblemOptions options) {
  FA_CHECK(check_problem_pointer(problem));
  FA_CHECK(check_backend(params.backend));
  const NamedList inputs = {{params.q, "q"},
                            {params.k, "k"},
                            {params.v, "v"},
                            {params.alibi_slopes, "alibi_slopes"},
                            {params.cu_seqlens_q, "cu_seqlens_q"},
                            {params.cu_seqlens_k, "cu_seqlens_k"},
                            {params.seqused_k, "seqused_k"},
                            {params.block_table, "block_table"},
                            {params.q_descale, "q_descale"},
                            {params.k_descale, "k_descale"},
                            {params.v_descale, "v_descale"}};
  const NamedList outputs = {{params.out, "out"}, {params.softmax_lse, "softmax_lse"}};
  FA_CHECK(check_all_well_formed(inputs));
  FA_CHECK(check_all_well_formed(outputs));

  AttnProblem built;
  FA_CHECK(build_attention({params, params, params, params.q, params.k, params.v, params.out, params.softmax_lse,
                            params.block_table, /*lse_required=*/false, options.allow_f32_outputs},
                           &built));
  FA_CHECK(check_descales(params, params.q, built.batch, built.heads_k, "k"));
  if (params.q.dtype == DType::F8E4M3) FA_CHECK(check_fp8_no_dropout(params.dropout_p));
  FA_CHECK(check_num_splits(params.num_splits));
  FA_CHECK(check_outputs_disjoint(outputs, inputs));
  fill_descales(params, &built);
  built.num_splits = params.num_splits;
  *problem = built;
  return {};
}

Status make_bwd_problem(const BwdParams& params, BwdProblem* problem, ProblemOptions options) {
  FA_CHECK(check_problem_pointer(problem));
  FA_CHECK(check_backend(params.backend));
  const TensorView &q = params.q, &dout = params.dout, &dq = params.dq, &dk = params.dk, &dv = params.dv;
  const NamedList inputs = {{params.q, "q"},
                            {params.k, "k"},
                            {params.v, "v"},
                            {params.out, "out"},
                            {params.dout, "dout"},
                            {params.softmax_lse, "softmax_lse"},
                            {params.alibi_slopes, "alibi_slopes"},
                            {params.cu_seqlens_q, "cu_seqlens_q"},
                            {params.cu_seqlens_k, "cu_seqlens_k"},
                            {params.seqused_k, "seqused_k"}};
  const NamedList outputs = {{dq, "dq"}, {dk, "dk"}, {dv, "dv"}};
  FA_CHECK(check_all_well_formed(inputs));
  FA_CHECK(check_all_well_formed(outputs));
  // Before the shared rules: an fp8 call would otherwise fail on out's dtype first.
  FA_CHECK(check_fp8_has_no_backward(q));

  BwdProblem built;
  const TensorView not_paged;  // the backward takes no paged k/v
  FA_CHECK(build_attention({params, params, params, params.q, params.k, params.v, params.out, params.softmax_lse,
                            not_paged, /*lse_required=*/true, options.allow_f32_outputs},
                           &built.fwd));
  const bool varlen = params.cu_seqlens_q.defined();
  FA_CHECK(check_defined(dout, "dout"));
  FA_CHECK(check_defined(dq, "dq"));
  FA_CHECK(check_defined(dk, "dk"));
  FA_CHECK(check_defined(dv, "dv"));
  FA_CHECK(check_all_same_device({{dout, "dout"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}}, q, "q"));
  FA_CHECK(check_output_dtype(dout, "dout", q.dtype, options.allow_f32_outputs));
  FA_CHECK(check_output_dtype(dq, "dq", q.dtype, options.allow_f32_outputs));
  // One dtype for the three gradients: the backends write them alike.
  FA_CHECK(check_dtype_matches(dk, "dk", dq.dtype, "dq"));
  FA_CHECK(check_dtype_matches(dv, "dv", dq.dtype, "dq"));
  FA_CHECK(check_same_shape(dout, "dout", params.out, "out"));
  FA_CHECK(check_same_shape(dq, "dq", params.q, "q"));
  FA_CHECK(check_same_shape(dk, "dk", params.k, "k"));
  FA_CHECK(check_same_shape(dv, "dv", params.v, "v"));
  FA_CHECK(check_all_last_dim_contiguous({{dout, "dout"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}}));
  FA_CHECK(check_all_aligned({{dout, "dout"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}}, Alignment::Vectorized));
  FA_CHECK(check_all_data({{dout, "dout"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}}));
  FA_CHECK(check_outputs_disjoint(outputs, inputs));

  const auto rows = [&](const TensorView& t, const TensorView& cu) {
    return varlen ? varlen_rows(t, cu) : dense_rows(t);
  };
  built.fwd.out_dtype = dq.dtype;  // equal to out's dtype unless allow_f32_outputs (see validate.h)
  built.dout = rows(dout, params.cu_seqlens_q);
  built.dq = rows(dq, params.cu_seqlens_q);
  built.dk = rows(dk, params.cu_seqlens_k);
  built.dv = rows(dv, params.cu_seqlens_k);
  built.dout_dtype = dout.dtype;
  built.deterministic = params.deterministic;
  *problem = built;
  return {};
}

Status make_kvcache_problem(const KvCacheParams& params, KvCacheProblem* problem, ProblemOptions options) {
  FA_CHECK(check_problem_pointer(problem));
  FA_CHECK(check_backend(params.backend));
  const TensorView &q = params.q, &k_cache = params.k_cache, &v_cache = params.v_cache;
  const TensorView &k_new = params.k_new, &v_new = params.v_new, &out = params.out, &lse = params.softmax_lse;
  const TensorView &cache_seqlens = params.cache_seqlens, &batch_idx = params.cache_batch_idx;
  const TensorView& leftpad = params.cache_leftpad;
  const TensorView &block_table = params.block_table, &cos = params.rotary_cos, &sin = params.rotary_sin;
  const TensorView &alibi = params.alibi_slopes, &cu_q = params.cu_seqlens_q;
  const NamedList all = {{q, "q"},
                         {cu_q, "cu_seqlens_q"},
                         {k_cache, "k_cache"},
                         {v_cache, "v_cache"},
                         {k_new, "k_new"},
                         {v_new, "v_new"},
                         {cache_seqlens, "cache_seqlens"},
                         {batch_idx, "cache_batch_idx"},
                         {leftpad, "cache_leftpad"},
                         {block_table, "block_table"},
                         {cos, "rotary_cos"},
                         {sin, "rotary_sin"},
                         {alibi, "alibi_slopes"},
                         {params.q_descale, "q_descale"},
                         {params.k_descale, "k_descale"},
                         {params.v_descale, "v_descale"},
                         {out, "out"},
                         {lse, "softmax_lse"}};
  FA_CHECK(check_all_well_formed(all));

  // Presence.
  FA_CHECK(check_defined(q, "q"));
  FA_CHECK(check_defined(k_cache, "k_cache"));
  FA_CHECK(check_defined(v_cache, "v_cache"));
  FA_CHECK(check_defined(out, "out"));
  FA_CHECK(check_paired(k_new, "k_new", v_new, "v_new"));
  FA_CHECK(check_paired(cos, "rotary_cos", sin, "rotary_sin"));
  FA_CHECK(check_required_with(cache_seqlens, "cache_seqlens", k_new, "k_new"));
  FA_CHECK(check_absent_with(batch_idx, "cache_batch_idx", block_table, "block_table"));
  const bool paged = block_table.defined(), appends = k_new.defined(), rotary = cos.defined();
  const bool varlen = cu_q.defined();

  // Placement and dtypes.
  FA_CHECK(check_all_same_device({{k_cache, "k_cache"}, {v_cache, "v_cache"}, {k_new, "k_new"}, {v_new, "v_new"},
                                  {cache_seqlens, "cache_seqlens"}, {batch_idx, "cache_batch_idx"},
                                  {leftpad, "cache_leftpad"}, {block_table, "block_table"}, {cos, "rotary_cos"},
                                  {sin, "rotary_sin"}, {alibi, "alibi_slopes"}, {out, "out"}, {lse, "softmax_lse"},
                                  {cu_q, "cu_seqlens_q"}},
                                 q, "q"));
  FA_CHECK(check_attention_dtype(q, "q"));
  if (q.dtype == DType::F8E4M3) FA_CHECK(check_fp8_no_rotary(cos));
  for (const Named& n : NamedList{{k_cache, "k_cache"}, {v_cache, "v_cache"}, {k_new, "k_new"}, {v_new, "v_new"},
                                  {cos, "rotary_cos"}, {sin, "rotary_sin"}})
    if (n.view.defined()) FA_CHECK(check_dtype_matches(n.view, n.name, q.dtype, "q"));
  FA_CHECK(check_output_dtype(out, "out", q.dtype, options.allow_f32_outputs));
  FA_CHECK(check_all_dtype({{lse, "softmax_lse"}, {alibi, "alibi_slopes"}}, DType::F32));
  FA_CHECK(check_all_dtype({{cache_seqlens, "cache_seqlens"}, {batch_idx, "cache_batch_idx"},
                            {leftpad, "cache_leftpad"}, {block_table, "block_table"}, {cu_q, "cu_seqlens_q"}},
                           DType::I32));

  // Ranks: q, out and softmax_lse lose their batch dimension with cu_seqlens_q.
  const int rank_q = varlen ? 3 : 4;
  FA_CHECK(check_ndim(q, "q", rank_q,
                      varlen ? "(total_q, heads_q, head_dim) with cu_seqlens_q" : "(batch, seqlen_q, heads_q, head_dim)"));
  if (varlen) {
    FA_CHECK(check_ndim(cu_q, "cu_seqlens_q", 1, "(batch + 1)"));
    FA_CHECK(check_cu_seqlens_length(cu_q, "cu_seqlens_q"));
  }
  const char* cache_layout =
      paged ? "(num_blocks, page_size, heads_k, head_dim) with block_table" : "(batch_cache, seqlen_cache, heads_k, head_dim)";
  FA_CHECK(check_ndim(k_cache, "k_cache", 4, cache_layout));
  FA_CHECK(check_ndim(v_cache, "v_cache", 4, cache_layout));
  if (appends) {
    FA_CHECK(check_ndim(k_new, "k_new", 4, "(batch, seqlen_new, heads_k, head_dim)"));
    FA_CHECK(check_ndim(v_new, "v_new", 4, "(batch, seqlen_new, heads_k, head_dim_v)"));
  }
  FA_CHECK(check_ndim(out, "out", rank_q,
                      varlen ? "(total_q, heads_q, head_dim_v) with cu_seqlens_q" : "(batch, seqlen_q, heads_q, head_dim_v)"));
  if (lse.defined())
    FA_CHECK(check_ndim(lse, "softmax_lse", rank_q - 1,
                        varlen ? "(heads_q, total_q) with cu_seqlens_q" : "(batch, heads_q, seqlen_q)"));
  if (cache_seqlens.defined()) FA_CHECK(check_ndim(cache_seqlens, "cache_seqlens", 1, "(batch)"));
  if (batch_idx.defined()) FA_CHECK(check_ndim(batch_idx, "cache_batch_idx", 1, "(batch)"));
  if (leftpad.defined()) FA_CHECK(check_ndim(leftpad, "cache_leftpad", 1, "(batch)"));
  if (paged) FA_CHECK(check_ndim(block_table, "block_table", 2, "(batch, max_blocks_per_seq)"));
  if (rotary) {
    FA_CHECK(check_ndim(cos, "rotary_cos", 2, "(seqlen_ro, rotary_dim / 2)"));
    FA_CHECK(check_ndim(sin, "rotary_sin", 2, "(seqlen_ro, rotary_dim / 2)"));
  }

  // Sizes.
  const int64_t batch = varlen ? cu_q.shape[0] - 1 : q.shape[0];
  const int64_t rows_q = q.shape[rank_q - 3];  // seqlen_q, or total_q with cu_seqlens_q
  const int64_t heads_q = q.shape[rank_q - 2], head_dim = q.shape[rank_q - 1];
  const int64_t heads_k = k_cache.shape[2], head_dim_v = v_cache.shape[3];
  const int64_t seqlen_new = appends ? k_new.shape[1] : 0;
  FA_CHECK(check_heads_positive(heads_q, "q", "heads_q"));
  FA_CHECK(check_heads_positive(heads_k, "k_cache", "heads_k"));
  FA_CHECK(check_gqa(heads_q, heads_k, "k_cache"));
  FA_CHECK(check_head_dim(head_dim, "q", "head_dim"));
  FA_CHECK(check_head_dim(head_dim_v, "v_cache", "head_dim_v"));
  FA_CHECK(check_dim(k_cache, "k_cache", 3, {head_dim, "the head_dim of q"}));
  FA_CHECK(check_shape(v_cache, "v_cache",
                       {{k_cache.shape[0], "dim 0 of k_cache"}, {k_cache.shape[1], "dim 1 of k_cache"},
                        {heads_k, "heads_k of k_cache"}, {head_dim_v, "head_dim_v"}}));
  FA_CHECK(check_all_dims_fit_int32({{q, "q"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}, {k_new, "k_new"},
                                     {v_new, "v_new"}, {out, "out"}, {lse, "softmax_lse"}, {block_table, "block_table"},
                                     {cos, "rotary_cos"}, {sin, "rotary_sin"}, {alibi, "alibi_slopes"}}));
  int64_t capacity = 0;  // key slots of one sequence
  if (paged) {
    FA_CHECK(check_page_size(k_cache.shape[1]));
    FA_CHECK(check_dim(block_table, "block_table", 0, {batch, "the batch of q"}));
    capacity = block_table.shape[1] * k_cache.shape[1];
    FA_CHECK(check_cache_capacity(capacity, "block_table", "max_blocks_per_seq * page_size"));
  } else {
    capacity = k_cache.shape[1];
    if (!batch_idx.defined()) FA_CHECK(check_cache_rows(k_cache.shape[0], batch));
  }
  if (batch_idx.defined()) FA_CHECK(check_dim(batch_idx, "cache_batch_idx", 0, {batch, "the batch of q"}));
  if (cache_seqlens.defined()) FA_CHECK(check_dim(cache_seqlens, "cache_seqlens", 0, {batch, "the batch of q"}));
  if (leftpad.defined()) FA_CHECK(check_dim(leftpad, "cache_leftpad", 0, {batch, "the batch of q"}));
  if (appends) {
    FA_CHECK(check_shape(k_new, "k_new",
                         {{batch, "the batch of q"}, {seqlen_new, "seqlen_new"}, {heads_k, "heads_k of k_cache"},
                          {head_dim, "the head_dim of q"}}));
    FA_CHECK(check_shape(v_new, "v_new",
                         {{batch, "the batch of q"}, {seqlen_new, "the seqlen_new of k_new"},
                          {heads_k, "heads_k of k_cache"}, {head_dim_v, "the head_dim_v of v_cache"}}));
  }
  if (rotary) {
    FA_CHECK(check_same_shape(sin, "rotary_sin", cos, "rotary_cos"));
    FA_CHECK(check_rotary_dim(2 * cos.shape[1], head_dim));
  }
  if (varlen) {
    FA_CHECK(check_shape(out, "out",
                         {{rows_q, "the total_q of q"}, {heads_q, "heads_q of q"},
                          {head_dim_v, "the head_dim_v of v_cache"}}));
    if (lse.defined())
      FA_CHECK(check_shape(lse, "softmax_lse", {{heads_q, "heads_q of q"}, {rows_q, "the total_q of q"}}));
  } else {
    FA_CHECK(check_shape(out, "out",
                         {{batch, "the batch of q"}, {rows_q, "the seqlen_q of q"}, {heads_q, "heads_q of q"},
                          {head_dim_v, "the head_dim_v of v_cache"}}));
    if (lse.defined())
      FA_CHECK(check_shape(lse, "softmax_lse",
                           {{batch, "the batch of q"}, {heads_q, "heads_q of q"}, {rows_q, "the seqlen_q of q"}}));
  }
  if (alibi.defined()) FA_CHECK(check_alibi_shape(alibi, batch, heads_q));

  // Memory layout.
  FA_CHECK(check_all_last_dim_contiguous({{q, "q"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}, {k_new, "k_new"},
                                          {v_new, "v_new"}, {out, "out"}, {lse, "softmax_lse"},
                                          {block_table, "block_table"}, {cos, "rotary_cos"}, {sin, "rotary_sin"},
                                          {alibi, "alibi_slopes"}}));
  FA_CHECK(check_all_contiguous({{cache_seqlens, "cache_seqlens"},
                                 {batch_idx, "cache_batch_idx"},
                                 {leftpad, "cache_leftpad"},
                                 {cu_q, "cu_seqlens_q"}}));
  if (rotary) FA_CHECK(check_same_strides(sin, "rotary_sin", cos, "rotary_cos"));
  FA_CHECK(check_all_aligned(
      {{q, "q"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}, {k_new, "k_new"}, {v_new, "v_new"}, {out, "out"}},
      Alignment::Vectorized));
  FA_CHECK(check_all_aligned({{lse, "softmax_lse"}, {cache_seqlens, "cache_seqlens"}, {batch_idx, "cache_batch_idx"},
                              {leftpad, "cache_leftpad"}, {block_table, "block_table"}, {cos, "rotary_cos"},
                              {sin, "rotary_sin"}, {alibi, "alibi_slopes"}, {cu_q, "cu_seqlens_q"}},
                             Alignment::Element));
  FA_CHECK(check_all_data(all));

  // Contents (host tensors only).
  int64_t seqlen_q = rows_q;  // the longest query sequence (an upper bound with CUDA cu_seqlens_q)
  if (varlen) {
    FA_CHECK(check_cu_seqlens_contents(cu_q, "cu_seqlens_q", batch, rows_q, "rows of q (total_q)"));
    FA_CHECK(check_max_seqlen_value(params.max_seqlen_q, "max_seqlen_q"));
    if (cu_q.device == DeviceType::Cpu) {
      const int32_t* cu = int_pointer(cu_q);
      int64_t longest = 0;
      for (int64_t b = 0; b < batch; ++b) longest = std::max<int64_t>(longest, cu[b + 1] - cu[b]);
      FA_CHECK(check_max_seqlen_bound(params.max_seqlen_q, "max_seqlen_q", longest));
      seqlen_q = params.max_seqlen_q > 0 ? params.max_seqlen_q : longest;
    } else {
      if (batch > 0) FA_CHECK(check_max_seqlen_derivable(params.max_seqlen_q, "max_seqlen_q", cu_q, "cu_seqlens_q"));
      seqlen_q = params.max_seqlen_q;
    }
  }
  const int32_t* seqlens = int_pointer(cache_seqlens);
  if (cache_seqlens.defined()) FA_CHECK(check_cache_seqlens_contents(cache_seqlens, batch, seqlen_new, capacity));
  if (batch_idx.defined())
    FA_CHECK(check_cache_batch_idx_contents(batch_idx, batch, k_cache.shape[0], /*must_be_distinct=*/appends));
  const int32_t* leftpads = int_pointer(leftpad);
  if (leftpad.defined()) FA_CHECK(check_cache_leftpad_contents(leftpad, batch, seqlens, capacity));
  if (paged && block_table.device == DeviceType::Cpu) {
    std::vector<PositionRange> used(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t end = seqlens != nullptr ? int64_t(seqlens[b]) + seqlen_new : capacity;
      used[size_t(b)] = {leftpads != nullptr ? std::min<int64_t>(leftpads[b], end) : 0, end};
    }
    FA_CHECK(check_block_table_contents(block_table, k_cache.shape[0], k_cache.shape[1], used, "k_cache"));
    if (appends) FA_CHECK(check_block_table_writes(block_table, batch, k_cache.shape[1], seqlens, seqlen_new));
  }
  // Rotary positions of q: one per row with a causal or local mask, else all at the first new one.
  const bool q_per_row = params.causal || params.window_left >= 0 || params.window_right >= 0;
  if (rotary && q.device == DeviceType::Cpu)
    FA_CHECK(check_rotary_length(cos.shape[0], batch, seqlens, seqlen_new, seqlen_q, int_pointer(cu_q), q_per_row));

  FA_CHECK(check_descales(params, q, batch, heads_k, "k_cache"));
  FA_CHECK(check_options(params));
  FA_CHECK(check_num_splits(params.num_splits));

  // Written by the call: out and lse, and the cache when keys are appended.
  if (appends) {
    FA_CHECK(check_outputs_disjoint({{out, "out"}, {lse, "softmax_lse"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}},
                                    {{q, "q"}, {cu_q, "cu_seqlens_q"}, {k_new, "k_new"}, {v_new, "v_new"},
                                     {cache_seqlens, "cache_seqlens"},
                                     {batch_idx, "cache_batch_idx"}, {leftpad, "cache_leftpad"}, {block_table, "block_table"},
                                     {cos, "rotary_cos"}, {sin, "rotary_sin"}, {alibi, "alibi_slopes"},
                                     {params.q_descale, "q_descale"}, {params.k_descale, "k_descale"},
                                     {params.v_descale, "v_descale"}}));
  } else {
    FA_CHECK(check_outputs_disjoint({{out, "out"}, {lse, "softmax_lse"}},
                                    {{q, "q"}, {cu_q, "cu_seqlens_q"}, {k_cache, "k_cache"}, {v_cache, "v_cache"},
                                     {cache_seqlens, "cache_seqlens"}, {batch_idx, "cache_batch_idx"},
                                     {leftpad, "cache_leftpad"}, {block_table, "block_table"}, {cos, "rotary_cos"},
                                     {sin, "rotary_sin"}, {alibi, "alibi_slopes"}, {params.q_descale, "q_descale"},
                                     {params.k_descale, "k_descale"}, {params.v_descale, "v_descale"}}));
  }

  KvCacheProblem built;
  AttnProblem& p = built.attn;
  p.dtype = q.dtype;
  p.out_dtype = out.dtype;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_k = heads_k;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.q = varlen ? varlen_rows(q, cu_q) : dense_rows(q);
  p.k = dense_rows(k_cache);
  p.v = dense_rows(v_cache);
  for (RowsView* cache : {&p.k, &p.v}) {
    cache->row_offset = leftpads;
    cache->positions = capacity;    // row_offset entries are clamped to it
    cache->extent = k_cache.shape[0];  // pages, or the cache's sequences: entries clamped to them
    if (paged) {
      // batch_stride is the page stride; rows within a page use row_stride.
      cache->block_table = int_pointer(block_table);
      cache->block_table_stride = block_table.stride[0];
      cache->page_size = k_cache.shape[1];
    } else {
      cache->batch_index = int_pointer(batch_idx);
    }
  }
  p.out = varlen ? varlen_rows(out, cu_q) : dense_rows(out);
  p.lse = lse_view(lse, cu_q);
  p.lens.seqlen_q = seqlen_q;
  p.lens.cu_seqlens_q = int_pointer(cu_q);
  p.lens.total_q = varlen ? rows_q : p.batch * seqlen_q;
  // Without cache_seqlens every slot is a key; with them, a bound. (Paged or batch-indexed with no
  // pages or cache rows: no sequence can have keys, whatever the CUDA contents say.)
  p.lens.seqlen_k = (paged || batch_idx.defined()) && k_cache.shape[0] == 0 ? 0 : capacity;
  p.lens.cache_seqlens = seqlens;
  p.lens.seqlen_k_added = cache_seqlens.defined() ? seqlen_new : 0;
  p.lens.k_leftpad = leftpads;
  fill_options(params, head_dim, &p);
  fill_descales(params, &p);
  p.num_splits = params.num_splits;
  if (appends) {
    built.k_new = dense_rows(k_new);
    built.v_new = dense_rows(v_new);
    built.seqlen_new = seqlen_new;
  }
  if (rotary) {
    built.rotary.cos = cos.data;
    built.rotary.sin = sin.data;
    built.rotary.row_stride = cos.stride[0];
    built.rotary.rotary_dim = 2 * cos.shape[1];
    built.rotary.seqlen_ro = cos.shape[0];
    built.rotary.interleaved = params.rotary_interleaved;
  }
  built.rotary_q_per_row = q_per_row;
  *problem = built;
  return {};
}

Status make_combine_problem(const CombineParams& params, CombineProblem* problem) {
  FA_CHECK(check_problem_pointer(problem));
  FA_CHECK(check_backend(params.backend));
  FA_CHECK(check_workspace(params.workspace));
  const TensorView &out_partial = params.out_partial, &lse_partial = params.lse_partial;
  const TensorView &out = params.out, &lse = params.softmax_lse;
  const NamedList inputs = {{out_partial, "out_partial"}, {lse_partial, "lse_partial"}};
  const NamedList outputs = {{out, "out"}, {lse, "softmax_lse"}};
  FA_CHECK(check_all_well_formed(inputs));
  FA_CHECK(check_all_well_formed(outputs));
  FA_CHECK(check_defined(out_partial, "out_partial"));
  FA_CHECK(check_defined(lse_partial, "lse_partial"));
  FA_CHECK(check_defined(out, "out"));
  FA_CHECK(check_all_same_device({{lse_partial, "lse_partial"}, {out, "out"}, {lse, "softmax_lse"}}, out_partial,
                                 "out_partial"));
  FA_CHECK(check_all_dtype({{out_partial, "out_partial"}, {lse_partial, "lse_partial"}, {lse, "softmax_lse"}},
                           DType::F32));
  FA_CHECK(check_float_output_dtype(out, "out"));

  // 5 dims (splits, batch, seqlen, heads, d) or, packed, 4 dims (splits, total, heads, d).
  const bool varlen = out_partial.ndim == 4;
  if (!varlen)
    FA_CHECK(check_ndim(out_partial, "out_partial", 5,
                        "(splits, batch, seqlen, heads, head_dim) or 4 (splits, total, heads, head_dim)"));
  FA_CHECK(check_ndim(lse_partial, "lse_partial", varlen ? 3 : 4,
                      varlen ? "(splits, heads, total) for a 4-dim out_partial" : "(splits, batch, heads, seqlen)"));
  FA_CHECK(check_ndim(out, "out", varlen ? 3 : 4,
                      varlen ? "(total, heads, head_dim) for a 4-dim out_partial" : "(batch, seqlen, heads, head_dim)"));
  if (lse.defined())
    FA_CHECK(check_ndim(lse, "softmax_lse", varlen ? 2 : 3,
                        varlen ? "(heads, total) for a 4-dim out_partial" : "(batch, heads, seqlen)"));
  const int64_t splits = out_partial.shape[0];
  const int64_t batch = varlen ? 1 : out_partial.shape[1];
  const int64_t seqlen = out_partial.shape[varlen ? 1 : 2];
  const int64_t heads = out_partial.shape[varlen ? 2 : 3];
  const int64_t head_dim = out_partial.shape[varlen ? 3 : 4];
  FA_CHECK(check_splits(splits, "out_partial"));
  FA_CHECK(check_heads_positive(heads, "out_partial", "heads"));
  FA_CHECK(check_head_dim(head_dim, "out_partial", "head_dim"));
  if (varlen) {
    FA_CHECK(check_shape(lse_partial, "lse_partial",
                         {{splits, "the splits of out_partial"}, {heads, "the heads of out_partial"},
                          {seqlen, "the total of out_partial"}}));
    FA_CHECK(check_shape(out, "out",
                         {{seqlen, "the total of out_partial"}, {heads, "the heads of out_partial"},
                          {head_dim, "the head_dim of out_partial"}}));
    if (lse.defined())
      FA_CHECK(check_shape(lse, "softmax_lse",
                           {{heads, "the heads of out_partial"}, {seqlen, "the total of out_partial"}}));
  } else {
    FA_CHECK(check_shape(lse_partial, "lse_partial",
                         {{splits, "the splits of out_partial"}, {batch, "the batch of out_partial"},
                          {heads, "the heads of out_partial"}, {seqlen, "the seqlen of out_partial"}}));
    FA_CHECK(check_shape(out, "out",
                         {{batch, "the batch of out_partial"}, {seqlen, "the seqlen of out_partial"},
                          {heads, "the heads of out_partial"}, {head_dim, "the head_dim of out_partial"}}));
    if (lse.defined())
      FA_CHECK(check_shape(lse, "softmax_lse",
                           {{batch, "the batch of out_partial"}, {heads, "the heads of out_partial"},
                            {seqlen, "the seqlen of out_partial"}}));
  }
  FA_CHECK(check_all_dims_fit_int32(
      {{out_partial, "out_partial"}, {lse_partial, "lse_partial"}, {out, "out"}, {lse, "softmax_lse"}}));
  FA_CHECK(check_all_last_dim_contiguous(
      {{out_partial, "out_partial"}, {lse_partial, "lse_partial"}, {out, "out"}, {lse, "softmax_lse"}}));
  FA_CHECK(check_all_aligned({{out_partial, "out_partial"}, {out, "out"}}, Alignment::Vectorized));
  FA_CHECK(check_all_aligned({{lse_partial, "lse_partial"}, {lse, "softmax_lse"}}, Alignment::Element));
  FA_CHECK(check_all_data({{out_partial, "out_partial"}, {lse_partial, "lse_partial"}, {out, "out"}, {lse, "softmax_lse"}}));
  FA_CHECK(check_outputs_disjoint(outputs, inputs));

  CombineProblem built;
  built.splits = splits;
  built.batch = batch;
  built.seqlen = seqlen;
  built.heads = heads;
  built.head_dim = head_dim;
  built.out_partial = static_cast<const float*>(out_partial.data);
  built.lse_partial = static_cast<const float*>(lse_partial.data);
  built.out = out.data;
  built.out_dtype = out.dtype;
  built.lse = lse.defined() ? static_cast<float*>(lse.data) : nullptr;
  const int64_t* op = out_partial.stride;
  const int64_t* lp = lse_partial.stride;
  const int64_t* o = out.stride;
  const int64_t* l = lse.stride;
  if (varlen) {  // one "sequence" of `total` rows
    built.out_partial_strides = {op[0], 0, op[1], op[2]};
    built.lse_partial_strides = {lp[0], 0, lp[2], lp[1]};
    built.out_strides = {0, 0, o[0], o[1]};
    if (lse.defined()) built.lse_strides = {0, 0, l[1], l[0]};
  } else {
    built.out_partial_strides = {op[0], op[1], op[2], op[3]};
    built.lse_partial_strides = {lp[0], lp[1], lp[3], lp[2]};
    built.out_strides = {0, o[0], o[1], o[2]};
    if (lse.defined()) built.lse_strides = {0, l[0], l[2], l[1]};
  }
  *problem = built;
  return {};
}

Status validate_dropout_mask(const DropoutMaskParams& params) {
  const TensorView& mask = params.mask;
  FA_CHECK(check_well_formed(mask, "mask"));
  FA_CHECK(check_defined(mask, "mask"));
  FA_CHECK(check_host(mask, "mask", "the dropout mask is computed on the CPU"));
  FA_CHECK(check_dtype(mask, "mask", DType::U8));
  FA_CHECK(check_ndim(mask, "mask", 4, "(batch, heads, seqlen_q, seqlen_k)"));
  FA_CHECK(check_dims_fit_int32(mask, "mask"));
  FA_CHECK(check_contiguous(mask, "mask"));
  FA_CHECK(check_data(mask, "mask"));
  FA_CHECK(check_dropout(params.dropout_p));
  return {};
}

}  // namespace flashattn::api
