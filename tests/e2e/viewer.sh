#!/usr/bin/env bash
# viewer.sh — ampview end to end: headless renders of every panel against golden screens,
# clear errors on bad input, and the terminal itself driven in tmux (send-keys, then
# capture-pane -e): gauge colours, the loss-scale -> anomaly drill-down, resize, escape
# sequences planted in a label, the no-colour fallback and restoring the terminal on a signal.
# Golden profiles come from build/tests/gen_profile (synthetic, seeded); then real runs of
# unstable and mlp_fashion recorded by ampprof are rendered too: their facts are asserted and,
# with durations, shares and source line numbers masked, the deterministic panels of the
# unstable run are goldens as well (real-*).  UPDATE_GOLDEN=1 rewrites the goldens.  Ends with
# "N passed, N failed"; exits 1 on any failure.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
top=$(cd "$(dirname "$0")/../.." && pwd -P) # physical: as compilers record source paths
cd "$top" || exit 1
AMPVIEW=$top/$BUILD/bin/ampview
AMPPROF=$top/$BUILD/bin/ampprof
GEN=$top/$BUILD/tests/gen_profile
GOLDEN=$top/tests/golden/viewer
for f in "$AMPVIEW" "$GEN" "$AMPPROF" "$top/$BUILD/bin/unstable" "$top/$BUILD/bin/mlp_fashion"; do
	[ -x "$f" ] || e2e_abort "$f is missing: run 'make' first"
done
sock=ampview-test-$$
e2e_on_exit 'tmux -L "$sock" kill-server 2>/dev/null'
e2e_tmpdir tmp ampview-e2e

# ---- profiles ---------------------------------------------------------------------------------
gen() { "$GEN" --quiet --output="$tmp/$1" "${@:2}" || bad "gen_profile $*"; }
gen ex.db --growth=4                                  # the example: 3 overflows, scale leaves the band
gen low.db --fp16=0.55 --copy=0.22 --overflows=0      # FP16 share low, copies high
gen crash.db --crashed --steps=12 --ops=600
gen unfin.db --unfinalized --steps=12 --ops=600
gen evil.db --evil-label='evil\e]2;PWNED\a\e[5mBLINK\e[0m' \
	--command='./train \e[2J\e]0;PWNED\a --epochs 1'
gen abs.db --growth=4 --source-dir=/home/ada/ampkit  # absolute call-site paths
gen empty.db --empty
gen newer.db --newer-schema
# a run still being recorded (end 'collecting', its output lock held as its collector holds it
# while it records), and a static link's call sites (every one __libc_start_call_main)
cp "$tmp/unfin.db" "$tmp/live.db"
sqlite3 "$tmp/live.db" "INSERT OR REPLACE INTO meta VALUES ('end', 'collecting'), ('pid', '$$'),
	('host', '$(hostname)')"
"$GEN" --hold=600 --output="$tmp/live.db" >"$tmp/hold.out" 2>&1 &
holder=$!
e2e_on_exit 'kill "$holder" 2>/dev/null'
for _ in $(seq 200); do grep -q held "$tmp/hold.out" 2>/dev/null && break; sleep 0.05; done
cp "$tmp/crash.db" "$tmp/crashq.db" # a frame the symbolizer could not name: its module kept
sqlite3 "$tmp/crashq.db" "UPDATE crashes SET frames = '?? ??:0 (libfoo.so+0x1a2b)'"
cp "$tmp/ex.db" "$tmp/static.db"
sqlite3 "$tmp/static.db" "UPDATE callsites SET function = '__libc_start_call_main',
	file = './csu/../sysdeps/x86/libc-start.c', line = 58"
# call sites never named (a collector killed before finalize symbolized them)
cp "$tmp/ex.db" "$tmp/unnamed.db"
sqlite3 "$tmp/unnamed.db" "UPDATE callsites SET function = NULL, file = NULL, line = NULL"
printf 'just text\n' > "$tmp/text.db"
sqlite3 "$tmp/other.db" 'CREATE TABLE t(x); INSERT INTO t VALUES (1);'

