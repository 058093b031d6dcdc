#!/usr/bin/env bash
# `cmake --install` into a fresh prefix serves other projects: the example plug-in builds out of
# tree with find_package(mhc_verify) and mhc::plugin (also with Boost hidden: the header needs no
# -dev package of ours), the installed CLI judges it, a C++ program links mhc::runner, and asking
# for the library without its dependencies fails at configure time, saying what is missing.
# Usage: install.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)

cmake --install "$build" --prefix "$d/p" > /dev/null || fail "cmake --install"
for f in include/mhc/plugin/mhc_plugin.h include/mhc/runner/check.hpp \
         lib/cmake/mhc_verify/mhc_verify-config.cmake bin/mhc-verify; do
  [ -e "$d/p/$f" ] || fail "not installed: $f"
done
! grep -rq "$src" "$d/p/lib/cmake" || fail "the package config names the source tree"

cmake -S "$src/impl/plugin/examples" -B "$d/plugin" "${gen[@]}" -DCMAKE_PREFIX_PATH="$d/p" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON > "$d/log" 2>&1 || { cat "$d/log"; fail "plug-in configure"; }
cmake --build "$d/plugin" > "$d/log" 2>&1 || { cat "$d/log"; fail "plug-in build"; }
"$d/p/bin/mhc-verify" check --kernel "plugin:$d/plugin/mhc_example.so" --op boundary --cases 1 \
  --tokens 2 --dim 64 > "$d/log" 2>&1 || { cat "$d/log"; fail "installed CLI on the out-of-tree plug-in"; }
grep -q "check: PASS" "$d/log" || { cat "$d/log"; fail "no PASS"; }

cmake -S "$src/cmake/tests/consumer" -B "$d/consumer" "${gen[@]}" -DCMAKE_PREFIX_PATH="$d/p" \
  > "$d/log" 2>&1 || { cat "$d/log"; fail "consumer configure"; }
cmake --build "$d/consumer" > "$d/log" 2>&1 || { cat "$d/log"; fail "consumer build"; }
(cd "$d" && "$d/consumer/consumer") > "$d/log" 2>&1 || { cat "$d/log"; fail "consumer run"; }
grep -q "consumer: 2 cases, 0 failed" "$d/log" || { cat "$d/log"; fail "consumer output"; }

if cmake -S "$src/cmake/tests/consumer" -B "$d/nolib" "${gen[@]}" -DCMAKE_PREFIX_PATH="$d/p" \
     -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON > "$d/log" 2>&1; then
  fail "COMPONENTS library configured without Boost"
fi
grep -q "libboost-dev" "$d/log" || { cat "$d/log"; fail "the missing dependency is not named"; }
echo "install: PASS"
