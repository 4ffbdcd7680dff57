#!/usr/bin/env bash
# Build (or reuse) Horovod 0.28.1 for the torch and tensorflow installed in PYTHON's env.
#
#   usage: scripts/build_horovod.sh PYTHON        e.g. scripts/build_horovod.sh .venv/bin/python
#
# Horovod 0.28.1 ships only as an sdist, and it does not build as shipped against
# torch >= 2.1 (needs C++17) or a TF wheel without XLA's highwayhash headers, so we
# patch it (scripts/horovod-0.28.1.patch), build a wheel once and cache it in
#   ${XBENCH_CACHE:-$HOME/.cache/xbench}/wheels/<key>/
# keyed on the horovod, torch, tensorflow and python versions and cpu/cuda flavour.
set -euo pipefail

HOROVOD_VERSION=0.28.1
RUNTIME_DEPS=(cloudpickle psutil pyyaml cffi packaging)
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PATCH="$SCRIPT_DIR/horovod-$HOROVOD_VERSION.patch"

say() { echo "build_horovod: $*"; }
die() { echo "build_horovod: ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 PYTHON   (e.g. $0 .venv/bin/python)"

# Absolute path to PYTHON without resolving symlinks: the venv's bin dir is where
# horovodrun gets installed.
PY="$1"
case "$PY" in
    */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
    *) PY="$(command -v "$PY")" || die "python not found: $1" ;;
esac
[ -x "$PY" ] || die "not an executable python: $1"
BIN_DIR="$(dirname "$PY")"

# Installed versions, read without importing the (slow to import) frameworks.
versions="$("$PY" - <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError

def first(*names):
    for n in names:
        try:
            return version(n)
        except PackageNotFoundError:
            pass
    return ""

print(first("torch"), first("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel"),
      "%d.%d" % sys.version_info[:2], sep="|")
EOF
)"
IFS='|' read -r TORCH_V TF_V PY_V <<<"$versions" || true
[ -n "${TORCH_V:-}" ] && [ -n "${TF_V:-}" ] ||
    die "torch and tensorflow must be installed for $PY first (found torch='${TORCH_V:-}' tensorflow='${TF_V:-}')"

# 1. A Horovod that already has both frameworks (ours from an earlier run, or the
#    user's own) is used as is: both extensions are there and were built against
#    the installed torch and tensorflow (per Horovod's metadata.json). That is what
#    `horovodrun --check-build` reports as "[X] PyTorch" / "[X] TensorFlow", but
#    this takes well under a second: check-build starts ~6 processes that each
#    import TensorFlow (20-90 s).
if [ -x "$BIN_DIR/horovodrun" ] && current="$("$PY" - "$TORCH_V" "$TF_V" 2>/dev/null <<'EOF'
import glob, json, os, sys
import horovod
d = os.path.dirname(horovod.__file__)
with open(os.path.join(d, "metadata.json")) as f:
    built = json.load(f)
assert built.get("pytorch") == sys.argv[1] and built.get("tensorflow") == sys.argv[2]
assert glob.glob(os.path.join(d, "torch", "mpi_lib_v2*.so"))
assert glob.glob(os.path.join(d, "tensorflow", "mpi_lib*.so"))
print(horovod.__version__)
EOF
)"; then
    say "horovod $current with PyTorch and TensorFlow already installed for $PY"
    exit 0
fi

# 2. Cache key. The patch's hash is in it so that a changed patch rebuilds.
# CUDA flavour only where we can really build and use it: nvcc and a visible GPU.
FLAVOUR=cpu
if command -v nvcc >/dev/null 2>&1 &&
   "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    FLAVOUR=cuda
fi

PATCH_SHA="$(sha256sum "$PATCH" | cut -c1-8)"
KEY="horovod$HOROVOD_VERSION-torch$TORCH_V-tf$TF_V-py$PY_V-$FLAVOUR-$PATCH_SHA"
CACHE_DIR="${XBENCH_CACHE:-$HOME/.cache/xbench}/wheels/$KEY"

install_wheel() {
    "$PY" -m pip install -q --no-deps "$1" || die "pip install of $1 failed"
    "$PY" -m pip install -q "${RUNTIME_DEPS[@]}" || die "pip install of ${RUNTIME_DEPS[*]} failed"
    say "installed $(basename "$1") for $PY"
}

cached="$(ls "$CACHE_DIR"/horovod-*.whl 2>/dev/null | head -n1 || true)"
if [ -n "$cached" ]; then
    say "using cached wheel $cached"
    install_wheel "$cached"
    exit 0
fi

# 3. Build from the patched sdist.
say "no cached wheel for $KEY; building horovod $HOROVOD_VERSION from source ($FLAVOUR; ~7 min on 2 idle cores, more on a busy machine)"