# ---- golden headless renders ------------------------------------------------------------------
# name | profile | arguments
goldens='overview|ex.db|--panel=overview
ops|ex.db|--panel=ops
ops-label|ex.db|--panel=ops --keys=v
ops-drill|ex.db|--panel=ops --keys=<enter>
ops-sort-filter|ex.db|--panel=ops --keys=c/exp<enter>
steps|ex.db|--panel=steps
steps-jump|ex.db|--panel=steps --keys=:30<enter>
scale|ex.db|--panel=scale
anomalies|ex.db|--panel=anomalies
anomaly-step|ex.db|--panel=scale --keys=<enter>
callsites|ex.db|--panel=callsites
callsites-anomalies|ex.db|--panel=callsites --keys=a
callsite-frames|ex.db|--panel=callsites --keys=<enter>
help|ex.db|--panel=overview --keys=?
wide-overview|ex.db|--panel=overview --width=120 --height=30
utf8-overview|ex.db|--panel=overview
low-overview|low.db|--panel=overview
low-ops|low.db|--panel=ops --keys=v
crash-overview|crash.db|--panel=overview
crash-steps|crash.db|--panel=steps
unfinalized-overview|unfin.db|--panel=overview
evil-ops|evil.db|--panel=ops --keys=v/evil<enter>
evil-drill|evil.db|--panel=ops --keys=v/evil<enter><enter>
abs-callsites|abs.db|--panel=callsites
abs-frames|abs.db|--panel=callsites --keys=<enter>
abs-anomalies|abs.db|--panel=anomalies
memory|ex.db|--panel=memory
diff|ex.db|--diff=low.db
diff-filter|ex.db|--diff=low.db --keys=/phase<enter>
scale-next-wraps|ex.db|--panel=scale --keys=nnn
scale-prev-wraps|ex.db|--panel=scale --keys=N
steps-next|ex.db|--panel=steps --keys=nn
steps-prev-wraps|ex.db|--panel=steps --keys=N
steps-filter|ex.db|--panel=steps --keys=/overflow<enter>
anomalies-next-wraps|ex.db|--panel=anomalies --keys=nnn
anomalies-filter|ex.db|--panel=anomalies --keys=/nothing<enter>
anomaly-step-next|ex.db|--panel=anomalies --keys=<enter>NN
callsites-filter|ex.db|--panel=callsites --keys=/model
narrow-callsites|abs.db|--panel=callsites --width=60
narrow-anomaly-step|ex.db|--panel=scale --keys=<enter> --width=60
narrow-scale|ex.db|--panel=scale --keys=n --width=48
live-overview|live.db|--panel=overview
static-overview|static.db|--panel=overview
static-callsites|static.db|--panel=callsites'
# golden NAME EXIT OUTPUT: compare a render with tests/golden/viewer/NAME.txt
golden() {
	if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
		printf '%s\n' "$3" > "$GOLDEN/$1.txt"
	fi
	if [ "$2" -ne 0 ]; then
		bad "golden $1: exit $2" "$3"
	elif ! diff -u "$GOLDEN/$1.txt" <(printf '%s\n' "$3") > "$tmp/diff" 2>&1; then
		bad "golden $1 differs (UPDATE_GOLDEN=1 to accept)" "$(cat "$tmp/diff")"
	else
		ok "golden $1"
	fi
}
while IFS='|' read -r name db args; do
	loc=C
	case $name in utf8-*) loc=C.UTF-8 ;; esac
	# shellcheck disable=SC2086
	out=$(cd "$tmp" && LC_ALL=$loc "$AMPVIEW" --headless $args "$db" 2>&1)
	golden "$name" $? "$out"
done <<< "$goldens"

# ---- what the renders must say, golden or not -------------------------------------------------
hl() { (cd "$tmp" && "$AMPVIEW" --headless "$@" 2>&1); }
out=$(hl --panel=overview low.db)
grep -q 'FP16 share .*LOW: below 70 %' <<< "$out" && grep -q 'Copy share .*HIGH: above 15 %' <<< "$out" \
	&& ok "low.db: FP16 flagged low, copies flagged high" || bad "low.db verdicts" "$out"
out=$(hl --panel=overview ex.db)
grep -q 'FP16 share .*ok: at least 70 %' <<< "$out" && grep -q 'Copy share .*ok: at most 15 %' <<< "$out" \
	&& ok "ex.db: both gauges within thresholds" || bad "ex.db verdicts" "$out"
out=$(hl --panel=overview --fp16-threshold=90 --memcpy-threshold=5 ex.db)
grep -q 'LOW: below 90 %' <<< "$out" && grep -q 'HIGH: above 5 %' <<< "$out" && grep -q 'threshold from option' <<< "$out" \
	&& ok "thresholds from options override the profile's" || bad "threshold options" "$out"
out=$(hl --panel=ops --keys=v low.db)
grep -q 'fp32\*' <<< "$out" && ok "FP32 rows of white-list ops are marked" || bad "candidate marks" "$out"
out=$(hl --panel=overview crash.db)
grep -q 'INCOMPLETE' <<< "$out" && grep -q 'crash, SIGSEGV' <<< "$out" \
	&& ok "crashed run opens and is marked incomplete" || bad "crashed run" "$out"
out=$(hl --panel=steps crash.db)
grep -q 'unended' <<< "$out" && ok "crashed run: its last step is browsable, unended" || bad "crash steps" "$out"
out=$(hl --panel=overview --width=100 crashq.db)
grep -q '^ Crashed     SIGSEGV in ?? ??:0 (libfoo.so+0x1a2b) . backtrace: ampprof report$' <<< "$out" \
	&& ok "crashed in an unnamed frame: its module and offset shown" || bad "unnamed crash frame" "$out"
