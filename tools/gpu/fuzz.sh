#!/usr/bin/env bash
# On a GPU machine: builds build-gpu/ (as tools/gpu/test.sh does) and fuzzes the GPU backends with
# tests/cpp/gpu/test_fuzz_gpu.cu: FA2 and FA3 each get >= 10,000 random valid calls (compared with
# the float64 reference) and >= 10,000 broken calls (which must be refused before any kernel
# runs), from one fresh seed, printed; then garbage in CUDA index tensors (the kernels must not
# fault), also under compute-sanitizer memcheck. Writes LOGDIR/fuzz-*.log and LOGDIR/summary.txt.
#   FA_FUZZ_SEED=N   the first seed (default: the time); a failure's seed replays it alone:
#                    FLASHATTN_FUZZ_SEED=<seed> FLASHATTN_FUZZ_CASES=1 build-gpu/tests/cpp/flashattn_gpu_tests --gtest_filter=<test>
#   FA_FUZZ_SCALE=K  K times the counts below (e.g. 0.1 for a quick look; >= 1 for the minimums)
#   FA_FUZZ_JOBS=N   runs at a time (default 6: the reference runs on the CPU)
#   FA_FUZZ_BINARY=P a flashattn_gpu_tests built elsewhere (no build here)
# Exit status: 0 when every run passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"

logdir="${1:?usage: tools/gpu/fuzz.sh LOGDIR}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
summary="$logdir/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary" >&2; }

seed="${FA_FUZZ_SEED:-$(date +%s)}"
scale="${FA_FUZZ_SCALE:-1}"
jobs="${FA_FUZZ_JOBS:-6}"
note "fuzz seed: $seed (FA_FUZZ_SEED=$seed replays this run), scale $scale"

fa_setup_path
binary="${FA_FUZZ_BINARY:-$FA_GPU_BUILD/tests/cpp/flashattn_gpu_tests}"
if [[ -z "${FA_FUZZ_BINARY:-}" ]]; then
  fa_ensure_deps 1 >"$logdir/build.log" 2>&1
  if ! fa_gpu_configure "$logdir/build.log" ON >/dev/null || ! fa_build "$FA_GPU_BUILD" flashattn_gpu_tests >>"$logdir/build.log" 2>&1; then
    note "build: FAILED (see build.log)"
    exit 1
  fi
fi
[[ -x "$binary" ]] || { note "no test binary at $binary"; exit 1; }

# test : cases (at scale 1). FA2: 10,000 valid + 10,000 broken; FA3: the same.
runs=(
  Fa2Fuzz.ForwardMatchesReference:4000 Fa2Fuzz.BackwardMatchesReference:3000
  Fa2Fuzz.KvCacheMatchesReference:2000 Fa2Fuzz.CombineMatchesReference:1000
  Fa2FuzzInvalid.ForwardRefusesBrokenCalls:3000 Fa2FuzzInvalid.BackwardRefusesBrokenCalls:3000
  Fa2FuzzInvalid.KvCacheRefusesBrokenCalls:3000 Fa2FuzzInvalid.CombineRefusesBrokenCalls:1000
  Fa3Fuzz.ForwardMatchesReference:6000 Fa3Fuzz.BackwardMatchesReference:4000
  Fa3FuzzInvalid.ForwardRefusesBrokenCalls:5000 Fa3FuzzInvalid.BackwardRefusesBrokenCalls:5000
  Fa2FuzzContents.GarbageIndexContentsDoNotFault:1000
)

log_of() { echo "$logdir/fuzz-$(echo "$1" | sed 's/[^A-Za-z0-9]/_/g').log"; }

# One run: its log, and a verdict line in the summary (failing cases with their replay lines).
fuzz_one() {
  local test="$1" cases="$2" log verdict=ok
  log="$(log_of "$test")"
  FLASHATTN_FUZZ_SEED="$seed" FLASHATTN_FUZZ_CASES="$cases" timeout "${FA_FUZZ_TIMEOUT:-3000}" \
    "$binary" --gtest_filter="$test" >"$log" 2>&1 || verdict="FAILED (exit $?)"
  grep -q '^\[  PASSED  \] 1 test' "$log" || verdict="${verdict/ok/FAILED}"
  grep -q '\[  SKIPPED \]' "$log" && verdict="SKIPPED ($(grep -m1 -o 'no [a-z0-9 ]*device[^"]*' "$log" || true))"
  {
    echo "$test ($cases cases): $verdict"
    [[ "$verdict" == ok ]] || grep -E 'replay:|Failure|names |accepted|error [0-9.e+-]+ vs' "$log" | head -n 12 | sed 's/^/    /'
  } >"$log.verdict"
}

for run in "${runs[@]}"; do
  test="${run%%:*}"
  cases="$(awk -v n="${run##*:}" -v s="$scale" 'BEGIN { c = int(n * s); print (c > 0 ? c : 1) }')"
  fuzz_one "$test" "$cases" &
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
done
wait || true
status=0
for run in "${runs[@]}"; do
  verdict_file="$(log_of "${run%%:*}").verdict"
  tee -a "$summary" <"$verdict_file" >&2
  head -n1 "$verdict_file" | grep -qE ': ok$' || status=1
done

# Reads out of bounds that do not fault: the garbage-index test under memcheck (few cases: slow).
sanitizer="$(command -v compute-sanitizer || true)"
[[ -n "$sanitizer" ]] || sanitizer="$(dirname "$(command -v nvcc)")/compute-sanitizer"
if [[ -x "$sanitizer" ]]; then
  log="$logdir/fuzz-contents-memcheck.log"
  verdict=ok
  FLASHATTN_FUZZ_SEED="$seed" FLASHATTN_FUZZ_CASES="${FA_FUZZ_MEMCHECK_CASES:-60}" \
    timeout 1800 "$sanitizer" --tool memcheck --error-exitcode 17 "$binary" \
    --gtest_filter='Fa2FuzzContents.*' >"$log" 2>&1 || verdict="FAILED (exit $?)"
  note "garbage index contents under memcheck: $verdict; $(grep -E 'ERROR SUMMARY' "$log" | tail -n1)"
  [[ "$verdict" == ok ]] || status=1
else
  note "compute-sanitizer not found: the memcheck run was skipped"
fi
note "fuzz seed: $seed; status $status"
exit "$status"
