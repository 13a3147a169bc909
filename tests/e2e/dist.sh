#!/usr/bin/env bash
# dist.sh — end-to-end checks of data-parallel training on Open MPI (libamprt_mpi) and of its
# profiles: `mpirun -np 2` on this machine.  Reads $BUILD (default build); about two minutes.
#
#   training   identical weights on every rank; 2 ranks x half the batch = 1 process x the
#              whole batch (fp32, 20 steps, 1e-5 relative); FP16 all-reduce parity; an
#              overflow on one rank only makes both skip and back off together; mlp_fashion
#              --dist against one process in amp (2 epochs: within 0.5 accuracy points)
#   sharding   optimizer_sharding = on gives the unsharded weights, losses and checkpoints bit
#              for bit (fp32, fp16, bf16, 3 ranks, accumulation, steps without update, an
#              overflow on one rank; clipping within 1e-6); a checkpoint before
#              amp_mpi_consolidate is refused
#   profiles   -o run.%r.db, the comm rows (bytes, dtype, bucket, wait), fp16 bytes = half of
#              fp32, ampprof merge (rank column, clock alignment), the report's communication
#              share and per-rank table, the advice, a rank killed with SIGKILL
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$E2E_DIR/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
T=$BUILD/tests
e2e_tmpdir OUT ampkit_e2e_dist
command -v mpirun >/dev/null || e2e_abort "mpirun is missing (make deps installs openmpi-bin)"
[ -e "$BUILD/lib/libamprt_mpi.so" ] || e2e_abort "libamprt_mpi was not built (libopenmpi-dev missing?)"
[ -x "$T/dist_cases" ] || e2e_abort "missing $T/dist_cases (run make units)"
# As root (CI) Open MPI wants to be told; --oversubscribe for more ranks than cores; no binding
# on a shared machine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
MPI=(timeout 300 mpirun --oversubscribe --bind-to none)
unset AMP_PRECISION_MODE AMP_ALLREDUCE_DTYPE AMP_CONFIG

