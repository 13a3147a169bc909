#!/usr/bin/env bash
# train.sh — end-to-end tests of the training features through ampprof: gradient clipping
# (steps.grad_norm, .clipped), gradient accumulation (steps.micro_batches, one loss-scale
# decision per optimizer step), checkpoints (a resumed run's profile continues the one that
# never stopped, loss for loss), memory_optimize (memory.*_unopt) and memory_limit, on
# tests/progs/train_cases.  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
TRAIN=$B/tests/train_cases
e2e_tmpdir WORK train-e2e
for f in "$AMPPROF" "$TRAIN"; do
	[ -x "$f" ] || e2e_abort "missing $f: run 'make all' first"
done
cd "$WORK"
q() { sqlite3 -batch "$1" "$2" 2>&1; }

# ---- gradient clipping ----------------------------------------------------------------------
"$AMPPROF" -q -o clip.db -- "$TRAIN" --steps 8 --clip 2.2 --overflow-step 5 --print >clip.out
check "clip: run exits 0" "$?" 0
check "clip: meta gradient_clipping" "$(q clip.db "SELECT value FROM meta WHERE key = 'gradient_clipping'")" 2.2
check "clip: a norm on every clean step, none on the overflowed one" \
	"$(q clip.db "SELECT count(*), sum(grad_norm IS NULL), sum(step = 5 AND grad_norm IS NULL AND clipped IS NULL AND skipped = 1) FROM steps")" "8|1|1"
check "clip: clipped exactly where the norm passed the threshold" \
	"$(q clip.db "SELECT count(*) FROM steps WHERE grad_norm IS NOT NULL AND clipped != (grad_norm > 2.2)")" 0
check "clip: some steps clipped, some not" \
	"$(q clip.db "SELECT sum(clipped) > 0, sum(clipped = 0) > 0 FROM steps")" "1|1"
# the norm in the profile is the one the program saw (amp_grad_norm), to the last bit:
# the printed %.17g values, read back by SQLite as doubles, compared with =
# vals FILE FIELD: "(step, value), ..." of the program's output, for a VALUES list
vals() { awk -v f="$2" '$f != "nan" { printf "%s(%s, %s)", sep, $2, $f; sep = ", " }' "$1"; }
check "clip: profile norms = the program's" \
	"$(q clip.db "SELECT count(*), sum(s.grad_norm = v.column2) FROM steps s JOIN (VALUES $(vals clip.out 6)) v ON v.column1 = s.step")" "7|7"
check "clip: norms are of unscaled gradients (well below the scale)" \
	"$(q clip.db "SELECT max(grad_norm) < 50 FROM steps")" 1

# ---- gradient accumulation ------------------------------------------------------------------
"$AMPPROF" -q -o accum.db -- "$TRAIN" --steps 6 --accum 4 --print >accum.out
check "accum: run exits 0" "$?" 0
check "accum: 4 micro-batches in every step" "$(q accum.db "SELECT count(*), min(micro_batches), max(micro_batches) FROM steps")" "6|4|4"
check "accum: samples of 4 micro-batches" "$(q accum.db "SELECT min(samples), max(samples) FROM steps")" "128|128"
check "accum: one scaler decision per optimizer step" \
	"$(q accum.db "SELECT count(*) FROM loss_scale WHERE reason != 'init'")" 6
check "accum: the scale grew after 4 optimizer steps (not 4 micro-batches)" \
	"$(q accum.db "SELECT group_concat(reason, ',') FROM (SELECT reason FROM loss_scale WHERE reason != 'init' ORDER BY step)")" \
	"hold,hold,hold,growth,hold,hold"
check "accum: 4 forward passes per step" \
	"$(q accum.db "SELECT min(n), max(n) FROM (SELECT step, count(*) AS n FROM ops WHERE op = 'CrossEntropy' AND phase = 'forward' GROUP BY step)")" "4|4"
check "accum: one optimizer update per step" \
	"$(q accum.db "SELECT count(*) FROM ops WHERE phase = 'optimizer'")" 6
check "accum: step loss = mean of the micro-batches' losses" \
	"$(q accum.db "SELECT count(*), sum(s.loss = v.column2) FROM steps s JOIN (VALUES $(vals accum.out 4)) v ON v.column1 = s.step")" "6|6"
