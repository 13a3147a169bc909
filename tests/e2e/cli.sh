#!/usr/bin/env bash
# cli.sh — the command-line grammar shared by ampprof (and its commands), ampdump, ampview and
# the examples: --help on stdout with exit 0, usage errors on stderr with exit 2 and the usage
# lines, unambiguous prefixes of long options accepted and an ambiguous one refused by name.
# Reads $BUILD (default build).  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
e2e_tmpdir OUT ampkit_e2e_cli

# run NAME WANT_RC CMD...: runs CMD with stdout in $OUT/out and stderr in $OUT/err
run() {
	local name=$1 want=$2
	shift 2
	"$@" >"$OUT/out" 2>"$OUT/err"
	local rc=$?
	if [ "$rc" = "$want" ]; then ok "$name: exit $want"; else bad "$name: exit $want" "got $rc: $(head -3 "$OUT/err")"; fi
}

for cmd in "ampprof" "ampprof report" "ampprof export" "ampprof info" "ampdump" "ampview" "mlp_fashion"; do
	set -- $cmd
	tool=$1
	shift
	run "$cmd --help" 0 "$BIN/$tool" "$@" --help
	check_true "$cmd --help: usage line of $cmd on stdout, nothing on stderr" \
		test -n "$(grep "^usage: $cmd " "$OUT/out")" -a ! -s "$OUT/err"
	# every option row is "    [-x, ]--name[=<v>]  help": the help starts in one column
	cols=$(grep -E '^    (-[a-z], |    )?--[a-z]' "$OUT/out" | grep -v '^    .*--[a-z0-9=<>|.-]*$' |
		awk '{ match($0, /--[^ ]* +/); print RSTART + RLENGTH }' | sort -u | wc -l)
	check_true "$cmd --help: option help aligned in one column" test "$cols" = 1
	run "$cmd --no-such-option" 2 "$BIN/$tool" "$@" --no-such-option
	check_true "$cmd unknown option: message and usage on stderr, nothing on stdout" \
		test -n "$(grep "^$tool: unknown option '--no-such-option'" "$OUT/err")" \
		-a -n "$(grep "^usage: $cmd " "$OUT/err")" -a ! -s "$OUT/out"
done
"$BIN/ampprof" export --help >"$OUT/exp"
check_true "ampprof export --help: --table listed, --ring-size not" \
	test -n "$(grep -e '--table=<t>' "$OUT/exp")" -a -z "$(grep -e '--ring-size' "$OUT/exp")"
for c in report export info; do
	"$BIN/ampprof" $c --help >"$OUT/h1" 2>&1
	"$BIN/ampprof" help $c >"$OUT/h2" 2>&1
	check_true "ampprof help $c = ampprof $c --help" cmp -s "$OUT/h1" "$OUT/h2"
done
run "ampprof help nope: a usage error" 2 "$BIN/ampprof" help nope
check_true "ampprof help nope: names the commands" grep -q '^hint: commands: report, export, info' "$OUT/err"
run "--version" 0 "$BIN/ampdump" --version
check_true "ampdump --version on stdout" grep -q '^ampdump ' "$OUT/out"
run "ampview --version" 0 "$BIN/ampview" --version

# ---- abbreviations: unambiguous prefixes everywhere, an ambiguous one names the candidates ---
run "ampdump --comp (prefix of --compare) is accepted" 2 "$BIN/ampdump" --comp only-one.db
check_true "ampdump --comp reached --compare's own check" grep -q -- '--compare needs two profiles' "$OUT/err"
run "ampdump --cos ambiguous" 2 "$BIN/ampdump" --cos=1 --compare a.db b.db
check_true "ampdump --cos: names --cosine and --cosine-floor" \
	grep -q -- "option '--cos' is ambiguous (--cosine, --cosine-floor)" "$OUT/err"
run "ampprof --d ambiguous" 2 "$BIN/ampprof" --d=off -- true
check_true "ampprof --d: names the candidates" \
	grep -q -- "option '--d' is ambiguous (--dump, --dump-steps, --dump-limit, --drop)" "$OUT/err"
run "ampprof --nan=bad: prefix of --nan-check, value checked" 2 "$BIN/ampprof" --nan=sometimes -- true
check_true "ampprof --nan: the value error names --nan-check" \
	grep -q -- "invalid value 'sometimes' for --nan-check" "$OUT/err"
