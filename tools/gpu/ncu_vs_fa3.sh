#!/usr/bin/env bash
# On the GPU machine: one forward shape under Nsight Compute, ours and FlashAttention-3's, side by
# side. Sections (speed of light, warp states, scheduler, instructions) and source counters of one
# launch of each (after warm-up launches, --clock-control none), exported as NAME-details.csv and
# NAME-sass.csv, then tools/sass/ncu_summary.py (cycles, clock, instructions, the loop per key,
# polls) and tools/sass/ncu_opcode_diff.py (executed instructions per opcode, ours - FA3).
# FA3 is built from .anchors (fa3_anchor.sh build [fp8], about two minutes) unless it imports
# already. docs/PERF.md, thirtieth session, call 2, is this on the bf16 d64 forward.
# usage: tools/gpu/ncu_vs_fa3.sh LOGDIR BATCH SEQLEN HEADS HEAD_DIM [CAUSAL] [bf16|e4m3]
#   NCU_BENCH  our flashattn_bench binary (default build-gpu's)
#   NCU_KEYS   "OURS FA3": the two kernels' key tiles, for the loop's instructions per key
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
usage="usage: tools/gpu/ncu_vs_fa3.sh LOGDIR BATCH SEQLEN HEADS HEAD_DIM [CAUSAL] [bf16|e4m3]"
logdir="${1:?$usage}" b="${2:?$usage}" s="${3:?$usage}" h="${4:?$usage}" d="${5:?$usage}"
causal="${6:-0}" dtype="${7:-bf16}"
[[ "$dtype" == bf16 || "$dtype" == e4m3 ]] || fa_die "dtype must be bf16 or e4m3"
[[ -d "$FA_ROOT/.anchors/fa3/hopper" ]] || fa_die "no .anchors/fa3: run ../shared/tools/fa3_anchor.sh prepare here first"
mkdir -p "$logdir"
bench="${NCU_BENCH:-$(fa_benchmark_binary)}"
ncu_bin="$(fa_ncu_binary)"
export PYTHONPATH="$FA_ROOT/.anchors/fa3/hopper${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import flash_attn_interface" 2>/dev/null; then
  words=()
  [[ "$dtype" == e4m3 ]] && words=(fp8)
  (cd "$FA_ROOT" && bash .anchors/tools/fa3_anchor.sh build "${words[@]}") >"$logdir/fa3-build.log" 2>&1 ||
    fa_die "FA3 build failed (log: $logdir/fa3-build.log)"
fi
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats
  --section SourceCounters --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active)
tag="${dtype}-d${d}-${b}x${s}-c${causal}"
profile() {  # NAME KERNEL_REGEX COMMAND...
  local name="$1" kernel="$2"
  shift 2
  "$ncu_bin" --clock-control none --kernel-name-base demangled -k "regex:$kernel" -s 2 -c 1 "${sections[@]}" \
    -f -o "$logdir/$name" "$@" >"$logdir/$name.log" 2>&1 || { tail -n 20 "$logdir/$name.log"; fa_die "ncu failed on $name"; }
  "$ncu_bin" -i "$logdir/$name.ncu-rep" --page details --csv >"$logdir/$name-details.csv"
  "$ncu_bin" -i "$logdir/$name.ncu-rep" --page source --csv --print-source sass >"$logdir/$name-sass.csv"
}
dtype_args=()
[[ "$dtype" == e4m3 ]] && dtype_args=(--dtype e4m3)
profile "ours-$tag" 'fwd_kernel' "$bench" --backend fa3 "${dtype_args[@]}" --shape "$b,$s,$s,$h,$d" --causal "$causal" \
  --direction fwd --warmup 2 --repeats 1 --no-naive
cat >"$logdir/fa3_fwd_once.py" <<'PY'
import sys, torch, flash_attn_interface as fa3
b, s, h, d, causal, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6]
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
if dtype == "e4m3":
    q, k, v = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
for _ in range(3):
    fa3.flash_attn_func(q, k, v, causal=causal)
torch.cuda.synchronize()
PY
profile "fa3-$tag" 'FlashAttnFwdSm90' python3 "$logdir/fa3_fwd_once.py" "$b" "$s" "$h" "$d" "$causal" "$dtype"
read -r keys_ours keys_fa3 <<<"${NCU_KEYS:-0 0}"
{
  python3 "$FA_ROOT/tools/sass/ncu_summary.py" "$logdir/ours-$tag" "$logdir/fa3-$tag" --keys-per-iteration "$keys_ours" "$keys_fa3"
  echo
  python3 "$FA_ROOT/tools/sass/ncu_opcode_diff.py" "$logdir/ours-$tag-sass.csv" "$logdir/fa3-$tag-sass.csv" --rows 25
} | tee "$logdir/summary-$tag.md"
