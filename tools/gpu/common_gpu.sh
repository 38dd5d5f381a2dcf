# Shared by tools/gpu/test.sh and tools/gpu/bench.sh: the GPU build in build-gpu/.
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

FA_GPU_BUILD="$FA_ROOT/build-gpu"

# fa_gpu_configure LOGFILE want_tests: CUDA forced on (a missing nvcc is an error here, not a silent
# CPU-only build), the default FLASHATTN_CUDA_GENCODE (sm_80 + sm_90a), and ptxas's per-kernel
# resource report (-Xptxas -v: registers, spills, shared memory) in the build output.
# FA_HANG_TRAP=ON builds mbarrier waits that trap after seconds (debugging a hang; off by default,
# as it changes the kernels' register allocation).
# FA_GPU_GENCODE replaces the default targets, e.g. "-gencode=arch=compute_90a,code=sm_90a" builds
# only what an H200 runs (about half the build time).
fa_gpu_configure() {
  local log="$1" want_tests="$2" gencode=()
  [[ -n "${FA_GPU_GENCODE:-}" ]] && gencode=("-DFLASHATTN_CUDA_GENCODE=$FA_GPU_GENCODE")
  fa_configure "$FA_GPU_BUILD" -DFLASHATTN_CUDA=ON -DFLASHATTN_BUILD_TESTS="$want_tests" \
    -DFLASHATTN_HANG_TRAP="${FA_HANG_TRAP:-OFF}" "${gencode[@]}" \
    "-DCMAKE_CUDA_FLAGS=-Xptxas=-v" 2>&1 | tee -a "$log"
}

# ptxas prints its report as "ptxas info : ..." lines, interleaved with the build output.
fa_extract_ptxas_report() {
  local build_log="$1" report="$2"
  if grep -E 'ptxas (info|warning)|Compiling entry|Function properties|bytes stack frame|Used [0-9]+ registers' \
      "$build_log" >"$report"; then
    fa_log "ptxas resource report: $report ($(grep -c 'Used [0-9]* registers' "$report" || true) kernel compilations)"
  else
    echo "(no ptxas output: no CUDA kernels were compiled)" >"$report"
  fi
}

# fa_ncu_binary: the path of Nsight Compute's ncu (on PATH or under /opt/nvidia/nsight-compute).
fa_ncu_binary() {
  local ncu
  ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1 || true)"
  [[ -n "$ncu" ]] || fa_die "ncu not found"
  echo "$ncu"
}

# fa_benchmark_binary: the path of build-gpu's flashattn_bench, after checking it is there and not a
# hang-trap build (its mbarrier waits trap on a timeout and change register allocation: spills).
fa_benchmark_binary() {
  local bench="$FA_GPU_BUILD/bench/flashattn_bench"
  [[ -x "$bench" ]] || fa_die "build flashattn_bench first (tools/gpu/bench.sh or tools/gpu/test.sh)"
  if grep -q '^FLASHATTN_HANG_TRAP:BOOL=ON' "$FA_GPU_BUILD/CMakeCache.txt"; then
    fa_die "build-gpu/ has the mbarrier hang trap (it spills): rebuild without it first"
  fi
  echo "$bench"
}

# fa_rename_backend JSON NAME: sets every row's backend in a flashattn_bench JSON file to NAME
# (bench/peers/join.py names its columns by backend: each measured variant gets its own).
fa_rename_backend() {
  python3 - "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["rows"]:
    r["backend"] = sys.argv[2]
json.dump(doc, open(sys.argv[1], "w"))
PY
}

# fa_run_variants BACKEND DIRECTION LOGDIR "WANTED NAMES" NAME:SETTING...: runs flashattn_bench over
# the peers grid once per wanted variant (SETTING: empty or flashattn_bench arguments, e.g.
# "--fa3-fwd-plan pingpong=0"; rows a forced plan cannot run are skipped), then torch SDPA's peers
# in the same run, and joins them into LOGDIR/table.md (printed too).
fa_run_variants() {
  local backend="$1" direction="$2" logdir="$3" wanted=" $4 " bench v name setting
  shift 4
  bench="$(fa_benchmark_binary)"
  local jsons=()
  for v in "$@"; do
    name="${v%%:*}" setting="${v#*:}"
    [[ "$wanted" == *" $name "* ]] || continue
    # shellcheck disable=SC2086  # setting is empty or benchmark arguments
    "$bench" --backend "$backend" --grid peers --direction "$direction" $setting --json "$logdir/$name.json" >"$logdir/$name.txt"
    fa_rename_backend "$logdir/$name.json" "$backend-$name"
    jsons+=("$logdir/$name.json")
  done
  python3 "$FA_ROOT/bench/peers/sdpa_peers.py" --direction "$direction" --json "$logdir/peers.json" >"$logdir/peers.txt"
  python3 "$FA_ROOT/bench/peers/join.py" "$logdir/peers.json" "${jsons[@]}" | tee "$logdir/table.md"
}

# fa_build_tests_and_bench LOGDIR: configures and builds build-gpu's flashattn_gpu_tests and
# flashattn_bench, logging to LOGDIR/build.log with ptxas's report in LOGDIR/ptxas.txt; dies with the
# log's tail when the build fails.
fa_build_tests_and_bench() {
  local logdir="$1" start
  fa_ensure_deps 1 >"$logdir/build.log" 2>&1
  fa_gpu_configure "$logdir/build.log" ON >/dev/null || fa_die "configure failed (see build.log)"
  start=$SECONDS
  fa_build "$FA_GPU_BUILD" flashattn_gpu_tests flashattn_bench >>"$logdir/build.log" 2>&1 || {
    tail -n 30 "$logdir/build.log"
    fa_die "build failed"
  }
  fa_extract_ptxas_report "$logdir/build.log" "$logdir/ptxas.txt"
  echo "build: $((SECONDS - start)) s"
}

# The FA3 backward's small sanitizer cases (gtest filter): ragged causal d64 and d128, causal
# seqused_k, causal varlen d128, deterministic GQA.
fa3_bwd_sanitize_filter() {
  local f="" i
  for i in 9 28 41 48; do f+="Sweep/Fa3Backward.MatchesReference/${i}_*:"; done
  echo "${f}Sweep/Fa3Backward.DeterministicMatchesReference/34_*"
}

# fa_install_python LOGFILE: installs the package with its CUDA backends into the machine's python3
# (FA_PYTHON), as the README's GPU recipe does: /usr/bin/g++ where it exists (a toolchain that links
# libstdc++ statically made the extension crash, issue 18), sm_90a unless FA_GPU_GENCODE says
# otherwise, every core. One build directory for every tool (python.sh, distributed.sh), so a
# second install in the same tree rebuilds nothing.
fa_install_python() {
  local log="$1" python="${FA_PYTHON:-python3}" cxx=()
  local gencode="${FA_GPU_GENCODE:--gencode=arch=compute_90a,code=sm_90a}"
  [[ -x /usr/bin/g++ ]] && cxx=(CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++)
  env "${cxx[@]}" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$python" -m pip install -v --no-build-isolation --no-deps \
    --disable-pip-version-check -C "cmake.define.FLASHATTN_CUDA_GENCODE=$gencode" \
    -C build-dir="$FA_ROOT/build-python-gpu" "$FA_ROOT" >"$log" 2>&1
}
