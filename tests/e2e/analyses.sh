#!/usr/bin/env bash
# analyses.sh — the analyses of issue 15.  `ampprof diff` on an FP32 and an AMP profile of the same program (mlp_fashion, 20
# training steps each): the rows pair the runs by op type, layer and phase, the figures are the
# databases' own (checked with sqlite3), the biggest movers come first, AMP's casts show as a
# row only B has, and the three formats (text, CSV, JSON) carry the same rows.  ampview's diff
# mode renders the same comparison.  The report's memory section and loss history (JSON), and
# `ampdump --hist`, checked against the database.  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
top=$(cd "$(dirname "$0")/../.." && pwd -P)
cd "$top" || exit 1
AMPPROF=$top/$BUILD/bin/ampprof
AMPVIEW=$top/$BUILD/bin/ampview
AMPDUMP=$top/$BUILD/bin/ampdump
for f in "$AMPPROF" "$AMPVIEW" "$AMPDUMP" "$top/$BUILD/bin/mlp_fashion" "$top/$BUILD/bin/unstable"; do
	[ -x "$f" ] || e2e_abort "$f is missing: run 'make' first"
done
e2e_tmpdir tmp ampdiff-e2e
cd "$tmp" || exit 1
for p in fp32 amp; do
	"$AMPPROF" -q -o $p.db -- "$top/$BUILD/bin/mlp_fashion" --precision=$p --steps 20 > $p.out 2>&1 \
		|| bad "ampprof mlp_fashion --precision=$p: exit $?" "$(tail -n 5 $p.out)"
done
q() { sqlite3 "$1" "$2"; }

out=$("$AMPPROF" diff fp32.db amp.db 2>&1)
check "diff exits 0" $? 0
steps=$(q fp32.db 'SELECT count(*) FROM steps WHERE detail = 1')
grep -q "^A fp32.db: $steps traced steps" <<< "$out" && grep -q '^B amp.db: ' <<< "$out" \
	&& ok "text: both runs named with their traced steps" || bad "text preamble" "$out"
line=$(grep -E '^op +Linear ' <<< "$out")
grep -Eq '^op +Linear +fp32 +fp16 +[0-9]+ +[0-9]+ ' <<< "$line" \
	&& ok "Linear paired: fp32 in A, fp16 in B" || bad "Linear row" "$out"

csv=$("$AMPPROF" diff --format=csv fp32.db amp.db)
check "CSV header" "$(head -1 <<< "$csv")" "kind,name,a_dtype,b_dtype,a_calls,b_calls,a_ms,b_ms,delta_ms,ratio"
# the figures are the profiles' own: Linear's time per traced step on each side
for side in a b; do
	db=fp32.db col=7
	[ $side = b ] && db=amp.db col=8
	want=$(q $db "SELECT printf('%.4f', sum(dur_ns) / 1e6 / (SELECT count(*) FROM steps WHERE detail = 1)) FROM ops WHERE op = 'Linear'")
	got=$(awk -F, '$1 == "op" && $2 == "Linear" { print $'$col' }' <<< "$csv")
	check "Linear ${side}_ms is the profile's time per traced step" "$got" "$want"
done
calls=$(q fp32.db "SELECT count(*) FROM ops WHERE label = 'fc1'")
check "layer fc1: A's calls from the database" "$(awk -F, '$1 == "layer" && $2 == "fc1" { print $5 }' <<< "$csv")" "$calls"
# within each kind, |delta_ms| never grows down the list (JSON: dtype lists hold commas)
"$AMPPROF" diff --format=json fp32.db amp.db | /usr/bin/python3 -c '
import json, sys
rows = json.load(sys.stdin)["rows"]
for a, b in zip(rows, rows[1:]):
    if a["kind"] == b["kind"] and abs(b["delta_ms"]) > abs(a["delta_ms"]) + 1e-9:
        sys.exit(1)' && ok "biggest movers first within op, layer and phase" || bad "order by |delta|" "$csv"