# relerr A B: ||a - b|| / ||a|| of two files of raw floats
relerr() {
	python3 - "$1" "$2" <<'PY'
import struct, sys
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
if len(a) != len(b) or not a:
    print('inf'); sys.exit()
n = len(a) // 4
A = struct.unpack('%df' % n, a); B = struct.unpack('%df' % n, b)
num = sum((x - y) ** 2 for x, y in zip(A, B)) ** 0.5
den = sum(x * x for x in A) ** 0.5
print('%.3g' % (num / den if den else float('inf')))
PY
}
cmp_num() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }
# ranks_same PREFIX N: "yes" when PREFIX.0 .. PREFIX.<N-1> (one file a rank) are identical
ranks_same() {
	local r
	for r in $(seq 1 $(( $2 - 1 ))); do
		cmp -s "$1.0" "$1.$r" || { echo no; return; }
	done
	echo yes
}
field() { tail -n 1 "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

# ---- training ---------------------------------------------------------------------------------
for mode in force_fp32 allow_mix_precision; do
	for dt in fp32 fp16; do
		AMP_PRECISION_MODE=$mode AMP_ALLREDUCE_DTYPE=$dt "${MPI[@]}" -np 2 "$T/dist_cases" --dist \
			--steps 20 --weights "$OUT/w.$mode.$dt.%r" >"$OUT/run.out" 2>"$OUT/run.err"
		check "2 ranks, $mode, all-reduce $dt: exit 0" "$?" 0
		check_true "2 ranks, $mode, all-reduce $dt: identical weights on both ranks" \
			cmp -s "$OUT/w.$mode.$dt.0" "$OUT/w.$mode.$dt.1"
	done
done
"${MPI[@]}" -np 3 env AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --dist --steps 5 \
	--weights "$OUT/w3.%r" >/dev/null 2>"$OUT/run3.err"
check_true "3 ranks (oversubscribed): identical weights" \
	sh -c "cmp -s '$OUT/w3.0' '$OUT/w3.1' && cmp -s '$OUT/w3.0' '$OUT/w3.2'"

# the same global batch of 32: 2 ranks x 16 against 1 process x 32 (same seed)
AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --steps 20 --weights "$OUT/w1.fp32" >/dev/null
e=$(relerr "$OUT/w1.fp32" "$OUT/w.force_fp32.fp32.0")
check_true "fp32: 2 ranks x half batch = 1 process x whole batch within 1e-5 ($e)" cmp_num "$e" "<=" 1e-5
# fc3's bias a Concat of five parameters: a tape node with more inputs than it lists (their
# gradients are reduced with the step's last buckets, nothing is read past the list)
AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --steps 20 --split-bias --weights "$OUT/w1.split" \
	>/dev/null
AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 20 --split-bias \
	--weights "$OUT/w2.split.%r" >/dev/null 2>"$OUT/split.err"
check "split bias: 2 ranks exit 0" "$?" 0
check_true "split bias: identical weights on both ranks" cmp -s "$OUT/w2.split.0" "$OUT/w2.split.1"
e=$(relerr "$OUT/w1.split" "$OUT/w2.split.0")
check_true "split bias: 2 ranks x half batch = 1 process within 1e-5 ($e)" cmp_num "$e" "<=" 1e-5
# gradient accumulation: each rank's share in 2 micro-batches, reduced once after the last
AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 20 --micro 2 \
	--weights "$OUT/w2.micro.%r" >/dev/null 2>"$OUT/micro.err"
check "2 micro-batches: 2 ranks exit 0" "$?" 0
check_true "2 micro-batches: identical weights on both ranks" cmp -s "$OUT/w2.micro.0" "$OUT/w2.micro.1"
e=$(relerr "$OUT/w1.fp32" "$OUT/w2.micro.0")
check_true "2 micro-batches: 2 ranks = 1 process x whole batch within 1e-5 ($e)" cmp_num "$e" "<=" 1e-5
# a step that ends without amp_optim_step completes its all-reduce at the step's end, and every
# rank keeps the mean: the next step adds to it, as one process keeps its gradient (1 KiB
# buckets: every parameter's sum taken in place, in its own gradient)
AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --steps 8 --skip-update 3 --weights "$OUT/w1.skipupd" \
	>/dev/null
for kb in 1024 1; do
	AMP_PRECISION_MODE=force_fp32 AMP_ALLREDUCE_BUCKET_KB=$kb "${MPI[@]}" -np 2 "$T/dist_cases" \
		--dist --steps 8 --skip-update 3 --weights "$OUT/w2.skipupd.$kb.%r" >/dev/null \
		2>"$OUT/skipupd.err"
	check "a step without the update ($kb KiB buckets): 2 ranks exit 0" "$?" 0
	check_true "a step without the update ($kb KiB buckets): identical weights on both ranks" \
		cmp -s "$OUT/w2.skipupd.$kb.0" "$OUT/w2.skipupd.$kb.1"
	e=$(relerr "$OUT/w1.skipupd" "$OUT/w2.skipupd.$kb.0")
	check_true "a step without the update ($kb KiB buckets): = 1 process within 1e-5 ($e)" \
		cmp_num "$e" "<=" 1e-5
done
# then a step with the update and no backward: it reduces what the ranks kept (fp16 payload,
# kept half gradients summed in place)
AMP_PRECISION_MODE=allow_mix_precision "$T/dist_cases" --steps 8 --skip-update 2 --no-backward 3 \
	--weights "$OUT/w1.nobwd" >/dev/null
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 AMP_ALLREDUCE_BUCKET_KB=1 \
	"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 8 --skip-update 2 --no-backward 3 \
	--weights "$OUT/w2.nobwd.%r" >/dev/null 2>"$OUT/nobwd.err"
check "an update without backward after a step without update: 2 ranks exit 0" "$?" 0
check_true "an update without backward after a step without update: identical weights" \
	cmp -s "$OUT/w2.nobwd.0" "$OUT/w2.nobwd.1"
e=$(relerr "$OUT/w1.nobwd" "$OUT/w2.nobwd.0")
check_true "an update without backward after a step without update: tracks 1 process ($e <= 5e-3)" \
	cmp_num "$e" "<=" 5e-3
# more ranks than samples: a rank with an empty share takes part in every all-reduce
"${MPI[@]}" -np 3 env AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --dist --steps 4 --batch 2 \
	--weights "$OUT/w3.empty.%r" >/dev/null 2>"$OUT/empty.err"
check "a rank with no samples: 3 ranks exit 0" "$?" 0
check_true "a rank with no samples: identical weights" \
	sh -c "cmp -s '$OUT/w3.empty.0' '$OUT/w3.empty.1' && cmp -s '$OUT/w3.empty.0' '$OUT/w3.empty.2'"
# a parameter no op reads keeps its initial values on every rank, as in one process (weight
# decay on: an update with a zero gradient would move it)
AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --steps 5 --unused --weights "$OUT/w1.unused" >/dev/null
AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 5 --unused \
	--weights "$OUT/w2.unused.%r" >/dev/null 2>"$OUT/unused.err"
check "unused parameter: 2 ranks exit 0" "$?" 0
check "unused parameter: its values as in one process" \
	"$(tail -c 32 "$OUT/w2.unused.0" | od -An -tx4 | tr -d ' \n')" \
	"$(tail -c 32 "$OUT/w1.unused" | od -An -tx4 | tr -d ' \n')"
# a gradient changed between amp_backward and amp_optim_step (fc2's zeroed through
# amp_tensor_grad on every rank): amp_backward leaves the sums, and the change counts, as in
# one process (1 KiB buckets: sums in place; 1024: in the bucket buffers)
AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --steps 6 --freeze 2 --weights "$OUT/w1.freeze" \
	>/dev/null
for kb in 1 1024; do
	AMP_PRECISION_MODE=force_fp32 AMP_ALLREDUCE_BUCKET_KB=$kb "${MPI[@]}" -np 2 "$T/dist_cases" \
		--dist --steps 6 --freeze 2 --weights "$OUT/w2.freeze.$kb.%r" >/dev/null 2>"$OUT/freeze.err"
	check_true "a gradient changed after backward ($kb KiB buckets): identical weights" \
		cmp -s "$OUT/w2.freeze.$kb.0" "$OUT/w2.freeze.$kb.1"
	e=$(relerr "$OUT/w1.freeze" "$OUT/w2.freeze.$kb.0")
	check_true "a gradient changed after backward ($kb KiB buckets): = 1 process within 1e-5 ($e)" \
		cmp_num "$e" "<=" 1e-5
done
# gradient accumulation, and a rank without data in a step: it runs no micro-batch and still
# calls amp_optim_step, which takes part in the all-reduce
AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 4 --micro 2 \
	--no-backward 1 --no-backward-rank 1 --weights "$OUT/w2.idle.%r" >/dev/null 2>"$OUT/idle.err"
check "2 micro-batches, one rank idle for a step: exit 0" "$?" 0
check_true "2 micro-batches, one rank idle for a step: identical weights" \
	cmp -s "$OUT/w2.idle.0" "$OUT/w2.idle.1"
# BatchNorm's running statistics (parameters without gradients, moved by each rank's share of
# the batch) are averaged over the ranks: every rank keeps the same values
for n in 2 3; do
	AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np $n "$T/dist_cases" --dist --steps 5 --bn \
		--weights "$OUT/w.bn.$n.%r" >/dev/null 2>"$OUT/bn.err"
	check "BatchNorm, $n ranks: exit 0" "$?" 0
	check "BatchNorm, $n ranks: identical weights and running statistics" \
		"$(ranks_same "$OUT/w.bn.$n" $n)" yes
done
# ranks with other all-reduce settings are refused at attach, by name
"${MPI[@]}" -np 1 env AMP_ALLREDUCE_DTYPE=fp16 "$T/dist_cases" --dist --steps 2 : \
	-np 1 "$T/dist_cases" --dist --steps 2 >/dev/null 2>"$OUT/mismatch.err"
check_true "other all-reduce settings on rank 1: refused (exit non-zero)" test "$?" -ne 0
grep -q "amp_mpi_attach: rank 1 has another allreduce_dtype than rank 0 ('fp32' there, 'fp16' on rank 0)" \
	"$OUT/mismatch.err" ||
	bad "other all-reduce settings: the message names the rank, the setting and both values" \
		"$(head -3 "$OUT/mismatch.err")"
# and other training settings: the payload is each rank's scaled gradient
"${MPI[@]}" -np 1 env AMP_PRECISION_MODE=allow_mix_precision AMP_LOSS_SCALE_INIT=1024 \
	"$T/dist_cases" --dist --steps 2 : -np 1 env AMP_PRECISION_MODE=allow_mix_precision \
	"$T/dist_cases" --dist --steps 2 >/dev/null 2>"$OUT/mismatch2.err"
check_true "another loss scale on rank 1: refused (exit non-zero)" test "$?" -ne 0
grep -q "rank 1 has another loss_scale_init than rank 0 ('128' there, '1024' on rank 0)" \
	"$OUT/mismatch2.err" || bad "another loss scale: the message names it" "$(head -3 "$OUT/mismatch2.err")"
# what decides the update, changed on one rank after attach: every rank fails that step, named
"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 6 --lr-rank 1 --lr-step 3 >"$OUT/lr1.out" \
	2>"$OUT/lr1.err"
check_true "a learning rate changed on rank 1 alone: refused (exit non-zero)" test "$?" -ne 0
check "a learning rate changed on rank 1 alone: both ranks name it at step 3" \
	"$(grep -c "amp_mpi (step 3): rank 1 has other optimizers than rank 0 ('sgd lr 0.01 momentum 0.9 weight_decay 0, 3 updates, holds the moments' there, 'sgd lr 0.05 " "$OUT/lr1.err")" 2
check "a learning rate changed on rank 1 alone: steps 0-2 ran" "$(grep -c '^rank 0 step' "$OUT/lr1.out")" 3
"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 4 --set gradient_clipping=1 --set-step 2 \
	--set-rank 1 >/dev/null 2>"$OUT/clip1.err"
check_true "gradient_clipping set on rank 1 alone: refused (exit non-zero)" test "$?" -ne 0
grep -q "amp_mpi (step 2): rank 1 has another gradient_clipping than rank 0 ('1' there, '0' on rank 0)" \
	"$OUT/clip1.err" || bad "gradient_clipping on rank 1 alone: named" "$(head -3 "$OUT/clip1.err")"
"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 4 --set custom_black_list=ReLU --set-step 1 \
	--set-rank 0 >/dev/null 2>"$OUT/list0.err"
check_true "a custom list set on rank 0 alone: refused (exit non-zero)" test "$?" -ne 0
grep -q "amp_mpi (step 1): rank 1 has other custom lists than rank 0 ('none' there, 'black: ReLU' on rank 0)" \
	"$OUT/list0.err" || bad "a custom list on rank 0 alone: named" "$(head -3 "$OUT/list0.err")"
# the lists in force are compared, not their text: the same list typed otherwise runs; lists
# that differ only far into a long text are refused
AMP_CUSTOM_BLACK_LIST=Linear,ReLU "${MPI[@]}" -np 1 "$T/dist_cases" --dist --steps 2 : \
	-np 1 env "AMP_CUSTOM_BLACK_LIST= ReLU, Linear" "$T/dist_cases" --dist --steps 2 \
	>/dev/null 2>"$OUT/list1.err"
check "the same custom list typed otherwise on each rank: exit 0" "$?" 0
long="MatMul, BatchMatMul, Conv2D, MaxPool2D, Add, Mul, Scale, BiasAdd, GELU, Softmax, LogSoftmax"
long="$long, Log, Exp, Sqrt, Pow, LayerNorm, CrossEntropy, Sum, Mean, Reshape, Transpose, Embedding"
long="$long, Dropout, Sub, Div, Neg, Abs, Maximum, Minimum, Clamp, Sigmoid, Tanh, Max, BatchNorm2D"
AMP_CUSTOM_BLACK_LIST="$long" "${MPI[@]}" -np 1 "$T/dist_cases" --dist --steps 2 : \
	-np 1 env "AMP_CUSTOM_BLACK_LIST=$long, ReLU" "$T/dist_cases" --dist --steps 2 \
	>/dev/null 2>"$OUT/list2.err"
check_true "long custom lists that differ in their last op: refused (exit non-zero)" test "$?" -ne 0
grep -q "rank 1 has other custom lists than rank 0 ('\.\.\..*ReLU.*' there, '\.\.\..*' on rank 0)" \
	"$OUT/list2.err" || bad "long custom lists: named, from where they differ" "$(head -3 "$OUT/list2.err")"
# a learning rate changed on one rank between its backward and its update, then put back: the
# next step finds that the updates differed
"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 6 --lr-rank 1 --lr-step 2 --lr-between \
	>/dev/null 2>"$OUT/lr2.err"
check_true "a learning rate changed on rank 1 between backward and update: refused" test "$?" -ne 0
grep -q "amp_mpi (step 3): rank 1 has other updates than rank 0" "$OUT/lr2.err" ||
	bad "a learning rate between backward and update: named at the next step" "$(head -3 "$OUT/lr2.err")"
"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 4 --set gradient_clipping=1 --set-step 2 \
	>/dev/null 2>"$OUT/clip2.err"
check "gradient_clipping set on every rank at the same step: exit 0" "$?" 0
"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 3 --set allreduce_dtype=fp16 --set-step 1 \
	>/dev/null 2>"$OUT/dtype1.err"
check_true "allreduce_dtype after attach: refused (exit non-zero)" test "$?" -ne 0
grep -q "allreduce_dtype: set before the data-parallel attach" "$OUT/dtype1.err" ||
	bad "allreduce_dtype after attach: says when to set it" "$(head -3 "$OUT/dtype1.err")"
# checkpoints: loaded on every rank, the run goes on; on one rank only (before or after attach),
# or another file on each, every rank stops, named, instead of training apart or hanging
AMP_PRECISION_MODE=allow_mix_precision "$T/dist_cases" --steps 4 --save "$OUT/a.ckpt" >/dev/null
AMP_PRECISION_MODE=allow_mix_precision "$T/dist_cases" --steps 5 --save "$OUT/b.ckpt" >/dev/null
AMP_PRECISION_MODE=allow_mix_precision "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 3 \
	--load "$OUT/a.ckpt" --weights "$OUT/w.ck.%r" >/dev/null 2>"$OUT/ck.err"
check "a checkpoint loaded on every rank: exit 0" "$?" 0
check_true "a checkpoint loaded on every rank: identical weights" cmp -s "$OUT/w.ck.0" "$OUT/w.ck.1"
for first in "" --load-first; do
	AMP_PRECISION_MODE=allow_mix_precision "${MPI[@]}" -np 2 "$T/dist_cases" --dist \
		--steps 3 --load "$OUT/a.ckpt" --load-rank 0 $first >/dev/null 2>"$OUT/ck1.err"
	check_true "a checkpoint loaded on rank 0 alone ${first:-after attach}: refused (exit non-zero, no hang)" \
		test "$?" -ne 0 -a "$?" -ne 124
	grep -q "rank 1 has other checkpoints than rank 0 ('none loaded' there, '1 loaded, the last with checksum [0-9a-f]*' on rank 0): every rank loads the same checkpoint" \
		"$OUT/ck1.err" || bad "a checkpoint on rank 0 alone ${first:-after attach}: named" "$(head -3 "$OUT/ck1.err")"
done
# each rank its own file (its RNG state and counters its own, the training state the same)
AMP_PRECISION_MODE=allow_mix_precision "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 4 \
	--save "$OUT/r%r.ckpt" >/dev/null 2>"$OUT/ckr.err"
check "per-rank checkpoints: saved (exit 0)" "$?" 0
check_true "per-rank checkpoints: the files differ (each rank's RNG state)" \
	test "$(cmp -s "$OUT/r0.ckpt" "$OUT/r1.ckpt"; echo $?)" = 1
AMP_PRECISION_MODE=allow_mix_precision "${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 3 \
	--load "$OUT/r%r.ckpt" --weights "$OUT/w.ckr.%r" >/dev/null 2>"$OUT/ckr2.err"
check "per-rank checkpoints: each rank loads its own, the run goes on (exit 0)" "$?" 0
check_true "per-rank checkpoints: identical weights" cmp -s "$OUT/w.ckr.0" "$OUT/w.ckr.1"
AMP_PRECISION_MODE=allow_mix_precision "${MPI[@]}" -np 1 "$T/dist_cases" --dist --steps 3 \
	--load "$OUT/a.ckpt" : -np 1 "$T/dist_cases" --dist --steps 3 --load "$OUT/b.ckpt" \
	>/dev/null 2>"$OUT/ck2.err"
check_true "another checkpoint on each rank: refused (exit non-zero)" test "$?" -ne 0
grep -q "rank 1 has other checkpoints than rank 0" "$OUT/ck2.err" ||
	bad "another checkpoint on each rank: named" "$(head -3 "$OUT/ck2.err")"
# and without the all-reduce the ranks would not agree (the test can fail)
AMP_PRECISION_MODE=force_fp32 "$T/dist_cases" --steps 20 --batch 16 --weights "$OUT/w1.half" >/dev/null
e=$(relerr "$OUT/w1.fp32" "$OUT/w1.half")
check_true "half the batch alone is not the same training ($e > 1e-3)" cmp_num "$e" ">" 1e-3
# FP16 all-reduce: the same training, within FP16 rounding of the gradients
AMP_PRECISION_MODE=allow_mix_precision "$T/dist_cases" --steps 20 --weights "$OUT/w1.amp" >/dev/null
e32=$(relerr "$OUT/w1.amp" "$OUT/w.allow_mix_precision.fp32.0")
e16=$(relerr "$OUT/w1.amp" "$OUT/w.allow_mix_precision.fp16.0")
check_true "amp: fp32 all-reduce tracks one process ($e32 <= 5e-3)" cmp_num "$e32" "<=" 5e-3
check_true "amp: fp16 all-reduce tracks one process ($e16 <= 5e-3)" cmp_num "$e16" "<=" 5e-3
# bit-identical from run to run
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 "${MPI[@]}" -np 2 "$T/dist_cases" \
	--dist --steps 20 --weights "$OUT/again.%r" >/dev/null 2>&1
check_true "fp16 all-reduce: bit-identical weights from run to run" \
	cmp -s "$OUT/again.0" "$OUT/w.allow_mix_precision.fp16.0"
# a bucket per parameter still sums the same
AMP_PRECISION_MODE=force_fp32 AMP_ALLREDUCE_BUCKET_KB=1 "${MPI[@]}" -np 2 "$T/dist_cases" --dist \
	--steps 20 --weights "$OUT/small.%r" >/dev/null 2>&1
e=$(relerr "$OUT/w1.fp32" "$OUT/small.0")
check_true "1 KiB buckets: same training within 1e-5 ($e)" cmp_num "$e" "<=" 1e-5

# an overflow on rank 1 only, at step 5: both ranks skip it and halve the scale together
for dt in fp32 fp16; do
	AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=$dt "${MPI[@]}" -np 2 \
		"$T/dist_cases" --dist --steps 10 --overflow-rank 1 --overflow-step 5 --all-ranks \
		--weights "$OUT/ov.$dt.%r" >"$OUT/ov.out" 2>"$OUT/ov.err"
	check "one-rank overflow ($dt): exit 0" "$?" 0
	r0=$(awk '$2 == 0 { print $4, $8, $10 }' "$OUT/ov.out" | sort -n | tr '\n' ' ')
	r1=$(awk '$2 == 1 { print $4, $8, $10 }' "$OUT/ov.out" | sort -n | tr '\n' ' ')
	check "one-rank overflow ($dt): identical scale histories" "$r0" "$r1"
	check "one-rank overflow ($dt): rank 0 skipped step 5 too" \
		"$(awk '$2 == 0 && $4 == 5 { print $10 }' "$OUT/ov.out")" 1
	check "one-rank overflow ($dt): the scale backed off to 64 on both" \
		"$(awk '$4 == 6 { print $8 }' "$OUT/ov.out" | sort -u)" 64
	check_true "one-rank overflow ($dt): identical weights" cmp -s "$OUT/ov.$dt.0" "$OUT/ov.$dt.1"
done

# mlp_fashion --dist: the global batch of 128 split over 2 ranks against one process (amp, the
# 2 epochs of the examples' default)
"$BIN/mlp_fashion" --precision=amp --epochs 2 --log-every 0 --json >"$OUT/one.json" 2>&1
"${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=amp --epochs 2 --log-every 0 --json \
	>"$OUT/two.json" 2>"$OUT/two.err"
check "mlp_fashion --dist: exit 0" "$?" 0
AMP_ALLREDUCE_DTYPE=fp16 "${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=amp --epochs 2 \
	--log-every 0 --json >"$OUT/two16.json" 2>&1
a1=$(field "$OUT/one.json" test_accuracy)
a2=$(field "$OUT/two.json" test_accuracy)
a16=$(field "$OUT/two16.json" test_accuracy)
check_true "mlp_fashion: 2 ranks within 0.5 points of 1 process ($a2 vs $a1)" \
	awk -v a="$a1" -v b="$a2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.8 && d <= 0.005) }'
check_true "mlp_fashion: fp16 all-reduce within 0.5 points ($a16 vs $a1)" \
	awk -v a="$a1" -v b="$a16" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.8 && d <= 0.005) }'
