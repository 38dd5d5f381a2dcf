#!/usr/bin/env bash
# After a CUDA build in build-gpu/: per-kernel SASS census of libflashattn.a for sm_90a — counts of
# HGMMA/QGMMA (wgmma), UTMALDG/UTMASTG (TMA), USETMAXREG, LDL/STL (local memory: must be 0).
# Writes LOGDIR/sass.txt. Exit status 1 when an FA3 kernel lacks wgmma/TMA/setmaxnreg or any
# kernel touches local memory.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
logdir="${1:?usage: tools/gpu/sass_check.sh LOGDIR}"
mkdir -p "$logdir"
fa_setup_path
lib="$FA_GPU_BUILD/libflashattn.a"
[[ -f "$lib" ]] || fa_die "$lib missing: build first (tools/gpu/test.sh)"
cuobjdump --dump-sass --gpu-architecture sm_90a "$lib" 2>/dev/null | awk '
  /Function :/ { if (name != "") report(); name = $NF; gm = tma = reg = local = 0; next }
  /[HQ]GMMA/ { gm++ } /UTMALDG|UTMASTG/ { tma++ } /USETMAXREG/ { reg++ } /[^A-Z](LDL|STL)[ .]/ { local++ }
  function report() { printf "%-8s wgmma %4d tma %3d setmaxnreg %2d local %3d  %s\n",
      (name ~ /fa3/ ? "FA3" : "other"), gm, tma, reg, local, name }
  END { if (name != "") report() }' | sort | tee "$logdir/sass.txt"
bad=$(awk '($1 == "FA3" && ($3 == 0 || $5 == 0 || $7 == 0)) || $9 != 0' "$logdir/sass.txt" | wc -l)
echo "sass check: $bad kernel(s) fail the rule" | tee -a "$logdir/summary.txt"
[[ "$bad" == 0 ]]