"$AMPPROF" -q -o plain.db -- "$TRAIN" --steps 3
check "plain: 1 micro-batch per step, no norm without clipping" \
	"$(q plain.db "SELECT min(micro_batches), max(micro_batches), count(grad_norm), count(clipped) FROM steps")" "1|1|0|0"

# ---- checkpoints ----------------------------------------------------------------------------
"$AMPPROF" -q -o full.db -- "$TRAIN" --steps 10 --clip 2.5 --print >full.out
"$TRAIN" --steps 4 --clip 2.5 --save run.ckpt >/dev/null
check "ckpt: saved" "$?" 0
check "ckpt: no temporary file left" "$(ls | grep -c 'run.ckpt.tmp')" 0
"$AMPPROF" -q -o resumed.db -- "$TRAIN" --steps 10 --clip 2.5 --resume run.ckpt --print >resumed.out
check "ckpt: resumed run exits 0" "$?" 0
check "ckpt: resumed profile starts at step 4" "$(q resumed.db "SELECT min(step), max(step), count(*) FROM steps")" "4|9|6"
check "ckpt: resumed losses, norms and scales = the run that never stopped (printed)" \
	"$(cat resumed.out)" "$(sed -n '5,10p' full.out)"
check "ckpt: resumed profile = the uninterrupted one, step for step" \
	"$(q resumed.db "ATTACH 'full.db' AS f; SELECT count(*), sum(r.loss = u.loss AND r.grad_norm = u.grad_norm AND r.scale = u.scale AND r.clipped = u.clipped) FROM steps r JOIN f.steps u ON u.step = r.step")" "6|6"
cp run.ckpt bad.ckpt
printf '\xff' | dd of=bad.ckpt bs=1 seek=100 conv=notrunc status=none
err=$("$TRAIN" --steps 10 --resume bad.ckpt 2>&1); rc=$?
check "ckpt: damaged file refused" "$rc" 1
check_true "ckpt: damaged file named with the reason" grep -q "checkpoint 'bad.ckpt': damaged (checksum mismatch)" <<<"$err"
err=$("$TRAIN" --steps 10 --hidden 32 --resume run.ckpt 2>&1)
check_true "ckpt: another model refused, naming the parameter" grep -q "parameter 'fc2.w' (6,64) in the file, 'fc2.w' (6,32)" <<<"$err"