check "mlp_fashion --dist: one result line (rank 0 speaks)" "$(grep -c '^{' "$OUT/two.json")" 1
grep -q "2 ranks, 64 samples each per step" "$OUT/two.json" || bad "mlp_fashion --dist: says how it splits"
"$BIN/mlp_fashion" --help | grep -q -- "--dist" || bad "mlp_fashion --help lists --dist"
# the loss printed under --dist is the global batch's: in fp32 the same as one process's
"$BIN/mlp_fashion" --precision=fp32 --steps 20 --log-every 10 --test-limit 100 2>/dev/null |
	awk '/^step/ { print $2, $6 }' >"$OUT/loss1"
"${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=fp32 --steps 20 --log-every 10 \
	--test-limit 100 2>/dev/null | awk '/^step/ { print $2, $6 }' >"$OUT/loss2"
check_true "mlp_fashion --dist fp32: the printed losses are the global batch's ($(tr '\n' ' ' <"$OUT/loss2")vs $(tr '\n' ' ' <"$OUT/loss1"))" \
	awk 'NR == FNR { a[$1] = $2; next } { n++; d = $2 - a[$1]; if (d < 0) d = -d; if (d > 1e-5 * $2) bad = 1 }
	     END { exit !(n == 2 && !bad) }' "$OUT/loss1" "$OUT/loss2"
# a rank whose share of a batch is empty (batch 1 on 2 ranks; a last batch of 60000 mod 458 = 2 on 3 ranks)
# takes part in the step with no gradient of its own
"${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --batch 1 --steps 6 --log-every 0 --test-limit 100 \
	>"$OUT/b1.out" 2>&1
check "mlp_fashion --dist --batch 1 on 2 ranks: exit 0 (rank 1 has no sample in any step)" "$?" 0
"${MPI[@]}" -np 3 "$BIN/mlp_fashion" --dist --batch 458 --steps 132 --log-every 0 --test-limit 100 \
	>"$OUT/b458.out" 2>&1
check "mlp_fashion --dist, 3 ranks, a last batch of 2 samples: exit 0" "$?" 0
grep -q "3 ranks, 152-153 samples each per step" "$OUT/b458.out" ||
	bad "mlp_fashion --dist: an uneven split said as a range" "$(head -3 "$OUT/b458.out")"
# a rank that fails mid-run (its own memory_limit) ends the job at once, not in a hang
start=$(date +%s)
"${MPI[@]}" -np 1 "$BIN/mlp_fashion" --dist --steps 20 --log-every 0 : \
	-np 1 -x AMP_MEMORY_LIMIT=12m "$BIN/mlp_fashion" --dist --steps 20 --log-every 0 \
	>"$OUT/abort.out" 2>&1
rc=$?
check_true "a rank failing mid-run: the job fails (exit $rc), within 60 s ($(( $(date +%s) - start )) s)" \
	test "$rc" -ne 0 -a "$rc" -ne 124 -a $(( $(date +%s) - start )) -lt 60
grep -q "training step: memory_limit" "$OUT/abort.out" || bad "a rank failing mid-run: says why" "$(cat "$OUT/abort.out")"

# ---- optimizer sharding -------------------------------------------------------------------------
# optimizer_sharding = on: the rings stop after their reduce-scatter hops, each rank updates the
# share whose sums it holds, and the updated values go round after the update.  Each element's
# update is the same arithmetic on the same sum, so the weights (amp_mpi_consolidate'd by
# dist_cases) and the printed losses are those of the runs above, bit for bit; the steps that
# cannot be split (accumulation) or end without an update run unsharded
sharded() { # name np want what args...: the run with sharding on, into $OUT/sh.<name>.<rank>,
	# against the unsharded run's weights in want ("-": none)
	local name=$1 np=$2 want=$3 what=$4
	shift 4
	AMP_OPTIMIZER_SHARDING=on "${MPI[@]}" -np "$np" "$T/dist_cases" --dist "$@" \
		--weights "$OUT/sh.$name.%r" >"$OUT/sh.$name.out" 2>"$OUT/sh.$name.err"
	check "sharded, $what: exit 0" "$?" 0
	check "sharded, $what: identical weights on every rank" "$(ranks_same "$OUT/sh.$name" "$np")" yes
	[ "$want" = - ] ||
		check_true "sharded, $what: the unsharded weights, bit for bit" cmp -s "$OUT/sh.$name.0" "$want"
}
for mode in force_fp32 allow_mix_precision; do
	for dt in fp32 fp16; do
		AMP_PRECISION_MODE=$mode AMP_ALLREDUCE_DTYPE=$dt sharded "$mode.$dt" 2 \
			"$OUT/w.$mode.$dt.0" "$mode, all-reduce $dt" --steps 20
	done
