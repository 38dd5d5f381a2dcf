#!/usr/bin/env bash
# FlashAttention-3's steady-state loops beside ours, without a GPU machine: compiles one FA3
# instantiation from .anchors/ (../shared/tools/fa3_anchor.sh prepare) for sm_90a with the flags
# of its setup.py, and prints, for each of its attention kernels, the template flags that tell
# the variants apart and tools/sass/loops.py's first loop (the steady state). Compare with
# `python3 tools/sass/loops.py OUR_OBJECT REGEX`. docs/PERF.md, twenty-second session: the d256
# backward, fp8 d128 and d64 forward loops read this way.
# usage: tools/sass/fa3_loops.sh INSTANTIATION [MIN_EX2]
#   e.g. tools/sass/fa3_loops.sh flash_fwd_hdim128_e4m3_sm90.cu
#        tools/sass/fa3_loops.sh flash_bwd_hdim256_bf16_sm90.cu
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
name="${1:?usage: tools/sass/fa3_loops.sh INSTANTIATION (a file of .anchors/fa3/hopper/instantiations) [MIN_EX2]}"
hopper="$FA_ROOT/.anchors/fa3/hopper"
[[ -f "$hopper/instantiations/$name" ]] || fa_die "no $hopper/instantiations/$name (fa3_anchor.sh prepare first)"
bin="$(bash "$FA_ROOT/tools/sass/prepare.sh")"
cubin="${TMPDIR:-/tmp}/fa3-${name%.cu}.cubin"
if [[ ! -s "$cubin" || "$hopper/instantiations/$name" -nt "$cubin" ]]; then
  (cd "$hopper" && nvcc -O3 -std=c++17 --use_fast_math --expt-relaxed-constexpr --expt-extended-lambda \
    -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG \
    -I. -I../csrc/cutlass/include -gencode=arch=compute_90a,code=sm_90a -cubin -o "$cubin" "instantiations/$name") ||
    fa_die "nvcc failed on $name"
fi
for kernel in $("$bin/cuobjdump" -sass "$cubin" | awk '/Function :/ {print $3}' | grep -E 'FlashAttn(Fwd|Bwd)Sm90'); do
  flags="$(echo "$kernel" | c++filt | grep -oE 'Sm90, (true|false)(, (true|false))+' | head -n1)"
  tile="$(echo "$kernel" | c++filt | grep -oE 'tuple<cute::C<[0-9]+>, cute::C<[0-9]+>, cute::C<[0-9]+> >' | sed -n 2p)"
  loop="$(python3 "$FA_ROOT/tools/sass/loops.py" "$cubin" "$kernel" --min-ex2 "${2:-8}" | sed -n 2,3p)"
  printf '%s | %s\n%s\n' "$tile" "$flags" "$loop"
done