# a help taller than the screen scrolls: the panel's last key comes into view
out=$(hl --panel=scale --width=80 --height=16 --keys='?' ex.db)
if grep -q 'Up/Down scroll' <<< "$out" && ! grep -q 'anomalies of the overflow under' <<< "$out"; then
	out=$(hl --panel=scale --width=80 --height=16 --keys='?jjjjjjjjjjjjjjjjjjjj' ex.db)
	grep -q 'anomalies of the overflow under the cursor' <<< "$out" && grep -q ' 17/17 ' <<< "$out" \
		&& ok "help at 80x16: scrolls to the Scale panel's last key" || bad "help scrolled" "$out"
else
	bad "help at 80x16: says it scrolls, the panel's keys cut" "$out"
fi
out=$(hl --panel=overview unfin.db)
grep -q 'not finalized' <<< "$out" && ok "unfinalized profile: summaries computed" || bad "unfinalized" "$out"
out=$(hl --panel=ops --keys='v/evil<enter><enter>' evil.db)
if grep -q 'evil?]2;PWNED??\[5mBLINK' <<< "$out" && ! grep -q $'\e' <<< "$out" && ! grep -q $'\a' <<< "$out"; then
	ok "headless: escape sequences in a label are neutralized"
else
	bad "headless sanitizing" "$(cat -v <<< "$out")"
fi
for p in overview ops steps scale anomalies callsites memory hist diff; do
	out=$(hl --panel=$p --width=200 --height=60 ex.db) && [ "$(wc -l <<< "$out")" -eq 60 ] \
		&& [ "$(awk '{ if (length($0) > 200) n++ } END { print n + 0 }' <<< "$out")" -eq 0 ] \
		|| { bad "panel $p at 200x60" "$out"; continue; }
	out=$(hl --panel=$p --width=40 --height=10 ex.db) && [ "$(wc -l <<< "$out")" -eq 10 ] \
		|| { bad "panel $p at 40x10" "$out"; continue; }
	ok "panel $p renders at 200x60 and 40x10"
done
# at 40 columns the tables drop columns, never write one over the other
out=$(hl --panel=ops --width=40 --height=10 ex.db)
grep -q '^  OP  *DTYPE  *CALLS  *TIME  *SHARE$' <<< "$out" \
	&& ok "ops at 40 columns: OP, DTYPE, CALLS, TIME, SHARE apart (FLOPS, MEAN dropped)" \
	|| bad "ops at 40 columns" "$out"

out=$(hl --panel=overview live.db)
grep -q 'BEING WRITTEN' <<< "$out" && ! grep -q 'INCOMPLETE' <<< "$out" \
	&& ok "a profile still being recorded says so, not INCOMPLETE" || bad "live profile" "$out"
kill "$holder"; wait "$holder" 2>/dev/null
out=$(hl --panel=overview live.db)
grep -q 'INCOMPLETE' <<< "$out" && ! grep -q 'BEING WRITTEN' <<< "$out" \
	&& ok "its collector gone (the lock with it), the same profile is INCOMPLETE, whatever its pid" \
	|| bad "dead live profile" "$out"
out=$(hl --panel=overview static.db)
grep -q 'libamprt statically' <<< "$out" && grep -q 'libamprt.so' <<< "$out" \
	&& ok "every call site in __libc_start_call_main: the warning says how to link" \
	|| bad "static-link warning" "$out"
out=$(hl --panel=overview unnamed.db)
grep -q 'every call site is unnamed' <<< "$out" && ! grep -q 'statically' <<< "$out" \
	&& ok "call sites never named: said so, not blamed on a static link" \
	|| bad "unnamed call sites" "$out"
out=$(hl --panel=overview ex.db)
! grep -q 'statically' <<< "$out" && ok "no static-link warning on a profile with real call sites" \
	|| bad "spurious static warning" "$out"
# every list panel: / opens a filter prompt, the keys typed are the filter, not commands
for p in ops steps anomalies callsites memory hist diff; do
	out=$(hl --panel=$p --diff=low.db '--keys=/qv1' ex.db)
	grep -q 'filter: /qv1_' <<< "$out" || { bad "panel $p: / filter prompt" "$out"; continue; }
	ok "panel $p: / opens the filter; q, v and 1 are its text"
done
# n wraps round the overflows: 3 overflows in ex.db, the fourth n is the first again
first=$(hl --panel=scale --keys=n ex.db | grep -o 'step [0-9]*: ' | head -1)
again=$(hl --panel=scale --keys=nnn ex.db | grep -o 'step [0-9]*: ' | head -1)
msg=$(hl --panel=scale --keys=nnn ex.db | tail -1)
[ -n "$first" ] && [ "$first" != "$again" ] && grep -q 'wrapped to the first' <<< "$msg" \
	&& ok "scale: n walks the overflow markers and wraps ($first)" || bad "scale n/N" "$msg"