# The system cmake 3.x: never a cmake from the venv (a pip cmake 4.x refuses gloo's
# old cmake_minimum_required), so drop the venv's bin dir from PATH for the build.
BUILD_PATH="$(tr ':' '\n' <<<"$PATH" | grep -vxF "$BIN_DIR" | paste -sd: -)"
CMAKE="$(PATH="$BUILD_PATH" command -v cmake || true)"
[ -n "$CMAKE" ] || die "cmake not found (install the system one: apt-get install cmake)"
CMAKE_V="$("$CMAKE" --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')"
case "$CMAKE_V" in
    3.1[3-9]*|3.[2-9][0-9]*) ;;
    *) die "need cmake 3.13..3.x, found $CMAKE $CMAKE_V (apt-get install cmake)" ;;
esac
command -v g++ >/dev/null 2>&1 || die "g++ not found (apt-get install g++)"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
LOG="$TMP/build.log"

fail() {
    # The first errors (e.g. CMake's) are often far above pip's traceback at the end.
    echo "---- first errors in the build log ----" >&2
    grep -m 10 -A 3 -E "CMake Error|error:|Error [0-9]+" "$LOG" >&2 || true
    echo "---- last 40 lines of the build log ----" >&2
    tail -n 40 "$LOG" >&2 || true
    echo "----------------------------------------" >&2
    # Keep the full log: $TMP is removed on exit.
    mkdir -p "$(dirname "$CACHE_DIR")"
    cp "$LOG" "$(dirname "$CACHE_DIR")/build-$KEY.log" 2>/dev/null &&
        echo "full log: $(dirname "$CACHE_DIR")/build-$KEY.log" >&2
    die "$1"
}

say "installing build deps (setuptools wheel ${RUNTIME_DEPS[*]})"
# --no-build-isolation below builds against this env's torch/tf, so the build
# deps must be here too. None of them depends on torch.
"$PY" -m pip install -q setuptools wheel "${RUNTIME_DEPS[@]}" >"$LOG" 2>&1 ||
    fail "could not install build deps"

say "downloading horovod==$HOROVOD_VERSION sdist"
"$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$TMP" >>"$LOG" 2>&1 ||
    fail "could not download the horovod $HOROVOD_VERSION sdist"
tar -xzf "$TMP/horovod-$HOROVOD_VERSION.tar.gz" -C "$TMP"
SRC="$TMP/horovod-$HOROVOD_VERSION"

say "applying $(basename "$PATCH")"
patch -p1 --fuzz=0 -d "$SRC" <"$PATCH" >>"$LOG" 2>&1 || fail "patch did not apply"

# setup.py runs make -j8 unless MAKEFLAGS is set: use one job per core, but at most
# one per 2 GB of RAM (a job peaks at ~1.6 GB). Our own MAKEFLAGS, not a calling
# make's (its jobserver is not passed through pip).
mem_gb=$(awk '/^MemTotal/ {print int($2 / 1048576)}' /proc/meminfo)
JOBS=$(nproc); [ "$JOBS" -le $((mem_gb / 2)) ] || JOBS=$((mem_gb / 2)); [ "$JOBS" -ge 1 ] || JOBS=1

ENV_VARS=(
    PATH="$BUILD_PATH"
    MAKEFLAGS="-j$JOBS"
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1
    HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo
)
[ "$FLAVOUR" = cuda ] && ENV_VARS+=(HOROVOD_GPU_OPERATIONS=NCCL)

say "building wheel (cmake $CMAKE_V, ${ENV_VARS[*]:1}); log: $LOG"
start=$SECONDS
(cd "$SRC" && env "${ENV_VARS[@]}" "$PY" -m pip wheel -v --no-deps --no-build-isolation -w "$TMP/dist" .) >>"$LOG" 2>&1 ||
    fail "horovod $HOROVOD_VERSION build failed"
WHEEL="$(ls "$TMP"/dist/horovod-*.whl 2>/dev/null | head -n1 || true)"
[ -n "$WHEEL" ] || fail "pip wheel made no horovod wheel"
say "built $(basename "$WHEEL") in $((SECONDS - start)) s"

# Into the cache atomically: copy under a temporary name, then rename, so that a
# half-written wheel is never picked up.
mkdir -p "$CACHE_DIR"
cp "$WHEEL" "$CACHE_DIR/.$(basename "$WHEEL").tmp.$$"
mv -f "$CACHE_DIR/.$(basename "$WHEEL").tmp.$$" "$CACHE_DIR/$(basename "$WHEEL")"
say "cached in $CACHE_DIR"

install_wheel "$CACHE_DIR/$(basename "$WHEEL")"
