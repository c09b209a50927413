#!/usr/bin/env bash
# C and C++ users: `meson install` of the build into a temporary prefix, then a C and a C++ program
# compiled and linked with nothing but `pkg-config --cflags --libs baton-ckpt` (as a Makefile or CMake's
# pkg_check_modules would), run against the installed library: a checkpoint written and restored.
#   pkgconfig_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >/dev/null
pc=$(find "$tmp/root" -name baton-ckpt.pc -print -quit)
[ -n "$pc" ] || { echo "pkgconfig_test: no baton-ckpt.pc was installed" >&2; exit 1; }
# The file names the prefix it was configured with; here that prefix lies under the temporary root.
prefix=$(sed -n 's/^prefix=//p' "$pc")
export PKG_CONFIG_PATH=$(dirname "$pc")
pc_flags=(--define-variable=prefix="$tmp/root$prefix")
read -ra cflags <<<"$(pkg-config "${pc_flags[@]}" --cflags baton-ckpt)"
read -ra libs <<<"$(pkg-config "${pc_flags[@]}" --libs baton-ckpt)"
libdir=$(pkg-config "${pc_flags[@]}" --variable=libdir baton-ckpt)
echo "pkg-config baton-ckpt: ${cflags[*]} ${libs[*]}"

cc -std=c11 -Wall -Werror "${cflags[@]}" "$here/consumer.c" -o "$tmp/consumer-c" "${libs[@]}"
c++ -std=c++20 -Wall -Werror "${cflags[@]}" "$here/consumer.cpp" -o "$tmp/consumer-cpp" "${libs[@]}"
# The installed library, not the build directory's: nothing else is on the loader's path.
LD_LIBRARY_PATH=$libdir "$tmp/consumer-c" "$tmp/chain-c"
LD_LIBRARY_PATH=$libdir "$tmp/consumer-cpp" "$tmp/chain-cpp"
if LD_LIBRARY_PATH=$libdir ldd "$tmp/consumer-c" | grep -q "$build"; then
    echo "pkgconfig_test: the program found the build directory's library" >&2
    exit 1
fi
