#!/usr/bin/env bash
# examples.sh — end-to-end checks of the example programs on the real data: flags and errors,
# the JSON result line, fp32-vs-amp parity of mlp_fashion, smoke runs of cnn_fashion and charlm,
# bert_kjv learning from context in amp and fp32 alike, short trainings of resnet_fashion in
# fp32, amp and bf16, and unstable's documented overflow steps.  Reads $BUILD (default
# build); about four minutes on one thread.
#
# Parity runs 300 steps (about 0.6 epoch, cosine schedule over those steps), not the issue's
# 2 epochs: both modes must reach 82 % test accuracy and agree within 1.5 points (the 2-epoch
# figures, >= 85 % and within 1.0 point, are measured by running the example itself).
#
# resnet_fashion runs 30 steps (1920 images) per mode at lr 0.05, evaluated on the first 1000
# test images: measured 43.7 % fp32, 44.5 % amp, 44.8 % bf16 (widths 10, 20, 40, on an Intel
# with AVX512-FP16; 48.7 / 47.5 / 45.8 % at widths 12, 24, 48); it must reach 30 % (chance is
# 10 %), and amp must stay within 4 points of fp32 (measured 0.8).  At the full run's lr 0.1
# the 30 steps are noisier (widths 12, 24, 48: 60.6 % fp32, 56.4 % amp, 61.0 % bf16).  The
# issue's 91 % of a full run is measured by running the example itself.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
e2e_tmpdir OUT ampkit_e2e_examples
# field FILE KEY: value of KEY in the JSON object on the last line of FILE (numbers, null, strings)
field() { tail -n 1 "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
# cmp_num A OP B: awk float comparison (OP one of < <= > >= ==)
cmp_num() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }

for ex in mlp_fashion cnn_fashion resnet_fashion charlm bert_kjv unstable; do
	if [ ! -x "$BIN/$ex" ]; then
		bad "$ex is built" "missing $BIN/$ex (run make examples)"
		e2e_finish
	fi
done

# ---- flags ------------------------------------------------------------------------------------
for ex in mlp_fashion cnn_fashion resnet_fashion charlm bert_kjv unstable; do
	"$BIN/$ex" --help >"$OUT/help" 2>"$OUT/help.err"
	rc=$?
	check_true "$ex --help: exit 0, usage on stdout" \
		test "$rc" = 0 -a -s "$OUT/help" -a ! -s "$OUT/help.err"
	grep -q '^usage: ' "$OUT/help" || bad "$ex --help starts with usage:"
	"$BIN/$ex" --no-such-flag >"$OUT/u.out" 2>"$OUT/u.err"
	rc=$?
	check_true "$ex unknown flag: exit 2, usage on stderr" \
		test "$rc" = 2 -a ! -s "$OUT/u.out" -a -s "$OUT/u.err"
done
# a learning rate the optimizers' float cannot hold (Inf, or 0) is refused, not trained with
for lr in 1e39 1e-300; do
	"$BIN/mlp_fashion" --lr $lr >"$OUT/lr.out" 2>&1
	check "mlp_fashion --lr $lr: exit 2" "$?" 2
	grep -q -- "--lr: expected a positive number from 1.17549435e-38 to 3.40282347e+38" "$OUT/lr.out" ||
		bad "mlp_fashion --lr $lr: says the range" "$(head -2 "$OUT/lr.out")"
done
"$BIN/mlp_fashion" --precision=int8 >/dev/null 2>"$OUT/p.err"
check_true "bad --precision is a usage error" test $? = 2
grep -q "expected fp32, amp, fp16 or bf16" "$OUT/p.err" || bad "bad --precision message" "$(head -1 "$OUT/p.err")"
for ex in mlp_fashion cnn_fashion; do
	"$BIN/$ex" --schedule=linear >"$OUT/s.out" 2>"$OUT/s.err"
	rc=$?
	check_true "$ex bad --schedule: exit 2, message and usage on stderr" \
		test "$rc" = 2 -a ! -s "$OUT/s.out" -a -n "$(grep "$ex: --schedule: expected cosine or constant, got 'linear'" "$OUT/s.err")" \
		-a -n "$(grep "^usage: $ex " "$OUT/s.err")"
done
"$BIN/resnet_fashion" --test-limit=-5 >"$OUT/t.out" 2>"$OUT/t.err"
rc=$?
check_true "bad --test-limit: exit 2, message and usage on stderr" \
	test "$rc" = 2 -a ! -s "$OUT/t.out" -a -n "$(grep "resnet_fashion: --test-limit: expected at least 0, got -5" "$OUT/t.err")" \
	-a -n "$(grep "^usage: resnet_fashion " "$OUT/t.err")"
