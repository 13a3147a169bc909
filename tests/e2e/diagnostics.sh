#!/usr/bin/env bash
# diagnostics.sh — end-to-end proof of the diagnostics (docs/ARCHITECTURE.md §9, issue 4) on real runs: the
# overflow of `unstable --precision=fp16` recorded by ampprof, its origin named by ampdump (op,
# layer, source line, checked against examples/unstable.c), the origin's .npy read back by numpy
# bit-exact against the raw dump and its statistics, fp32-vs-amp (step 0) and fp32-vs-fp16
# (overflow step) full-dump comparisons, the dump limit on a run that overflows at every step,
# and the report's account of the overflow cases.  Reads $BUILD (default build), built with
# `make all`; about 15 s on 2 cores.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
AMPPROF=$BUILD/bin/ampprof
AMPDUMP=$BUILD/bin/ampdump
UNSTABLE=$BUILD/bin/unstable
MLP=$BUILD/bin/mlp_fashion
SRC=$ROOT/examples/unstable.c
PY=/usr/bin/python3
q() { sqlite3 -batch "$1" "$2" 2>&1; }
meta() { q "$1" "SELECT value FROM meta WHERE key = '$2'"; }
# first_row CSV CONDITION [EXPR]: EXPR (default "op label role name") of the first row of an
# `ampdump --compare --format=csv` output for which the python CONDITION on the row r holds
first_row() {
	local expr='" ".join((r["op"], r["label"], r["role"], r["name"]))'
	[ $# -ge 3 ] && expr=$3
	"$PY" -c 'import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if eval(sys.argv[2]):
        print(eval(sys.argv[3]))
        break' "$1" "$2" "$expr"
}

for tool in "$AMPPROF" "$AMPDUMP" "$UNSTABLE" "$MLP" sqlite3 "$PY"; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		e2e_abort "$tool is missing (run make all; install sqlite3 and python3-numpy)"
	fi
done
# the documented steps, from the example itself
S=$(sed -n 's/^#define UNSTABLE_OVERFLOW_STEP *\([0-9][0-9]*\).*/\1/p' "$SRC")
BACKOFF=$(sed -n 's/^#define UNSTABLE_BACKOFF_STEP *\([0-9][0-9]*\).*/\1/p' "$SRC")
if [ -z "$S" ] || [ -z "$BACKOFF" ]; then
	e2e_abort "cannot read the documented steps from $SRC"
fi

ls_dir() { find "$1" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort; }
SHM_BEFORE=$(ls_dir /dev/shm)
# other programs share /tmp: look only for what ampprof and ampdump could leave there
tmp_amp() { ls_dir /tmp | grep -i 'ampprof\|spool\|amp-session\|ampdump' | grep -v '^ampprof-e2e\|^ampdump-e2e'; }
TMP_BEFORE=$(tmp_amp)
e2e_tmpdir T ampkit-diag-e2e
cd "$T" || exit 1

# ---- 1. ampprof records the forward overflow of unstable --precision=fp16 --------------------
"$AMPPROF" -o fp16.db --dump=nonfinite -- "$UNSTABLE" --precision=fp16 --steps $((S + 10)) \
	--log-every 0 >fp16.out 2>fp16.err
check "unstable fp16 under ampprof: exit 0" "$?" 0
check_true "unstable fp16: the example reports the non-finite loss at step $S" \
	grep -q "^step $S: non-finite loss" fp16.out
check "steps table: first overflow at the documented step $S" \
	"$(q fp16.db 'SELECT min(step) FROM steps WHERE overflow = 1')" "$S"
check "steps table: step $S overflowed and was skipped, loss not finite" \
	"$(q fp16.db "SELECT overflow, skipped, loss IS NULL OR abs(loss) > 1e308 FROM steps WHERE step = $S")" "1|1|1"
check "steps table: no overflow before step $S" "$(q fp16.db "SELECT count(*) FROM steps WHERE step < $S AND overflow <> 0")" 0
check_true "overview.overflow_steps > 0" test "$(q fp16.db 'SELECT overflow_steps FROM overview')" -gt 0
check "overview.overflow_steps = overflow rows" "$(q fp16.db 'SELECT overflow_steps FROM overview')" \
	"$(q fp16.db 'SELECT count(*) FROM steps WHERE overflow = 1')"
check "tensor_stats: origin of step $S is the Exp 'rate' output" \
	"$(q fp16.db "SELECT op, name, role, inf > 0 FROM tensor_stats WHERE step = $S AND origin = 1 ORDER BY id")" "Exp|rate|output|1"

# ---- 2. ampdump --step S: the origin first, marked, with its source line ---------------------
"$AMPDUMP" --step "$S" fp16.db >step.txt 2>step.err
check "ampdump --step $S: exit 0" "$?" 0
if sed -n 1p step.txt | grep -Eq "^step $S of fp16\.db: [0-9]+ tensors, [0-9]+ dumped; origin \(\*\): Exp at seq [0-9]+ \(rate\)$"; then
	ok "ampdump --step $S: heading names the origin Exp (rate)"
else
	bad "ampdump --step $S: heading" "$(sed -n 1p step.txt)"
fi
# data rows start at line 3; the marked rows must come first and all be the Exp 'rate' op
marks=$(sed -n '3,$p' step.txt | awk '{ print ($1 == "*") ? "*" : "-" }' | tr -d '\n')
if [[ $marks =~ ^\*+-+$ ]]; then ok "ampdump --step $S: origin rows listed first, marked *"; else bad "origin rows first" "$marks"; fi
check "ampdump --step $S: every marked row is op Exp, label rate" \
	"$(awk 'NR > 2 && $1 == "*" { print $3, $4 }' step.txt | sort -u)" "Exp rate"
orow=$(awk 'NR > 2 && $1 == "*" && $5 == "output"' step.txt)
site=$(awk '{ print $NF }' <<<"$orow")
file=${site%:*}
line=${site##*:}
if [[ $file == */examples/unstable.c || $file == examples/unstable.c ]] && [[ $line =~ ^[0-9]+$ ]]; then
	ok "ampdump --step $S: origin call site is examples/unstable.c:$line"
	if sed -n "${line}p" "$SRC" | grep -q 'amp_exp(ctx, "rate"'; then
		ok "examples/unstable.c:$line is the amp_exp(ctx, \"rate\", ...) call"
	else
		bad "examples/unstable.c:$line is the amp_exp call" "$(sed -n "${line}p" "$SRC")"
	fi
else
	bad "ampdump --step $S: origin call site" "$orow"
fi

# ---- 3. the origin's .npy, read back by numpy ---------------------------------------------
"$AMPDUMP" --step "$S" --npy npy fp16.db >npy.txt 2>npy.err
check "ampdump --step $S --npy: exit 0" "$?" 0
seq=$(q fp16.db "SELECT seq FROM tensor_stats WHERE step = $S AND origin = 1 AND role = 'output'")
out_npy=$(awk -v p="_seq${seq}_output_" 'index($1, p) { print $1; exit }' npy.txt)
in_npy=$(awk -v p="_seq${seq}_input_" 'index($1, p) { print $1; exit }' npy.txt)
if [ -n "$out_npy" ] && [ -f "$out_npy" ] && [ -n "$in_npy" ] && [ -f "$in_npy" ]; then
	ok "npy: the origin's input and output written ($(basename "$out_npy"))"
	# the nan and inf columns of the ampdump table row for the origin's output
	tnan=$(awk '{ print $10 }' <<<"$orow")
	tinf=$(awk '{ print $11 }' <<<"$orow")
	if "$PY" - "$out_npy" "$in_npy" fp16.db "$S" "$seq" "$tnan" "$tinf" <<'PY'; then
import sqlite3, sys
import numpy as np
out_npy, in_npy, db, step, seq, tnan, tinf = sys.argv[1:3] + [sys.argv[3]] + [int(a) for a in sys.argv[4:]]
y = np.load(out_npy)
assert y.dtype == np.float16, y.dtype
con = sqlite3.connect(db)
dtype, shape, nbytes, blob = con.execute(
    "SELECT dtype, shape, bytes, data FROM dumps WHERE step = ? AND seq = ? AND role = 'output' "
    "ORDER BY id", (step, seq)).fetchone()
assert dtype == "fp16" and nbytes == len(blob) == y.nbytes, (dtype, nbytes, len(blob), y.nbytes)
assert "(" + ",".join(str(d) for d in y.shape) + ")" == shape, (y.shape, shape)
raw = np.frombuffer(blob, dtype="<f2")
assert np.array_equal(y.reshape(-1).view(np.uint16), raw.view(np.uint16)), "npy differs from dumps.data"
count, nan, inf, lo, hi = con.execute(
    "SELECT count, nan, inf, min, max FROM tensor_stats WHERE step = ? AND seq = ? AND origin = 1 "
    "AND role = 'output'", (step, seq)).fetchone()
assert y.size == count and int(np.isnan(y).sum()) == nan and int(np.isinf(y).sum()) == inf, \
    (y.size, count, np.isnan(y).sum(), nan, np.isinf(y).sum(), inf)
assert (tnan, tinf) == (nan, inf), ("ampdump table", tnan, tinf, nan, inf)
assert nan + inf > 0
fin = y[np.isfinite(y)]
assert float(fin.min()) == lo and float(fin.max()) == hi, (fin.min(), lo, fin.max(), hi)
# the Inf sit exactly where e^x of the dumped input passes the FP16 maximum
x = np.load(in_npy)
assert x.dtype == np.float16 and np.isfinite(x).all()
with np.errstate(over="ignore"):
    ref = np.exp(x.astype(np.float64)) > 65504
assert np.array_equal(np.argwhere(ref), np.argwhere(np.isinf(y))), (np.argwhere(ref), np.argwhere(np.isinf(y)))
print("     numpy: %s %s, inf at %s, nan at %s, = stats row (nan %d, inf %d), bit-exact with dumps.data"
      % (y.dtype, y.shape, np.argwhere(np.isinf(y)).tolist(), np.argwhere(np.isnan(y)).tolist(), nan, inf))
PY
		ok "npy: numpy loads float16; NaN/Inf = stats row = ampdump table; bit-exact with dumps.data"
	else
		bad "npy: numpy check"
	fi
else
	bad "npy: origin files" "$(cat npy.txt npy.err)"
fi

# ---- 4. full dumps of mlp_fashion step 0, fp32 against amp ----------------------------------
# Same seed, so at step 0 the weights are identical: only the precision differs.
N=0
for p in fp32 amp; do
	"$AMPPROF" -q -o mlp_$p.db --dump-steps=$N -- "$MLP" --precision=$p --steps 1 --seed 7 \
		--log-every 0 >/dev/null 2>mlp_$p.err
	check "mlp_fashion $p --dump-steps=$N: exit 0" "$?" 0
done
check "mlp_fashion: step $N dumped in full in both runs, same tensors" \
	"$(q mlp_fp32.db "SELECT count(*) > 0, group_concat(name) FROM (SELECT name FROM dumps WHERE step = $N AND reason = 'step' ORDER BY seq, role, name)")" \
	"$(q mlp_amp.db "SELECT count(*) > 0, group_concat(name) FROM (SELECT name FROM dumps WHERE step = $N AND reason = 'step' ORDER BY seq, role, name)")"
"$AMPDUMP" --compare mlp_fp32.db mlp_amp.db --step $N --format=csv >mlp_cmp.csv 2>mlp_cmp.err
rc=$?
# as cmp(1): 1 when a tensor is flagged (column why), 0 when none is
check "ampdump --compare mlp fp32 amp: exit 1 exactly when a tensor is flagged" "$rc" \
	"$("$PY" -c 'import csv,sys; print(int(any(r["why"] for r in csv.DictReader(open(sys.argv[1])))))' mlp_cmp.csv)"
"$AMPDUMP" --compare mlp_fp32.db mlp_amp.db --step $N >mlp_def.txt 2>&1
check "ampdump --compare mlp fp32 amp (text): the flag criterion heads the output" \
	"$(sed -n 1p mlp_def.txt)" \
	"flag: nonfinite = Inf/NaN that differ; drift = cosine < 0.99 or norm ratio off 1 by > 0.1, with some |a-b| > 0.001 + rtol*|a|; floor = cosine < 0.9; ceiling = some |a-b| > 1 + rtol*|a|"
check "ampdump --compare mlp fp32 amp (text): then the rtol by dtype" "$(sed -n 2p mlp_def.txt)" \
	"rtol: 0.0009765625 with an fp16 side, 0 otherwise; a: the reference"
scale=$(q mlp_amp.db "SELECT scale FROM steps WHERE step = $N")
check "mlp_fashion amp: step $N ran with a loss scale (128)" "$scale" "128.0"
check "--compare: gradients divided by each run's loss scale (header)" \
	"$(sed -n 3p mlp_def.txt)" "grads: divided by their run's loss scale (a: 1, b: 128)"
check "--compare: gradients compared unscaled (loss.grad: 1 in both, max_abs 0)" \
	"$(first_row mlp_cmp.csv 'r["name"] == "loss.grad"' 'r["max_abs"]')" 0
# weights, biases and the input images are fp32 values rounded to fp16: within 0.001 + 2^-10*|a|
check "mlp_fashion fp32 vs amp: the tensors only rounded to fp16 (Linear inputs: fc1/in0, weights, biases) are within the max-abs tolerance" \
	"$("$PY" -c 'import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["op"] == "Linear" and r["role"] == "input"
        and (r["name"].endswith(("/in1", "/in2")) or r["name"] == "fc1/in0")]
print(len(rows), sorted(set(r["status"] for r in rows)), all(float(r["tol_ratio"]) <= 1 for r in rows))' mlp_cmp.csv)" "7 ['ok'] True"
# every forward output, input and gradient of the step, in both runs, with the default limits
margins=$("$PY" -c 'import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bad = [r for r in rows if r["status"] != "ok"]
print(len(rows), len(bad), "%.3g %.3g %.3g" % (min(float(r["cosine"]) for r in rows),
      max(abs(float(r["norm_ratio"]) - 1) for r in rows), max(float(r["max_abs"]) for r in rows)))' mlp_cmp.csv)
read -r n_rows n_flagged low_cos norm_off max_err <<<"$margins"
if [ "${n_flagged:-1}" = 0 ] && [ "${n_rows:-0}" -ge 30 ] &&
	grep -q "^no divergence: $n_rows of $n_rows tensors compared, none flagged; lowest cosine" mlp_def.txt; then
	ok "mlp_fashion fp32 vs amp at step $N: no op flagged with the default limits ($n_rows tensors; lowest cosine $low_cos, norm off 1 by at most $norm_off, largest max abs error $max_err)"
else
	bad "mlp_fashion fp32 vs amp at step $N: no op flagged with the default limits" "$(tail -1 mlp_def.txt)"
fi
# the statistics of every dumped output and gradient (those of the Linear ones taken in the GEMM
# epilogue) describe the very values dumped
if "$PY" - mlp_amp.db "$N" <<'PY'; then
import sqlite3, sys
import numpy as np
con = sqlite3.connect(sys.argv[1])
step = int(sys.argv[2])
n, seen = 0, set()
for seq, role, name, dtype, count, nan, inf, under, lo, hi, absmax, hist in con.execute(
        "SELECT seq, role, name, dtype, count, nan, inf, underflow, min, max, absmax, exp_hist "
        "FROM tensor_stats WHERE step = ? AND role IN ('output', 'grad')", (step,)):
    row = con.execute("SELECT dtype, data FROM dumps WHERE step = ? AND seq = ? AND role = ? "
                      "AND name = ?", (step, seq, role, name)).fetchone()
    if row is None:
        continue
    assert row[0] == dtype, (name, row[0], dtype)
    x = np.frombuffer(row[1], dtype="<f2" if dtype == "fp16" else "<f4").astype(np.float64)
    fin = x[np.isfinite(x)]
    tiny = np.count_nonzero((fin != 0) & (np.abs(fin) < 2.0**-14))
    got = (count, nan, inf, under, lo, hi, absmax)
    want = (x.size, int(np.isnan(x).sum()), int(np.isinf(x).sum()), tiny,
            float(fin.min()), float(fin.max()), float(np.abs(fin).max()))
    assert got == want, (name, got, want)
    n += 1
    seen.add(name)
assert {"fc1", "fc2", "fc3", "fc2/in0.grad", "fc1/in1.grad", "fc2/in1.grad"} <= seen, seen
print("     %d tensors: count, NaN, Inf, underflow, min, max, absmax = numpy on the dump" % n)
PY
	ok "mlp_fashion amp step $N: tensor_stats of every dumped output and gradient = numpy on its dump"
else
	bad "mlp_fashion amp: tensor_stats against the dumps"
fi
# the limits are not vacuous on these very tensors: stricter ones flag the fp16 rounding
"$AMPDUMP" --compare mlp_fp32.db mlp_amp.db --step $N --format=csv --cosine=1 --max-abs=0 --rtol=0 \
	>mlp_strict.csv 2>/dev/null
check "mlp_fashion fp32 vs amp: with --cosine=1 --max-abs=0 --rtol=0 the first fp16 tensor is FIRST (drift)" \
	"$(first_row mlp_strict.csv 'r["status"] == "FIRST"' '" ".join((r["name"], r["dtype_b"], r["why"]))')" "fc1/in0 fp16 drift"

# ---- 5. fp32 against fp16 at the overflow step: the origin is flagged -----------------------
for p in fp32 fp16; do
	"$AMPPROF" -q -o un_$p.db --dump-steps="$S" -- "$UNSTABLE" --precision=$p --steps $((S + 1)) \
		--log-every 0 >/dev/null 2>un_$p.err
	check "unstable $p --dump-steps=$S: exit 0" "$?" 0
done
"$AMPDUMP" --compare un_fp32.db un_fp16.db --step "$S" --format=csv >un_cmp.csv 2>un_cmp.err
check "ampdump --compare unstable fp32 fp16: exit 1 (the overflow is a divergence)" "$?" 1
check "compare: the first tensor with a non-finite mismatch is the origin" \
	"$(first_row un_cmp.csv 'int(r["nonfinite"]) > 0')" "Exp rate output rate"
"$AMPDUMP" --compare un_fp32.db un_fp16.db --step "$S" --format=csv --max-abs=0 >un_cos.csv 2>/dev/null
check "compare (drift on any error, --max-abs=0): first flagged op is the origin" \
	"$(first_row un_cos.csv 'r["status"] == "FIRST"')" "Exp rate output rate"
before=$("$PY" -c 'import csv, sys
n = 0
for r in csv.DictReader(open(sys.argv[1])):
    if r["status"] == "FIRST":
        break
    n += r["status"] == "over"
print(n)' un_cmp.csv)
check "compare with the default limits: first divergence (FIRST) is the origin, not one of the $before tensors flagged before it" \
	"$(first_row un_cmp.csv 'r["status"] == "FIRST"')" "Exp rate output rate"
"$AMPDUMP" --compare un_fp32.db un_fp16.db --step "$S" >un_cmp.txt 2>&1
if grep -Eq "^first divergence: step $S seq [0-9]+ Exp \(rate\) output 'rate': .*Inf/NaN in 'un_fp16\.db' only at [0-9]+ of 32 elements" un_cmp.txt; then
	ok "compare summary names the origin: Exp (rate) output, Inf/NaN in fp16 only"
else
	bad "compare summary names the origin" "$(tail -1 un_cmp.txt)"
fi

# ---- 6. every step overflows: the dump limit holds and the skipped dumps are counted ---------
LIMIT=400
AMP_LOSS_SCALE=1e30 "$AMPPROF" -o every.db --dump=nonfinite --dump-limit=$LIMIT -- "$UNSTABLE" \
	--precision=amp --steps 20 --log-every 0 >every.out 2>every.err
check "static loss scale 1e30: exit 0" "$?" 0
check "static loss scale 1e30: every step overflows" "$(q every.db 'SELECT count(*), sum(overflow) FROM steps')" "20|20"
check_true "dumps written" test "$(q every.db 'SELECT count(*) FROM dumps')" -gt 0
check "dump limit holds: sum(dumps.bytes) <= $LIMIT" \
	"$(q every.db "SELECT total(bytes) <= $LIMIT AND total(length(data)) <= $LIMIT FROM dumps")" 1
check "meta dumps_bytes = sum(dumps.bytes)" "$(meta every.db dumps_bytes)" "$(q every.db 'SELECT sum(bytes) FROM dumps')"
check_true "skipped dumps counted (dumps_skipped > 0)" test "$(meta every.db dumps_skipped)" -gt 0
check_true "the byte limit itself skipped dumps (dumps_skipped_limit > 0)" test "$(meta every.db dumps_skipped_limit)" -gt 0
check_true "skipped dump bytes counted" test "$(meta every.db dumps_skipped_bytes)" -gt 0
"$AMPPROF" report every.db >every.report 2>&1
SKIPPED=$(meta every.db dumps_skipped)
check_true "ampprof summary: dumps written and $SKIPPED skipped, with the reason" \
	grep -Eq "^  dumps +[0-9]+ written .*, $SKIPPED skipped \(.*--dump-limit reached" every.err
check_true "ampprof report: the same dump line" \
	grep -Eq "^  dumps +[0-9]+ written .*, $SKIPPED skipped \(.*--dump-limit reached" every.report

# ---- 7. the report tells the overflow cases apart -------------------------------------------
"$AMPPROF" report fp16.db >fp16.report 2>&1
check "report fp16: exit 0" "$?" 0
check_true "report fp16: forward overflow named (sensitive_op_overflow, Exp, step $S)" \
	grep -q "sensitive_op_overflow: Exp overflowed in FP16 (first at step $S)" fp16.report
check_true "report fp16: classified as a forward overflow of Exp (rate) at step $S" \
	grep -Eq "forward_overflow: forward overflow at step $S .*Exp \(rate\)" fp16.report
# --fp16-threshold=100: the rule below is checked for what it says, whatever this host's timing
# puts the half share at (it runs near 70 %)
"$AMPPROF" -q -o amp.db --dump=nonfinite --fp16-threshold=100 -- "$UNSTABLE" --precision=amp \
	--steps $((BACKOFF + 6)) --log-every 0 >/dev/null 2>amp.err
check "unstable amp under ampprof: exit 0" "$?" 0
check "amp: the only overflow is the documented back-off at step $BACKOFF, loss finite" \
	"$(q amp.db 'SELECT group_concat(step), sum(loss IS NOT NULL AND abs(loss) < 1e308) FROM steps WHERE overflow = 1')" "$BACKOFF|1"
check "amp: the scaler backed off 128 -> 64 at step $BACKOFF" \
	"$(q amp.db "SELECT old_scale, new_scale FROM loss_scale WHERE reason = 'overflow' ORDER BY rowid")" "128.0|64.0"
check "amp: the origin is in the gradients (role grad), not in the forward" \
	"$(q amp.db "SELECT count(*) > 0, sum(role <> 'grad') FROM tensor_stats WHERE step = $BACKOFF AND origin = 1")" "1|0"
"$AMPPROF" report amp.db >amp.report 2>&1
check "report amp: exit 0" "$?" 0
check_true "report amp: one overflow step, one skipped" grep -q "1 overflow step(s), 1 skipped" amp.report
check_true "report amp: no forward sensitive-op overflow claimed" test "$(grep -c sensitive_op_overflow amp.report)" = 0
# the profile has no graph: low_fp16_share, asking for Add, Scale and Mul on the white list,
# says that Exp's FP32 output is past FP16's range (white-listing its reader Scale made the
# run's loss Inf)
check_true "amp: low_fp16_share warns that an FP32 output past 65504 (Exp 'rate') must not feed a listed op" \
	grep -q "but an FP32 output reaches .* (Exp 'rate'), past FP16's 65504" \
	<(q amp.db "SELECT message FROM advice WHERE rule = 'low_fp16_share'")
check_true "report amp: overflow only in the scaled gradients, handled by the scaler (128 -> 64)" \
	grep -Eq "scaled_grad_overflow: overflow only in the scaled gradients at step $BACKOFF .*handled by the loss scaler \(scale 128 -> 64\)" amp.report
# NaN from an invalid operation: the runtime test program takes the log of negative values.
"$AMPPROF" -q -o inv.db -- "$BUILD/tests/runtime_cases" --steps 6 --bad-step 2 >/dev/null 2>&1
"$AMPPROF" report inv.db >inv.report 2>&1
check_true "report: NaN from an invalid operation (log of negatives) at step 2" \
	grep -q "invalid_operation: NaN from an invalid operation at step 2" inv.report

# ---- 7b. a BF16 run: engines, the two shares, no false loss-scale verdicts -------------------
# BF16 has FP32's range: the mode runs with a static scale of 1, which is neither a floor
# reached nor an unusual dynamic scale; where the CPU has BF16 arithmetic the GEMMs run on it.
"$AMPPROF" -q -o bf16.db -- "$MLP" --precision=bf16 --steps 30 --log-every 0 >/dev/null 2>&1
"$AMPPROF" report bf16.db >bf16.report 2>&1
check "bf16 run: half type recorded" "$(q bf16.db "SELECT half_types FROM overview")" bf16
check "bf16 run: no loss-scale advice for the static scale of 1" \
	"$(q bf16.db "SELECT count(*) FROM advice WHERE rule LIKE 'loss_scale%'")" 0
check_true "bf16 report: the BF16 share and the native half share" \
	sh -c "grep -q '^  BF16 share ' bf16.report && grep -q '^  native half ' bf16.report"
# native_bf16_checks DB ENGINE: the bf16 Linear of DB ran on ENGINE, mostly native, no advice.
native_bf16_checks() {
	check "bf16 Linear runs on $2" \
		"$(q "$1" "SELECT group_concat(DISTINCT engine) FROM ops WHERE op = 'Linear'")" "$2"
	# a time share: only in an optimized build (under a sanitizer the FP32 C loops slow, the
	# half GEMMs' assembly does not); the engines above hold in both
	case $(basename "$BUILD") in
	*asan*) ;;
	*) check_true "bf16 run on $2: native half share above 50 %" \
		test "$(q "$1" "SELECT native_half_share > 0.5 FROM overview")" = 1 ;;
	esac
	check "bf16 run on $2: no emulated-half advice" \
		"$(q "$1" "SELECT count(*) FROM advice WHERE rule = 'emulated_half'")" 0
}
intel=$(grep -m1 '^vendor_id' /proc/cpuinfo | grep -c GenuineIntel)
if grep -qw amx_bf16 /proc/cpuinfo; then
	native_bf16_checks bf16.db amx-bf16
elif grep -qw avx512_bf16 /proc/cpuinfo && [ "$intel" = 0 ]; then
	native_bf16_checks bf16.db avx512-bf16
elif grep -qw avx512_bf16 /proc/cpuinfo; then
	# Intel cores without AMX: vdpbf16ps is slower than FP32 FMA there, so auto runs bf16
	# products on FP32 FMA, and the advice says why (and names fp16 where the CPU has it).
	check "Intel, no AMX: bf16 Linear on fp32-fma" \
		"$(q bf16.db "SELECT group_concat(DISTINCT engine) FROM ops WHERE op = 'Linear'")" fp32-fma
	adv=$(q bf16.db "SELECT message FROM advice WHERE rule = 'emulated_half'")
	check_true "Intel, no AMX: the advice says why bf16 is not on vdpbf16ps" \
		test -n "$(echo "$adv" | grep 'on GenuineIntel cores it computes fewer products per cycle than FP32 FMA')"
	if grep -qw avx512_fp16 /proc/cpuinfo; then
		check_true "Intel, no AMX: the advice names the fp16 mode" \
			test -n "$(echo "$adv" | grep 'precision_mode = allow_mix_precision_fp16')"
	fi
	AMP_KERNELS=avx512-bf16 "$AMPPROF" -q -o bf16dp.db -- "$MLP" --precision=bf16 --steps 30 --log-every 0 >/dev/null 2>&1
	native_bf16_checks bf16dp.db avx512-bf16
else
	echo "SKIPPED: avx512-bf16 needs avx512_bf16 (the bf16 engine checks; amx-bf16 would serve too)"
fi
# The same run forced onto a path without BF16 arithmetic: emulated, and the advice says so.
AMP_KERNELS=$EMU_KERNELS "$AMPPROF" -q -o bf16emu.db -- "$MLP" --precision=bf16 --steps 10 --log-every 0 >/dev/null 2>&1
check "bf16 on the $EMU_KERNELS path: Linear on fp32-fma" \
	"$(q bf16emu.db "SELECT group_concat(DISTINCT engine) FROM ops WHERE op = 'Linear'")" fp32-fma
check "bf16 on the $EMU_KERNELS path: native half share 0" "$(q bf16emu.db "SELECT native_half_share FROM overview")" 0.0
check "bf16 on the $EMU_KERNELS path: the emulated-half advice fires" \
	"$(q bf16emu.db "SELECT count(*) FROM advice WHERE rule = 'emulated_half'")" 1
# The FP16 AMP run on that path: its GEMMs on FP32 arithmetic, and the advice names them, their
# share of op time (the ops table's own sum) and the forced path as the reason.
AMP_KERNELS=$EMU_KERNELS "$AMPPROF" -q -o fp16emu.db -- "$MLP" --precision=amp --steps 10 --log-every 0 >/dev/null 2>&1
check "fp16 on the $EMU_KERNELS path: Linear on fp32-fma" \
	"$(q fp16emu.db "SELECT group_concat(DISTINCT engine) FROM ops WHERE op = 'Linear'")" fp32-fma
check "fp16 on the $EMU_KERNELS path: native half share 0" "$(q fp16emu.db "SELECT native_half_share FROM overview")" 0.0
adv=$(q fp16emu.db "SELECT message FROM advice WHERE rule = 'emulated_half'")
share=$(q fp16emu.db "SELECT printf('%.1f', 100.0 * sum(CASE WHEN exec_dtype = 'fp16' AND engine IN ('fp32-fma', 'scalar') THEN dur_ns ELSE 0 END) / sum(dur_ns)) FROM ops")
check_true "fp16 on the $EMU_KERNELS path: the advice names fp16 Linear and its share ($share %)" \
	test -n "$(echo "$adv" | grep -F "for $share % of op time (fp16 Linear")"
check_true "fp16 on the $EMU_KERNELS path: the advice gives the forced path as the reason" \
	test -n "$(echo "$adv" | grep -F "forced kernels = $EMU_KERNELS")"

# ---- 9. verdicts on programs with one known fault each (tests/progs/faults.c) ----------------
FAULTS=$BUILD/tests/faults
FSRC=$ROOT/tests/progs/faults.c
# the line of faults.c that carries a FAULTS_* marker
mline() { grep -n "/\* $1 \*/" "$FSRC" | head -1 | cut -d: -f1; }
# line of a call-site id expression evaluated in a row's context
sline() { echo "(SELECT line FROM callsites WHERE id = $1)"; }
fault() { # fault NAME [faults options...]: profiles it into NAME.db
	local name=$1
	shift
	rm -f "f_$name.db"
	"$AMPPROF" -q -o "f_$name.db" -- "$FAULTS" --fault "$name" "$@" >"f_$name.out" 2>"f_$name.err"
	check "faults --fault $name under ampprof: exit 0" "$?" 0
}
if [ ! -x "$FAULTS" ]; then
	e2e_abort "$FAULTS is missing (run make all)"
fi

# 9.1 an FP16 Mul flushes 1e-10 to zero, the FP32 Log after it makes -Inf: an underflow, named
# at the Mul, not a forward overflow of Log
fault underflow
check "underflow: one origin, class underflow, at the Log (step 2, its line), caused by the fp16 Mul (its line)" \
	"$(q f_underflow.db "SELECT step, class, op, $(sline callsite), src_op, src_label, src_dtype, $(sline src_callsite) FROM nonfinite ORDER BY step")" \
	"2|underflow|Log|$(mline FAULTS_UNDERFLOW_LOG)|Mul|sq|fp16|$(mline FAULTS_UNDERFLOW_MUL)"
check "underflow: the advice names the Mul, step 2, the Mul's line" \
	"$(q f_underflow.db "SELECT rule, severity, op, step, $(sline callsite) FROM advice WHERE rule IN ('underflow', 'forward_overflow', 'sensitive_op_overflow') ORDER BY id")" \
	"underflow|error|Mul|2|$(mline FAULTS_UNDERFLOW_MUL)"
check_true "underflow: the advice says to keep the Mul in FP32, and that Log is not the cause" \
	grep -q "the cause is the Mul, not Log: run Mul in FP32 (custom_black_list = Mul)" \
	<(q f_underflow.db "SELECT message FROM advice WHERE rule = 'underflow'")
check "underflow: no advice puts Log (already FP32) on the black list" \
	"$(q f_underflow.db "SELECT count(*) FROM advice WHERE message LIKE '%custom_black_list = Log%'")" 0
check_true "underflow: ampdump's origin line names the Mul as the cause" \
	grep -q "origin (\*): Log at seq [0-9]* (log): its input underflowed to zero in Mul 'sq' at seq [0-9]*, the cause" \
	<("$AMPDUMP" --step 2 --db f_underflow.db)

# 9.2 an FP32 Scale makes 95454 and the white-list Linear casts it to FP16: the cast is the origin
fault cast
check "cast: class cast_overflow at step 2; source fc/in0.precast, from Scale 'boost' (its line), consumer Linear (its line)" \
	"$(q f_cast.db "SELECT step, class, op, $(sline callsite), src_tensor, src_op, src_label, src_dtype, $(sline src_callsite), src_absmax > 65504 FROM nonfinite ORDER BY step")" \
	"2|cast_overflow|Linear|$(mline FAULTS_CAST_USE)|fc/in0.precast|Scale|boost|fp32|$(mline FAULTS_CAST_SRC)|1"
check "cast: the advice (cast_overflow) names Scale, step 2, the Scale's line" \
	"$(q f_cast.db "SELECT rule, op, step, $(sline callsite) FROM advice WHERE rule IN ('cast_overflow', 'forward_overflow') ORDER BY id")" \
	"cast_overflow|Scale|2|$(mline FAULTS_CAST_SRC)"
check_true "cast: the advice says the cast is the origin and which value" \
	grep -Eq "the cast to fp16 in front of Linear \(fc\).*its source 'fc/in0.precast', the FP32 output of Scale \(boost\).*holds 95454.5.*the cast is the origin, not Linear" \
	<(q f_cast.db "SELECT message FROM advice WHERE rule = 'cast_overflow'")
check_true "cast: ampdump --step names the cast as the origin, as the report does" \
	grep -q "origin (\*): the automatic cast in front of Linear at seq [0-9]* (fc): its FP32 input overflows the half type" \
	<("$AMPDUMP" --step 2 f_cast.db 2>&1 | head -1)

# 9.3 a static scale of 1 with FP16 gradients: the weight gradient of fc is all zeros, nothing
# overflows; the gradient-underflow rule names the layer and says what to change
fault gradunder
check "gradunder: no overflow, no non-finite origin" \
	"$(q f_gradunder.db "SELECT sum(overflow), (SELECT count(*) FROM nonfinite) FROM steps")" "0|0"
check "gradunder: gradient_underflow names Linear, the last step, fc's line" \
	"$(q f_gradunder.db "SELECT rule, severity, op, step, $(sline callsite) FROM advice WHERE rule = 'gradient_underflow'")" \
	"gradient_underflow|warning|Linear|3|$(mline FAULTS_GRADUNDER_FC)"
check_true "gradunder: the share of zero values at the static scale 1, and the fix (dynamic scaling or a higher static scale)" \
	grep -Eq "the gradient fc/in1.grad of layer 'fc' \(Linear, called at [^)]*faults.c:$(mline FAULTS_GRADUNDER_FC)\) is 100.0 % zero or subnormal in fp16 \(100.0 % exact zeros\) at the static loss scale 1: the layer stops learning; enable dynamic loss scaling \(loss_scale = dynamic\) or raise the static scale \(loss_scale = [0-9]+" \
	<(q f_gradunder.db "SELECT message FROM advice WHERE rule = 'gradient_underflow'")
check_true "gradunder: the scale advised with the largest gradient at both scales; all zeros: a parameter the loss may not depend on" \
	grep -Eq "\(loss_scale = [0-9]+ keeps the run's largest gradient below 32768: [0-9.e+-]+ at the scale 1, [0-9.e+-]+ at [0-9]+\); or, every value being exactly zero, the loss may not depend on this parameter at all .* no scale mends: a run in FP32 \(precision_mode = force_fp32\) tells which$" \
	<(q f_gradunder.db "SELECT message FROM advice WHERE rule = 'gradient_underflow'")
check "gradunder: no floor or collapse verdict for the static scale (no 'overflow even unscaled')" \
	"$(q f_gradunder.db "SELECT count(*) FROM advice WHERE rule IN ('loss_scale_floor', 'loss_scale_collapse') OR message LIKE '%even unscaled%'")" 0
check "healthy runs (mlp_fashion amp, unstable fp16 and amp): no gradient_underflow" \
	"$(for d in mlp_amp.db fp16.db amp.db; do q $d "SELECT count(*) FROM advice WHERE rule = 'gradient_underflow'"; done | tr '\n' ' ')" "0 0 0 "

# 9.4 the aligned flag of backward GEMMs, K checked, ranking by the time padding could save
check_true "mlp_fashion amp: backward GEMMs recorded aligned (flag 1 on some)" \
	test "$(q mlp_amp.db "SELECT count(*) FROM op_sigs WHERE phase = 'backward' AND op = 'Linear' AND aligned = 1")" -gt 0
check "mlp_fashion amp: every backward GEMM has its forward op's aligned flag" \
	"$(q mlp_amp.db "SELECT count(*) FROM op_sigs b JOIN op_sigs f ON f.op = b.op AND f.label = b.label AND f.shape = b.shape AND f.phase = 'forward' WHERE b.phase = 'backward' AND b.op IN ('Linear', 'MatMul', 'Conv2D') AND b.aligned <> f.aligned")" 0
check "mlp_fashion amp: its only unaligned GEMMs, the 10-output head's (run as dot products), are not recommended for padding" \
	"$(q mlp_amp.db "SELECT count(*) FROM advice WHERE rule = 'gemm_unaligned'")" 0
check_true "mlp_fashion amp: the head's GEMMs are unaligned (flag 0) all the same" \
	test "$(q mlp_amp.db "SELECT count(*) FROM op_sigs WHERE label = 'fc3' AND aligned = 0")" -gt 0
fault gemm
check "gemm: 'wide' (K = 514) is unaligned forward and backward, its output shape aligned" \
	"$(q f_gemm.db "SELECT group_concat(phase || ':' || aligned) FROM (SELECT phase, aligned FROM op_sigs WHERE label = 'wide' ORDER BY phase)")" \
	"backward:0,forward:0"
check "gemm: gemm_unaligned names Linear at the 'wide' line, not the single-column head" \
	"$(q f_gemm.db "SELECT rule, op, $(sline callsite) FROM advice WHERE rule = 'gemm_unaligned'")" \
	"gemm_unaligned|Linear|$(mline FAULTS_GEMM_WIDE)"
check_true "gemm: the message ranks 'wide' first with M, N, K and leaves the narrow head out" \
	grep -Eq "^1 GEMM shape\(s\) miss the fast path \(M, N or K not a multiple of 8\); padding could save about [0-9.]+ ms \([0-9.]+ % of op time\), most in Linear 'wide' \(M 64, N 64, K 514\): .*\(1 narrow GEMM\(s\), such as classifier heads, left out" \
	<(q f_gemm.db "SELECT message FROM advice WHERE rule = 'gemm_unaligned'")

# 9.5 a white-list op kept in FP32 by custom_black_list: the advice names the key and where it
# was set (the file's line, or the variable), and never the mode already in force
printf '# faults --fault blacklist\nprecision_mode = allow_mix_precision\ncustom_black_list = Linear\n' >bl.cfg
fault blacklist --config bl.cfg
check "blacklist: meta records where the keys were set" \
	"$(q f_blacklist.db "SELECT group_concat(key || '=' || value, ' ') FROM (SELECT key, value FROM meta WHERE key IN ('precision_mode_source', 'custom_black_list_source') ORDER BY key)")" \
	"custom_black_list_source=bl.cfg:3 precision_mode_source=bl.cfg:2"
check_true "blacklist: low_fp16_share names custom_black_list = Linear and bl.cfg:3" \
	grep -q "custom_black_list = Linear (set at bl.cfg:3) keeps Linear in FP32: remove Linear from that list" \
	<(q f_blacklist.db "SELECT message FROM advice WHERE rule = 'low_fp16_share'")
check "blacklist: no advice recommends allow_mix_precision, which is in force, or Linear for the white list" \
	"$(q f_blacklist.db "SELECT count(*) FROM advice WHERE message LIKE '%precision_mode = allow_mix_precision %' OR message LIKE '%custom_white_list (Linear%'")" 0
AMP_CUSTOM_BLACK_LIST=Linear AMP_PRECISION_MODE=force_fp32 "$AMPPROF" -q -o f_blacklist_env.db -- \
	"$FAULTS" --fault blacklist >/dev/null 2>&1
check_true "blacklist from the environment: the variable is named, and the mode with its variable" \
	grep -q "custom_black_list = Linear (set by environment AMP_CUSTOM_BLACK_LIST) keeps Linear in FP32: remove Linear from that list; the mode in force is force_fp32 (set by environment AMP_PRECISION_MODE): use precision_mode = allow_mix_precision" \
	<(q f_blacklist_env.db "SELECT message FROM advice WHERE rule = 'low_fp16_share'")
check "force_fp32 run: no loss-scale floor verdict (the scaler never ran)" \
	"$(q f_blacklist_env.db "SELECT count(*) FROM advice WHERE rule LIKE 'loss_scale%'")" 0
# advice to black-list an op adds it to the run's list: following it keeps Exp in FP32
AMP_CUSTOM_BLACK_LIST=Exp "$AMPPROF" -q -o exp_bl.db -- "$UNSTABLE" --precision=fp16 \
	--steps $((S + 10)) --log-every 0 >/dev/null 2>&1
check_true "black list in force (Exp): the cast overflow's advice adds Scale to it, not instead" \
	grep -q "run Scale in FP32 (custom_black_list = Exp,Scale)" \
	<(q exp_bl.db "SELECT message FROM advice WHERE rule = 'cast_overflow'")

# 9.6 a scaled-gradient overflow in the backward of fc2 also names fc2's forward call site
fault gradoverflow
check "gradoverflow: origin at step 0 is fc2's weight gradient; the forward call site is fc2's line" \
	"$(q f_gradoverflow.db "SELECT step, class, op, label, $(sline fwd_callsite) FROM nonfinite ORDER BY step LIMIT 1")" \
	"0|scaled_grad_overflow|Linear|fc2/in1.grad|$(mline FAULTS_MLP_FC2)"
check_true "gradoverflow: the advice gives the forward op's call site" \
	grep -q "its forward op was called at .*tests/progs/faults.c:$(mline FAULTS_MLP_FC2);" \
	<(q f_gradoverflow.db "SELECT message FROM advice WHERE rule = 'scaled_grad_overflow'")

# 9.7 one story everywhere: a NaN from an invalid operation (no overflow) in the report, ampdump
# --list, and ampview's anomalies and steps panels; the loss stored as NaN, shown as nan; the
# scaler's back-off reason is 'nan', not 'overflow'
AMPVIEW=$BUILD/bin/ampview
fault invalid
check "invalid: origin Sqrt (root) at step 2, its line, class invalid_operation" \
	"$(q f_invalid.db "SELECT step, class, op, label, $(sline callsite) FROM nonfinite ORDER BY step")" \
	"2|invalid_operation|Sqrt|root|$(mline FAULTS_INVALID_SQRT)"
check "invalid: the NaN loss is stored as such (loss_state nan), the other steps finite" \
	"$(q f_invalid.db "SELECT group_concat(step || ':' || loss_state) FROM (SELECT step, loss_state FROM steps ORDER BY step)")" \
	"0:finite,1:finite,2:nan,3:finite"
check "invalid: the back-off's reason is nan (no gradient overflowed), linked to its cause" \
	"$(q f_invalid.db "SELECT reason, old_scale, new_scale, cause_class, cause_op, cause_tensor, $(sline cause_callsite) FROM loss_scale WHERE step = 2 AND reason <> 'hold'")" \
	"nan|128.0|64.0|invalid_operation|Sqrt|root|$(mline FAULTS_INVALID_SQRT)"
"$AMPPROF" report f_invalid.db >f_invalid.report 2>&1
check_true "invalid: the report says invalid operation at step 2, Sqrt (root)" \
	grep -q "invalid_operation: NaN from an invalid operation at step 2 (1 step): Sqrt (root) output in fp32" f_invalid.report
check "invalid: ampdump --list shows step 2 with loss nan and origin Sqrt" \
	"$("$AMPDUMP" --list --format=csv f_invalid.db | awk -F, '$1 == 2 { print $1, $5, $8 }')" "2 nan Sqrt"
# runtime_cases: the log of negatives gives a NaN whose gradients stay finite: no overflow at all
"$AMPPROF" -q -o rc_inv.db -- "$BUILD/tests/runtime_cases" --steps 6 --bad-step 2 >/dev/null 2>&1
check "runtime_cases: step 2 has a NaN loss, no overflow, a hold decision" \
	"$(q rc_inv.db "SELECT s.loss_state, s.overflow, l.reason FROM steps s JOIN loss_scale l ON l.step = s.step AND l.reason <> 'init' WHERE s.step = 2")" \
	"nan|0|hold"
for db in f_invalid.db rc_inv.db; do
	"$AMPVIEW" --headless --panel=anomalies --width=100 --height=14 "$db" >"$db.anom" 2>&1
	check_true "ampview anomalies ($db): step 2 listed with its origin" \
		grep -Eq "^. +2 +[0-9]+ +(no|yes) +[0-9]+ +(Sqrt root|Log log) " "$db.anom"
	check_true "ampview anomalies ($db): the heading counts it" grep -q "^ 1 step with non-finite values" "$db.anom"
	"$AMPVIEW" --headless --panel=steps --width=100 --height=14 "$db" >"$db.steps" 2>&1
	check_true "ampview steps ($db): step 2's loss shown as nan" grep -Eq "^ +2 +[0-9.]+ [mun]?s +nan " "$db.steps"
done
check "ampdump --list (runtime_cases): step 2 with loss nan, origin Log" \
	"$("$AMPDUMP" --list --format=csv rc_inv.db | awk -F, '$1 == 2 { print $1, $5, $8 }')" "2 nan Log"

# --dump=nonfinite is the default: the invalid run above (no --dump) has the origin's tensors
check "default --dump=nonfinite: the origin's input and output dumped at step 2, nothing else" \
	"$(q f_invalid.db "SELECT group_concat(DISTINCT step || ':' || op || ':' || reason), sum(role = 'input') > 0, sum(role = 'output') > 0 FROM dumps")" \
	"2:Sqrt:nonfinite|1|1"
check "default --dump: meta options.dump nonfinite" "$(meta f_invalid.db options.dump)" nonfinite
"$AMPPROF" -q -o f_nodump.db --dump=off -- "$FAULTS" --fault invalid >/dev/null 2>&1
check "--dump=off: no dumps" "$(q f_nodump.db "SELECT count(*) FROM dumps")" 0

# ---- 10. why the scale changed -----------------------------------------------------------------
# probing: a scale started far too high backs off at its first steps, then holds
check "gradoverflow: history probing at steps 0,1; half the steps skipped" \
	"$(q f_gradoverflow.db "SELECT scale_history, scale_history_steps, skipped_share FROM run_summary")" "probing|0,1|0.5"
check "gradoverflow: each back-off linked to the gradient, its call site and its forward call site" \
	"$(q f_gradoverflow.db "SELECT group_concat(step || ':' || cause_class || ':' || cause_tensor || ':' || $(sline cause_fwd_callsite), ' ') FROM (SELECT * FROM loss_scale WHERE reason = 'overflow' ORDER BY step)")" \
	"0:scaled_grad_overflow:fc2/in1.grad:$(mline FAULTS_MLP_FC2) 1:scaled_grad_overflow:fc2/in1.grad:$(mline FAULTS_MLP_FC2)"
check "gradoverflow: hold decisions count their clean steps" \
	"$(q f_gradoverflow.db "SELECT group_concat(clean_steps) FROM (SELECT clean_steps FROM loss_scale WHERE reason = 'hold' ORDER BY step)")" "1,2"
"$AMPPROF" report f_gradoverflow.db >f_gradoverflow.report 2>&1
check_true "report: the scale history line" grep -q "^  scaling      probing (normal) at steps 0,1; 2 skipped (50.0 % of the optimizer steps)$" f_gradoverflow.report
check_true "report: the history advice with the first back-off's cause and forward call site" \
	grep -Eq "loss_scale_history: loss scale history: probing .* first back-off at step 0 \(1048576 -> 524288, overflow\): Linear fc2/in1.grad at [^ ]*faults.c:[0-9]+, forward at [^ ]*faults.c:$(mline FAULTS_MLP_FC2)" f_gradoverflow.report
"$AMPPROF" report --format=json f_gradoverflow.db >f_gradoverflow.json 2>&1
check "report json: scale_history, its steps, skipped_share" \
	"$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["scale_history"], d["scale_history_steps"], d["skipped_share"])' f_gradoverflow.json)" \
	"probing [0, 1] 0.5"
"$AMPVIEW" --headless --panel=scale --width=100 --height=18 f_gradoverflow.db >f_gradoverflow.scale 2>&1
check_true "ampview loss-scale panel: the history line" grep -Eq "history: probing \(normal\) at steps 0,1 (·|\.) 2 skipped \(50.0 %\)" f_gradoverflow.scale
# a scaler that grows at every clean step overflows every other step: probing, not collapsing
# (no warning), its 101 back-offs listed as the first 32, whole, then ",..."
AMP_LOSS_SCALE_GROWTH_INTERVAL=1 "$AMPPROF" -q -o f_probe.db -- "$FAULTS" --fault gradoverflow \
	--steps 200 >/dev/null 2>&1
check "growth at every step: probing, 32 steps then ',...', no warning of the scale" \
	"$(q f_probe.db "SELECT scale_history, scale_history_steps, overflow_steps, (SELECT count(*) FROM advice WHERE severity <> 'info' AND rule LIKE 'loss_scale%') FROM run_summary")" \
	"probing|0,1$(seq -s, 3 2 61 | sed 's/^/,/'),...|101|0"
"$AMPPROF" report --format=json f_probe.db >f_probe.json 2>&1
check "report json: the 32 steps listed and that there are more" \
	"$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); s=d["scale_history_steps"]; print(len(s), s[-1], d["scale_history_steps_more"])' f_probe.json)" \
	"32 61 True"
# isolated spikes: unstable amp's one back-off, 299 steps into a settled scale, with its cause
check "unstable amp: history isolated_spikes at the back-off step $BACKOFF" \
	"$(q amp.db "SELECT scale_history, scale_history_steps FROM run_summary")" "isolated_spikes|$BACKOFF"
check "unstable amp: the back-off linked to its gradient with the absmax of the step before" \
	"$(q amp.db "SELECT cause_class, cause_op, cause_absmax > 0 FROM loss_scale WHERE reason = 'overflow'")" "scaled_grad_overflow|Linear|1"
check "unstable amp: 1 skipped step: no skipped-steps rule" "$(q amp.db "SELECT count(*) FROM advice WHERE rule = 'skipped_steps'")" 0
# collapsing: a forward cast overflow at every step drives the scale to its floor
fault cast --bad-step -1 --steps 12
check "cast at every step: history collapsing, 12 back-offs" \
	"$(q f_cast.db "SELECT scale_history, (SELECT count(*) FROM loss_scale WHERE reason = 'overflow') FROM run_summary")" "collapsing|12"
check "cast at every step: the skipped-steps rule fires (12 of 12)" \
	"$(q f_cast.db "SELECT rule, step FROM advice WHERE rule = 'skipped_steps'")" "skipped_steps|0"
check_true "cast at every step: the floor verdict blames the forward pass, not unscaled gradients" \
	grep -q "the forward pass goes non-finite (cast_overflow) whatever the scale" \
	<(q f_cast.db "SELECT message FROM advice WHERE rule = 'loss_scale_floor'")

# ---- 11. overflow forecast ---------------------------------------------------------------------
# unstable fp16 profiled up to step 200: the trend of the Exp 'rate' predicts the step-S overflow
"$AMPPROF" -q -o fc200.db -- "$UNSTABLE" --precision=fp16 --steps 201 --log-every 0 >/dev/null 2>&1
check "forecast (steps 0..200): no overflow yet" "$(q fc200.db "SELECT count(*) FROM steps WHERE overflow = 1")" 0
pred=$(q fc200.db "SELECT overflow_step FROM forecast WHERE name = 'rate' AND op = 'Exp' AND role = 'output'")
check_true "forecast: the Exp 'rate' overflow predicted within 15 % of step $S (predicted $pred)" \
	"$PY" -c "import sys; p = float(sys.argv[1]); sys.exit(0 if abs(p - $S) <= 0.15 * $S else 1)" "${pred:-nan}"
check "forecast: 'rate' is the nearest predicted overflow" \
	"$(q fc200.db "SELECT name FROM forecast WHERE steps_left > 0 ORDER BY steps_left LIMIT 1")" rate
check_true "forecast advice: 'rate: Exp input grows 0.02 per step, ... overflows FP16 around step N'" \
	grep -Eq "^overflow forecast: rate: Exp input grows 0\.0[12][0-9]* per step \(its output x1\.0[12][0-9]*\), overflows FP16 around step (2[1-8][0-9])" \
	<(q fc200.db "SELECT message FROM advice WHERE rule = 'overflow_forecast'")
check_true "report: a scale that backed off at the last steps is said beside the range (final)" \
	grep -Eq "^  loss scale   [0-9.]+ \.\. [0-9.]+ \(final $(q fp16.db "SELECT new_scale FROM loss_scale ORDER BY step DESC, rowid DESC LIMIT 1" | sed 's/\.0$//')\), " <("$AMPPROF" report fp16.db)
check "forecast before the overflow: nothing said of one already" \
	"$(q fc200.db "SELECT count(*) FROM advice WHERE rule = 'overflow_forecast' AND message LIKE '%already%'")" 0
check "forecast after the overflow (fp16.db, past step $S): says it went non-finite already, and when" \
	"$(q fp16.db "SELECT count(*) FROM advice WHERE rule = 'overflow_forecast' AND message LIKE '%rate: % (it went non-finite already at step $S, % step(s) in all)%'") $(q fp16.db "SELECT count(*) FROM advice WHERE rule = 'overflow_forecast'")" "1 1"
"$AMPPROF" report --format=json fc200.db >fc200.json 2>&1
check "forecast in the report's JSON: the nearest first, with its call site" \
	"$("$PY" -c 'import json,sys; f=json.load(open(sys.argv[1]))["forecast"][0]; print(f["name"], f["op"], f["role"], f["last_step"], f["line"] > 0)' fc200.json)" \
	"rate Exp output 200 True"
"$AMPVIEW" --headless --panel=overview --width=120 --height=60 fc200.db >fc200.view 2>&1
check_true "ampview overview lists the forecast" grep -q "overflow forecast: rate: Exp input grows" fc200.view
# healthy runs: nothing forecast to overflow within the run's own length
"$AMPPROF" -q -o mlp60.db -- "$MLP" --precision=amp --steps 60 --log-every 0 >/dev/null 2>&1
check "mlp_fashion amp, 60 steps: no overflow forecast within 60 steps" \
	"$(q mlp60.db "SELECT count(*) FROM forecast WHERE steps_left <= 60")" 0
# the advice's horizon: as many steps as the trend was fitted over.  Up to step 80 the Exp
# 'rate' is forecast (kept in the table) but not warned of: its overflow is further ahead
"$AMPPROF" -q -o fc80.db -- "$UNSTABLE" --precision=fp16 --steps 81 --log-every 0 >/dev/null 2>&1
check "forecast (steps 0..80): 'rate' in the table beyond the horizon, no advice for it" \
	"$(q fc80.db "SELECT count(*) > 0 FROM forecast WHERE name = 'rate' AND steps_left > 100")|$(q fc80.db "SELECT count(*) FROM advice WHERE rule = 'overflow_forecast' AND message LIKE '%rate:%'")" "1|0"

# ---- 12. FP16 readiness of an FP32 run -----------------------------------------------------------
check "unstable fp32 up to step $S: would overflow in FP16 (fp16_ready overflows)" \
	"$(q un_fp32.db "SELECT fp16_ready FROM run_summary")" overflows
check_true "unstable fp32: the readiness advice names the Exp 'rate' from step $S" \
	grep -q "FP16 readiness of this FP32 run: 1 tensor(s) would overflow FP16: rate (Exp, from step $S)" \
	<(q un_fp32.db "SELECT message FROM advice WHERE rule = 'fp16_readiness'")
check "mlp_fashion fp32: needs a loss scale (gradients under FP16's normal range)" \
	"$(q mlp_fp32.db "SELECT fp16_ready FROM run_summary")" needs_loss_scale
check_true "mlp_fashion fp32: the advice says the run needs a loss scale" \
	grep -Eq "gradient\(s\) would underflow without a loss scale: .*; the run needs one \(dynamic scaling, the FP16 default\); a static scale of [0-9]+ would keep" \
	<(q mlp_fp32.db "SELECT message FROM advice WHERE rule = 'fp16_readiness'")
check "half runs get no readiness verdict" "$(q mlp_amp.db "SELECT fp16_ready IS NULL FROM run_summary")" 1
# a --steps range the run never reaches records no op: the run is still not an FP32 one
out=$("$AMPPROF" -f -o past.db --steps=1000-2000 -- "$UNSTABLE" --precision=amp --steps 20 --log-every 0 2>&1)
check "--steps past the run's end: no readiness verdict for an AMP run" \
	"$(q past.db "SELECT fp16_ready IS NULL, (SELECT count(*) FROM advice WHERE rule = 'fp16_readiness') FROM run_summary")" "1|0"
check_true "--steps past the run's end: the summary says the range matched no step" \
	grep -q "no op recorded: --steps=1000-2000 matched no step the run reached" <<<"$out"

# ---- 8. nothing left behind ------------------------------------------------------------------
check "no spool directory left beside the outputs" "$(find "$T" -name '.ampprof-spool-*' | wc -l)" 0
check "nothing new in /dev/shm" "$(comm -13 <(echo "$SHM_BEFORE") <(ls_dir /dev/shm))" ""
check "nothing new in /tmp" "$(comm -13 <(echo "$TMP_BEFORE") <(tmp_amp))" ""

e2e_finish
