// The environment variables of the tuning knobs (FwdTuning, BwdTuning, the FA2 tile variants):
// read once per process by their callers. Host code only.
#pragma once

#include <cstdlib>
#include <string>

namespace flashattn {

// The variable's value, "" when it is unset.
inline std::string env_string(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace flashattn