done
AMP_PRECISION_MODE=allow_mix_precision_bf16 AMP_ALLREDUCE_DTYPE=bf16 "${MPI[@]}" -np 2 \
	"$T/dist_cases" --dist --steps 20 --weights "$OUT/w.bf16.%r" >/dev/null 2>"$OUT/bf16.err"
AMP_PRECISION_MODE=allow_mix_precision_bf16 AMP_ALLREDUCE_DTYPE=bf16 sharded bf16 2 \
	"$OUT/w.bf16.0" "bf16, all-reduce bf16" --steps 20
AMP_PRECISION_MODE=force_fp32 sharded 3ranks 3 "$OUT/w3.0" "3 ranks" --steps 5
AMP_PRECISION_MODE=force_fp32 sharded split 2 "$OUT/w2.split.0" \
	"split bias (parameters of 2 values in a shared bucket)" --steps 20 --split-bias
AMP_PRECISION_MODE=force_fp32 sharded micro 2 "$OUT/w2.micro.0" "2 micro-batches (not split)" \
	--steps 20 --micro 2
for kb in 1024 1; do
	AMP_PRECISION_MODE=force_fp32 AMP_ALLREDUCE_BUCKET_KB=$kb sharded "skipupd.$kb" 2 \
		"$OUT/w2.skipupd.$kb.0" "a step without the update ($kb KiB buckets)" --steps 8 \
		--skip-update 3
done
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 AMP_ALLREDUCE_BUCKET_KB=1 \
	sharded nobwd 2 "$OUT/w2.nobwd.0" "an update without backward" --steps 8 --skip-update 2 \
	--no-backward 3
AMP_PRECISION_MODE=force_fp32 sharded empty 3 "$OUT/w3.empty.0" "a rank with no samples" \
	--steps 4 --batch 2
# in amp the rank without samples has no working copies: the ranks exchange the masters
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 "${MPI[@]}" -np 3 "$T/dist_cases" \
	--dist --steps 4 --batch 2 --weights "$OUT/w3.empty.amp.%r" >/dev/null 2>&1
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 sharded empty.amp 3 \
	"$OUT/w3.empty.amp.0" "amp, a rank with no samples (no working copies there)" --steps 4 --batch 2
for kb in 1 1024; do
	AMP_PRECISION_MODE=force_fp32 AMP_ALLREDUCE_BUCKET_KB=$kb sharded "freeze.$kb" 2 \
		"$OUT/w2.freeze.$kb.0" "a gradient zeroed after backward ($kb KiB buckets)" --steps 6 \
		--freeze 2
done
AMP_PRECISION_MODE=force_fp32 sharded bn 2 "$OUT/w.bn.2.0" "BatchNorm (and its running statistics)" \
	--steps 5 --bn
# an overflow on rank 1 alone: both skip step 3 and back off, as without sharding
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 "${MPI[@]}" -np 2 "$T/dist_cases" \
	--dist --steps 6 --overflow-rank 1 --overflow-step 3 --weights "$OUT/w.ovf.%r" \
	>"$OUT/ovf.out" 2>/dev/null
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 sharded ovf 2 "$OUT/w.ovf.0" \
	"an overflow on rank 1 alone" --steps 6 --overflow-rank 1 --overflow-step 3
check "sharded, an overflow on rank 1 alone: the same steps, losses and scales" \
	"$(cat "$OUT/sh.ovf.out")" "$(cat "$OUT/ovf.out")"
grep -q "step 3 .* scale 128 skipped 1" "$OUT/sh.ovf.out" ||
	bad "sharded, an overflow on rank 1 alone: step 3 skipped" "$(cat "$OUT/sh.ovf.out")"
# clipping by the global norm: the norm's squares are summed per rank, then over the ranks
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 "${MPI[@]}" -np 2 "$T/dist_cases" \
	--dist --steps 6 --set gradient_clipping=0.5 --set-step 1 --weights "$OUT/w.clip.%r" \
	>/dev/null 2>&1
AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 sharded clip 2 - \
	"gradient clipping" --steps 6 --set gradient_clipping=0.5 --set-step 1
e=$(relerr "$OUT/w.clip.0" "$OUT/sh.clip.0")
check_true "sharded, gradient clipping: the unsharded weights within 1e-6 (the norm's sum in another order: $e)" \
	cmp_num "$e" "<=" 1e-6
# the masters are whole only after amp_mpi_consolidate: a checkpoint before it is refused, by
# name; after it, the checkpoint is the unsharded run's, byte for byte
for sh in off on; do
	AMP_OPTIMIZER_SHARDING=$sh AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 \
		"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 6 --save "$OUT/ck.sh.$sh" >/dev/null \
		2>"$OUT/ck.sh.err"
	check "checkpoint, sharding $sh: exit 0" "$?" 0
done
check_true "sharded, consolidated: the unsharded run's checkpoint, byte for byte" \
	cmp -s "$OUT/ck.sh.off" "$OUT/ck.sh.on"
AMP_OPTIMIZER_SHARDING=on AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=fp16 \
	"${MPI[@]}" -np 2 "$T/dist_cases" --dist --steps 6 --save "$OUT/ck.sh.nc" --no-consolidate \
	>/dev/null 2>"$OUT/ck.nc.err"
check_true "sharded, not consolidated: the checkpoint refused (exit non-zero)" test "$?" -ne 0
grep -q "amp_checkpoint_save: optimizer_sharding left .* call amp_mpi_consolidate on every rank first" \
	"$OUT/ck.nc.err" || bad "sharded, not consolidated: says why and what to do" "$(head -3 "$OUT/ck.nc.err")"
# set on one rank alone: refused at attach, by name
"${MPI[@]}" -np 1 env AMP_OPTIMIZER_SHARDING=on "$T/dist_cases" --dist --steps 2 : \
	-np 1 "$T/dist_cases" --dist --steps 2 >/dev/null 2>"$OUT/sh.mismatch.err"
check_true "optimizer_sharding on rank 0 alone: refused (exit non-zero)" test "$?" -ne 0
grep -q "optimizer_sharding" "$OUT/sh.mismatch.err" ||
	bad "optimizer_sharding on rank 0 alone: named" "$(head -3 "$OUT/sh.mismatch.err")"
# mlp_fashion: the same losses and accuracy, and its checkpoint consolidated on every rank
"${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=amp --steps 30 --log-every 10 \
	--test-limit 500 2>/dev/null >"$OUT/mlp.unsharded"
AMP_OPTIMIZER_SHARDING=on "${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=amp --steps 30 \
	--log-every 10 --test-limit 500 2>/dev/null >"$OUT/mlp.sharded"
# (the losses and the accuracy, not the times)
check "mlp_fashion --dist, sharded: the unsharded losses and accuracy" \
	"$(grep -E '^step|^test' "$OUT/mlp.sharded" | sed 's/ *[0-9]* samples\/s//')" \
	"$(grep -E '^step|^test' "$OUT/mlp.unsharded" | sed 's/ *[0-9]* samples\/s//')"
grep -q "all-reduce in fp32, the update sharded over the ranks" "$OUT/mlp.sharded" ||
	bad "mlp_fashion --dist, sharded: says so" "$(head -3 "$OUT/mlp.sharded")"
for sh in off on; do
	AMP_OPTIMIZER_SHARDING=$sh "${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=amp \
		--epochs 2 --steps 480 --checkpoint "$OUT/mlp.ck.$sh" --log-every 0 --test-limit 100 \
		>"$OUT/mlp.ck.out" 2>&1
	check "mlp_fashion --dist --checkpoint, sharding $sh: exit 0" "$?" 0
done
check_true "mlp_fashion --dist --checkpoint, sharded: the unsharded checkpoint, byte for byte" \
	cmp -s "$OUT/mlp.ck.off" "$OUT/mlp.ck.on"
for sh in off on; do
	AMP_OPTIMIZER_SHARDING=$sh "${MPI[@]}" -np 2 "$BIN/mlp_fashion" --dist --precision=amp \
		--epochs 2 --steps 480 --resume "$OUT/mlp.ck.$sh" --log-every 5 --test-limit 100 \
		2>/dev/null | sed 's/ *[0-9]* samples\/s//' >"$OUT/mlp.res.$sh"
done
check "mlp_fashion --dist --resume, sharded: the unsharded losses and accuracy" \
	"$(grep -E '^step|^test' "$OUT/mlp.res.on")" "$(grep -E '^step|^test' "$OUT/mlp.res.off")"
check "mlp_fashion --dist --resume: said once (rank 0 speaks), steps 470, 475, 480 trained" \
	"$(grep -c '^resumed from' "$OUT/mlp.res.on")|$(grep -c '^step' "$OUT/mlp.res.on")" "1|3"

# ---- profiles -----------------------------------------------------------------------------------
cd "$OUT" || e2e_abort "cannot enter $OUT"
B=$(cd "$OLDPWD" && cd "$BUILD" && pwd)
for dt in fp32 fp16; do
	AMP_PRECISION_MODE=allow_mix_precision AMP_ALLREDUCE_DTYPE=$dt "${MPI[@]}" -np 2 \
		"$B/bin/ampprof" -q -o "p$dt.%r.db" -- "$B/tests/dist_cases" --dist --steps 12 \
		--overflow-rank 1 --overflow-step 4 --skip-update 7 >/dev/null 2>"p$dt.err"
	check "ampprof -o p$dt.%r.db under mpirun: exit 0" "$?" 0
	check_true "one profile per rank (p$dt.0.db, p$dt.1.db)" test -s "p$dt.0.db" -a -s "p$dt.1.db"
done
check "profile: rank in meta" "$(sqlite3 pfp32.1.db "SELECT value FROM meta WHERE key = 'rank'")" 1
check "profile: rank 1's own profile says rank 1 in its rows and its rank table" \
	"$(sqlite3 pfp32.1.db "SELECT group_concat(DISTINCT rank) FROM steps"):$(sqlite3 pfp32.1.db "SELECT group_concat(rank) FROM rank_summary")" "1:1"
check "profile: kinds of collectives" \
	"$(sqlite3 pfp32.0.db "SELECT group_concat(kind || ':' || n) FROM (SELECT kind, count(*) n FROM comm GROUP BY kind ORDER BY kind)")" \
	"allreduce:12,barrier:5,broadcast:1"
