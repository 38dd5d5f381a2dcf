// combine() checked in double: random partials with empty splits and empty rows, dense or varlen
// layout. The runner lets GPU tests mirror the call onto the device.
#pragma once

#include <functional>

#include "flashattn/flashattn.h"

namespace flashattn::test {

using CombineRunner = std::function<Status(const CombineParams&)>;
void check_combine(bool varlen, DType out_dtype, Backend backend, const CombineRunner& runner = {});

}  // namespace flashattn::test
