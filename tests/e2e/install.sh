#!/usr/bin/env bash
# install.sh — `make install` into a temporary prefix, then a newcomer's program (the README's
# quickstart) built, linked and run through pkg-config alone: amprt.pc names that prefix,
# libamprt.so.0 is the SONAME, only amp.h's API is exported, no rpath of the build tree; the
# installed ampprof profiles it; `make uninstall` removes every installed file.  Also what
# `make install` needs (not the unit tests, not Criterion) and that LDFLAGS reach the links.
# Reads $BUILD (default build).  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case $BUILD in /*) ABS_BUILD=$BUILD ;; *) ABS_BUILD=$ROOT/$BUILD ;; esac
e2e_tmpdir T ampkit_e2e_install
P=$T/prefix
CC=${CC:-cc}
command -v pkg-config >/dev/null || e2e_abort "pkg-config is missing"

make -s -C "$ROOT" BUILD="$ABS_BUILD" PREFIX="$P" install >"$T/install.log" 2>&1
check_true "make install PREFIX=<tmp>: exit 0" test $? = 0 || cat "$T/install.log"
V=$(sed -n 's/^Version: //p' "$P/lib/pkgconfig/amprt.pc")
for f in bin/ampprof bin/ampdump bin/ampview include/amp/amp.h lib/libamprt.a \
	"lib/libamprt.so.$V" lib/pkgconfig/amprt.pc; do
	check_true "installed $f" test -f "$P/$f"
done
check "libamprt.so.0 links to the versioned file" "$(readlink "$P/lib/libamprt.so.0")" "libamprt.so.$V"
check "libamprt.so links to libamprt.so.0" "$(readlink "$P/lib/libamprt.so")" "libamprt.so.0"
check "SONAME is libamprt.so.0" \
	"$(readelf -d "$P/lib/libamprt.so.$V" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')" \
	"libamprt.so.0"
if [ -f "$P/lib/libamprt_mpi.so.$V" ]; then
	check "libamprt_mpi: versioned as libamprt (SONAME libamprt_mpi.so.0, the links)" \
		"$(readelf -d "$P/lib/libamprt_mpi.so.$V" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p') $(readlink "$P/lib/libamprt_mpi.so.0") $(readlink "$P/lib/libamprt_mpi.so")" \
		"libamprt_mpi.so.0 libamprt_mpi.so.$V libamprt_mpi.so.0"
fi

export PKG_CONFIG_PATH=$P/lib/pkgconfig
check "amprt.pc: prefix is the install prefix" "$(pkg-config --variable=prefix amprt)" "$P"
check "amprt.pc: libdir" "$(pkg-config --variable=libdir amprt)" "$P/lib"
check "amprt.pc: includedir" "$(pkg-config --variable=includedir amprt)" "$P/include"
check_true "amprt.pc: Requires.private libunwind and zlib (static links get -lunwind -lz)" \
	grep -w -- -lunwind <<<"$(pkg-config --static --libs amprt)" | grep -qw -- -lz
check_true "amprt.pc: a shared link does not name libunwind" \
	test -z "$(pkg-config --libs amprt | grep -w -- -lunwind)"

# A second prefix gets its own amprt.pc (the file is not generated once for /usr/local).
make -s -C "$ROOT" BUILD="$ABS_BUILD" PREFIX="$T/other" install >"$T/install2.log" 2>&1
check "a second PREFIX: its amprt.pc names it" \
	"$(PKG_CONFIG_PATH=$T/other/lib/pkgconfig pkg-config --variable=prefix amprt)" "$T/other"

# The README shows quickstart.c from its first #include on, as the file is.
check "README's program is examples/quickstart.c" \
	"$(awk '/^```c$/ { getline; if ($0 == "#include <amp/amp.h>") on = 1 } on && /^```$/ { exit } on' "$ROOT/README.md" | md5sum)" \
	"$(sed -n '/^#include <amp\/amp.h>$/,$p' "$ROOT/examples/quickstart.c" | md5sum)"

# The newcomer's program, built through pkg-config alone, outside the source tree.
mkdir -p "$T/src"
cp "$ROOT/examples/quickstart.c" "$T/src/train.c"
(cd "$T/src" && $CC -fno-omit-frame-pointer -g train.c $(pkg-config --cflags --libs amprt) -lm \
	-o train) >"$T/cc.log" 2>&1
check_true "cc train.c \$(pkg-config --cflags --libs amprt) -lm: builds" test -x "$T/src/train" ||
	cat "$T/cc.log"
check_true "the program needs libamprt.so.0" \
	grep -q 'NEEDED.*\[libamprt.so.0\]' <<<"$(readelf -d "$T/src/train")"
check_true "the program has no rpath (of the build tree or any)" \
	test -z "$(readelf -d "$T/src/train" | grep -E 'RPATH|RUNPATH')"