check "profile: the step without the update has its all-reduce too (completed at its end)" \
	"$(sqlite3 pfp32.0.db "SELECT count(*) FROM comm WHERE kind = 'allreduce' AND step = 7")" 1
check "profile: all-reduce rows carry dtype and bucket" \
	"$(sqlite3 pfp16.0.db "SELECT count(*) FROM comm WHERE kind = 'allreduce' AND dtype = 'fp16' AND bucket = 0 AND wait_ns <= dur_ns AND dur_ns > 0")" 12
b32=$(sqlite3 pfp32.0.db "SELECT sum(bytes) FROM comm WHERE kind = 'allreduce'")
b16=$(sqlite3 pfp16.0.db "SELECT sum(bytes) FROM comm WHERE kind = 'allreduce'")
check "fp16 all-reduce moves half the bytes of fp32 ($b16 vs $b32)" "$((b32))" "$((2 * b16))"
check "profile: the injected overflow is local to rank 1" \
	"$(sqlite3 pfp32.1.db "SELECT step FROM comm WHERE local_overflow = 1"):$(sqlite3 pfp32.0.db "SELECT count(*) FROM comm WHERE local_overflow = 1")" "4:0"

"$B/bin/ampprof" merge -o merged.db pfp32.0.db pfp32.1.db >merge.out 2>merge.err
check "ampprof merge: exit 0" "$?" 0
# one file (journal mode delete), as a recorded profile: readable from a read-only folder
check "ampprof merge: one file, no -wal" "$(sqlite3 merged.db 'PRAGMA journal_mode')|$(ls merged.db-wal 2>/dev/null)" "delete|"
mkdir -p ro && cp merged.db ro/ && chmod 444 ro/merged.db && chmod 555 ro && chmod 711 .
check_true "ampprof merge: the merged profile reads from a read-only folder (as nobody)" \
	setpriv --reuid=65534 --regid=65534 --clear-groups "$B/bin/ampprof" report "$PWD/ro/merged.db"
chmod 700 . && chmod 755 ro
# on a terminal (script(1)), a progress line per rank profile, erased before the summary
TERM=xterm AMP_PROGRESS_DELAY_MS=0 script -qec "'$B/bin/ampprof' merge -o merged-tty.db pfp32.0.db pfp32.1.db" /dev/null >merge-tty.out 2>&1
check_true "ampprof merge on a terminal: a progress line (rank profiles i/2), erased" \
	/usr/bin/python3 -c 'import re,sys; d=open(sys.argv[1],"rb").read(); sys.exit(0 if re.search(rb"\rampprof: merge: rank profiles [0-9]/2 \([0-9]+ %\) \([0-9.]+ s\)\x1b\[K", d) and b"\r\x1b[K" in d else 1)' merge-tty.out
grep -q "clocks aligned on the start-up barrier (clocks [0-9.]* us apart)" merge.out ||
	bad "merge says how far apart the clocks were" "$(cat merge.out merge.err)"
grep -q "rank 1: pfp32.1.db, exited with status 0" merge.out || bad "merge says how rank 1 ended" "$(cat merge.out)"
for t in steps op_events copy_events comm loss_scale; do
	check "merged $t: rows of both ranks" "$(sqlite3 merged.db "SELECT group_concat(rank) FROM (SELECT DISTINCT rank FROM $t ORDER BY rank)")" "0,1"
done
check "merged: every op row joins its own rank's signature" \
	"$(sqlite3 merged.db "SELECT count(*) FROM ops")" \
	"$(( $(sqlite3 pfp32.0.db "SELECT count(*) FROM ops") + $(sqlite3 pfp32.1.db "SELECT count(*) FROM ops") ))"
check "merged: each call site once, whichever ranks ran it" \
	"$(sqlite3 merged.db "SELECT count(*) = count(DISTINCT coalesce(module, '') || ':' || coalesce(offset, '') || ':' || coalesce(frames, '')) FROM callsites")" 1
check "merged: both ranks' ops point at the shared call sites" \
	"$(sqlite3 merged.db "SELECT count(DISTINCT e.rank) FROM op_events e JOIN op_sigs s ON s.id = e.sig JOIN callsites c ON c.id = s.callsite")" 2
check "merged: every call-site reference resolves" \
	"$(sqlite3 merged.db "SELECT (SELECT count(*) FROM op_sigs WHERE callsite NOT IN (SELECT id FROM callsites)) + (SELECT count(*) FROM tensor_stats WHERE callsite NOT IN (SELECT id FROM callsites)) + (SELECT count(*) FROM loss_scale WHERE cause_callsite NOT IN (SELECT id FROM callsites)) + (SELECT count(*) FROM nonfinite WHERE callsite NOT IN (SELECT id FROM callsites))")" 0
check "merged: threads keep their rank" \
	"$(sqlite3 merged.db "SELECT count(*) FROM op_events e JOIN threads t ON t.id = e.thread WHERE t.rank <> e.rank")" 0
check_true "merged: aligned on the median barrier round (both ranks leave it at one time)" \
	test "$(sqlite3 merged.db "SELECT count(*) FROM (SELECT bucket FROM comm WHERE kind = 'barrier' GROUP BY bucket HAVING count(DISTINCT start_ns + dur_ns) = 1 AND count(*) = 2)")" -ge 1
check "merged: identical scale histories in the database" \
	"$(sqlite3 merged.db "SELECT group_concat(new_scale) FROM loss_scale WHERE rank = 0 ORDER BY step")" \
	"$(sqlite3 merged.db "SELECT group_concat(new_scale) FROM loss_scale WHERE rank = 1 ORDER BY step")"
check "merged: the one overflow both ranks skipped together counts once" \
	"$(sqlite3 merged.db "SELECT overflow_steps || ':' || skipped_steps || ':' || steps FROM overview")" "1:1:12"
"$B/bin/ampprof" report merged.db >merged-report.out 2>&1
# the JSON history is the lowest rank's (each rank's loss is of its own share of the batch)
"$B/bin/ampprof" report --format=json merged.db >merged.json 2>/dev/null
"$B/bin/ampprof" report --format=json pfp32.0.db >rank0.json 2>/dev/null
check_true "merged JSON: the loss history is rank 0's" /usr/bin/python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["history"]["steps"]; b = json.load(open(sys.argv[2]))["history"]["steps"]
sys.exit(0 if len(a) == len(b) and a == b else 1)' merged.json rank0.json
check "merged JSON: the communication figures of the text report" \
	"$(/usr/bin/python3 -c '
import json, sqlite3, sys
c = json.load(open(sys.argv[1]))["comm"]
db = sqlite3.connect(sys.argv[2])
share, spread = db.execute("SELECT comm_share, rank_spread FROM run_summary").fetchone()
ok = abs(c["share"] - share) < 1e-6 and abs(c["rank_spread"] - spread) < 1e-6
print(ok, c["allreduce_dtype"], c["world_size"], [r["rank"] for r in c["ranks"]],
      all(r["steps"] > 0 and r["busy_ns"] > 0 and r["end"] == "exited" for r in c["ranks"]))' merged.json merged.db)" \
	"True fp32 2 [0, 1] True"
check "merged JSON: ranks and rank-steps" \
	"$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ranks"], d["rank_steps"], d["steps"])' merged.json)" "2 24 12"
grep -q "^  steps        12 on 2 ranks (24 rank-steps) in" merged-report.out ||
	bad "merged report: the steps line counts each step once" "$(grep '^  steps' merged-report.out)"
check "profile: every all-reduce row ends within its step" \
	"$(sqlite3 pfp16.0.db "SELECT count(*) FROM comm c JOIN steps s ON s.step = c.step WHERE c.kind = 'allreduce' AND c.start_ns + c.dur_ns > s.start_ns + s.dur_ns")" 0
# parameters without gradients: the running statistics a BatchNorm moves are averaged every
# step (a comm row of their own, without a bucket); one nothing writes is left alone
for c in bn unused; do
	AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np 2 "$B/bin/ampprof" -q -o "b$c.%r.db" -- \
		"$B/tests/dist_cases" --dist --steps 4 --$c >/dev/null 2>&1
done
check "profile: BatchNorm's running statistics averaged in each of the 4 steps" \
	"$(sqlite3 bbn.0.db "SELECT count(*) || ':' || max(bytes) FROM comm WHERE kind = 'allreduce' AND bucket IS NULL")" "4:1024"
check "profile: a parameter nothing writes is not averaged" \
	"$(sqlite3 bunused.0.db "SELECT count(*) FROM comm WHERE kind = 'allreduce' AND bucket IS NULL")" 0
check "merged: rank_summary has both ranks" "$(sqlite3 merged.db "SELECT group_concat(rank || ':' || steps) FROM rank_summary ORDER BY rank")" "0:12,1:12"
check_true "merged: comm share in the overview" \
	test -n "$(sqlite3 merged.db "SELECT comm_share FROM overview WHERE comm_share BETWEEN 0 AND 1 AND ranks = 2 AND rank_spread >= 0")"
check "merged: advice on the one-rank overflow" \
	"$(sqlite3 merged.db "SELECT step FROM advice WHERE rule = 'rank_overflow'")" 4
check "merged: advice on the fp32 all-reduce of an amp run" \
	"$(sqlite3 merged.db "SELECT count(*) FROM advice WHERE rule = 'fp32_allreduce'")" 1
"$B/bin/ampprof" merge -o m16.db pfp16.0.db pfp16.1.db >/dev/null
check "fp16 run: no fp32_allreduce advice" "$(sqlite3 m16.db "SELECT count(*) FROM advice WHERE rule = 'fp32_allreduce'")" 0
# diff of two merged profiles: per step of a rank, the all-reduces as their own phase
"$B/bin/ampprof" diff merged.db m16.db >diff.out 2>&1
check "diff of merged profiles: exit 0" "$?" 0
grep -qE "^A merged.db: 24 traced steps of 2 ranks, [0-9.]+ ms/step of a rank$" diff.out ||
	bad "diff: a merged side's steps are its ranks'" "$(head -3 diff.out)"
