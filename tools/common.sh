# Shared by tools/*.sh and tools/gpu/*.sh: source it, don't run it.
# Finds the repository, puts the CUDA compiler on PATH when the toolkit is installed, installs
# missing build dependencies (apt, when available), and configures and builds with CMake.

FA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FA_JOBS="$(nproc 2>/dev/null || echo 2)"
FA_MIN_CMAKE="3.24"

fa_log() { printf '[flashattn] %s\n' "$*" >&2; }
fa_die() { printf '[flashattn] error: %s\n' "$*" >&2; exit 1; }

# nvcc usually lives outside PATH (/usr/local/cuda/bin); with it on PATH CMake's FLASHATTN_CUDA=AUTO
# finds it, and the CUDA sources are compiled even on a machine without a GPU.
fa_setup_path() {
  if [[ -x /usr/local/cuda/bin/nvcc && ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  # A CMake installed by fa_ensure_cmake into .deps (see below) takes precedence.
  if [[ -x "$FA_ROOT/.deps/cmake-venv/bin/cmake" ]]; then
    export PATH="$FA_ROOT/.deps/cmake-venv/bin:$PATH"
  fi
}

fa_version_ge() {  # fa_version_ge 3.25.1 3.24 -> true
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" == "$2" ]]
}

fa_cmake_version() { cmake --version 2>/dev/null | head -n1 | awk '{print $3}'; }

fa_gtest_available() {
  [[ -f /usr/include/gtest/gtest.h || -f /usr/local/include/gtest/gtest.h ||
     -f /usr/src/googletest/CMakeLists.txt || -f "$FA_ROOT/.deps/googletest/CMakeLists.txt" ]]
}

# Runs apt-get as root, through sudo when needed; false when that is impossible.
fa_apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || return 1
    sudo=(sudo)
  fi
  fa_log "installing: $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

# Older distributions ship a CMake below the project's minimum; pip has current ones.
fa_ensure_cmake_from_pip() {
  command -v python3 >/dev/null 2>&1 || return 1
  fa_log "CMake $(fa_cmake_version) is older than $FA_MIN_CMAKE; installing a newer one into .deps/cmake-venv"
  python3 -m venv "$FA_ROOT/.deps/cmake-venv" &&
    "$FA_ROOT/.deps/cmake-venv/bin/pip" install -q "cmake>=$FA_MIN_CMAKE" &&
    export PATH="$FA_ROOT/.deps/cmake-venv/bin:$PATH"
}

# Installs what the build needs and is missing: a C++20 compiler, CMake >= 3.24, GoogleTest
# (when want_gtest=1). Present tools are left alone.
fa_ensure_deps() {
  local want_gtest="${1:-1}"
  fa_setup_path
  local packages=()
  command -v cmake >/dev/null 2>&1 || packages+=(cmake)
  command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || packages+=(g++)
  if [[ "$want_gtest" == 1 ]] && ! fa_gtest_available; then packages+=(libgtest-dev); fi
  # ninja is optional (Makefiles work too): installed only alongside something that is required,
  # so a machine that has everything else never waits on apt.
  if ((${#packages[@]})) && ! command -v ninja >/dev/null 2>&1; then packages+=(ninja-build); fi
  if ((${#packages[@]})); then
    if ! fa_apt_install "${packages[@]}"; then
      # ninja is optional (Makefiles work too); the rest is not.
      local required=()
      local p
      for p in "${packages[@]}"; do [[ "$p" == ninja-build ]] || required+=("$p"); done
      if ((${#required[@]})); then
        fa_die "missing ${required[*]} and cannot install them here (no apt-get or no root/sudo); install them and rerun"
      fi
      fa_log "ninja not found; using Makefiles"
    fi
  fi
  command -v cmake >/dev/null 2>&1 || fa_die "cmake is still missing"
  if ! fa_version_ge "$(fa_cmake_version)" "$FA_MIN_CMAKE"; then
    fa_ensure_cmake_from_pip || fa_die "CMake >= $FA_MIN_CMAKE is needed (found $(fa_cmake_version))"
  fi
  if [[ "$want_gtest" == 1 ]] && ! fa_gtest_available; then
    fa_die "GoogleTest is missing: install libgtest-dev, or run tools/gpu/prepare_deps.sh on a machine that has it"
  fi
}

# fa_configure BUILD_DIR [cmake args...]: configures once per build directory; later calls only
# change what the arguments change. A directory made with another generator is rebuilt from scratch.
fa_configure() {
  local build_dir="$1"
  shift
  local generator=()
  if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); else generator=(-G "Unix Makefiles"); fi
  if [[ -f "$build_dir/CMakeCache.txt" ]]; then
    local cached
    cached="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build_dir/CMakeCache.txt")"
    if [[ "$cached" != "${generator[1]}" ]]; then
      fa_log "removing $build_dir (made with '$cached', now '${generator[1]}')"
      rm -rf "$build_dir"
    fi
  fi
  fa_log "configuring $build_dir"
  cmake -S "$FA_ROOT" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
}

# fa_build BUILD_DIR [targets...]: all targets when none are named, on every core.
fa_build() {
  local build_dir="$1"
  shift
  local targets=()
  local t
  for t in "$@"; do targets+=(--target "$t"); done
  fa_log "building $build_dir ${*:-(all targets)} with $FA_JOBS jobs"
  cmake --build "$build_dir" --parallel "$FA_JOBS" "${targets[@]}"
}

# True when an NVIDIA GPU answers (the benchmark and the GPU tests need one to run, not to build).
fa_gpu_present() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}
