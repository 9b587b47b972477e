#!/usr/bin/env bash
# CTest package_install: `cmake --install` of this build into a temporary prefix, then a tiny
# external C++ project (fa4::fa4 and fa4::fa4_static, attention_forward on the cpu backend) and a
# C-only project (the C ABI, fa4::fa4) configured, built and run against the installed tree via
# find_package(fa4 CONFIG); the C program once more built by the compiler alone from `pkg-config
# --cflags --libs fa4`. Also: the installed files are where the package says, the programs run
# without LD_LIBRARY_PATH, and the installed fa4 CLI runs.
#   check_package.sh BUILD_DIR SOURCE_DIR VERSION   (env: CMAKE, CC, CXX, GENERATOR, FA4_CFLAGS,
#                                                    FA4_CXXFLAGS, FA4_LDFLAGS from CMake)
set -euo pipefail
build=$1 src=$2 version=$3
cmake_bin=${CMAKE:-cmake}
here="$src/tests/package"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/fa4-pkg.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
unset LD_LIBRARY_PATH

step() { echo "== $*"; }
fail() { echo "package_install: $*" >&2; exit 1; }

step "install into $prefix"
"$cmake_bin" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install failed"; }
cfg=$(find "$prefix" -name fa4Config.cmake | head -1)
pc=$(find "$prefix" -name fa4.pc | head -1)
[ -n "$cfg" ] || fail "no fa4Config.cmake installed"
[ -n "$pc" ] || fail "no fa4.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/include/fa4/fa4.h" "$prefix/include/fa4/fa4_c.h" "$libdir/libfa4.a" "$libdir/libfa4.so"; do
  [ -e "$f" ] || fail "not installed: ${f#$prefix/}"
done

common=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DFA4_VERSION="$version")
[ -n "${GENERATOR:-}" ] && common+=(-G "$GENERATOR")
configure_build() {  # name source extra-args...
  local name=$1 dir=$2; shift 2
  "$cmake_bin" -S "$dir" -B "$tmp/$name" "${common[@]}" "$@" >"$tmp/$name.log" 2>&1 &&
    "$cmake_bin" --build "$tmp/$name" >>"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: configure / build failed"; }
}

step "C++ project: find_package(fa4 CONFIG), fa4::fa4 and fa4::fa4_static"
configure_build cxx "$here/cxx" -DCMAKE_CXX_COMPILER="${CXX:-c++}" \
  -DCMAKE_CXX_FLAGS="${FA4_CXXFLAGS:-}" -DCMAKE_EXE_LINKER_FLAGS="${FA4_LDFLAGS:-}" &
cxx_pid=$!
step "C project: find_package(fa4 CONFIG), fa4::fa4"
configure_build c "$here/c" -DCMAKE_C_COMPILER="${CC:-cc}" \
  -DCMAKE_C_FLAGS="${FA4_CFLAGS:-}" -DCMAKE_EXE_LINKER_FLAGS="${FA4_LDFLAGS:-}" &
c_pid=$!

command -v pkg-config >/dev/null || fail "pkg-config not found (scripts/deps.sh installs it)"
step "C program by pkg-config: $(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs fa4)"
export PKG_CONFIG_PATH="$(dirname "$pc")"
[ "$(pkg-config --modversion fa4)" = "$version" ] || fail "fa4.pc: version $(pkg-config --modversion fa4), expected $version"
# shellcheck disable=SC2046
"${CC:-cc}" ${FA4_CFLAGS:-} "$here/c/main.c" -o "$tmp/use_c_pkgconfig" $(pkg-config --cflags --libs fa4) \
  -Wl,-rpath,"$(pkg-config --variable=libdir fa4)" -lm ${FA4_LDFLAGS:-} || fail "pkg-config build failed"

wait "$cxx_pid" || fail "C++ project failed"
wait "$c_pid" || fail "C project failed"

step "run"
for exe in "$tmp/cxx/use_shared" "$tmp/cxx/use_static" "$tmp/c/use_c" "$tmp/use_c_pkgconfig"; do
  "$exe" || fail "${exe#$tmp/} failed"
done
# use_static must not need libfa4.so; use_shared must load the installed one.
if command -v ldd >/dev/null; then
  ldd "$tmp/cxx/use_static" >"$tmp/ldd_static" && ! grep -q 'libfa4\.so' "$tmp/ldd_static" ||
    fail "use_static depends on libfa4.so"
  ldd "$tmp/cxx/use_shared" >"$tmp/ldd_shared" && grep -q "$libdir/libfa4\.so" "$tmp/ldd_shared" ||
    { cat "$tmp/ldd_shared"; fail "use_shared does not load $libdir/libfa4.so"; }
fi
if command -v readelf >/dev/null; then
  readelf -d "$libdir/libfa4.so" >"$tmp/dyn" && grep -qE 'R(UN)?PATH.*\$ORIGIN' "$tmp/dyn" ||
    fail "libfa4.so has no \$ORIGIN install rpath"
fi
if [ -x "$prefix/bin/fa4" ]; then
  "$prefix/bin/fa4" info >/dev/null || fail "the installed fa4 CLI does not run"
fi
echo "package_install: ok (fa4 $version)"
