// fwd with varlen queries over a paged k/v (block_table), the call shape of vLLM-style serving
// engines (mixed prefill and decode sequences in one batch). The keys of each sequence are
// scattered over shuffled pages whose unused slots hold NaN; the result must equal the same
// problem with packed varlen k/v, checked against the naive reference with the project's
// tolerance rule. The runner lets GPU tests mirror the call onto the device.
#pragma once

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "attention_case.h"

namespace flashattn::test {

struct PagedVarlenCase {
  AttentionCase attn;  // varlen_q / varlen_k give the sequences
  int page_size = 16;

  std::string name() const {
    std::ostringstream s;
    s << attn.name() << "_page" << page_size;
    return s.str();
  }
};

inline void PrintTo(const PagedVarlenCase& c, std::ostream* os) { *os << c.name(); }

// Runs the case on `backend` (through runner when given) and the references; returns the errors.
FwdResult check_paged_varlen_case(const PagedVarlenCase& c, Backend backend, const FwdRunner& runner = {});

std::vector<PagedVarlenCase> paged_varlen_cases();

}  // namespace flashattn::test
