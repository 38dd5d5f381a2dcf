#!/usr/bin/env bash
# On the GPU machine, one call: everything that is built but switched on only through forced plans
# (the fp8 forward, the split-weights combine, packed query heads), the defaults' suites, and the
# benchmarks beside FlashAttention-3 in the same call.
#   anchor-build.log       FlashAttention-3 built from .anchors/ (bf16 and fp8), in the background
#                          while the tests run (CPU only)
#   build.log, ptxas.txt   flashattn_gpu_tests and flashattn_bench (sm_90a), unless build-gpu/ came
#                          along prebuilt (carry build-gpu/tests/cpp/flashattn_gpu_tests and
#                          build-gpu/bench/flashattn_bench)
#   tests-*.log            the gated suites, then the default suites the plan refactor touched
#   sanitize/              synccheck/racecheck/memcheck on small cases of the new kernels
#   bench/                 ours (defaults, each FA3 backward variant, fp8, the combine) beside FA3:
#                          bench/table.md, bench/fp8.md, bench/decode.md
#   python/                tools/gpu/python.sh (the package built with its CUDA backends, the Python
#                          suite on CUDA tensors), in the background from the start; the benchmarks
#                          wait for it
# Steps, in this order: NEXT_STEPS="anchor python build bwd3 gated bench decode defaults packed sanitize fa3"
# NEXT_DECODE_SHAPES="b,sq,sk,h,d,hk:dense|PAGE ..." times those shapes instead of the decode grid;
# NEXT_BENCH="fa3 fa3-fwd fa3-det fp8" picks the bench step's runs (default: fa3 fa3-det fp8),
# NEXT_FA3_GRIDS="peers fp8" FlashAttention-3's; NEXT_GATED, NEXT_DEFAULTS the test groups' gtest
# filters; NEXT_SANITIZE_CASES="FILTER ..." the sanitizers' cases; NEXT_FP8_BINARIES="NAME ..." fp8
# rows of experiment builds carried as build-gpu/bench/flashattn_bench_NAME.
# (default: all); NEXT_DEADLINE (s) skips the steps that would start after it; TESTS_TIMEOUT per group.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/next_gpu_run.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
steps=" ${NEXT_STEPS:-anchor python build bwd3 gated bench decode defaults packed sanitize fa3} "
export FA_GPU_GENCODE="${FA_GPU_GENCODE:--gencode=arch=compute_90a,code=sm_90a}"
fa_setup_path
tests_bin="$FA_GPU_BUILD/tests/cpp/flashattn_gpu_tests"
bench_bin="$FA_GPU_BUILD/bench/flashattn_bench"
anchor_pid=""
have_anchor=0
[[ -f "$FA_ROOT/.anchors/tools/fa3_anchor.sh" ]] && have_anchor=1

# step NAME: whether NAME was asked for and the call's deadline (NEXT_DEADLINE seconds, default 540)
# leaves time for it; a step skipped for time is named so that the next call can run it.
step() {
  [[ "$steps" == *" $1 "* ]] || return 1
  if ((SECONDS > ${NEXT_DEADLINE:-540})); then
    echo "skipped for time: $1"
    return 1
  fi
}
anchor_built() { compgen -G "$FA_ROOT/.anchors/fa3/hopper/*.so" >/dev/null; }

if step anchor && [[ $have_anchor == 1 ]] && ! anchor_built; then
  (cd "$FA_ROOT" && MAX_JOBS="${ANCHOR_JOBS:-10}" nice bash .anchors/tools/fa3_anchor.sh build fp8) >"$logdir/anchor-build.log" 2>&1 &
  anchor_pid=$!
fi
python_pid=""
if step python; then
  bash "$FA_ROOT/tools/gpu/python.sh" "$logdir/python" >"$logdir/python.out" 2>&1 &
  python_pid=$!