# usage_error EXAMPLE "MESSAGE" ARGS...: exit 2 with the message, the usage line and the hint
# on stderr, nothing on stdout
usage_error() {
	local ex=$1 msg=$2
	shift 2
	"$BIN/$ex" "$@" >"$OUT/ue.out" 2>"$OUT/ue.err" </dev/null
	local rc=$?
	if [ "$rc" = 2 ] && [ ! -s "$OUT/ue.out" ] && grep -qxF -- "$ex: $msg" "$OUT/ue.err" &&
		grep -q "^usage: $ex " "$OUT/ue.err" && grep -q "^hint: '$ex --help'" "$OUT/ue.err"; then
		ok "$ex $*: usage error '$msg'"
	else
		bad "$ex $*: usage error '$msg'" "exit $rc: $(head -c 300 "$OUT/ue.err") $(head -c 200 "$OUT/ue.out")"
	fi
}
usage_error mlp_fashion "--momentum: expected 0 <= X < 1, got -5" --momentum -5
usage_error mlp_fashion "--momentum: expected 0 <= X < 1, got 0.99999999 (1 in the optimizer's float)" --momentum 0.99999999
usage_error cnn_fashion "--weight-decay: expected 0 or more, got -1" --weight-decay -1
usage_error mlp_fashion "--stop-after: expected at least 0, got -1" --stop-after -1
usage_error mlp_fashion "--epochs: expected 1 to 1000000, got 4000000000000" --epochs 4000000000000
usage_error mlp_fashion "--batch: expected at most 60000 (the training images), got 100000" --batch 100000
usage_error charlm "--epochs: expected 1 to 1000000, got 4000000000000" --epochs 4000000000000
usage_error charlm "--eval-batches: expected 1 to 1048576, got 0" --eval-batches 0
usage_error charlm "--d-model: expected 1 to 4096, got 0" --d-model 0
usage_error charlm "--heads: 3 does not divide --d-model 128" --heads 3
usage_error charlm "--temperature: expected more than 0, got 0" --temperature 0
usage_error bert_kjv "--context: expected 7 to 1024, got 5" --context 5
usage_error bert_kjv "--batch: expected 1 to 512, got 1000" --batch 1000
usage_error unstable "--steps: expected at least 1, got 0" --steps 0
usage_error unstable "--noise: expected 0 to 4, got 1e+300" --noise 1e300
usage_error unstable "unknown option '--epochs'" --epochs 2
"$BIN/unstable" --help >"$OUT/uh" 2>&1
check "unstable --help: no --epochs (one step a day, no dataset), --steps without '0: no limit'" \
	"$(grep -c -- '--epochs' "$OUT/uh")|$(grep -c 'no limit' "$OUT/uh")" "0|0"
"$BIN/quickstart" --help >"$OUT/qh" 2>"$OUT/qh.err"
check "quickstart --help: exit 0, usage on stdout" \
	"$?|$(grep -c '^usage: .*quickstart (no options' "$OUT/qh")|$(wc -c <"$OUT/qh.err")" "0|1|0"
"$BIN/quickstart" --fast >"$OUT/qh" 2>"$OUT/qh.err"
check "quickstart with an option: exit 2, usage on stderr" \
	"$?|$(grep -c '^usage: ' "$OUT/qh.err")|$(wc -c <"$OUT/qh")" "2|1|0"
# --text: a directory is said to be one; a pipe is read to its end
"$BIN/charlm" --text "$OUT" --steps 1 >"$OUT/td.out" 2>&1
check "charlm --text DIR: exit 1, says it is a directory" \
	"$?|$(grep -c "^charlm: '$OUT' is a directory, not a text file$" "$OUT/td.out")" "1|1"
"$BIN/charlm" --text <(yes 'In the beginning God created the heaven and the earth.' | head -n 400) \
	--steps 2 --eval-batches 1 --sample-len 0 --log-every 0 --json >"$OUT/tp.out" 2>&1
check "charlm --text <(pipe): trains on all of it (22000 characters)" \
	"$?|$(grep -c '^charlm: .*, 22000 characters' "$OUT/tp.out")" "0|1"
# the precision a config selects that no --precision names is called by its mode's name
AMP_PRECISION_MODE=force_bf16 "$BIN/unstable" --steps 2 --log-every 0 --json >"$OUT/fb.out" 2>&1
check "force_bf16 (from the environment) is labelled force_bf16, not keep" \
	"$?|$(field "$OUT/fb.out" precision)" "0|force_bf16"