LD_LIBRARY_PATH=$P/lib "$T/src/train" >"$T/run.out" 2>&1
check_true "runs with LD_LIBRARY_PATH=<prefix>/lib" test $? = 0
check_true "it trains (prints its last step)" grep -q '^step 1499 ' "$T/run.out"
check_true "the loader resolves libamprt from the prefix" \
	grep -q "libamprt.so.0 => $P/lib/libamprt.so.0" <<<"$(LD_LIBRARY_PATH=$P/lib ldd "$T/src/train")"
# The README's other way: an rpath of the installed libdir.
(cd "$T/src" && $CC train.c $(pkg-config --cflags --libs amprt) -lm \
	-Wl,-rpath,"$(pkg-config --variable=libdir amprt)" -o train_rpath) >"$T/cc2.log" 2>&1
env -u LD_LIBRARY_PATH "$T/src/train_rpath" >"$T/run2.out" 2>&1
check_true "built with -Wl,-rpath,<libdir>: runs without LD_LIBRARY_PATH" test $? = 0

# The header's version macro agrees with the library and the .pc.
cat >"$T/src/ver.c" <<'EOF'
#include <amp/amp.h>
#include <stdio.h>
#include <string.h>
#if AMP_VERSION_NUMBER < 100
#error "AMP_VERSION_NUMBER"
#endif
int main(void)
{
	printf("%s %s %d\n", AMP_VERSION_STRING, amp_version(), AMP_VERSION_MAJOR);
	return strcmp(AMP_VERSION_STRING, amp_version()) != 0;
}
EOF
(cd "$T/src" && $CC ver.c $(pkg-config --cflags --libs amprt) -o ver) >"$T/cc3.log" 2>&1
check "AMP_VERSION_STRING = amp_version() = the .pc's Version, major 0" \
	"$(LD_LIBRARY_PATH=$P/lib "$T/src/ver")" "$V $V 0"

# Only the public API is exported: every defined dynamic symbol is a function amp.h declares,
# or amp_dist.h (the interface of a data-parallel backend, libamprt_mpi).
nm -D --defined-only "$P/lib/libamprt.so.0" | awk '{print $3}' | sort -u >"$T/exported"
cat "$P/include/amp/amp.h" "$P/include/amp/amp_dist.h" | $CC -E -P -I"$P/include" -x c - | tr '\n' ' ' |
	grep -oE '\bamp_[a-z0-9_]+ *\(' | sed 's/ *($//' | sort -u >"$T/declared"
check "exported symbols outside amp.h and amp_dist.h: none" "$(comm -23 "$T/exported" "$T/declared" | head -5)" ""
check_true "amp_ctx_new is exported" grep -qx amp_ctx_new "$T/exported"
check_true "the emitter's internals are not (amp_trace_op_end)" test -z "$(grep -x amp_trace_op_end "$T/exported")"
check_true "at least 50 public functions exported" test "$(wc -l <"$T/exported")" -ge 50

# The installed ampprof profiles the installed program and names its call sites.
(cd "$T/src" && LD_LIBRARY_PATH=$P/lib "$P/bin/ampprof" -q -o run.db -- ./train >/dev/null 2>"$T/prof.err")
check "installed ampprof profiles it: exit 0" "$?" 0
check_true "its call sites are in train.c" test "$(sqlite3 "$T/src/run.db" \
	"SELECT count(*) FROM callsites WHERE file LIKE '%train.c' AND line > 0")" -gt 0

# What install needs: the library, the tools, amprt.pc; never a unit test or Criterion.
make -n -C "$ROOT" BUILD="$T/fresh" PREFIX="$T/p3" install >"$T/dry" 2>&1
check_true "make install (fresh tree) builds the library and the tools" \
	grep -q 'libamprt.so' "$T/dry"
check "make install builds no unit test and does not link Criterion" \
	"$(grep -cE 'tests/test_|-lcriterion' "$T/dry")" 0
# (continued lines of a recipe joined into one command)
make -n -C "$ROOT" BUILD="$T/fresh" LDFLAGS=-Wl,-O1,--as-needed PREFIX="$T/p3" install 2>&1 |
	sed -e ':a' -e '/\\$/N; s/\\\n//; ta' >"$T/dry2"
check "with LDFLAGS=...: every link of the library and the tools has it" \
	"$(grep -E -- '-shared|-o [^ ]*/bin/amp(prof|dump|view)( |$)' "$T/dry2" | grep -vc -- '-Wl,-O1,--as-needed')" 0
check_true "with LDFLAGS=...: there are such links" \
	test "$(grep -E -- '-shared|-o [^ ]*/bin/amp(prof|dump|view)( |$)' "$T/dry2" | wc -l)" -ge 4

make -s -C "$ROOT" BUILD="$ABS_BUILD" PREFIX="$P" uninstall >"$T/uninstall.log" 2>&1
check "make uninstall: exit 0" "$?" 0
check "make uninstall leaves no file in the prefix" "$(find "$P" -type f -o -type l | head -3)" ""

e2e_finish
