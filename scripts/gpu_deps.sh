#!/usr/bin/env bash
# Downloads the Debian packages trlx's build needs (headers and the few
# shared libraries: yaml-cpp, spdlog, fmt, Oniguruma, CLI11, nlohmann/json,
# Catch2, pkg-config, libcurl, SQLite and zlib headers) into .gpu-deps/, for a GPU machine that has CUDA,
# PyTorch, CMake and ninja but neither these packages nor a package mirror.
# Carry .gpu-deps/ with the checkout there: scripts/gpu_check.sh unpacks them
# into a scratch prefix (not into /) and builds against it.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(libcli11-dev libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libspdlog-dev libspdlog1.10 libfmt-dev
          libfmt9 catch2 libonig-dev libonig5 pkgconf pkgconf-bin libpkgconf3 pkg-config
          libcurl4-openssl-dev libsqlite3-dev zlib1g-dev)
# The -dev packages' lib*.so links name runtimes not carried here (libcurl4,
# libsqlite3-0, zlib1g): gpu_check.sh points them at the machine's own, and
# without a libcurl there trlx builds without hub downloads (configure says so).
mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb
apt-get download "${PACKAGES[@]}"
echo "gpu_deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .gpu-deps/"