# --schedule constant keeps the rate (it read as cosine: both names begin with a c)
for sch in cosine constant; do
	"$BIN/mlp_fashion" --schedule $sch --steps 20 --batch 500 --test-limit 100 --log-every 0 \
		--json >"$OUT/sch_$sch" 2>&1
done
check_true "mlp_fashion --schedule constant trains otherwise than cosine" \
	test "$(field "$OUT/sch_constant" final_loss)" != "$(field "$OUT/sch_cosine" final_loss)"

"$BIN/mlp_fashion" --data "$OUT/nodata" --steps 1 >/dev/null 2>"$OUT/d.err"
rc=$?
check_true "missing data: non-zero exit" test "$rc" != 0
if grep -q "$OUT/nodata/train-images-idx3-ubyte.gz" "$OUT/d.err" && grep -q "make deps" "$OUT/d.err"; then
	ok "missing data: message names the file and the install step"
else
	bad "missing data: message names the file and the install step" "$(cat "$OUT/d.err")"
fi

# ---- mlp_fashion: fp32 vs amp parity ---------------------------------------------------------
required="precision steps test_accuracy final_loss samples_per_sec peak_bytes overflow_steps final_scale"
for p in fp32 amp bf16; do
	"$BIN/mlp_fashion" --precision=$p --steps 300 --log-every 100 --json >"$OUT/mlp_$p" 2>&1
	check_true "mlp_fashion $p: exit 0" test $? = 0
	if tail -n 1 "$OUT/mlp_$p" | grep -q '^{.*}$'; then ok "mlp_fashion $p: last line is JSON"
	else bad "mlp_fashion $p: last line is JSON" "$(tail -n 1 "$OUT/mlp_$p")"; fi
	missing=""
	for k in $required; do [ -n "$(field "$OUT/mlp_$p" $k)" ] || missing="$missing $k"; done
	check_true "mlp_fashion $p: JSON has$missing${missing:+ missing} all required keys" test -z "$missing"
	check_true "mlp_fashion $p: precision=$p, 300 steps" \
		test "$(field "$OUT/mlp_$p" precision)" = $p -a "$(field "$OUT/mlp_$p" steps)" = 300
done
acc32=$(field "$OUT/mlp_fp32" test_accuracy)
accamp=$(field "$OUT/mlp_amp" test_accuracy)
echo "     mlp_fashion 300 steps: fp32 $acc32, amp $accamp"
check_true "mlp_fashion fp32 accuracy >= 0.82 ($acc32)" cmp_num "$acc32" ">=" 0.82
check_true "mlp_fashion amp accuracy >= 0.82 ($accamp)" cmp_num "$accamp" ">=" 0.82
diff=$(awk -v a="$acc32" -v b="$accamp" 'BEGIN { d = a - b; print d < 0 ? -d : d }')
check_true "mlp_fashion amp within 1.5 points of fp32 (|diff| $diff)" cmp_num "$diff" "<=" 0.015
check_true "mlp_fashion amp: no overflow, scale 128" \
	test "$(field "$OUT/mlp_amp" overflow_steps)" = 0 -a "$(field "$OUT/mlp_amp" final_scale)" = 128
check_true "mlp_fashion amp uses less memory than fp32" \
	cmp_num "$(field "$OUT/mlp_amp" peak_bytes)" "<" "$(field "$OUT/mlp_fp32" peak_bytes)"
# BF16: the same parity, with no loss scaling (a static 1) and no overflow
accbf=$(field "$OUT/mlp_bf16" test_accuracy)
echo "     mlp_fashion 300 steps: bf16 $accbf"
check_true "mlp_fashion bf16 accuracy >= 0.82 ($accbf)" cmp_num "$accbf" ">=" 0.82
diff=$(awk -v a="$acc32" -v b="$accbf" 'BEGIN { d = a - b; print d < 0 ? -d : d }')
check_true "mlp_fashion bf16 within 1.0 point of fp32 (|diff| $diff)" cmp_num "$diff" "<=" 0.010
check_true "mlp_fashion bf16: no loss scaling (scale 1), no overflow" \
	test "$(field "$OUT/mlp_bf16" overflow_steps)" = 0 -a "$(field "$OUT/mlp_bf16" final_scale)" = 1
check_true "mlp_fashion bf16: parameters + activations below fp32's" \
	cmp_num "$(field "$OUT/mlp_bf16" param_act_peak_bytes)" "<" "$(field "$OUT/mlp_fp32" param_act_peak_bytes)"

# Determinism: the same seed gives the same losses, bit for bit.
for i in 1 2; do
	"$BIN/mlp_fashion" --steps 20 --log-every 10 --seed 7 --json >"$OUT/det$i" 2>&1