run "ampprof report --f=bad: prefix of --format" 2 "$BIN/ampprof" report --f=xml
run "ampview --he ambiguous" 2 "$BIN/ampview" --he
check_true "ampview --he: names --headless, --height and --help" \
	grep -q -- "option '--he' is ambiguous (--headless, --height, --help)" "$OUT/err"
run "ampview --hea=1: a flag takes no value" 2 "$BIN/ampview" --hea=1
check_true "ampview --hea=1: message names --headless" grep -q -- "option '--headless' takes no value" "$OUT/err"
run "ampview --width without a value" 2 "$BIN/ampview" --headless --width
check_true "ampview --width: needs a value" grep -q -- "option '--width' needs a value" "$OUT/err"
run "mlp_fashion --s ambiguous" 2 "$BIN/mlp_fashion" --s 3
check_true "mlp_fashion --s: names the candidates" \
	grep -q -- "option '--s' is ambiguous (--steps, --seed, --schedule, --stop-after)" "$OUT/err"
run "mlp_fashion --prec=int8: prefix of --precision, value checked" 2 "$BIN/mlp_fashion" --prec=int8
check_true "mlp_fashion --prec: the value error" grep -q -- "--precision: expected fp32, amp, fp16 or bf16" "$OUT/err"

# ---- strings an application wrote, through every ampprof output -----------------------------
# a, 0x80 (invalid), b, ESC [2J (clear screen), LF, "evidence: forged", ESC ]0;t BEL (title)
# as a label, an op name, the command line and an advice message (one line each; evidence is
# one item per line by design, so it is left to the writer of the advice)
PRODUCER=$BUILD/tests/trace_producer
H="CAST(X'6180621b5b324a0a65766964656e63653a20666f726765641b5d303b7407' AS TEXT)"
if "$BIN/ampprof" -q -o "$OUT/h.db" -- "$PRODUCER" --steps 4 --ops 5 >/dev/null 2>&1; then
	sqlite3 "$OUT/h.db" "UPDATE op_sigs SET label = $H; UPDATE op_summary SET op = $H;
		UPDATE meta SET value = $H WHERE key = 'command';
		INSERT INTO advice (rule, severity, message, evidence, op) VALUES ($H, 'warning', $H, 'one item', $H);
		UPDATE steps SET loss = 9e999 WHERE step = 1; UPDATE steps SET loss = -9e999 WHERE step = 2"
	for form in "report" "report --format=json" "export --format=chrome" "export --format=csv" \
		"export --format=csv --table=advice" "export --format=csv --table=steps"; do
		"$BIN/ampprof" $form "$OUT/h.db" >"$OUT/h.out" 2>"$OUT/h.err"
		rc=$?
		check_true "hostile strings: ampprof $form: exit 0" test "$rc" = 0
		check_true "hostile strings: ampprof $form: no ESC or BEL byte in the output" \
			test -z "$(LC_ALL=C grep -l $'[\x1b\x07]' "$OUT/h.out")"
		case $form in
		*json* | *chrome*)
			check_true "hostile strings: ampprof $form: valid JSON" \
				/usr/bin/python3 -c 'import json,sys; json.load(sys.stdin)' <"$OUT/h.out" ;;
		*csv*)
			check_true "hostile strings: ampprof $form: valid UTF-8 CSV, one record per row" \
				/usr/bin/python3 -c 'import csv,sys; r=list(csv.reader(open(sys.argv[1], encoding="utf-8", newline=""))); assert len(set(map(len, r))) == 1, r' "$OUT/h.out" ;;
		esac
	done
	"$BIN/ampprof" report --format=json "$OUT/h.db" >"$OUT/r.json"
	check_true "report json: format_version 1, the label kept as text with U+FFFD" \
		/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["format_version"] == 1; assert d["command"] == "a\ufffdb\x1b[2J\nevidence: forged\x1b]0;t\x07", d["command"]' "$OUT/r.json"
	check_true "report json: advice evidence is an array of its lines" \
		/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); a=[x for x in d["advice"] if x["severity"] == "warning" and x["evidence"] == ["one item"]]; assert a and all(isinstance(x["evidence"], list) for x in d["advice"]), d["advice"]' "$OUT/r.json"
	sqlite3 "$OUT/h.db" "UPDATE advice SET evidence = 'first' || char(10) || 'second' WHERE evidence = 'one item'"
	"$BIN/ampprof" report --format=json "$OUT/h.db" >"$OUT/r2.json"
	check_true "report json: two evidence lines, two items" \
		/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert any(x["evidence"] == ["first", "second"] for x in d["advice"]), d["advice"]' "$OUT/r2.json"
	"$BIN/ampprof" export --format=chrome "$OUT/h.db" >"$OUT/c.json"
	check_true "chrome: format_version 1; an infinite loss is null, never the string inf" \
		/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["otherData"]["format_version"] == 1; l=[e["args"]["loss"] for e in d["traceEvents"] if e.get("cat") == "step"]; assert l[1] is None and l[2] is None and l[0] == 1 and l[3] == 0.25, l' "$OUT/c.json"
	"$BIN/ampprof" report "$OUT/h.db" >"$OUT/r.txt"
	check_true "report text: a newline in a label forges no evidence line" \
		test "$(grep -c '^ *evidence: forged' "$OUT/r.txt")" = 0
	check_true "report text: the label shown with '?' for its controls" \
		grep -q 'a?b?\[2J?evidence: forged?\]0;t?' "$OUT/r.txt"
	"$BIN/ampprof" export --format=csv --table=steps "$OUT/h.db" >"$OUT/s.csv"
	check_true "csv: infinite losses as inf and -inf" \
		/usr/bin/python3 -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); assert [x["loss"] for x in r[1:3]] == ["inf", "-inf"], r' "$OUT/s.csv"
