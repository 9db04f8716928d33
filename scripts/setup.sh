#!/usr/bin/env bash
# One command from a fresh Debian 12 (or Ubuntu 22.04+) machine to a built
# `trlx`: system packages, the PyTorch wheel (for LibTorch), then a Release
# build of the binary in build/ (scripts/test.sh builds the tests). Safe to run again: it installs only what is missing and
# rebuilds incrementally.
#
# Environment:
#   PYTHON=python3        interpreter whose torch provides LibTorch
#   LIBTORCH=/path        use an unpacked LibTorch archive instead of the wheel
#   BUILD_DIR=build       where to build
#   JOBS=2                parallel compile jobs
#   TRLX_SKIP_APT=1       do not touch system packages (no root needed)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
say() { printf '\n== %s\n' "$*"; }

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  python3 python3-pip python3-venv
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 libonig-dev
  openmpi-bin libopenmpi-dev
  libcurl4-openssl-dev zlib1g-dev libsqlite3-dev
)

if [ "${TRLX_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "Installing system packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    say "System packages present"
  fi
fi

CMAKE_ARGS=(-S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ -n "${LIBTORCH:-}" ]; then
  say "Using LibTorch from LIBTORCH=$LIBTORCH"
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$LIBTORCH")
else
  # The interpreter that has torch: $PYTHON, else python3, else a project venv
  # (Debian's own python3 refuses system-wide pip installs).
  PY=${PYTHON:-python3}
  if ! "$PY" -c "import torch" 2>/dev/null; then
    if [ -x "$ROOT/.venv/bin/python3" ] && "$ROOT/.venv/bin/python3" -c "import torch" 2>/dev/null; then
      PY="$ROOT/.venv/bin/python3"
    else
      say "Installing the PyTorch wheel (several GB with its CUDA libraries)"
      log=$(mktemp)
      if ! "$PY" -m pip install torch 2>"$log"; then
        if grep -q "externally-managed" "$log"; then
          # Debian's own python3 refuses system-wide installs: use a venv.
          say "System python is externally managed; installing into $ROOT/.venv"
          python3 -m venv "$ROOT/.venv"
          "$ROOT/.venv/bin/python3" -m pip install torch
          PY="$ROOT/.venv/bin/python3"
        else
          cat "$log" >&2
          exit 1
        fi
      fi
      rm -f "$log"
    fi
  fi
  PREFIX=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  say "Using LibTorch $("$PY" -c 'import torch; print(torch.__version__)') from $PREFIX"
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$PREFIX" -DPython3_EXECUTABLE="$(command -v "$PY" || echo "$PY")")
fi

# Apache Arrow C++ (Parquet and Arrow datasets) from the pyarrow wheel, in the
# interpreter that has torch (python3 when LibTorch is an unpacked archive).
# Without it trlx still builds and refuses Parquet/Arrow files.
ARROW_PY=${PY:-${PYTHON:-python3}}
if ! "$ARROW_PY" -c "import pyarrow" 2>/dev/null; then
  say "Installing the pyarrow wheel (Apache Arrow's C++ libraries, for Parquet and Arrow datasets)"
  "$ARROW_PY" -m pip install pyarrow || say "pyarrow could not be installed: this build will refuse Parquet/Arrow datasets"
fi
if ARROW_DIRS=$("$ARROW_PY" -c 'import pyarrow as pa; print(pa.get_include()); print(pa.get_library_dirs()[0])' 2>/dev/null); then
  say "Using Apache Arrow $("$ARROW_PY" -c 'import pyarrow; print(pyarrow.__version__)') from pyarrow"
  CMAKE_ARGS+=(-DTRLX_ARROW_INCLUDE_DIR="$(sed -n 1p <<<"$ARROW_DIRS")" -DTRLX_ARROW_LIB_DIR="$(sed -n 2p <<<"$ARROW_DIRS")")
fi

say "Configuring ($BUILD_DIR)"
cmake "${CMAKE_ARGS[@]}" >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
# The trlx binary only: scripts/test.sh builds the test executables before it
# runs them.
say "Building trlx with $JOBS jobs (about 9 minutes on 2 cores from nothing; ccache makes rebuilds fast)"
cmake --build "$BUILD_DIR" -j "$JOBS" --target trlx
say "Done: $ROOT/$BUILD_DIR/apps/trlx/trlx"
"$BUILD_DIR/apps/trlx/trlx" --version
echo "Next: scripts/test.sh   (or: $BUILD_DIR/apps/trlx/trlx --help)"
