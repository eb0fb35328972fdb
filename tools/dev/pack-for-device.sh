#!/usr/bin/env bash
# pack-for-device.sh [BUILD] — packs what a run on the GPU machine needs into
# .devrun/ (gitignored), for the device tool's `carry`: the binaries of BUILD
# (stripped), the CUDA check, and every shared library they load that is not
# part of the C runtime (the GPU machine's image lacks Debian's -dev libraries:
# cjson, zmq, utf8proc, uring, microhttpd and their dependencies).  Build first
# with `make -j2 all cuda-check` (nvcc found, so the CUDA backend is linked);
# for the H200 alone, a build with sm_90 code only is a third the size (the
# carry limit leaves room for the fixtures): NVCC_FLAGS="-O2 -std=c++17 -I.
# -gencode arch=compute_90,code=sm_90" make -j2 BUILD=build-dev all cuda-check,
# then pack-for-device.sh build-dev.  BINS="nebula-convert nebula-gen ..."
# packs only those binaries (the tree and .devrun together must fit the
# 64 MiB carry: all of bin/ no longer does beside the fixtures).
# On the GPU machine: `bash tools/dev/device-run.sh` (LD_LIBRARY_PATH is set
# there).  Prints the packed size: the carry limit is 64 MiB.
set -eu
BUILD=${1:-build}
D=.devrun
[ -x "$BUILD/tests/cuda/check_backend" ] || { echo "pack-for-device: $BUILD/tests/cuda/check_backend missing: make -j2 all cuda-check" >&2; exit 1; }
[ -x "$BUILD/bin/nebula-bench-bw" ] || { echo "pack-for-device: $BUILD/bin/nebula-bench-bw missing: nvcc was not found at build time" >&2; exit 1; }
rm -rf "$D/build" "$D/lib"
mkdir -p "$D/build/bin" "$D/build/tests/cuda" "$D/lib"
if [ -n "${BINS:-}" ]; then # only these binaries of BUILD/bin (the tree and .devrun share the 64 MiB carry)
    for b in $BINS; do cp "$BUILD/bin/$b" "$D/build/bin/" || { echo "pack-for-device: no $BUILD/bin/$b" >&2; exit 1; }; done
else
    cp "$BUILD"/bin/* "$D/build/bin/"
fi
# every CUDA check built (check_backend, check_seq_state, ...): the GPU steps of tools/dev/device-checks.sh
for c in "$BUILD"/tests/cuda/check_*; do [ -x "$c" ] && [ -f "$c" ] && cp "$c" "$D/build/tests/cuda/"; done
strip "$D"/build/bin/* "$D"/build/tests/cuda/*
ldd "$D"/build/bin/* "$D"/build/tests/cuda/* 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$D/lib/"; done
# The carry is 64 MiB for the tree and what it names together: .devrun with every check is more than that, its
# xz archive a sixth of it.  tools/dev/device-checks.sh unpacks .devrun.txz when it is newer than .devrun.
tar -cf - "$D" | xz -T2 -6 >"$D.txz"
echo "pack-for-device: $(du -sh "$D" | cut -f1) in $D ($(ls "$D/lib" | wc -l) libraries), $(du -sh "$D.txz" | cut -f1) as $D.txz; carry [\"$D.txz\"]"