else
	bad "hostile strings: recording a profile with $PRODUCER"
fi

# ---- report --fail-on for CI ------------------------------------------------------------------
if "$BIN/ampprof" -q -o "$OUT/f.db" -- "$PRODUCER" --steps 4 --ops 5 >/dev/null 2>&1; then
	sqlite3 "$OUT/f.db" "DELETE FROM advice; INSERT INTO advice (rule, severity, message) VALUES ('r1', 'info', 'fyi')"
	run "report --fail-on=warning, info only" 0 "$BIN/ampprof" report --fail-on=warning "$OUT/f.db"
	sqlite3 "$OUT/f.db" "INSERT INTO advice (rule, severity, message) VALUES ('r2', 'warning', 'look')"
	run "report --fail-on=error, a warning" 0 "$BIN/ampprof" report --fail-on=error "$OUT/f.db"
	run "report --fail-on=warning, a warning" 1 "$BIN/ampprof" report --fail-on=warning "$OUT/f.db"
	check_true "report --fail-on: the report is printed all the same, the reason on stderr" \
		test -n "$(grep 'warning  r2: look' "$OUT/out")" \
		-a -n "$(grep -- "1 finding(s) of severity warning or error in the advice (--fail-on=warning)" "$OUT/err")"
	sqlite3 "$OUT/f.db" "INSERT INTO advice (rule, severity, message) VALUES ('r3', 'error', 'bad')"
	run "report --fail-on=error, an error" 1 "$BIN/ampprof" report --fail-on=error --format=json "$OUT/f.db"
	check_true "report --fail-on with json: the JSON is complete" \
		/usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert [a["rule"] for a in d["advice"]] == ["r1", "r2", "r3"]' <"$OUT/out"
	run "report --fail-on=warning, an error too" 1 "$BIN/ampprof" report --fail-on=warning "$OUT/f.db"
	run "report --fail-on=info: a usage error" 2 "$BIN/ampprof" report --fail-on=info "$OUT/f.db"
	check_true "report --fail-on=info: the message" grep -q "invalid value 'info' for --fail-on" "$OUT/err"
	run "report without --fail-on: 0 whatever the advice" 0 "$BIN/ampprof" report "$OUT/f.db"
else
	bad "--fail-on: recording a profile with $PRODUCER"
fi