# a real program: mlp_fashion interrupted after its first epoch and resumed ends exactly where
# the uninterrupted run ends (test accuracy and the mean loss of its last steps, all digits)
MLP=$B/bin/mlp_fashion
"$MLP" --epochs 2 --batch 1000 --stop-after 1 --checkpoint mlp.ckpt >mlp1.out 2>&1
check "mlp_fashion: stopped after epoch 1 with a checkpoint" "$(grep -c '^checkpoint mlp.ckpt: step 59, epoch 1$' mlp1.out)" 1
"$MLP" --epochs 2 --batch 1000 --resume mlp.ckpt --json >mlp2.out 2>&1
check_true "mlp_fashion: resumed at step 59, epoch 1" grep -q '^resumed from mlp.ckpt: step 59, epoch 1$' mlp2.out
"$MLP" --epochs 2 --batch 1000 --json >mlp3.out 2>&1
res() { tail -n 1 "$1" | grep -o '"steps":[0-9]*\|"test_accuracy":[0-9.e-]*\|"final_loss":[0-9.e-]*\|"final_scale":[0-9.e-]*' | tr '\n' ' '; }
check "mlp_fashion: resumed result = uninterrupted result" "$(res mlp2.out)" "$(res mlp3.out)"
# the checkpoint carries the flags: a resume under others is refused, naming the flag, even
# where the step count would fit (batch 2000: 30 steps an epoch)
WITH="(a resume continues that run: give it the settings it was written with)"
for flags in "--batch 500|--batch 1000, this run has --batch 500" \
	"--batch 2000|--batch 1000, this run has --batch 2000" \
	"--precision fp32|--precision amp, this run has --precision fp32" \
	"--seed 5|--seed 1, this run has --seed 5" "--lr 0.1|--lr 0.05, this run has --lr 0.1" \
	"--momentum 0.5|--momentum 0.9, this run has --momentum 0.5" \
	"--precision bf16|--precision amp, this run has --precision bf16"; do
	"$MLP" --epochs 2 --batch 1000 --resume mlp.ckpt ${flags%%|*} >mlp4.out 2>&1
	check "mlp_fashion: resume with ${flags%%|*} refused (exit 1, says which flag)" \
		"$?|$(grep -cxF "mlp_fashion: --resume: checkpoint 'mlp.ckpt' was written with ${flags#*|} $WITH" mlp4.out)|$(grep -c '^epoch' mlp4.out)" "1|1|0"
done
# what the flags do not say: the configuration's keys that shape the numbers, the ranks, the
# example (each stopped the load elsewhere, or went through)
AMP_GRADIENT_CLIPPING=0.1 "$MLP" --epochs 2 --batch 1000 --resume mlp.ckpt >mlp4.out 2>&1
check "mlp_fashion: resume under another gradient_clipping (environment) refused, named" \
	"$?|$(grep -cxF "mlp_fashion: --resume: checkpoint 'mlp.ckpt' was written with the configuration's gradient_clipping 0, this run has the configuration's gradient_clipping 0.1 $WITH" mlp4.out)" "1|1"
"$B/bin/cnn_fashion" --epochs 2 --batch 1000 --resume mlp.ckpt >mlp4.out 2>&1
check "cnn_fashion: resume of mlp_fashion's checkpoint refused, naming the example" \
	"$?|$(grep -cxF "cnn_fashion: --resume: checkpoint 'mlp.ckpt' was written with the example mlp_fashion, this run has the example cnn_fashion $WITH" mlp4.out)" "1|1"
for flags in "--schedule constant|constant" "--epochs 3|cosine over 180 steps" \
	"--steps 100|cosine over 100 steps"; do
	"$MLP" --epochs 2 --batch 1000 --resume mlp.ckpt ${flags%%|*} >mlp4.out 2>&1
	check "mlp_fashion: resume with ${flags%%|*} refused (the schedule and its length)" \
		"$?|$(grep -cxF "mlp_fashion: --resume: checkpoint 'mlp.ckpt' was written with --schedule cosine over 120 steps, this run has --schedule ${flags#*|} (--epochs and --steps set its length; a resume continues that run: give it the settings it was written with)" mlp4.out)" "1|1"
done
# final_loss (the mean of the last 50 steps' losses) after a resume that ran fewer than 50
# steps is the uninterrupted run's: the loss window is in the checkpoint
"$MLP" --epochs 2 --batch 2000 --test-limit 100 --stop-after 1 --checkpoint b2k.ckpt >b2k1.out 2>&1
"$MLP" --epochs 2 --batch 2000 --test-limit 100 --resume b2k.ckpt --json >b2k2.out 2>&1
"$MLP" --epochs 2 --batch 2000 --test-limit 100 --json >b2k3.out 2>&1
check "mlp_fashion: 30 steps after a resume, final_loss = the uninterrupted run's" \
	"$(res b2k2.out)" "$(res b2k3.out)"
# under the constant schedule a longer run continues from the checkpoint as if never stopped,
# and a --steps already reached trains nothing (it trained one step more)
C="--batch 2000 --test-limit 100 --schedule constant"
"$MLP" $C --epochs 2 --checkpoint c2.ckpt >c2a.out 2>&1
"$MLP" $C --epochs 3 --resume c2.ckpt --json >c2b.out 2>&1
"$MLP" $C --epochs 3 --json >c2c.out 2>&1
check "mlp_fashion --schedule constant: 2 epochs resumed to 3 = 3 epochs" "$(res c2b.out)" "$(res c2c.out)"
"$MLP" $C --epochs 2 --resume c2.ckpt --json >c2e.out 2>&1
check "mlp_fashion: resumed at --epochs already reached: says so, trains nothing (60 steps)" \
	"$?|$(grep -c '^resumed from c2.ckpt: --epochs 2 already reached, nothing to train$' c2e.out)|$(grep -c '^epoch' c2e.out)|$(res c2e.out | grep -o '"steps":[0-9]*')" \
	'0|1|0|"steps":60'
# a note whose loss count no run could have written (past the steps taken, past int64_t),
# under a checksum made right again: refused as damaged
for count in 61 99999999999999999999; do
	/usr/bin/python3 - c2.ckpt c2bad.ckpt "$count" <<'PY'
import re, struct, sys, zlib
b = open(sys.argv[1], "rb").read()
payload = b[32:]  # the note first: its length, its bytes
n = struct.unpack("<I", payload[:4])[0]
note = payload[4:4 + n]
new = re.sub(rb"^losses [0-9]+", b"losses " + sys.argv[3].encode(), note, flags=re.M)
payload = struct.pack("<I", len(new)) + new + payload[4 + n:]
hdr = b[:16] + struct.pack("<Q", len(payload)) + struct.pack("<I", zlib.crc32(payload)) + b[28:32]
open(sys.argv[2], "wb").write(hdr + payload)
PY
	"$MLP" $C --epochs 3 --resume c2bad.ckpt >c2bad.out 2>&1
	check "mlp_fashion: a note's loss count $count refused as damaged (exit 1)" \
		"$?|$(grep -c "^mlp_fashion: --resume: checkpoint 'c2bad.ckpt': its note's loss window is damaged$" c2bad.out)" "1|1"
done
"$MLP" $C --epochs 3 --steps 40 --resume c2.ckpt --json >c2d.out 2>&1
check "mlp_fashion: resumed past --steps 40: says so, trains nothing (60 steps)" \
	"$?|$(grep -c '^resumed from c2.ckpt: --steps 40 already reached, nothing to train$' c2d.out)|$(grep -c '^epoch' c2d.out)|$(res c2d.out | grep -o '"steps":[0-9]*')" \
	'0|1|0|"steps":60'
# --steps ending on an epoch's end takes its checkpoint; inside an epoch it says none was taken
"$MLP" --epochs 2 --batch 1000 --steps 60 --test-limit 100 --checkpoint s60.ckpt >s60.out 2>&1
check "mlp_fashion --steps 60 (one epoch of batch 1000): its checkpoint" \
	"$(grep -c '^checkpoint s60.ckpt: step 59, epoch 1$' s60.out)|$(test -s s60.ckpt && echo written)" "1|written"
"$MLP" --epochs 2 --batch 1000 --steps 30 --test-limit 100 --checkpoint s30.ckpt >s30.out 2>&1
check "mlp_fashion --steps 30 (inside the epoch): no checkpoint, and says so" \
	"$(grep -c '^checkpoint s30.ckpt: not written for epoch 1: --steps 30 ended the run inside it' s30.out)|$(test -e s30.ckpt && echo written)" "1|"
# a checkpoint path that cannot be written is a usage error before any training: through a
# symbolic link, its target (a dangling link; a file in a folder no file can be made in)
ln -sf /nonexistent-dir/t.ckpt dangling.ckpt
ln -sf /proc/version proc.ckpt
for link in "dangling.ckpt|a symbolic link to nowhere" "proc.ckpt|its folder '/proc' cannot be written"; do
	"$MLP" --epochs 1 --checkpoint "${link%%|*}" >lnk.out 2>&1
	check "mlp_fashion --checkpoint ${link%%|*}: refused at once (exit 2, nothing trained, says why)" \
		"$?|$(grep -c '^epoch 1' lnk.out)|$(grep -c "^mlp_fashion: --checkpoint '${link%%|*}': ${link#*|}" lnk.out)" "2|0|1"
done
"$MLP" --epochs 1 --checkpoint /nonexistent-dir/x.ckpt >mlp5.out 2>&1
check "mlp_fashion: an unwritable --checkpoint refused at once (exit 2, nothing trained)" \
	"$?|$(grep -c '^epoch 1' mlp5.out)" "2|0"
check_true "mlp_fashion: an unwritable --checkpoint: says why" \
	grep -q "^mlp_fashion: --checkpoint '/nonexistent-dir/x.ckpt': its folder '/nonexistent-dir' does not exist$" mlp5.out

# ---- memory_optimize and memory_limit -------------------------------------------------------
"$AMPPROF" -q -o mem0.db -- "$TRAIN" --steps 4 --print >mem0.out
"$AMPPROF" -q -o mem1.db -- "$TRAIN" --steps 4 --memopt --print >mem1.out
check "memopt: same losses, bit for bit" "$(cat mem1.out)" "$(cat mem0.out)"
check "memopt: meta memory_optimize" "$(q mem1.db "SELECT value FROM meta WHERE key = 'memory_optimize'")" on
check "memopt off: no *_unopt figures" "$(q mem0.db "SELECT count(activations_unopt), count(peak_unopt) FROM memory")" "0|0"
check "memopt: every category with and without it" \
	"$(q mem1.db "SELECT count(*) = count(master_weights_unopt) AND count(*) = count(working_copies_unopt) AND count(*) = count(activations_unopt) AND count(*) = count(grads_unopt) AND count(*) = count(optimizer_state_unopt) AND count(*) = count(total_unopt) FROM memory")" 1
check "memopt: weights and optimizer state the same with and without" \
	"$(q mem1.db "SELECT sum(master_weights != master_weights_unopt) + sum(optimizer_state != optimizer_state_unopt) FROM memory")" 0
check "memopt: activations and grads lower with it" \
	"$(q mem1.db "SELECT min(activations < activations_unopt), min(grads < grads_unopt), min(peak < peak_unopt) FROM memory")" "1|1|1"
check "memopt: the 'without' figures are the run without it" \
	"$(q mem1.db "SELECT group_concat(activations_unopt || '/' || grads_unopt || '/' || peak_unopt, ' ') FROM (SELECT * FROM memory ORDER BY step)")" \
	"$(q mem0.db "SELECT group_concat(activations || '/' || grads || '/' || peak, ' ') FROM (SELECT * FROM memory ORDER BY step)")"
peak_with=$(q mem1.db "SELECT max(peak) FROM memory")
peak_without=$(q mem0.db "SELECT max(peak) FROM memory")
"$TRAIN" --steps 2 --limit "$peak_with" --memopt >/dev/null
check "limit: a step at the optimized peak fits with memory_optimize" "$?" 0
err=$("$TRAIN" --steps 2 --limit "$peak_with" 2>&1); rc=$?
check "limit: the same limit refuses the step without it (exit 3)" "$rc" 3
check_true "limit: the refusal names the op and the bytes" \
	grep -Eq "memory_limit: (backward of )?[A-Za-z]+ '[a-z0-9.]+' needs [0-9]+ bytes more in step 0, with [0-9]+ of the limit of $peak_with bytes in use" <<<"$err"
"$AMPPROF" -q -o limit.db -- "$TRAIN" --steps 2 --limit "$peak_without" >/dev/null
check "limit: at the unoptimized peak the run fits" "$?" 0
check "limit: meta memory_limit" "$(q limit.db "SELECT value FROM meta WHERE key = 'memory_limit'")" "$peak_without"

# ---- bert_kjv: the masked-character objective learns; memory_optimize changes nothing but memory
BERT=$B/bin/bert_kjv
"$BERT" --steps 30 --eval-every 0 --eval-batches 4 --json >bert.out 2>&1
check "bert_kjv: 30 steps run" "$?" 0
check "bert_kjv: masked-character validation loss below 3.2 nats after 30 steps (uniform: 4.14)" \
	"$(tail -n 1 bert.out | sed -n 's/.*"val_loss":\([0-9.]*\).*/\1/p' | awk '{ print ($1 < 3.2) }')" 1
"$BERT" --steps 3 --eval-every 0 --eval-batches 1 --json >bert0.out 2>&1
"$BERT" --steps 3 --eval-every 0 --eval-batches 1 --json --memory-optimize >bert1.out 2>&1
field() { tail -n 1 "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"; }
check "bert_kjv: memory_optimize keeps every loss" "$(field bert1.out final_loss) $(field bert1.out val_loss)" \
	"$(field bert0.out final_loss) $(field bert0.out val_loss)"
check "bert_kjv: memory_optimize lowers the peak below 0.7x" \
	"$(awk -v a="$(field bert1.out peak_bytes)" -v b="$(field bert0.out peak_bytes)" 'BEGIN { print (a < 0.7 * b) }')" 1
err=$("$BERT" --steps 1 --batch 32 --memory-limit 8m 2>&1); rc=$?
check "bert_kjv: a batch past --memory-limit fails" "$rc" 1
check_true "bert_kjv: ... naming memory_limit" grep -q "memory_limit: .* needs [0-9]* bytes more in step 0" <<<"$err"

e2e_finish