done
check_true "mlp_fashion is deterministic for a seed" \
	test "$(grep '^step' "$OUT/det1" | cut -c1-40)" = "$(grep '^step' "$OUT/det2" | cut -c1-40)" \
	-a "$(field "$OUT/det1" final_loss)" = "$(field "$OUT/det2" final_loss)"

# ---- cnn_fashion and charlm: short runs ---------------------------------------------------------
"$BIN/cnn_fashion" --steps 40 --log-every 20 --json >"$OUT/cnn" 2>&1
check_true "cnn_fashion amp 40 steps: exit 0" test $? = 0
acc=$(field "$OUT/cnn" test_accuracy)
check_true "cnn_fashion learns (accuracy $acc >= 0.6 after 40 steps)" cmp_num "${acc:-0}" ">=" 0.6
"$BIN/cnn_fashion" --precision=bf16 --steps 40 --log-every 20 --json >"$OUT/cnn_bf16" 2>&1
check_true "cnn_fashion bf16 40 steps: exit 0" test $? = 0
accb=$(field "$OUT/cnn_bf16" test_accuracy)
check_true "cnn_fashion bf16 learns (accuracy $accb >= 0.6 after 40 steps)" cmp_num "${accb:-0}" ">=" 0.6
mem=$(awk -v a="$(field "$OUT/cnn_bf16" param_act_peak_bytes)" -v b="$(field "$OUT/cnn" param_act_peak_bytes)" 'BEGIN { print a / b }')
check_true "cnn_fashion bf16: parameters + activations no more than amp's ($mem)" cmp_num "$mem" "<=" 1

"$BIN/charlm" --steps 30 --log-every 10 --eval-batches 2 --sample-len 40 --json >"$OUT/lm" 2>&1
check_true "charlm amp 30 steps: exit 0" test $? = 0
vl=$(field "$OUT/lm" val_loss)
check_true "charlm val_loss finite and falling below 3.0 ($vl)" cmp_num "${vl:-9}" "<" 3.0
for p in fp32 bf16; do
	"$BIN/charlm" --precision=$p --steps 30 --log-every 10 --eval-batches 2 --sample-len 40 --json >"$OUT/lm_$p" 2>&1
	check_true "charlm $p 30 steps: exit 0" test $? = 0
done
vl32=$(field "$OUT/lm_fp32" val_loss) vlb=$(field "$OUT/lm_bf16" val_loss)
check_true "charlm bf16 val_loss within 0.05 nats of fp32's after 30 steps ($vlb vs $vl32)" \
	cmp_num "$(awk -v a="${vlb:-9}" -v b="${vl32:-0}" 'BEGIN { d = a - b; print d < 0 ? -d : d }')" "<=" 0.05
check_true "charlm prints a sample" grep -q -- '--- sample' "$OUT/lm"
for len in 10 0; do
	"$BIN/charlm" --steps 2 --eval-batches 1 --prompt '' --sample-len $len >"$OUT/lm_empty" 2>&1
	check_true "charlm --prompt '' --sample-len $len: exit 0 (the newline it starts from has room)" test $? = 0
done

# ---- bert_kjv: the masked-character objective learns from context, amp beside fp32 -----------
# The validation text's unigram entropy is 3.00 nats; an encoder that does not use the context
# stays near 2.75 (where bert_kjv once sat for its whole 10 minutes, and where this model still
# is after 350 steps with the position table started as noise).  350 steps of the default model
# made narrower for time (d_model 64; about 20 s of one core each) must take both modes well
# below that (measured 2.28 in both), and close to each other.  The issue's figures (below 1.6
# nats within 10 minutes, amp within 0.05 nats of fp32 at the same step) are measured by running
# the example itself (README).
BERT_STEPS=350
for p in amp fp32; do
	"$BIN/bert_kjv" --precision=$p --steps $BERT_STEPS --d-model 64 --eval-every 0 \
		--eval-batches 8 --log-every 0 --json >"$OUT/bert_$p" 2>&1
	check_true "bert_kjv $p $BERT_STEPS steps: exit 0" test $? = 0
	check_true "bert_kjv $p: precision=$p, $BERT_STEPS steps in the JSON line" \
		test "$(field "$OUT/bert_$p" precision)" = $p -a "$(field "$OUT/bert_$p" steps)" = $BERT_STEPS
done
vba=$(field "$OUT/bert_amp" val_loss) vb32=$(field "$OUT/bert_fp32" val_loss)
echo "     bert_kjv $BERT_STEPS steps: validation loss amp $vba, fp32 $vb32 nats"
check_true "bert_kjv amp learns from context: val_loss $vba < 2.5 after $BERT_STEPS steps" \
	cmp_num "${vba:-9}" "<" 2.5