check "diff: the all-reduces as a phase, fp32 against fp16, once per rank and step" \
	"$("$B/bin/ampprof" diff --kind=phase --format=csv merged.db m16.db | grep '^phase,comm,' | cut -d, -f3-6)" \
	"fp32,fp16,24,24"
check "diff: the all-reduce time a rank blocked, its own row" \
	"$("$B/bin/ampprof" diff --kind=phase --format=csv merged.db m16.db | grep -c '^phase,comm wait,')" 1
check "diff: per step of a rank, the comm row is the mean all-reduce time of a rank's step" \
	"$("$B/bin/ampprof" diff --kind=phase --format=json merged.db m16.db | /usr/bin/python3 -c '
import json, sqlite3, sys
d = json.load(sys.stdin)
r = [x for x in d["rows"] if x["name"] == "comm"][0]
def mean(db):
    c = sqlite3.connect(db)
    return c.execute("SELECT sum(c.dur_ns) / 1e6 / (SELECT count(*) FROM steps WHERE detail = 1) FROM comm c JOIN steps s ON s.step = c.step AND s.rank = c.rank AND s.detail = 1 WHERE c.kind = \x27allreduce\x27 AND c.bucket IS NOT NULL").fetchone()[0]
print(d["a_ranks"], d["b_ranks"], abs(r["a_ms"] - mean("merged.db")) < 1e-4, abs(r["b_ms"] - mean("m16.db")) < 1e-4)')" \
	"2 2 True True"
# the averaging of parameters without gradients (bucket NULL, always fp32) is not the gradients'
cp m16.db m16n.db
sqlite3 m16n.db "INSERT INTO comm (step, kind, bytes, dtype, bucket, start_ns, dur_ns, wait_ns, rank) VALUES (3, 'allreduce', 8, 'fp32', NULL, 0, 5000000, 5000000, 0)"
check "diff: the comm row leaves out the averaging of parameters without gradients" \
	"$("$B/bin/ampprof" diff --kind=phase --format=csv merged.db m16n.db | grep '^phase,comm,' | cut -d, -f3-6)" \
	"fp32,fp16,24,24"
# a profile without traced steps gives totals, its all-reduces included
cp m16.db m16t.db
sqlite3 m16t.db "UPDATE steps SET detail = 0"
check "diff: a side without traced steps has its all-reduces' totals" \
	"$("$B/bin/ampprof" diff --kind=phase --format=csv merged.db m16t.db | grep '^phase,comm,' | cut -d, -f3-6)" \
	"fp32,fp16,24,24"
check "diff: a side without traced steps has its steps' totals (step row)" \
	"$("$B/bin/ampprof" diff --kind=phase --format=csv merged.db m16t.db | grep '^phase,step,' | cut -d, -f6)" \
	"$(sqlite3 m16t.db "SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL")"
"$B/bin/ampview" --headless --height=80 --diff=merged.db m16.db >vdiff.out 2>&1
check "ampview diff of merged profiles: exit 0" "$?" 0
grep -q "per traced step of a rank (24, 24)" vdiff.out ||
	bad "ampview diff: steps of every rank, figures per step of a rank" "$(head -3 vdiff.out)"
grep -qE "^  phase  comm  +fp32 +fp16 " vdiff.out || bad "ampview diff: the comm phase row" "$(cat vdiff.out)"
"$B/bin/ampprof" report merged.db >report.out 2>&1
check "report of the merged profile: exit 0" "$?" 0
grep -q "^  comm share   [0-9.]* % of step time .*all-reduce in fp32, 2 ranks, rank spread" report.out ||
	bad "report: communication share line" "$(cat report.out)"
grep -qE "^ +1 +12 " report.out || bad "report: per-rank table" "$(cat report.out)"
"$B/bin/ampdump" --step 4 --db merged.db >dump.out 2>&1
check "ampdump reads the merged profile" "$?" 0
grep -q "'merged.db' holds 2 ranks: reading rank 1, where step 4's non-finite values began (--rank to choose)" dump.out ||
	bad "ampdump: says which rank of a merged profile it reads" "$(head -3 dump.out)"
"$B/bin/ampdump" --step 3 --db merged.db >dump3.out 2>&1
grep -q "'merged.db' holds 2 ranks: reading rank 0 (--rank to choose)" dump3.out ||
	bad "ampdump: a step without non-finite values reads the lowest rank" "$(head -3 dump3.out)"
"$B/bin/ampdump" --rank 0 --step 4 --db merged.db >dump.out 2>&1
# the overflow at step 4 was rank 1's: its origin is there, with that rank's own dumps
"$B/bin/ampdump" --rank 1 --step 4 --db merged.db >dump1.out 2>&1
check "ampdump --rank 1: exit 0" "$?" 0
check "ampdump --rank 1: rank 1's origin at step 4 (its fc1 input overflowed)" \
	"$(grep -c '^\* .* fc1/in0 .* fp16' dump1.out)" 1
check "ampdump --rank 0 at step 4: no origin (rank 0's values were finite)" \
	"$(grep -c '^\* ' dump.out)" 0
"$B/bin/ampdump" --rank 5 --list --db merged.db >/dev/null 2>rank5.err
check "ampdump --rank 5: no such rank, exit 1" "$?" 1
grep -q "'merged.db' has no rank 5" rank5.err || bad "ampdump --rank 5: message" "$(cat rank5.err)"
"$B/bin/ampdump" --list --db merged.db 2>/dev/null | grep -q "merged.db: 1 of 12 steps" ||
	bad "ampdump --list counts each step once" "$("$B/bin/ampdump" --list --db merged.db 2>&1 | head -3)"
"$B/bin/ampview" --headless --panel=steps merged.db 2>/dev/null | grep -q "^ 12 steps" ||
	bad "ampview Steps: the run's 12 steps, once" "$("$B/bin/ampview" --headless --panel=steps merged.db | head -3)"
"$B/bin/ampprof" report pfp32.0.db >single.out 2>&1
check "a single-rank profile reports rank 0" "$(sqlite3 pfp32.0.db "SELECT group_concat(rank) FROM rank_summary")" 0
check "export --table=comm: CSV with the wait column" \
	"$("$B/bin/ampprof" export --format=csv --table=comm merged.db | head -1 | grep -o 'wait_ns,local_overflow,thread,rank')" \
	"wait_ns,local_overflow,thread,rank"
# ampview compares the ranks on its overview (a single-rank profile shows no such block)
"$B/bin/ampview" --headless --width=120 --height=40 merged.db >view.out 2>&1
check "ampview reads the merged profile" "$?" 0
grep -q "^ Comm share  *[0-9.]* % .* 10 %" view.out || bad "ampview: communication share gauge" "$(cat view.out)"
grep -q "^ Ranks .* per step . spread [0-9.]* %" view.out || bad "ampview: rank spread" "$(cat view.out)"
check "ampview: one row per rank under Ranks" \
	"$(sed -n '/^ Ranks /,/^$/p' view.out | grep -cE '^ +[01] +[0-9.]+ [mu]?s ')" 2
"$B/bin/ampview" --headless --width=100 --height=40 pfp32.0.db >view1.out 2>&1
check "ampview: no rank block for one rank" "$(grep -c '^ Ranks ' view1.out)" 0
# merge errors
cp pfp32.0.db dup0.db
"$B/bin/ampprof" merge -o dup.db pfp32.0.db dup0.db >/dev/null 2>dup.err
check "merge refuses two profiles of one rank" "$?" 6
grep -q "both rank 0" dup.err || bad "merge: duplicate rank message" "$(cat dup.err)"
check "the ranks of one run share a run id" \
	"$(sqlite3 pfp32.0.db "SELECT value FROM meta WHERE key = 'run_id'")" \
	"$(sqlite3 pfp32.1.db "SELECT value FROM meta WHERE key = 'run_id'")"
"$B/bin/ampprof" merge -o runs.db pfp32.0.db pfp16.1.db >/dev/null 2>runs.err
check "merge refuses ranks of two runs" "$?" 6
grep -q "'pfp32.0.db' and 'pfp16.1.db' are ranks of different runs (run ids [0-9a-f]* and [0-9a-f]*)" runs.err ||
	bad "merge: ranks of two runs named" "$(cat runs.err)"
check_true "merge of two runs: no output left" test ! -e runs.db
# a rank's meta that no run wrote (edited or damaged): refused, named
for forged in "rank|5|'f.1.db' says it is rank 5 of a run of 2 ranks (its meta is damaged)" \
	"rank|-1|'f.1.db' says it is rank -1 of a run of 2 ranks (its meta is damaged)" \
	"world_size|3|'pfp32.0.db' and 'f.1.db' are ranks of runs of 2 and 3 ranks"; do
	IFS='|' read -r key value msg <<<"$forged"
	cp pfp32.1.db f.1.db
	sqlite3 f.1.db "UPDATE meta SET value = '$value' WHERE key = '$key'"
	"$B/bin/ampprof" merge -o forged.db pfp32.0.db f.1.db >/dev/null 2>forged.err
	check "merge refuses a rank profile with meta $key = $value (exit 6, named, no output)" \
		"$?|$(grep -cF "$msg" forged.err)|$(test -e forged.db && echo written)" "6|1|"
done
# an input a killed rank left with its -wal: read where it is, the input untouched
cp pfp32.1.db wal.1.db
/usr/bin/python3 -c '
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("UPDATE steps SET loss = 42 WHERE step = 0")
os._exit(0)  # as a SIGKILL would: no checkpoint, the -wal stays' wal.1.db
sum_before=$(md5sum <wal.1.db)
"$B/bin/ampprof" merge -o wal.db pfp32.0.db wal.1.db >/dev/null 2>wal.err
check "merge of an input with a -wal: exit 0" "$?" 0
check "merge reads the -wal's rows" "$(sqlite3 wal.db "SELECT loss FROM steps WHERE rank = 1 AND step = 0")" 42.0
check "merge leaves the input as it was" "$(md5sum <wal.1.db)" "$sum_before"
check_true "merge leaves the input's -wal" test -s wal.1.db-wal
# a damaged input: exit 6, named
cp pfp32.1.db bad.1.db
root=$(sqlite3 bad.1.db "SELECT rootpage FROM sqlite_master WHERE name = 'op_events'")
psize=$(sqlite3 bad.1.db "PRAGMA page_size")
head -c "$psize" /dev/zero | tr '\0' '\377' |
	dd of=bad.1.db bs="$psize" seek=$((root - 1)) count=1 conv=notrunc 2>/dev/null