# ---- outputs that must be whole, profiles that are damaged -----------------------------------
if "$BIN/ampprof" -q -o "$OUT/w.db" -- "$PRODUCER" --steps 4 --ops 5 >/dev/null 2>&1; then
	cp "$OUT/w.db" "$OUT/w2.db"
	size=$(stat -c %s "$OUT/w2.db")
	run "export --output onto the profile itself: refused" 2 \
		"$BIN/ampprof" export --format=csv --output="$OUT/./w2.db" "$OUT/w2.db"
	check_true "export onto itself: the profile untouched, the reason said" \
		test "$(stat -c %s "$OUT/w2.db")" = "$size" -a -n "$(grep "is the profile being exported" "$OUT/err")"
	cp "$PRODUCER" "$OUT/prog"
	psize=$(stat -c %s "$OUT/prog")
	run "--force --output naming the program: refused" 2 \
		"$BIN/ampprof" -q -f -o "$OUT/./prog" -- "$OUT/prog" --steps 1
	run "--force --output naming the program (--application): refused" 2 \
		"$BIN/ampprof" -q -f -o "$OUT/prog" --application="$OUT/prog --steps 1"
	check_true "output naming the program: the program untouched, the reason said" \
		test "$(stat -c %s "$OUT/prog")" = "$psize" -a -x "$OUT/prog" \
		-a -n "$(grep "is the program" "$OUT/err")"
	echo "previous" >"$OUT/prev.json"
	run "export to a full device: exit 4" 4 "$BIN/ampprof" export --format=chrome --output=/dev/full "$OUT/w.db"
	check_true "export to a full device: the reason, not 'not an error'" \
		grep -q "cannot write '/dev/full': No space left on device" "$OUT/err"
	run "export --format=chrome --table: a usage error" 2 "$BIN/ampprof" export --format=chrome \
		--table=ops "$OUT/w.db"
	check_true "export --format=chrome --table: says why" \
		grep -q -- "--table=ops cannot be used with --format=chrome" "$OUT/err"
	run "report to a full stdout: exit 4" 4 sh -c '"$0" report "$1" >/dev/full' "$BIN/ampprof" "$OUT/w.db"
	run "diff to a full stdout: exit 4" 4 sh -c '"$0" diff "$1" "$1" >/dev/full' "$BIN/ampprof" "$OUT/w.db"
	for t in ampprof ampview ampdump; do
		for o in --help --version; do
			run "$t $o to a full stdout: exit 1" 1 sh -c '"$0" "$1" >/dev/full' "$BIN/$t" "$o"
			check_true "$t $o to a full stdout: says why" \
				grep -q "^$t: cannot write to standard output: No space left on device" "$OUT/err"
		done
	done
	# one table's first page overwritten: every query that meets it stops short
	cp "$OUT/w.db" "$OUT/bad.db"
	pg=$(sqlite3 "$OUT/w.db" "SELECT min(pageno) FROM dbstat WHERE name = 'advice'")
	head -c 4096 /dev/zero | tr '\0' '\377' | dd of="$OUT/bad.db" bs=4096 seek=$((pg - 1)) conv=notrunc 2>/dev/null
	run "report of a damaged profile: exit 6, never 'advice: none' and 0" 6 "$BIN/ampprof" report "$OUT/bad.db"
	check_true "report of a damaged profile: says so" grep -q "cannot read all of .*malformed" "$OUT/err"
	run "report --format=json of a damaged profile: exit 6" 6 "$BIN/ampprof" report --format=json "$OUT/bad.db"
	check_true "report --format=json of a damaged profile: no half document on stdout" \
		test ! -s "$OUT/out" -a -n "$(grep 'no JSON was written' "$OUT/err")"
	run "export of a damaged profile: exit 6" 6 "$BIN/ampprof" export --format=csv --table=advice \
		--output="$OUT/prev.json" "$OUT/bad.db"
	check_true "export of a damaged profile: the file it would replace kept as it was" \
		test "$(cat "$OUT/prev.json")" = previous -a -z "$(ls "$OUT"/prev.json.* 2>/dev/null)"
	"$BIN/ampprof" -q -o "$OUT/none.db" -- /bin/true >/dev/null 2>&1
	run "diff with a profile without steps" 0 "$BIN/ampprof" diff "$OUT/none.db" "$OUT/w.db"
	check_true "diff: no traced steps said as such, never '1 traced steps'" \
		grep -q "^A .*none.db: no traced steps, its figures are totals" "$OUT/out"
else
	bad "whole outputs: recording a profile with $PRODUCER"
fi

# The benches: --help on stdout with exit 0 (without running anything), an unknown option
# refused on stderr with exit 2.  Only the normal build has them.
if [ -x "$BUILD/bench/bench_kernels" ]; then
	for b in bench_amp bench_overhead bench_dist bench_kernels bench_emitter bench_ingest bench_viewer; do
		run "$b --help" 0 "$BUILD/bench/$b" --help
		check_true "$b --help: its usage line on stdout, nothing on stderr" \
			test -n "$(grep "^usage: $b" "$OUT/out")" -a ! -s "$OUT/err"
		run "$b --no-such-option" 2 "$BUILD/bench/$b" --no-such-option
		check_true "$b unknown option: named on stderr with the usage, nothing on stdout" \
			test -n "$(grep -- "^$b: .*'--no-such-option'" "$OUT/err")" \
			-a -n "$(grep "^usage: $b" "$OUT/err")" -a ! -s "$OUT/out"
	done
else
	echo "SKIPPED: the benches' command lines need $BUILD/bench (the sanitizer build has none)"
fi

e2e_finish