check_true "bert_kjv fp32 learns from context: val_loss $vb32 < 2.5 after $BERT_STEPS steps" \
	cmp_num "${vb32:-9}" "<" 2.5
check_true "bert_kjv amp within 0.05 nats of fp32 after $BERT_STEPS steps ($vba vs $vb32)" \
	cmp_num "$(awk -v a="${vba:-9}" -v b="${vb32:-0}" 'BEGIN { d = a - b; print d < 0 ? -d : d }')" "<=" 0.05

# ---- resnet_fashion: learns in fp32, amp and bf16 ----------------------------------------------
# RESNET_STEPS steps of batch 64 at lr 0.05 (cosine over those steps), each evaluated on the first 1000
# test images (--test-limit: all 10000 would take half a minute a run here).  The thresholds
# and the figures they were set from are in the header.
RESNET_STEPS=30
for p in fp32 amp bf16; do
	"$BIN/resnet_fashion" --precision=$p --steps $RESNET_STEPS --lr 0.05 --test-limit 1000 --log-every 10 --json \
		>"$OUT/res_$p" 2>&1
	check_true "resnet_fashion $p $RESNET_STEPS steps: exit 0" test $? = 0
	check_true "resnet_fashion $p: $RESNET_STEPS steps, evaluated on 1000 test images" \
		test "$(field "$OUT/res_$p" steps)" = $RESNET_STEPS -a "$(field "$OUT/res_$p" test_samples)" = 1000
done
r32=$(field "$OUT/res_fp32" test_accuracy) ramp=$(field "$OUT/res_amp" test_accuracy)
rbf=$(field "$OUT/res_bf16" test_accuracy)
echo "     resnet_fashion $RESNET_STEPS steps, first 1000 test images: fp32 $r32, amp $ramp, bf16 $rbf"
for p in fp32 amp bf16; do
	a=$(field "$OUT/res_$p" test_accuracy)
	check_true "resnet_fashion $p learns (accuracy ${a:-none} >= 0.30)" cmp_num "${a:-0}" ">=" 0.30
done
diff=$(awk -v a="${r32:-0}" -v b="${ramp:-1}" 'BEGIN { d = a - b; print d < 0 ? -d : d }')
check_true "resnet_fashion amp within 4 points of fp32 (|diff| $diff)" cmp_num "$diff" "<=" 0.04
check_true "resnet_fashion amp: no overflow, scale 128" \
	test "$(field "$OUT/res_amp" overflow_steps)" = 0 -a "$(field "$OUT/res_amp" final_scale)" = 128
check_true "resnet_fashion bf16: no loss scaling (scale 1), no overflow" \
	test "$(field "$OUT/res_bf16" overflow_steps)" = 0 -a "$(field "$OUT/res_bf16" final_scale)" = 1

# ---- unstable: documented behaviour -----------------------------------------------------------
for p in fp32 amp fp16; do
	"$BIN/unstable" --precision=$p --log-every 0 --json >"$OUT/un_$p" 2>&1
	check_true "unstable $p: exit 0" test $? = 0
done
S=$(field "$OUT/un_fp16" documented_overflow_step)
B=$(field "$OUT/un_amp" documented_backoff_step)
echo "     unstable: documented fp16 overflow step $S, amp back-off step $B"
check_true "unstable fp16: first non-finite loss at the documented step $S" \
	test -n "$S" -a "$(field "$OUT/un_fp16" first_nonfinite_loss_step)" = "$S"
check_true "unstable fp16: final loss non-finite" test "$(field "$OUT/un_fp16" final_loss)" = null
check_true "unstable amp: scaler backs off at the documented step $B" \
	test -n "$B" -a "$(field "$OUT/un_amp" first_overflow_step)" = "$B"
check_true "unstable amp: scale halved to 64 and loss finite" \
	test "$(field "$OUT/un_amp" final_scale)" = 64 -a "$(field "$OUT/un_amp" final_loss)" != null \
	-a "$(field "$OUT/un_amp" first_nonfinite_loss_step)" = -1
check_true "unstable fp32: no overflow" \
	test "$(field "$OUT/un_fp32" overflow_steps)" = 0 -a "$(field "$OUT/un_fp32" final_loss)" != null
"$BIN/unstable" --precision=amp --log-every 0 --json >"$OUT/un_amp2" 2>&1
check_true "unstable is deterministic" \
	test "$(field "$OUT/un_amp" final_loss)" = "$(field "$OUT/un_amp2" final_loss)"

e2e_finish
