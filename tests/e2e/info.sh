#!/usr/bin/env bash
# info.sh — `ampprof info`: the CPU's half arithmetic and the library's kernel paths, checked
# against /proc/cpuinfo; the engine each dtype's GEMM would use (a half engine exactly where
# the CPU has that half arithmetic); a forced path; JSON that parses; errors.
# Reads $BUILD (default build).  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
e2e_tmpdir OUT ampkit_e2e_info
has_flag() { grep -qw "$1" /proc/cpuinfo; }
PY=/usr/bin/python3

"$BIN/ampprof" info >"$OUT/text" 2>"$OUT/err"
check_true "info: exit 0, nothing on stderr" test $? = 0 -a ! -s "$OUT/err"
for key in cpu "half arithmetic" library versions "kernel paths" engines; do
	check_true "info text has '$key'" grep -q "^$key " "$OUT/text"
done
# auto takes each kernel from the best path that has one (fp16 from avx512-fp16 on a CPU whose
# top path is amx-bf16): the line does not name one path as if it ran everything
check_true "info text: auto combines the paths" \
	grep -q '^kernel paths .*(auto: each kernel from the best path here that has one' "$OUT/text"
"$BIN/ampprof" info --format=json >"$OUT/json" 2>"$OUT/err"
check_true "info --format=json: exit 0" test $? = 0
check_true "info JSON parses, format_version 1" \
	$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["format_version"] == 1' "$OUT/json"

# field PYEXPR: a value from the JSON
field() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$OUT/json"; }
check_true "six kernel paths, scalar to amx-bf16" \
	test "$(field '",".join(p["name"] for p in d["paths"])')" = "scalar,avx2,avx512,avx512-bf16,avx512-fp16,amx-bf16"
# path runs exactly when the CPU has its feature
for pair in "avx512-bf16:avx512_bf16" "avx512-fp16:avx512_fp16" "amx-bf16:amx_bf16"; do
	path=${pair%%:*} flag=${pair#*:}
	runs=$(field "[p['runs'] for p in d['paths'] if p['name'] == '$path'][0]")
	if has_flag "$flag"; then want=True; else want=False; fi
	check_true "$path runs = $want (cpuinfo ${flag}: $want)" test "$runs" = "$want"
	if [ "$want" = False ]; then
		check_true "$path: the missing feature is named" \
			test -n "$(field "[p['missing'] for p in d['paths'] if p['name'] == '$path'][0]" | grep "$flag")"
	fi
	check_true "half features list $flag as cpuinfo does" \
		test "$(field "'$flag' in d['cpu_half_features']")" = "$want"
done
# the engine a half type's GEMM runs on is a half engine where the CPU has that arithmetic
bf16=$(field 'd["engines"]["bf16"]') fp16=$(field 'd["engines"]["fp16"]')
# (but not vdpbf16ps on Intel cores, where it is slower than FP32 FMA: the JSON says why)
intel=$(grep -m1 '^vendor_id' /proc/cpuinfo | grep -c GenuineIntel)
if has_flag amx_bf16; then want_bf16=amx-bf16
elif has_flag avx512_bf16 && [ "$intel" = 0 ]; then want_bf16=avx512-bf16
else want_bf16=fp32-fma; fi
check "bf16 GEMM engine" "$bf16" "$want_bf16"
note=$(field 'd["engine_notes"].get("bf16", "")')
if [ "$want_bf16" = fp32-fma ] && has_flag avx512_bf16; then
	check_true "the bf16 note says why vdpbf16ps is left out" \
		test -n "$(echo "$note" | grep 'vdpbf16ps computes half the products per cycle')"
	check_true "the text says it too" \
		test -n "$(grep '^  bf16 .*AMP_KERNELS=avx512-bf16 forces vdpbf16ps' "$OUT/text")"
else
	check "no bf16 note where bf16 runs on its best engine" "$note" ""
fi
if has_flag avx512_fp16; then want_fp16=avx512-fp16; else want_fp16=fp32-fma; fi
check "fp16 GEMM engine" "$fp16" "$want_fp16"
check_true "text marks an fp32-fma half GEMM as emulated" \
	sh -c "! grep -Eq '(fp16|bf16) GEMM on fp32-fma' '$OUT/text' || grep -q 'fp32-fma (emulated)' '$OUT/text'"

# a forced path
AMP_KERNELS=scalar "$BIN/ampprof" info --format=json >"$OUT/json" 2>"$OUT/err"
check_true "AMP_KERNELS=scalar: active path scalar" test "$(field 'd["active_path"]')" = scalar
check_true "AMP_KERNELS=scalar: every GEMM on scalar" \
	test "$(field '",".join(d["engines"][k] for k in ("fp32","fp16","bf16"))')" = "scalar,scalar,scalar"
check_true "AMP_KERNELS=scalar: forced, and no note about auto's bf16 choice" \
	test "$(field 'd["forced_by_env"], d["engine_notes"]')" = "True {}"
AMP_KERNELS=bogus "$BIN/ampprof" info >"$OUT/text" 2>"$OUT/err"; rc=$?
check_true "AMP_KERNELS=bogus: said on stderr and in the paths line, that programs refuse to start" \
	test "$rc" = 0 -a -n "$(grep 'AMP_KERNELS=bogus names no kernel path: programs run here refuse to start' "$OUT/err")" \
	-a -n "$(grep '^kernel paths .*AMP_KERNELS=bogus names no kernel path' "$OUT/text")"

# errors
"$BIN/ampprof" info --library=/nonexistent/libamprt.so >"$OUT/out" 2>"$OUT/err"
rc=$?
check_true "a missing library: exit 3 (rc $rc)" test "$rc" = 3
check_true "a missing library: the message says why and hints --library" \
	sh -c "grep -q '^ampprof: cannot load the runtime:' '$OUT/err' && grep -q '^hint: .*--library' '$OUT/err'"
"$BIN/ampprof" info --format=xml >"$OUT/out" 2>"$OUT/err"
check_true "an unknown format: usage error, exit 2" test $? = 2 -a ! -s "$OUT/out"
"$BIN/ampprof" info --help >"$OUT/out" 2>"$OUT/err"
check_true "info --help: usage on stdout" grep -q '^usage: ampprof info ' "$OUT/out"

e2e_finish