"$B/bin/ampprof" merge -o bad.db pfp32.0.db bad.1.db >/dev/null 2>bad.err
check "merge of a damaged input: exit 6" "$?" 6
grep -q "'bad.1.db' is damaged" bad.err || bad "merge: the damaged input named" "$(cat bad.err)"
cp merged.db merged.keep
"$B/bin/ampprof" merge --force -o merged.db pfp32.0.db bad.1.db >/dev/null 2>/dev/null
check "merge --force of a damaged input: exit 6, the existing output as it was, no leftover" \
	"$?|$(cmp -s merged.db merged.keep && echo same)|$(ls -a | grep -c 'merged\.db\.merging')" "6|same|0"
rm -f merged.keep
# --force onto a profile being recorded (its output lock held), or onto a symbolic link:
# refused before any work, as --output is
cp merged.db held.db
"$B/tests/gen_profile" --hold=600 --output=held.db >held.out 2>&1 &
holder=$!
for _ in $(seq 200); do grep -q held held.out 2>/dev/null && break; sleep 0.05; done
"$B/bin/ampprof" merge --force -o held.db pfp32.0.db pfp32.1.db >/dev/null 2>held.err
check "merge --force onto a profile being recorded: exit 4, refused, the profile untouched" \
	"$?|$(grep -c 'another ampprof is writing it' held.err)|$(cmp -s held.db merged.db && echo same)" "4|1|same"
kill "$holder"; wait "$holder" 2>/dev/null
ln -sf merged.db link.db
"$B/bin/ampprof" merge --force -o link.db pfp32.0.db pfp32.1.db >/dev/null 2>link.err
check "merge --force onto a symbolic link: exit 4, the link kept" \
	"$?|$(grep -c 'symbolic link' link.err)|$(test -L link.db && echo link)" "4|1|link"
# a stale -wal beside the output (a writer killed before its checkpoint) is not read into the
# merged profile that replaces it
cp merged.db stale.db
/usr/bin/python3 - <<'PY'
import os, sqlite3
c = sqlite3.connect("stale.db")
c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("UPDATE meta SET value = 'stale' WHERE key = 'command'"); c.execute("DELETE FROM steps")
c.commit()
os._exit(0)  # no checkpoint: the -wal stays
PY
cp stale.db-wal orphan.db-wal; cp stale.db-shm orphan.db-shm # a removed profile's leftovers
"$B/bin/ampprof" merge --force -o stale.db pfp32.0.db pfp32.1.db >/dev/null 2>&1
check "merge --force over a file with a stale -wal: the merged rows, not the stale ones" \
	"$?|$(sqlite3 stale.db "SELECT count(*) > 0 FROM steps") |$(sqlite3 stale.db "SELECT count(*) FROM meta WHERE value = 'stale'")" "0|1 |0"
# the same -wal and -shm left at a name whose profile was removed: a merge without --force
# onto that name reads its own rows
"$B/bin/ampprof" merge -o orphan.db pfp32.0.db pfp32.1.db >/dev/null 2>&1
check "merge onto a name with a removed profile's -wal: the merged rows, the -wal gone" \
	"$?|$(sqlite3 -readonly orphan.db "SELECT count(*) > 0 FROM steps")|$(sqlite3 -readonly orphan.db "SELECT count(*) FROM meta WHERE value = 'stale'")" "0|1|0"
"$B/bin/ampprof" merge -o twice.db merged.db >/dev/null 2>twice.err
check "merge refuses a merged profile" "$?" 6
grep -q "'merged.db' is a merged profile already" twice.err || bad "merge: merged input message" "$(cat twice.err)"
"$B/bin/ampprof" merge -o one.db pfp32.1.db >/dev/null 2>one.err
check "merge of rank 1 alone: exit 0" "$?" 0
grep -q "warning: 1 of the run's 2 rank profile(s) given, not rank 0's" one.err ||
	bad "merge: a missing rank is said" "$(cat one.err)"
check "merge of rank 1 alone: the run's facts are kept" \
	"$(sqlite3 one.db "SELECT count(*) FROM meta WHERE key = 'command' AND value LIKE '%dist_cases%'")" 1
# profiles without a run id (an older runtime): the commands tell
cp bbn.1.db norunid.1.db
sqlite3 norunid.1.db "DELETE FROM meta WHERE key = 'run_id'"
"$B/bin/ampprof" merge -o mixed.db pfp32.0.db norunid.1.db >/dev/null 2>mixed.err
grep -q "profiled different commands" mixed.err || bad "merge: profiles of two runs are said" "$(cat mixed.err)"
"$B/bin/ampprof" merge -o merged.db pfp32.0.db pfp32.1.db >/dev/null 2>exists.err
check "merge keeps an existing output without --force" "$?" 4
"$B/bin/ampprof" merge pfp32.0.db >/dev/null 2>noout.err
check "merge without -o is a usage error" "$?" 2
"$B/bin/ampprof" -o 'x.%q.db' -- true >/dev/null 2>badpat.err
check "--output with an unknown %x is a usage error" "$?" 2

# a straggler (rank 1 on the scalar kernels): the communication advice names it as what the
# ranks wait for, not the bytes
"${MPI[@]}" -np 1 "$B/bin/ampprof" -q -o "st.%r.db" -- "$B/tests/dist_cases" --dist --steps 20 : \
	-np 1 -x AMP_KERNELS=scalar "$B/bin/ampprof" -q -o "st.%r.db" -- "$B/tests/dist_cases" --dist \
	--steps 20 >/dev/null 2>&1
"$B/bin/ampprof" merge -o st.db st.0.db st.1.db >/dev/null 2>&1
check "straggler: the advice names rank 1" \
	"$(sqlite3 st.db "SELECT message LIKE 'rank 1 is a straggler:%' FROM advice WHERE rule = 'straggler'")" 1
check "straggler: the communication advice says the wait is for it" \
	"$(sqlite3 st.db "SELECT message LIKE '%the ranks wait mostly for rank 1,%' AND message NOT LIKE '%halves the bytes%' FROM advice WHERE rule = 'comm_share'")" 1
check "straggler: the evidence counts the bucket's all-reduces and its bytes a rank" \
	"$(sqlite3 st.db "SELECT evidence LIKE 'bucket 0: 0.10 MB a rank, 20 all-reduces on 2 ranks: waited %' FROM advice WHERE rule = 'comm_share'")" 1
# sharded, a bucket's all-reduce is two rows (reduce-scatter, exchange of the updated fp16
# working copies), half the bytes each: the advice still counts 20 all-reduces
AMP_OPTIMIZER_SHARDING=on "${MPI[@]}" -np 1 "$B/bin/ampprof" -q -o "sst.%r.db" -- "$B/tests/dist_cases" \
	--dist --steps 20 : -np 1 -x AMP_KERNELS=scalar "$B/bin/ampprof" -q -o "sst.%r.db" -- \
	"$B/tests/dist_cases" --dist --steps 20 >/dev/null 2>&1
"$B/bin/ampprof" merge -o sst.db sst.0.db sst.1.db >/dev/null 2>&1
check "sharded straggler: two rows a bucket, step and rank; the evidence counts all-reduces" \
	"$(sqlite3 sst.db "SELECT count(*), total(n <> 2) FROM (SELECT count(*) AS n FROM comm WHERE kind = 'allreduce' AND bucket IS NOT NULL GROUP BY bucket, step, rank)")|$(sqlite3 sst.db "SELECT evidence LIKE 'bucket 0: 0.08 MB a rank, 20 all-reduces on 2 ranks: waited %' FROM advice WHERE rule = 'comm_share'")" \
	"40|0.0|1"
# on 3 ranks each row is still half the payload (masters exchanged in force_fp32)
AMP_OPTIMIZER_SHARDING=on AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -np 3 "$B/bin/ampprof" -q \
	-o "s3.%r.db" -- "$B/tests/dist_cases" --dist --steps 4 >/dev/null 2>&1
check "sharded, 3 ranks: every row of a bucket half its fp32 payload" \
	"$(sqlite3 s3.0.db "SELECT group_concat(DISTINCT bytes || ' ' || dtype), count(*) FROM comm WHERE kind = 'allreduce' AND bucket IS NOT NULL")" \
	"52244 fp32|8"
# an FP16 all-reduce in a run without loss scaling
AMP_PRECISION_MODE=force_fp32 AMP_ALLREDUCE_DTYPE=fp16 "${MPI[@]}" -np 2 "$B/bin/ampprof" -q \
	-o "u.%r.db" -- "$B/tests/dist_cases" --dist --steps 12 >/dev/null 2>&1
"$B/bin/ampprof" merge -o u.db u.0.db u.1.db >/dev/null 2>&1
check "unscaled fp16 all-reduce: advised, bf16 suggested" \
	"$(sqlite3 u.db "SELECT count(*) FROM advice WHERE rule = 'unscaled_fp16_allreduce' AND message LIKE '%allreduce_dtype = bf16%'")" 1
check "a scaled fp16 all-reduce is not" \
	"$(sqlite3 m16.db "SELECT count(*) FROM advice WHERE rule = 'unscaled_fp16_allreduce'")" 0

# a rank killed with SIGKILL at step 5: the other rank's profile stays valid, the merge says who
"${MPI[@]}" -np 2 "$B/bin/ampprof" -q -o "k.%r.db" -- "$B/tests/dist_cases" --dist --steps 50 \
	--die-rank 1 --die-step 5 >/dev/null 2>&1