# ---- bad input --------------------------------------------------------------------------------
expect_err() { # name, exit code, message pattern, args...
	local name=$1 code=$2 pat=$3
	shift 3
	err=$( (cd "$tmp" && "$AMPVIEW" "$@") 2>&1 >/dev/null)
	rc=$?
	if [ $rc -eq "$code" ] && grep -q -- "$pat" <<< "$err"; then ok "$name"; else bad "$name (exit $rc)" "$err"; fi
}
expect_err "missing file" 1 "^ampview: cannot open 'nope.db': no such file" --headless nope.db
expect_err "text file" 1 "^ampview: cannot open 'text.db': not an SQLite database, not an ampkit profile" --headless text.db
expect_err "other SQLite file" 1 "^ampview: cannot open 'other.db': not an ampkit profile" --headless other.db
expect_err "newer schema" 1 "^ampview: cannot open 'newer.db': profile schema version [0-9][0-9]* is newer" --headless newer.db
expect_err "empty profile" 1 "^ampview: cannot open 'empty.db': the profile holds no steps" --headless empty.db
expect_err "--diff with a missing baseline" 1 "^ampview: --diff: cannot open 'nope.db': no such file" --headless --diff=nope.db ex.db
expect_err "unknown panel" 2 "unknown panel 'bogus'" --headless --panel=bogus ex.db
expect_err "bad width" 2 "bad --width" --headless --width=x ex.db
expect_err "unknown option" 2 "unknown option '--frobnicate'" --frobnicate
expect_err "not a terminal" 1 "must be a terminal" ex.db
out=$(hl --panel=steps '--keys=:99999<enter>' ex.db)
grep -q "no step 99999: the run's steps are" <<< "$out" && ok "steps: a jump past the run says so" || bad "steps jump past the end" "$out"
out=$(hl --panel=steps '--keys=:x<enter>' ex.db)
grep -q "no jump: type the step's number" <<< "$out" && ok "steps: a jump without digits says so" || bad "steps jump without digits" "$out"
expect_err "--keys without --headless" 2 "--keys is for --headless" --keys=3 ex.db
expect_err "--width without --headless" 2 "--width is for --headless" --width=50 ex.db
out=$("$AMPVIEW" --help) && grep -q '^usage: ampview' <<< "$out" && ok "--help on stdout, exit 0" || bad "--help" "$out"
out=$("$AMPVIEW" --version) && grep -q '^ampview ' <<< "$out" && ok "--version" || bad "--version" "$out"

# ---- real profiles: unstable (FP16 overflow) and mlp_fashion (AMP) under ampprof ---------------
# Timings vary from run to run, so these renders are checked for facts; the panels of the
# unstable run that hold no timing (loss scale, anomalies, a step's tensors) are goldens once
# the checkout's path and the source line numbers are masked, and the steps and ops panels
# once durations, shares and the bars are masked as well.  The numerics are seeded and the
# same for every kernel set that computes fp16 in FP32 (avx512, avx2, scalar); the native
# avx512-fp16 GEMM sums in fp16 blocks, another trajectory, so where the CPU has AVX-512 the
# unstable runs take the avx512 set (the same on both CPU classes), else the default.
u16_kernels=
[ "$EMU_KERNELS" = avx512 ] && u16_kernels=avx512
(cd "$tmp" && AMP_KERNELS=$u16_kernels "$AMPPROF" -q -o u16.db -- "$top/$BUILD/bin/unstable" \
	--precision=fp16 --steps 260 > u16.out 2>&1) || bad "ampprof unstable: exit $?" "$(tail -n 5 "$tmp/u16.out")"
(cd "$tmp" && "$AMPPROF" -q -o mlp.db -- "$top/$BUILD/bin/mlp_fashion" --precision=amp --steps 30 \
	> mlp.out 2>&1) || bad "ampprof mlp_fashion: exit $?" "$(cat "$tmp/mlp.out")"
q() { sqlite3 "$tmp/$1" "$2"; }
hl80() { hl --width=80 --height=24 "$@"; }
# the example's documented overflow step, and the origin's call site as the profile records it
S=$(AMP_KERNELS=$u16_kernels "$top/$BUILD/bin/unstable" --precision=fp16 --steps 1 --log-every 0 --json |
	sed -n 's/.*"documented_overflow_step":\([0-9]*\).*/\1/p')