fi
wait_python() {
  [[ -n "$python_pid" ]] || return 0
  wait "$python_pid"
  echo "python: exit $? ($(tr '\n' ' ' <"$logdir/python/summary.txt"))"
  python_pid=""
}
if step build; then
  if [[ -x "$tests_bin" && -x "$bench_bin" ]]; then
    echo "build: prebuilt binaries carried"
  else
    fa_build_tests_and_bench "$logdir"
  fi
fi

# run_group NAME FILTER: one gtest run, its summary line and first failures.
run_group() {
  local name="$1" filter="$2" start=$SECONDS
  timeout "${TESTS_TIMEOUT:-300}" "$tests_bin" --gtest_filter="$filter" >"$logdir/tests-$name.log" 2>&1
  echo "tests $name: exit $? in $((SECONDS - start)) s ($(grep -E '^\[  (PASSED|FAILED)  \]' "$logdir/tests-$name.log" | tr '\n' ' '))"
  grep -E '^\[  FAILED  \]' "$logdir/tests-$name.log" | head -n 12
}
step bwd3 && run_group bwd3 "Sm90Primitives.*:*Fa3Backward*"
step gated && run_group gated "${NEXT_GATED:-Sm90Fp8.*:*Fa3Fp8*:Fa2CombinePlan.*:Fa3BackwardVariantRefusal.*:Fa3BackwardVariantList.*}"
out="$logdir/bench"
mkdir -p "$out"
b() {  # b NAME ARGS...: one flashattn_bench run into out/NAME.json, rows renamed NAME
  local name="$1" start=$SECONDS
  shift
  "$bench_bin" "$@" --json "$out/$name.json" >"$out/$name.txt" 2>&1 || tail -n 5 "$out/$name.txt"
  [[ -f "$out/$name.json" ]] && fa_rename_backend "$out/$name.json" "$name"
  echo "bench $name: $((SECONDS - start)) s"
}
if step bench; then
  wait_python
  benches=" ${NEXT_BENCH:-fa3 fa3-det fp8} "
  [[ "$benches" == *" fa3 "* ]] && b fa3 --backend fa3 --grid peers --direction both
  [[ "$benches" == *" fa3-fwd "* ]] && b fa3 --backend fa3 --grid peers --direction fwd
  [[ "$benches" == *" fa3-det "* ]] && b fa3-det --backend fa3 --grid peers --direction bwd --deterministic
  for v in ${NEXT_BWD_VARIANTS:-}; do
    b "bwd-${v//+/_}" --backend fa3 --grid peers --direction bwd --fa3-bwd-variant "$v"
  done
  [[ "$benches" == *" fp8 "* ]] && b fp8 --backend fa3 --grid peers --direction fwd --dtype e4m3
  # Experiment builds carried beside the default one (build-gpu/bench/flashattn_bench_NAME): fp8 rows.
  for name in ${NEXT_FP8_BINARIES:-}; do
    (bench_bin="$FA_GPU_BUILD/bench/flashattn_bench_$name" && b "fp8-$name" --backend fa3 --grid peers --direction fwd --dtype e4m3)
  done
fi
if step decode; then
  wait_python
  if [[ -n "${NEXT_DECODE_SHAPES:-}" ]]; then
    # A few decode shapes (b,sq,sk,h,d,hk:cache) instead of the whole grid, each config one row.
    for shape in $NEXT_DECODE_SHAPES; do
      tag="${shape//,/_}" tag="${tag//:/_}"
      b "decode-$tag" --backend auto --causal 1 --shape "${shape%%:*}" --kvcache "${shape##*:}"
      b "decode-packed-$tag" --backend fa2 --causal 1 --shape "${shape%%:*}" --kvcache "${shape##*:}" --fa2-fwd-plan pack_gqa_queries=1
    done
  else
    b decode --backend auto --grid decode
    b decode-packed --backend fa2 --grid decode --fa2-fwd-plan pack_gqa_queries=1
  fi
