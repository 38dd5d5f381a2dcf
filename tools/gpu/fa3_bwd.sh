#!/usr/bin/env bash
# On the GPU machine: the FA3 backward's GPU tests and its benchmark against FlashAttention-3
# itself in the same call. Writes into LOGDIR:
#   build.log, ptxas.txt        the build (sm_90a only) and ptxas's register/spill report
#   tests.log                   the FA3 backward and sm90 primitive GPU tests
#   table.md, peers.png         ours (fa3 fwd+bwd, deterministic bwd, fa2 bwd) beside FA3, cuDNN and
#                               torch's FA2 over the peers grid: TFLOP/s and ratios, and the plot
# Steps can be skipped: FA3_BWD_STEPS="build test bench anchor" (default: all). The anchor needs
# .anchors/ (bash ../shared/tools/fa3_anchor.sh prepare ...; copy ../shared/tools/* to
# .anchors/tools/) carried to the machine; without it the table has ours, cuDNN and torch's FA2.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/fa3_bwd.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
steps=" ${FA3_BWD_STEPS:-build test bench anchor} "
export FA_GPU_GENCODE="${FA_GPU_GENCODE:--gencode=arch=compute_90a,code=sm_90a}"
fa_setup_path
if [[ "$steps" == *" build "* ]]; then
  fa_build_tests_and_bench "$logdir"
fi
if [[ "$steps" == *" test "* ]]; then
  timeout "${FA3_BWD_TEST_TIMEOUT:-420}" "$FA_GPU_BUILD/tests/cpp/flashattn_gpu_tests" \
    --gtest_filter="${FA3_BWD_TEST_FILTER:-Sm90Primitives.*:*Fa3Backward*}" >"$logdir/tests.log" 2>&1
  echo "tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' "$logdir/tests.log" | tr '\n' ' '))"
  grep -E '^\[  FAILED  \]' "$logdir/tests.log" | head -n 20
fi
if [[ "$steps" == *" bench "* ]]; then
  bench="$(fa_benchmark_binary)"
  "$bench" --backend fa3 --grid peers --direction both --json "$logdir/ours-fa3.json" >"$logdir/ours-fa3.txt" 2>&1
  "$bench" --backend fa3 --grid peers --direction bwd --deterministic --json "$logdir/ours-fa3-det.json" >"$logdir/ours-fa3-det.txt" 2>&1
  fa_rename_backend "$logdir/ours-fa3-det.json" fa3-det
  "$bench" --backend fa2 --grid peers --direction bwd --json "$logdir/ours-fa2.json" >"$logdir/ours-fa2.txt" 2>&1
  ours=("$logdir/ours-fa3.json" "$logdir/ours-fa3-det.json" "$logdir/ours-fa2.json")
  peers="$logdir/peers.json"
  if [[ "$steps" == *" anchor "* && -f "$FA_ROOT/.anchors/tools/fa3_anchor.sh" ]]; then
    (cd "$FA_ROOT" && bash .anchors/tools/fa3_anchor.sh build) >>"$logdir/anchor-build.log" 2>&1 || tail -n 20 "$logdir/anchor-build.log"
    PYTHONPATH="$FA_ROOT/.anchors/fa3/hopper" python3 "$FA_ROOT/.anchors/tools/fa3_bench.py" --grid peers \
      --seqlens "${FA3_BENCH_SEQLENS:-512,1024,2048,4096,8192,16384}" --json "$peers" >"$logdir/peers.txt" 2>&1 ||
      tail -n 20 "$logdir/peers.txt"
  else
    python3 "$FA_ROOT/bench/peers/sdpa_peers.py" --direction both --json "$peers" >"$logdir/peers.txt" 2>&1
  fi
  python3 "$FA_ROOT/bench/peers/join.py" "$peers" "${ours[@]}" | tee "$logdir/table.md"
  python3 "$FA_ROOT/bench/peers/plot.py" --out "$logdir/peers.png" --title "H200, bf16, $(date -u +%F)" "$peers" "${ours[@]}"
fi
