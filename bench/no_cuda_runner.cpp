// Stand-ins for cuda_runner.cpp when flashattn is built without CUDA.
#include "runner.h"

namespace flashattn::bench {

bool cuda_runner_built() { return false; }
std::unique_ptr<Runner> make_cuda_runner(const RunSettings&) { return nullptr; }
std::string cuda_device_description(int) { return ""; }

}  // namespace flashattn::bench