site=$(q u16.db "SELECT c.file || '|' || c.line FROM tensor_stats t JOIN callsites c
	ON c.id = t.callsite WHERE t.origin = 1 ORDER BY t.step, t.seq LIMIT 1")
ofile=${site%|*} oline=${site#*|}
if [ -n "$S" ] && [ "$(q u16.db 'SELECT min(step) FROM steps WHERE overflow = 1')" = "$S" ] \
	&& [ "$ofile" = "$top/examples/unstable.c" ] && sed -n "${oline}p" "$ofile" | grep -q 'amp_exp('; then
	ok "unstable: first overflow at the documented step $S, origin at examples/unstable.c:$oline (amp_exp)"
else
	bad "unstable profile: step '$S', origin '$site'" "$(sed -n "${oline:-1}p" "$ofile" 2>&1)"
fi
src=examples/unstable.c:$oline
for p in overview ops steps scale anomalies callsites memory hist; do
	for db in u16.db mlp.db; do
		out=$(hl80 --panel=$p $db) && [ "$(wc -l <<< "$out")" -eq 24 ] \
			&& [ "$(awk '{ if (length($0) > 80) n++ } END { print n + 0 }' <<< "$out")" -eq 0 ] \
			|| bad "real $db: panel $p at 80x24" "$out"
	done
done
ok "real profiles: every panel renders at 80x24"
out=$(hl --panel=hist --width=40 --height=10 mlp.db)
grep -q '^  TENSOR  *DTYPE  *VALUES OVERFLOW$' <<< "$out" \
	&& ok "hist at 40 columns: TENSOR, DTYPE, VALUES, OVERFLOW apart" || bad "hist at 40 columns" "$out"
# advice_detail: the rows under the advice list that spell out the selected advice, joined
advice_detail() {
	awk '/^ Advice \(/ { a = 1; next } a && /^$/ { d = 1; next }
		d && (/^   evidence:/ || !/^   /) { exit } d { sub(/^   /, ""); printf "%s%s", sep, $0; sep = " " }'
}
# Enter on an advice that names a call site but no step: the Sites panel, on that site
pos=$(q u16.db "SELECT n FROM (SELECT row_number() OVER (ORDER BY CASE severity WHEN 'error'
	THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, id) - 1 AS n, step, callsite FROM advice)
	WHERE step IS NULL AND callsite IS NOT NULL LIMIT 1")
if [ -n "$pos" ]; then
	want=$(q u16.db "SELECT substr(c.file, length(rtrim(c.file, replace(c.file, '/', ''))) + 1)
		|| ':' || c.line FROM callsites c WHERE c.id = (SELECT callsite FROM (SELECT
		row_number() OVER (ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1
		ELSE 2 END, id) - 1 AS n, callsite FROM advice) WHERE n = $pos)")
	downs=$(for _ in $(seq "$pos"); do printf '<down>'; done)
	out=$(hl --width=160 --height=40 "--keys=$downs<enter>" u16.db)
	grep -Eq "^(▶|>) .*$want " <<< "$out" && ok "advice -> Enter: the Sites panel selects its call site ($want)" ||
		bad "advice call site not selected (want $want)" "$out"
else
	bad "u16.db has no advice with a call site and no step" "$(q u16.db 'SELECT rule, step, callsite FROM advice')"
fi
out=$(hl80 --panel=overview u16.db)
msg=$(q u16.db "SELECT message FROM advice ORDER BY CASE severity WHEN 'error' THEN 0
	WHEN 'warning' THEN 1 ELSE 2 END, id LIMIT 1")
full=$(advice_detail <<< "$out")
if grep -Eq '^ Run +(\.\.\.|/).*/unstable --precision=fp16 --steps 260$' <<< "$out" \
	&& grep -Eq '^ Steps +260 \. [0-9]+ overflow' <<< "$out" \
	&& grep -Eq '^ FP16 share +[0-9.]+ % +[#.|]+ +(ok: at least|LOW: below) 70 %' <<< "$out" \
	&& grep -q "Non-finite  first at step $S: Exp output (rate)" <<< "$out" \
	&& grep -Eq "at (.*/)?$src in main" <<< "$out" \
	&& { { [ ${#msg} -le 68 ] && grep -qF "$msg" <<< "$out"; } \
		|| { [ -n "$full" ] && [ "${msg#"$full"}" != "$msg" ]; }; }; then
	ok "real overview: command, steps, FP16 gauge, origin, the first advice spelled out"
else
	bad "real overview (unstable), advice '$full'" "$out"
fi
n=$(q mlp.db 'SELECT count(*) FROM steps')
k=$(q mlp.db 'SELECT count(*) FROM steps WHERE loss IS NULL AND overflow = 0')
out=$(hl80 --panel=overview mlp.db)
lossless= # evaluation batches are steps without a loss
[ "$k" -gt 0 ] && lossless="\\($k without a loss\\) "
if [ $((n - k)) -eq 30 ] && grep -Eq '^ Run +(\.\.\.|/).*/mlp_fashion --precision=amp --steps 30$' <<< "$out" \
	&& grep -Eq "^ Steps +$n $lossless\\. 0 overflow" <<< "$out" \
	&& grep -Eq '^ FP16 share +[0-9.]+ % +[#.|]+ +(ok: at least|LOW: below) 70 %' <<< "$out" \
	&& grep -q 'Non-finite  none recorded' <<< "$out"; then
	ok "real overview (mlp_fashion): 30 training steps and $k evaluation steps told apart"
else
	bad "real overview (mlp_fashion): $n steps, $k without a loss" "$out"
fi
out=$(hl80 --panel=scale --keys='<enter>' u16.db)
if grep -q "^ Step $S " <<< "$out" && grep -Eq '^ Origin  Exp \(seq [0-9]+\) output rate: [1-9][0-9]* Inf' <<< "$out" \
	&& grep -Eq "^ +at (.*/)?$src in main" <<< "$out"; then
	ok "real loss scale -> Enter: step $S, origin Exp 'rate' at $src"
else
	bad "real loss scale -> Enter" "$out"
fi
for db in u16.db mlp.db; do
	out=$(hl80 --panel=ops $db)
	grep -Eq '^[> ] Linear +fp16 +[0-9]' <<< "$out" && ok "real ops ($db): Linear runs in fp16" \
		|| bad "real ops ($db)" "$out"
done
# the ops panel's drill-down: the op type's duration statistics, as op_summary holds them
want=$(q u16.db "SELECT median_ns || ' ' || min_ns || ' ' || max_ns FROM op_summary WHERE op = 'Linear' AND exec_dtype = 'fp16'")
# (filtered to Linear: on a loaded machine another op's total can pass it)
out=$(hl80 --panel=ops --keys='/Linear<enter><enter>' u16.db)
if [ -n "$want" ] && grep -Eq '^ Linear fp16: median [0-9.]+ (ns|us|ms) . min [0-9.]+ (ns|us|ms) . max [0-9.]+ (ns|us|ms) . stddev ' <<< "$out"; then
	ok "real ops drill-down: Linear's median, min, max and stddev ($want ns in op_summary)"
else
	bad "ops drill-down statistics ('$want')" "$out"
fi
out=$(hl80 --panel=anomalies u16.db)
if grep -Eq "^[> ] +$S +[0-9]+ +yes +[1-9][0-9]* +Exp rate $src\$" <<< "$out" \
	&& [ "$(grep -Ec '^[> ] +[0-9]+ +[0-9]+ +(yes|no) ' <<< "$out")" = "$(q u16.db 'SELECT count(*) FROM steps WHERE overflow = 1')" ]; then
	ok "real anomalies: step $S, skipped, origin Exp rate at $src; one row per overflow step"
else
	bad "real anomalies" "$out"
fi
out=$(hl80 --panel=callsites u16.db)
rows=$(grep -Ec '^[> ] examples/unstable\.c:[0-9]+ ' <<< "$out")
want=$(q u16.db "SELECT min(count(*), 19) FROM callsites")
if [ "$rows" = "$want" ] && grep -Eq "^[> ] $src +Exp +260 .* 6 +6\$" <<< "$out" \
	&& grep -q 'paths in '"$top"/ <<< "$out" && ! grep -q '^[> ] ~' <<< "$out"; then
	ok "real call sites: $rows rows of examples/unstable.c lines, none cut, the origin's line marked"
else
	bad "real call sites ($rows rows, want $want)" "$out"
fi
out=$(hl80 --panel=callsites mlp.db)
grep -Eq '^[> ] examples/mlp_fashion\.c:[0-9]+ +backward ' <<< "$out" \
	&& grep -Eq '^[> ] examples/mlp_fashion\.c:[0-9]+ +Optimizer ' <<< "$out" \
	&& ok "real call sites (mlp_fashion): backward and optimizer told apart on one line" \
	|| bad "real call sites (mlp_fashion)" "$out"
# masked goldens: name | arguments | mask (lines: the checkout's path, so that a full path and
# one shortened for a deep checkout read the same, and line numbers; times: also durations,
# shares and the step bars)
mask() {
	local m=$1
	sed -E -e "s#$top/##g" -e 's/(\.c):[0-9]+/\1:N/g' |
		if [ "$m" = times ]; then
			sed -E -e 's/ +[0-9.]+ (ns|us|ms|s)( |$)/ T\2/g' -e 's/ +[0-9.]+%/ P/g' \
				-e 's/^([> ] +[0-9]+ .*[^#=~. ]) +[#=~.]+$/\1/'
		else
			cat
		fi
}
real='real-unstable-scale|--panel=scale|lines
real-unstable-scale-short|--panel=scale --height=14|lines
real-unstable-scale-tiny|--panel=scale --height=11|lines
real-unstable-anomalies|--panel=anomalies|lines
real-unstable-anomaly-step|--panel=scale --keys=<enter>|lines
real-unstable-steps|--panel=steps --keys=:250<enter>|times
real-unstable-ops|--panel=ops --keys=f|times
real-unstable-hist|--panel=hist|lines
real-unstable-hist-rate|--panel=hist --keys=/rate<enter>|lines
real-unstable-memory|--panel=memory|lines'
while IFS='|' read -r name args m; do
	# shellcheck disable=SC2086
	out=$(hl80 $args u16.db)
	rc=$?
	golden "$name" $rc "$(mask "$m" <<< "$out")"
done <<< "$real"

# ---- the terminal, in tmux --------------------------------------------------------------------
if ! command -v tmux > /dev/null; then
	e2e_abort "tmux is not installed"
fi
T() { tmux -L "$sock" -f /dev/null "$@"; }
# start NAME TERM LOCALE PROFILE: ampview in a fresh 80x24 window; its exit status is kept
start() {
	T kill-session -t "$1" 2>/dev/null
	T new-session -d -s "$1" -x 80 -y 24 \
		"cd '$tmp' && env TERM=$2 LC_ALL=$3 '$AMPVIEW' $4; echo \"EXIT=\$?\"; sleep 30"
	wait_for "$1" 'ampview'
}
# wait_for SESSION TEXT: until the pane shows TEXT (3 s at most)
wait_for() {
	for _ in $(seq 60); do
		T capture-pane -p -t "$1" 2>/dev/null | grep -q -- "$2" && return 0
		sleep 0.05
	done
	return 1
}
keys() { T send-keys -t "$@"; sleep 0.3; }
cap() { T capture-pane -p -e -t "$1"; }
plain() { T capture-pane -p -t "$1"; }
# the red foreground as tmux reports it: 31, or a 256-colour 1/9/196
red='(\[|;)(31|38;5;(1|9|196))m'
green='(\[|;)(32|38;5;(2|10|46))m'

start low xterm-256color C.UTF-8 low.db
line=$(cap low | grep 'FP16 share')
grep -Eq "$red" <<< "$line" && ! grep -Eq "$green" <<< "$line" \
	&& ok "(a) FP16 share below 70 % is drawn in red" || bad "(a) red FP16 gauge" "$(cat -v <<< "$line")"
line=$(cap low | grep 'Copy share')
grep -Eq "$red" <<< "$line" && grep -q 'HIGH' <<< "$line" \
	&& ok "(b) copy share above 15 % is drawn in red" || bad "(b) red copy gauge" "$(cat -v <<< "$line")"
keys low q
wait_for low 'EXIT=0' && ok "q quits with status 0" || bad "q" "$(plain low)"

# a terminal that cannot place the cursor: refused with the headless hint, not a blank screen
start dumb dumb C.UTF-8 ex.db
wait_for dumb 'EXIT=' && plain dumb | grep -q 'TERM=dumb) cannot place the cursor' &&
	plain dumb | grep -q 'EXIT=1' && ok "TERM=dumb: refused (exit 1), the reason said" ||
	bad "TERM=dumb" "$(plain dumb)"

# a filter typed in UTF-8 on the terminal matches as the same text given to --keys does
cp "$tmp/ex.db" "$tmp/u8.db"
sqlite3 "$tmp/u8.db" "UPDATE op_sigs SET label = 'débit' WHERE id = (SELECT min(id) FROM op_sigs)"
start u8 xterm-256color C.UTF-8 u8.db
keys u8 2
keys u8 v
keys u8 /
T send-keys -t u8 -l 'débit'; sleep 0.3
keys u8 Enter
plain u8 | grep -q 'filter: débit' && ! plain u8 | grep -q 'no rows match' &&
	plain u8 | grep -q '^▶.* débit ' && ok "a UTF-8 filter typed on the terminal matches" ||
	bad "UTF-8 filter in the terminal" "$(plain u8)"

start ex xterm-256color C.UTF-8 ex.db
line=$(cap ex | grep 'FP16 share')
grep -Eq "$green" <<< "$line" && ! grep -Eq "$red" <<< "$line" \
	&& ok "(a) FP16 share at or above 70 % is drawn in green" || bad "(a) green FP16 gauge" "$(cat -v <<< "$line")"
keys ex 4
keys ex Enter
screen=$(plain ex)
if grep -q 'Origin  Exp (seq 501) output blocks.0.attn.exp' <<< "$screen" \
	&& grep -q 'at examples/model.c:88 in attention_forward' <<< "$screen"; then
	ok "(c) loss scale -> Enter on a marker shows the origin op and its source line"
else
	bad "(c) origin from the loss-scale panel" "$screen"
fi
keys ex Escape
plain ex | grep -q 'Loss scale, log2 axis' && ok "Esc goes back to the loss-scale panel" || bad "Esc back" "$(plain ex)"
# n / N in the terminal: the next overflow marker, and round from the last to the first
keys ex n
keys ex n
keys ex n
plain ex | grep -q 'wrapped to the first overflow marker' && ok "tmux: n wraps from the last overflow to the first" \
	|| bad "tmux n wrap" "$(plain ex)"
keys ex N
plain ex | grep -q 'wrapped to the last overflow marker' && ok "tmux: N wraps back to the last" \
	|| bad "tmux N wrap" "$(plain ex)"
# / in the call sites: the letters are the filter (not 'a': rank by anomalies, not 'q': quit)
keys ex 6
keys ex / m o d e l q
screen=$(plain ex)
if grep -q 'filter: /modelq_' <<< "$screen" && grep -q 'ranked by time' <<< "$screen"; then
	ok "tmux: / in Call sites types a filter; a and q are text"
else
	bad "tmux / in call sites" "$screen"
fi
keys ex BSpace
keys ex Enter
screen=$(plain ex)
rows=$(grep -Ec '^[> ] examples/' <<< "$screen")
model=$(grep -Ec '^[> ] examples/model\.c:' <<< "$screen")
grep -q 'filter: model' <<< "$screen" && [ "$rows" -ge 1 ] && [ "$rows" = "$model" ] \
	&& ok "tmux: Enter keeps the filter ($rows call sites)" || bad "tmux filter kept" "$screen"
keys ex Escape
keys ex 3
keys ex / o v e r
keys ex Enter
screen=$(plain ex)
n=$(grep -Ec '^[> ] +[0-9]+ ' <<< "$screen")
ovf=$(grep -Ec '^[> ] +[0-9]+ .* O' <<< "$screen")
[ "$n" -ge 1 ] && [ "$n" = "$ovf" ] && ok "tmux: / in Steps keeps the overflow steps ($n)" \
	|| bad "tmux steps filter ($n rows, $ovf overflow)" "$screen"
keys ex Escape
keys ex 4
keys ex '?'
plain ex | grep -q 'Keys (any key closes)' && ok "? shows the help overlay" || bad "help overlay" "$(plain ex)"
keys ex Space
keys ex 1
# (d) resize: the pane must equal a headless render of the same size
for size in 100x30 80x24 132x40; do
	T resize-window -t ex -x "${size%x*}" -y "${size#*x}"
	sleep 0.4
	got=$(plain ex | sed 's/ *$//')
	want=$(cd "$tmp" && LC_ALL=C.UTF-8 "$AMPVIEW" --headless --width="${size%x*}" --height="${size#*x}" ex.db | sed 's/ *$//')
	if [ "$got" = "$want" ]; then
		ok "(d) after a resize to $size the layout matches the headless render"
	else
		bad "(d) resize to $size" "$(diff <(echo "$want") <(echo "$got"))"
	fi
done
keys ex q

start real xterm-256color C.UTF-8 u16.db
keys real 4
keys real Enter
screen=$(plain real)
if grep -Eq "Origin  Exp \(seq [0-9]+\) output rate" <<< "$screen" && grep -Eq "at (.*/)?$src in main" <<< "$screen"; then
	ok "(c) real unstable run: loss scale -> Enter shows Exp 'rate' at $src"
else
	bad "(c) origin from the loss-scale panel, real profile" "$screen"
fi
keys real q

start evil xterm-256color C.UTF-8 evil.db
keys evil 2
keys evil v
keys evil / e v i l Enter
keys evil Enter
screen=$(cap evil)
title=$(T display-message -p -t evil '#{pane_title}')
if grep -q 'evil?]2;PWNED??\[5mBLINK' <<< "$(plain evil)" && ! grep -q $'\e\\[5m' <<< "$screen" \
	&& ! grep -q PWNED <<< "$title"; then
	ok "(e) an escape sequence planted in an op label is neutralized"
else
	bad "(e) planted escapes (title '$title')" "$(cat -v <<< "$screen")"
fi
keys evil 1
plain evil | grep -q 'Run *./train ?\[2J?]0;PWNED? --epochs 1' && ! T display-message -p -t evil '#{pane_title}' | grep -q PWNED \
	&& ok "(e) escapes in the command line are neutralized too" || bad "(e) command" "$(plain evil)"
keys evil q

start mono vt100 C low.db
screen=$(cap mono)
line=$(grep 'FP16 share' <<< "$screen")
if ! grep -Eq '\[(3[0-7]|4[0-7]|38;5)' <<< "$screen" && grep -q '\[7m' <<< "$line" && grep -Eq 'FP16 share +[0-9.]+ %  #' <<< "$(plain mono)"; then
	ok "TERM=vt100: no colour, the flagged gauge in reverse video, ASCII glyphs"
else
	bad "TERM=vt100 fallback" "$(cat -v <<< "$screen" | head -12)"
fi
keys mono q

start sig xterm-256color C.UTF-8 ex.db
[ "$(T display-message -p -t sig '#{alternate_on}')" = 1 ] || bad "ampview did not use the alternate screen"
pid=$(pgrep -f -n "^$AMPVIEW ex.db" || true)
if [ -n "$pid" ]; then
	kill -TERM "$pid"
	if wait_for sig 'EXIT=143' && [ "$(T display-message -p -t sig '#{alternate_on}')" = 0 ] \
		&& [ "$(T display-message -p -t sig '#{cursor_flag}')" = 1 ]; then
		ok "SIGTERM: terminal restored (normal screen, cursor shown), status 143"
	else
		bad "SIGTERM restore" "$(plain sig)"
	fi
else
	bad "cannot find the ampview process"
fi

e2e_finish