fi
step defaults && run_group defaults "${NEXT_DEFAULTS:-*Fa2Forward*:*Fa2Backward*:*Fa2KvCache*:Sweep/Fa3Forward*:*Fa3ForwardPlans*:*Fa3ForwardRace*:Sm90Primitives.*-*PackedQuer*}"
step packed && run_group packed "*Fa2KvCachePackedQueries*:*Fa2Forward.PackedQueryHeadsMatchReference*:Speculative/*"
if step sanitize; then
  # One small case of each new kernel per run, so that a report names its kernel.
  mkdir -p "$logdir/sanitize"
  sanitizer="$(command -v compute-sanitizer || echo "$(dirname "$(command -v nvcc)")/compute-sanitizer")"
  cases=("Sweep/Fa3Backward.MatchesReference/9_*" "Sweep/Fa3Backward.DeterministicMatchesReference/9_*"
    "Sweep/Fa3Backward.MatchesReference/28_*"
    "Sweep/Fa3Fp8Forward.EveryPlanMatchesReference/3_*" "Fa2CombinePlan.SplitWeightsFixedCases"
    "Speculative/Fa2KvCachePackedQueries.*/0_*")
  [[ -n "${NEXT_SANITIZE_CASES:-}" ]] && read -r -a cases <<<"$NEXT_SANITIZE_CASES"
  for tool in ${NEXT_SANITIZERS:-racecheck synccheck memcheck}; do
    for i in "${!cases[@]}"; do
      timeout 60 "$sanitizer" --tool "$tool" --error-exitcode 9 "$tests_bin" --gtest_filter="${cases[$i]}" >"$logdir/sanitize/$tool-$i.log" 2>&1
      echo "sanitize $tool ${cases[$i]}: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logdir/sanitize/$tool-$i.log" | tail -n 1))"
    done
  done
fi
if step fa3 && [[ $have_anchor == 1 ]]; then
  wait_python
  [[ -n "$anchor_pid" ]] && { wait "$anchor_pid" || tail -n 20 "$logdir/anchor-build.log"; }
  export PYTHONPATH="$FA_ROOT/.anchors/fa3/hopper"
  start=$SECONDS
  grids=" ${NEXT_FA3_GRIDS:-peers fp8} "
  [[ "$grids" == *" peers "* ]] && { python3 "$FA_ROOT/.anchors/tools/fa3_bench.py" --grid peers ${NEXT_NO_SDPA:+--no-sdpa} \
    --seqlens "${NEXT_SEQLENS:-1024,2048,4096,8192,16384}" --json "$out/peers.json" >"$out/peers.txt" 2>&1 || tail -n 5 "$out/peers.txt"; }
  [[ "$grids" == *" fp8 "* ]] && { python3 "$FA_ROOT/.anchors/tools/fa3_bench.py" --grid fp8 --no-sdpa \
    --seqlens "${NEXT_SEQLENS:-1024,2048,4096,8192,16384}" --json "$out/peers-fp8.json" >"$out/peers-fp8.txt" 2>&1 || tail -n 5 "$out/peers-fp8.txt"; }
  echo "fa3 bench: $((SECONDS - start)) s"
fi
wait_python
# Whatever this call or an earlier one on this machine measured, joined.
[[ -n "$anchor_pid" ]] && wait "$anchor_pid"
join() { local f=() x; for x in "$@"; do [[ -f "$x" ]] && f+=("$x"); done; ((${#f[@]})) && python3 "$FA_ROOT/bench/peers/join.py" "${f[@]}"; }
join "$out/peers.json" "$out"/fa3.json "$out"/fa3-det.json "$out"/bwd-*.json >"$out/table.md"
join "$out/peers-fp8.json" "$out/fp8.json" "$out"/fp8-*.json >"$out/fp8.md"
join "$out"/decode*.json >"$out/decode.md"
echo "call: $SECONDS s"