check_true "killed rank: both profiles written" test -s k.0.db -a -s k.1.db
check "killed rank: rank 1 ended by SIGKILL" "$(sqlite3 k.1.db "SELECT value FROM meta WHERE key = 'exit_signal'")" SIGKILL
check "killed rank: rank 1's steps before it died are there" "$(sqlite3 k.1.db "SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL")" 5
check_true "killed rank: rank 0's profile is valid" test "$(sqlite3 k.0.db "PRAGMA integrity_check")" = ok
"$B/bin/ampprof" merge -o k.db k.0.db k.1.db >k.out 2>&1
check "killed rank: merge exit 0" "$?" 0
grep -q "rank 1: k.1.db, killed by SIGKILL (incomplete)" k.out || bad "killed rank: the merge says how rank 1 ended" "$(cat k.out)"
# diff against the killed rank: per traced step that ended (its last, unended step's events
# left out), the step row as the header's time per step
check "diff with a killed rank: per step that ended, the step row the header's mean" \
	"$("$B/bin/ampprof" diff --kind=phase --format=json merged.db k.1.db | /usr/bin/python3 -c '
import json, sqlite3, sys
d = json.load(sys.stdin)
r = [x for x in d["rows"] if x["name"] == "step"][0]
c = sqlite3.connect("k.1.db")
n, t = c.execute("SELECT count(*), sum(dur_ns) FROM steps WHERE detail = 1 AND dur_ns IS NOT NULL").fetchone()
ops = c.execute("SELECT count(*) FROM op_events e JOIN steps s ON s.step = e.step AND s.rank IS e.rank WHERE s.detail = 1 AND s.dur_ns IS NOT NULL AND e.sig IN (SELECT id FROM op_sigs WHERE phase = \x27forward\x27)").fetchone()[0]
f = [x for x in d["rows"] if x["name"] == "forward"][0]
print(d["b_steps"] == n, r["b_calls"] == n, abs(r["b_ms"] - t / 1e6 / n) < 1e-4, f["b_calls"] == ops)')" \
	"True True True True"
check "killed rank: merged meta" "$(sqlite3 k.db "SELECT value FROM meta WHERE key = 'rank.1.end'"):$(sqlite3 k.db "SELECT value FROM meta WHERE key = 'complete'")" "killed:0"
check_true "killed rank: ampview's overview says a rank failed, not rank 0's signal" \
	grep -q "Ended       a rank failed" <("$B/bin/ampview" --headless --panel=overview k.db 2>&1)
check_true "killed rank: the report's first line says how each rank ended, the killed one first" \
	grep -q "failed on a rank: rank 1 was killed (SIGKILL), rank 0 was killed (SIGTERM)" \
	<("$B/bin/ampprof" report k.db 2>&1 | head -1)
# the overflow began on rank 1 (step 4): the report's next step names rank 1, ampdump reads it
# by default, and rank 0 has no "no origin" row beside rank 1's origin
"$B/bin/ampprof" report merged.db >mreport.out 2>&1
check_true "merged report: next names the rank of the first origin" \
	grep -Eq "^  next +$B/bin/ampdump --step 4 --rank 1 --db merged.db +\(the first origin, step 4, rank 1\)" mreport.out
"$B/bin/ampdump" --step 4 --db merged.db >mstep.out 2>mstep.err
check_true "ampdump --step 4 on the merged profile: reads rank 1, where the overflow began" \
	grep -q "reading rank 1, where step 4's non-finite values began" mstep.err
check_true "ampdump --step 4 on the merged profile: the origin is there" grep -q "origin (\*)" mstep.out
check "merged: no origin-less row for step 4 beside rank 1's origin" \
	"$(sqlite3 merged.db "SELECT count(*) FROM nonfinite WHERE step = 4 AND stats_id IS NULL")" 0
# ampview's step detail shows the tensors of the rank where the overflow began, and says so
"$B/bin/ampview" --headless --panel=anomalies --keys='<enter>' merged.db >manom.out 2>&1
check_true "ampview step detail on the merged profile: rank 1's, said" \
	grep -Eq "Step 4 .{1,3} rank 1 .{1,3} scale" manom.out
check "ampview step detail on the merged profile: fc1's output once (one rank's tensors)" \
	"$(grep -c ' Linear  *output fc1 ' manom.out)" 1
# the Chrome trace of the merged profile: a process per rank, named, with its collectives
"$B/bin/ampprof" export --format=chrome --output=merged.json merged.db >/dev/null 2>&1
if /usr/bin/python3 - merged.json <<'PY'; then ok "chrome export of the merged profile: a process per rank, named, with its all-reduce rows"; else bad "chrome export of the merged profile"; fi
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
assert sorted(names) == [1, 2], names  # rank + 1: pid 0 is the idle task to trace viewers
assert all(names[p].startswith("rank %d: dist_cases (pid " % (p - 1)) for p in names), names
comm = [e for e in ev if e["cat"] == "comm"]
for r in (0, 1):
    assert sum(1 for e in comm if e["pid"] == r + 1 and e["name"] == "allreduce") == 12, r
assert any(e["args"]["local_overflow"] == 1 and e["pid"] == 2 for e in comm)
assert not any(e["args"]["local_overflow"] == 1 and e["pid"] == 1 for e in comm)
PY
# buckets in flight together: each on a track of its own, so that the trace's slices nest
AMP_ALLREDUCE_BUCKET_KB=4 "${MPI[@]}" -np 2 "$B/bin/ampprof" -q -o "bk.%r.db" -- \
	"$B/tests/dist_cases" --dist --steps 4 >/dev/null 2>&1
"$B/bin/ampprof" merge -o bk.db bk.0.db bk.1.db >/dev/null 2>&1
"$B/bin/ampprof" export --format=chrome --output=bk.json bk.db >/dev/null 2>&1
check_true "chrome export, several buckets: the trace's slices nest (trace_check)" \
	/usr/bin/python3 "$E2E_DIR/trace_check.py" bk.json
check_true "chrome export, several buckets: a track per bucket, named" \
	test "$(grep -o '"name":"all-reduce bucket [0-9]*"' bk.json | sort -u | wc -l)" -gt 1
# two ranks of one merged profile compared (--rank A,B): each rank's own dumps of step 1
AMP_PRECISION_MODE=allow_mix_precision "${MPI[@]}" -np 2 "$B/bin/ampprof" -q -o "dd.%r.db" \
	--dump-steps=1 -- "$B/tests/dist_cases" --dist --steps 3 >/dev/null 2>&1
"$B/bin/ampprof" merge -o dd.db dd.0.db dd.1.db >/dev/null 2>&1
"$B/bin/ampdump" --compare dd.db dd.db --rank 0,1 --step 1 --format=csv >dd01.csv 2>dd01.err
rc=$?
check_true "ampdump --compare --rank 0,1 of one merged profile: compared (exit $rc, 0 or 1)" \
	test "$rc" -le 1
check_true "ampdump --compare --rank 0,1: rank 1's inputs are not rank 0's (another shard)" \
	/usr/bin/python3 -c 'import csv,sys; r=[x for x in csv.DictReader(open(sys.argv[1])) if x["name"] == "fc1/in0"]; assert r and float(r[0]["cosine"]) < 0.999, r' dd01.csv
"$B/bin/ampdump" --compare dd.db dd.db --rank 1 --step 1 --format=csv >dd11.csv 2>/dev/null
check "ampdump --compare --rank 1 of one merged profile against itself: no divergence" "$?" 0
"$B/bin/ampdump" --step 1 --rank 0,1 --db dd.db >/dev/null 2>&1
check "ampdump --rank 0,1 without --compare: a usage error" "$?" 2
# memory is each rank's own: the merged peak is the largest rank's, not the sum
p0=$(sqlite3 pfp32.0.db "SELECT peak_bytes FROM overview")
p1=$(sqlite3 pfp32.1.db "SELECT peak_bytes FROM overview")
check "merged: the memory peak is the largest rank's ($p0, $p1)" \
	"$(sqlite3 merged.db "SELECT peak_bytes FROM overview")" "$(( p0 > p1 ? p0 : p1 ))"
check_true "merged report: the memory line names the rank" \
	grep -Eq "^  memory +at the peak \(step [0-9]+, rank [01], the rank with the most\)" mreport.out
# profiles of no data-parallel run are not ranks
"$B/bin/ampprof" -q -o solo1.db -- "$B/tests/dist_cases" --steps 2 >/dev/null 2>&1
"$B/bin/ampprof" -q -o solo2.db -- "$B/tests/dist_cases" --steps 2 >/dev/null 2>&1
"$B/bin/ampprof" merge -o solo.db solo1.db solo2.db >/dev/null 2>solo.err
check "merge of two single-process profiles: refused (exit 6)" "$?" 6
grep -q "'solo1.db' is not a rank's profile of a data-parallel run" solo.err ||
	bad "merge of single-process profiles: says why" "$(cat solo.err)"
# a rank that exits with a failing status fails the merged run
"${MPI[@]}" -np 1 "$B/bin/ampprof" -q -o "x.%r.db" -- "$B/tests/dist_cases" --dist --steps 3 : \
	-np 1 "$B/bin/ampprof" -q -o "x.%r.db" -- sh -c "'$B/tests/dist_cases' --dist --steps 3; exit 3" \
	>/dev/null 2>&1
"$B/bin/ampprof" merge -o x.db x.0.db x.1.db >/dev/null 2>&1
check "a rank that exited with status 3: merged end rank-failed" \
	"$(sqlite3 x.db "SELECT value FROM meta WHERE key = 'end'")" rank-failed
check_true "a rank that exited with status 3: the report's first line says so" \
	grep -q "failed on a rank: rank 1 exited with status 3, rank 0 exited with status 0" \
	<("$B/bin/ampprof" report x.db 2>&1 | head -1)
# a rank profile whose ampprof died before finalize has no threads rows: it is still rank 1's
cp pfp32.1.db nothreads.1.db
sqlite3 nothreads.1.db "DELETE FROM threads; DELETE FROM run_summary; DELETE FROM rank_summary"
"$B/bin/ampprof" report nothreads.1.db >/dev/null 2>&1
check "a rank profile without threads rows: one rank, its own" \
	"$(sqlite3 nothreads.1.db "SELECT group_concat(rank) FROM rank_summary")" 1
e2e_finish
