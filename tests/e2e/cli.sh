#!/usr/bin/env bash
# cli.sh — the command-line grammar shared by ampprof (and its commands), ampdump, ampview and
# the examples: --help on stdout with exit 0, usage errors on stderr with exit 2 and the usage
# lines, unambiguous prefixes of long options accepted and an ambiguous one refused by name.
# Reads $BUILD (default build).  Ends with "N passed, N failed".
set -u
export LC_ALL=C TZ=UTC
BUILD=${BUILD:-build}
BIN=$BUILD/bin
OUT=$(mktemp -d /tmp/ampkit_e2e_cli.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1${2:+: $2}"; }
# check_true NAME COMMAND...: passes when the command succeeds
check_true() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }

# run NAME WANT_RC CMD...: runs CMD with stdout in $OUT/out and stderr in $OUT/err
run() {
	local name=$1 want=$2
	shift 2
	"$@" >"$OUT/out" 2>"$OUT/err"
	local rc=$?
	if [ "$rc" = "$want" ]; then ok "$name: exit $want"; else bad "$name: exit $want" "got $rc: $(head -3 "$OUT/err")"; fi
}

for cmd in "ampprof" "ampprof report" "ampprof export" "ampdump" "ampview" "mlp_fashion"; do
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
	grep -q -- "option '--s' is ambiguous (--steps, --seed, --schedule)" "$OUT/err"
run "mlp_fashion --prec=int8: prefix of --precision, value checked" 2 "$BIN/mlp_fashion" --prec=int8
check_true "mlp_fashion --prec: the value error" grep -q -- "--precision: expected fp32, amp, fp16 or bf16" "$OUT/err"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