kinds=$(awk -F, 'NR > 1 { print $1 }' <<< "$csv" | uniq | tr '\n' ' ')
check "groupings in order" "$kinds" "op layer phase "
for ph in forward backward optimizer copies step; do
	grep -q "^phase,$ph," <<< "$csv" || bad "phase row $ph missing" "$csv"
done
ok "phase rows: forward, backward, optimizer, copies, step"
casts=$(q amp.db "SELECT count(*) FROM copies WHERE kind = 'cast'")
row=$(grep '^phase,copy cast,' <<< "$csv")
if [ "$casts" -gt 0 ] && [ "$(cut -d, -f5,6,10 <<< "$row")" = "0,$casts,inf" ]; then
	ok "AMP's casts: a row only B has ($casts casts, ratio inf)"
else
	bad "cast row ($casts casts in amp.db)" "$row"
fi

json=$("$AMPPROF" diff --format=json fp32.db amp.db)
if /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["format_version"] == 1 and d["a_steps"] == '"$steps"'
rows = d["rows"]
lin = [r for r in rows if r["kind"] == "op" and r["name"] == "Linear"][0]
assert isinstance(lin["a_ms"], float) and lin["a_dtype"] == "fp32" and lin["b_dtype"] == "fp16"
cast = [r for r in rows if r["name"] == "copy cast"][0]
assert cast["ratio"] is None and cast["ratio_nonfinite"] == "inf"
assert len(rows) == '"$(($(wc -l <<< "$csv") - 1))"'
' <<< "$json"; then
	ok "JSON: numbers as numbers, inf as null + ratio_nonfinite, the rows of the CSV"
else
	bad "JSON" "$json"
fi
out=$("$AMPPROF" diff --kind=layer --limit=2 --format=csv fp32.db amp.db)
check "--kind=layer --limit=2" "$(awk -F, 'NR > 1 { print $1 }' <<< "$out" | tr '\n' ' ')" "layer layer "

# ---- the report's memory section and step history (unstable in fp16: 6 overflows) --------------
"$AMPPROF" -q -o u16.db -- "$top/$BUILD/bin/unstable" --precision=fp16 --steps 260 > u16.out 2>&1 \
	|| bad "ampprof unstable: exit $?" "$(tail -n 5 u16.out)"
for db in amp.db u16.db; do
	peak=$(q $db "SELECT step || ' ' || master_weights FROM memory ORDER BY peak DESC, total DESC, step LIMIT 1")
	line=$("$AMPPROF" report $db | grep '^  memory       at the peak')
	grep -q "at the peak (step ${peak% *}): master_weights " <<< "$line" \
		&& ok "report ($db): memory by category at the peak step ${peak% *}" || bad "report memory line ($db)" "$line"
done
json=$("$AMPPROF" report --format=json u16.db)
want_steps=$(q u16.db 'SELECT count(DISTINCT step) FROM steps')
want_ovf=$(q u16.db "SELECT group_concat(step, ' ') FROM (SELECT step FROM steps WHERE overflow = 1 ORDER BY step)")
want_mem=$(q u16.db "SELECT master_weights + working_copies + activations + grads + optimizer_state FROM memory ORDER BY peak DESC, total DESC, step LIMIT 1")
if /usr/bin/python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
m, h = d["memory"], d["history"]
assert sum(m["at_peak"].values()) == '"$want_mem"', m["at_peak"]
assert m["stride"] == 1 and len(m["steps"]) == '"$want_steps"'
assert h["stride"] == 1 and len(h["steps"]) == '"$want_steps"'
ovf = [s["step"] for s in h["steps"] if s["overflow"]]
assert " ".join(map(str, ovf)) == "'"$want_ovf"'", ovf
first = [s for s in h["steps"] if s["overflow"]][0]
assert first["loss"] is None and first["new_scale"] == first["scale"] / 2, first
assert first["loss_nonfinite"] == "'"$(q u16.db "SELECT loss_state FROM steps WHERE overflow = 1 ORDER BY step LIMIT 1")"'", first
assert all(isinstance(s["scale"], (int, float)) for s in h["steps"])
' <<< "$json"; then
	ok "report JSON: memory at the peak and per step, the loss beside the scale, every overflow ($want_ovf)"
