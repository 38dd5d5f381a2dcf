#!/usr/bin/env bash
# Host time of two versions of the Python package in one GPU call: this tree's and REF's (its
# python/flashattn, run with the extension this tree builds; the extension's C++ is shared, so
# only Python changes are compared).
#   here:        tools/gpu/python_ab.sh prepare REF     (writes build/python-ab/python/flashattn and
#                build/python-ab/REF, git-ignored)
#   on the GPU:  tools/gpu/python_ab.sh run LOGDIR      (carry build/python-ab; installs the package
#                unless it is installed from this tree already)
# LOGDIR gets host_profile_{tree,ref}.txt (tools/gpu/host_profile.py --pieces) and
# host_overhead_{tree,ref}.txt (tools/gpu/host_overhead.py), run alternately, AB_ROUNDS times each.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common_gpu.sh"
ab_dir="$FA_ROOT/build/python-ab"
case "${1:-}" in
  prepare)
    ref="${2:?usage: tools/gpu/python_ab.sh prepare REF}"
    rm -rf "$ab_dir" && mkdir -p "$ab_dir"
    git -C "$FA_ROOT" archive "$ref" python/flashattn | tar x -C "$ab_dir" || fa_die "cannot export $ref's python/flashattn"
    echo "$ref $(git -C "$FA_ROOT" rev-parse --short "$ref")" >"$ab_dir/REF"
    fa_log "$ref's package in $ab_dir/python/flashattn; carry build/python-ab"
    ;;
  run)
    logdir="${2:?usage: tools/gpu/python_ab.sh run LOGDIR}"
    mkdir -p "$logdir" && logdir="$(cd "$logdir" && pwd)"
    [[ -d "$ab_dir/python/flashattn" ]] || fa_die "run 'tools/gpu/python_ab.sh prepare REF' first and carry build/python-ab"
    fa_setup_path
    python="${FA_PYTHON:-python3}"
    # The installed package's folder (from /tmp, so that this tree's python/ is not imported).
    installed() { (cd /tmp && "$python" -c 'import flashattn, os; print(os.path.dirname(flashattn.__file__))' 2>/dev/null); }
    site="$(installed)"
    if [[ -z "$site" ]]; then
      fa_install_python "$logdir/install.log" || fa_die "install failed (see $logdir/install.log)"
      site="$(installed)"
    fi
    cp "$site"/_ext*.so "$ab_dir/python/flashattn/" || fa_die "no extension in $site"
    cd "$FA_ROOT/tools/gpu" || fa_die "no tools/gpu in $FA_ROOT"
    for _ in $(seq "${AB_ROUNDS:-1}"); do
      for v in tree ref; do
        path=""; [[ $v == ref ]] && path="$ab_dir/python"
        PYTHONPATH="$path" timeout 90 "$python" host_profile.py --calls 100 --pieces >>"$logdir/host_profile_$v.txt" 2>&1
        PYTHONPATH="$path" timeout 60 "$python" host_overhead.py --shapes 1x16384 --calls 50 >>"$logdir/host_overhead_$v.txt" 2>&1
      done
    done
    for v in tree ref; do
      echo "== $v ($([[ $v == ref ]] && cat "$ab_dir/REF" || echo "this tree"))"
      grep -E 'us median|^\{' "$logdir/host_profile_$v.txt" "$logdir/host_overhead_$v.txt" | sed 's/^[^:]*://'
    done | tee "$logdir/summary.txt"
    ;;
  *) fa_die "usage: tools/gpu/python_ab.sh prepare REF | run LOGDIR" ;;
esac
