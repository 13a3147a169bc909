#!/usr/bin/env bash
# ops.sh — end-to-end test that ampprof names the model ops (BatchNorm2D, pooling, axis
# reductions, broadcasting binary ops, Concat, Slice, ...): tests/progs/ops_tour trains through
# them under ampprof, and the profile must hold each op type by name, forward and backward,
# with the default list of schema/ in op_types, and with the exec dtypes the modes imply;
# the engines of the fp16 elementwise ops on the best path without half arithmetic
# (EMU_KERNELS) and on avx512-fp16.
# Needs $BUILD (default build) built with `make all`.  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
TOUR=$B/tests/ops_tour
for f in "$AMPPROF" "$TOUR"; do
	if [ ! -x "$f" ]; then e2e_abort "missing $f: run 'make all' first"; fi
done
e2e_tmpdir WORK ops-e2e
cd "$WORK"
q() { sqlite3 -batch "$1" "$2" 2>&1; }

NEW="BatchNorm2D Sigmoid Tanh Sub Maximum Minimum Clamp Abs Neg Div AvgPool2D GlobalAvgPool2D Concat Slice Max"
# name:list as schema/'s default lists have them
LISTS="Abs:gray AvgPool2D:gray BatchNorm2D:black Clamp:gray Concat:gray Div:gray GlobalAvgPool2D:gray Max:black Maximum:gray Minimum:gray Neg:gray Sigmoid:gray Slice:gray Sub:gray Tanh:gray"

for mode in allow_mix_precision force_bf16; do
	"$AMPPROF" -q -o "$mode.db" -- "$TOUR" --precision "$mode" --steps 3 >"$mode.out" 2>"$mode.err"
	check "ops_tour under ampprof ($mode) exits 0" "$?" 0
	missing=""
	for op in $NEW; do
		n=$(q "$mode.db" "SELECT count(DISTINCT phase) FROM ops WHERE op = '$op' AND phase IN ('forward', 'backward')")
		[ "$n" = 2 ] || missing="$missing $op($n)"
	done
	check "$mode: every new op type recorded by name, forward and backward" "$missing" ""
	check "$mode: axis Sum and Mean recorded as Sum and Mean" \
		"$(q "$mode.db" "SELECT group_concat(op || ':' || label, ' ') FROM (SELECT DISTINCT op, label FROM ops WHERE label IN ('col.sum', 'row.mean') AND phase = 'forward' ORDER BY op)")" \
		"Mean:row.mean Sum:col.sum"
	check "$mode: no op without a name" "$(q "$mode.db" "SELECT count(*) FROM ops WHERE op IS NULL OR op = '?'")" 0
done

in_list=$(q allow_mix_precision.db "SELECT group_concat(name || ':' || list, ' ') FROM (SELECT name, list FROM op_types WHERE name IN ('$(echo $NEW | sed "s/ /','/g")') ORDER BY name)")
check "op_types holds the default lists of the new ops" "$in_list" "$LISTS"

# allow_mix_precision on an fp32 input: the black BatchNorm2D in fp32, the gray ops follow it
check "amp: BatchNorm2D runs in fp32" \
	"$(q allow_mix_precision.db "SELECT DISTINCT exec_dtype FROM ops WHERE op = 'BatchNorm2D' ORDER BY 1")" fp32
# force_bf16: every op in bf16, BatchNorm2D included (the unsafe mode), and the running
# statistics still updated (a finite loss every step)
check "force_bf16: the new ops run in bf16" \
	"$(q force_bf16.db "SELECT group_concat(DISTINCT exec_dtype) FROM ops WHERE op IN ('$(echo $NEW | sed "s/ /','/g")')")" bf16
check "force_bf16: three finite losses" "$(grep -c 'loss -\?[0-9]' force_bf16.out)" 3
check "force_bf16: the profile's steps carry the losses" \
	"$(q force_bf16.db "SELECT count(*) FROM steps WHERE loss IS NOT NULL")" 3

# force_fp16: the fp16 Add and Sub read and write fp16 on the fp16 kernels, and the engine
# column says which arithmetic ran: native fp16 (avx512-fp16) where the path has it, FP32 on
# fp16 storage (fp32-fma) on a path without (EMU_KERNELS, lib.sh); Add's backward only copies
# the gradient (none), Sub's subtracts it from one already there; the ops that still convert
# to FP32 (Div, Sigmoid) keep fp32-fma on both.  Same losses on both paths: the fp16 kernels
# give the FP32 blocks' bits.
fp16_engines() {
	q "$1" "SELECT group_concat(r, ' ') FROM (SELECT DISTINCT op || '.' || phase || ':' || engine AS r FROM ops WHERE exec_dtype = 'fp16' AND op IN ('Add', 'Sub', 'Div', 'Sigmoid') ORDER BY r)"
}
AMP_KERNELS=$EMU_KERNELS "$AMPPROF" -q -o f16emu.db -- "$TOUR" --precision force_fp16 --steps 3 >f16emu.out 2>f16emu.err
check "force_fp16 on $EMU_KERNELS exits 0" "$?" 0
check "force_fp16 on $EMU_KERNELS: fp16 elementwise on fp32-fma" "$(fp16_engines f16emu.db)" \
	"Add.backward:none Add.forward:fp32-fma Div.backward:fp32-fma Div.forward:fp32-fma Sigmoid.backward:fp32-fma Sigmoid.forward:fp32-fma Sub.backward:fp32-fma Sub.forward:fp32-fma"
if grep -qw avx512_fp16 /proc/cpuinfo; then
	AMP_KERNELS=avx512-fp16 "$AMPPROF" -q -o f16nat.db -- "$TOUR" --precision force_fp16 --steps 3 >f16nat.out 2>f16nat.err
	check "force_fp16 on avx512-fp16 exits 0" "$?" 0
	check "force_fp16 on avx512-fp16: Add and Sub on avx512-fp16 (Add's backward a copy), the rest fp32-fma" \
		"$(fp16_engines f16nat.db)" \
		"Add.backward:none Add.forward:avx512-fp16 Div.backward:fp32-fma Div.forward:fp32-fma Sigmoid.backward:fp32-fma Sigmoid.forward:fp32-fma Sub.backward:avx512-fp16 Sub.forward:avx512-fp16"
	check "force_fp16 on avx512-fp16: three finite losses" "$(grep -c 'loss -\?[0-9]' f16nat.out)" 3
	check "force_fp16: the same losses on avx512-fp16 and $EMU_KERNELS" \
		"$(grep 'loss' f16nat.out)" "$(grep 'loss' f16emu.out)"
else
	echo "SKIPPED: avx512-fp16 engine checks need avx512_fp16"
fi

e2e_finish