else
	bad "report JSON memory/history" "$(head -c 600 <<< "$json")"
fi

# ---- ampdump --hist: exponent histograms on FP16's range ---------------------------------------
out=$("$AMPDUMP" --hist --format=csv u16.db)
check "hist: one row per tensor name" "$(($(wc -l <<< "$out") - 1))" "$(q u16.db "SELECT count(DISTINCT name) FROM tensor_stats WHERE exp_hist IS NOT NULL")"
got=$(awk -F, '$1 == "rate" { print $4 " " $8 }' <<< "$out")
want=$(q u16.db "SELECT sum(count) || ' ' || sum(nan + inf) FROM tensor_stats WHERE name = 'rate' AND exp_hist IS NOT NULL")
check "hist: rate's values, its overflow zone = its Inf and NaN" "$got" "$want"
out=$("$AMPDUMP" --hist --step=250 --tensor=rate u16.db)
grep -Eq '^ +32  >= 2\^16, inf, nan +overflow +1 ' <<< "$out" && grep -Eq '^ +1  \(0, 2\^-14\) +subnormal ' <<< "$out" \
	&& [ "$(grep -Ec '^ +[0-9]+  \[2\^-?[0-9]+, 2\^-?[0-9]+\) +normal ' <<< "$out")" -eq 30 ] \
	&& ok "hist --tensor: 33 bins, zero, subnormal, 30 normal binades, overflow holding step 250's Inf" \
	|| bad "hist --tensor rate --step 250" "$out"
err=$("$AMPDUMP" --hist --tensor=nope u16.db 2>&1 >/dev/null)
[ $? -eq 1 ] && grep -q "no tensor named 'nope'" <<< "$err" && ok "hist: unknown tensor, exit 1" || bad "hist unknown tensor" "$err"

# the README's transcripts come from tests/transcripts.sh: its marked blocks list its commands
out=$(bash "$top/tests/transcripts.sh" --check 2>&1) && ok "README transcripts: $out" \
	|| bad "README transcripts and tests/transcripts.sh disagree" "$out"

# errors
err=$("$AMPPROF" diff fp32.db 2>&1 >/dev/null)
check "one profile: usage error" $? 2
grep -q 'diff needs two profiles' <<< "$err" || bad "one profile message" "$err"
err=$("$AMPPROF" diff fp32.db nope.db 2>&1 >/dev/null)
rc=$?
[ $rc -eq 6 ] && grep -q "cannot open 'nope.db'" <<< "$err" && ok "missing profile: exit 6, named" \
	|| bad "missing profile (exit $rc)" "$err"
"$AMPPROF" diff --help | grep -q '^usage: ampprof diff' && ok "diff --help" || bad "diff --help"

# ampview's diff mode: the same rows, A as the baseline
out=$("$AMPVIEW" --headless --width=100 --height=40 --diff=fp32.db amp.db 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q 'fp32.db -> amp.db' <<< "$out" \
	&& grep -Eq '^[> ] op +Linear +fp32 +fp16 ' <<< "$out" && grep -Eq 'copy cast .* new' <<< "$out"; then
	ok "ampview --diff: the comparison, Linear fp32 -> fp16, the casts new in B"
else
	bad "ampview --diff (exit $rc)" "$out"
fi
out=$("$AMPVIEW" --headless --width=100 --height=40 --diff=fp32.db --keys=/fc amp.db 2>&1)
rows=$(grep -Ec '^[> ] (op|layer|phase) ' <<< "$out")
fc=$(grep -Ec '^[> ] layer +fc[0-9] ' <<< "$out")
[ "$rows" -eq "$fc" ] && [ "$fc" -eq 3 ] && ok "ampview --diff: / filters the rows" \
	|| bad "diff filter ($rows rows, $fc fc)" "$out"
e2e_finish
