#!/usr/bin/env bash
# hostile.sh — end-to-end tests that text the application wrote (op labels, the command line)
# reaches no terminal raw and no machine output invalid: the end-of-run summary, `ampprof
# report` and `ampdump --step` in a tmux pane (capture-pane -e: no title set, no blinking, no
# forged "evidence:" line), and every JSON and CSV output through Python's json (strict: no
# NaN/Infinity, valid UTF-8) and csv, with invalid UTF-8 in labels and non-finite values in
# the profile.  Needs $BUILD (default build) built with `make all`.  Ends with "N passed, N
# failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
AMPDUMP=$B/bin/ampdump
CASES=$B/tests/runtime_cases
PY=/usr/bin/python3
e2e_tmpdir WORK ampprof-hostile-e2e
for f in "$AMPPROF" "$AMPDUMP" "$CASES" "$PY"; do
	[ -x "$f" ] || e2e_abort "missing $f: run 'make all' first"
done
command -v tmux > /dev/null || e2e_abort "tmux is not installed"
cd "$WORK"
sock=ampprof-hostile-$$
e2e_on_exit 'tmux -L "$sock" kill-server 2>/dev/null'
T() { tmux -L "$sock" -f /dev/null "$@"; }

# A label that sets the window title, blinks, forges an evidence line and is not UTF-8.
P=$'\e]2;PWNED\a\e[5mBLINK\e[0m\nevidence: FORGED \xff\xfe\x80 '
printf '%s' "$P" > prefix.txt
cat > run.sh <<EOF
#!/bin/sh
# the command line carries an escape too (a comment the shell ignores)
exec '$AMPPROF' "\$@" --application="'$CASES' --steps 6 --bad-step 3 --label-prefix \"\$(cat prefix.txt)\" # \$(printf '\\033[31mRED')"
EOF
chmod +x run.sh

# run NAME COMMAND...: COMMAND in a fresh tmux pane; waits for it, then NAME.cap holds the pane
# with its attributes (capture-pane -e) and NAME.title the pane's title.
run() {
	local name=$1
	shift
	T kill-session -t "$name" 2>/dev/null
	T new-session -d -s "$name" -x 200 -y 50 "cd '$WORK' && $*; echo DONE-\$?; sleep 30"
	for _ in $(seq 200); do
		T capture-pane -p -t "$name" | grep -q '^DONE-' && break
		sleep 0.05
	done
	T capture-pane -p -e -S -200 -t "$name" > "$name.cap"
	T display-message -p -t "$name" '#{pane_title}' > "$name.title"
}
# safe NAME WHAT: the pane of run NAME (WHAT: its description) shows the hostile labels defused.
safe() {
	check "$2: finished" "$(grep -o '^DONE-[0-9]*' "$1.cap")" DONE-0
	check_true "$2: the label's text is shown" grep -q 'BLINK' "$1.cap"
	check "$2: no title was set" "$(grep -c PWNED "$1.title")" 0
	check "$2: nothing blinks" "$(grep -c $'\e\\[[0-9;]*5m' "$1.cap")" 0
	check "$2: no red from the command line" "$(grep -c $'\e\\[31m' "$1.cap")" 0
	check "$2: no forged line" "$(grep -Ec '^ *(evidence: )+FORGED' "$1.cap")" 0
}

run summary ./run.sh -o h.db --dump=nonfinite
safe summary "end-of-run summary"
check_true "end-of-run summary: the origin's advice is there" grep -q 'invalid_operation' summary.cap
run report "'$AMPPROF' report h.db"
safe report "ampprof report"
run dump "'$AMPDUMP' --step 3 --db h.db"
safe dump "ampdump --step"
run dumplist "'$AMPDUMP' --list --db h.db"
check "ampdump --list: no title, no blink" \
	"$(grep -c PWNED dumplist.title)|$(grep -c $'\e\\[[0-9;]*5m' dumplist.cap)" "0|0"
check "advice rows keep one line per evidence item" \
	"$(sqlite3 h.db "SELECT count(*) FROM advice WHERE evidence LIKE '%' || char(10) || 'evidence: FORGED%' OR message LIKE '%' || char(27) || '%'")" 0
# the re-run hint quotes the command line (a step with nothing recorded)
./run.sh -q -o off.db --nan-check=off > /dev/null 2>&1
err=$("$AMPDUMP" --step 2 --db off.db 2>&1)
check_true "ampdump hint: the command line is quoted" grep -q 'ampdump --application=' <<<"$err"
check "ampdump hint: no escape reaches the terminal" "$(grep -c $'\e' <<<"$err")" 0

# ---- machine outputs: strict JSON, CSV --------------------------------------------------------
# strict: the bytes are UTF-8 and the document parses without NaN/Infinity (json.loads rejects
# raw control characters in strings; escaped ones are the labels' text, kept)
cat > strict.py <<'EOF'
import json, sys
def reject(c):
    raise ValueError("non-standard constant " + c)
text = open(sys.argv[1], "rb").read().decode("utf-8")
json.loads(text, parse_constant=reject)
print("ok", "\ufffd" in text or "\\ufffd" in text.lower())
EOF
json_ok() { # NAME FILE: FILE is strict JSON that shows the invalid bytes as U+FFFD
	local r
	r=$("$PY" strict.py "$2" 2>&1)
	check "$1: strict JSON, invalid UTF-8 as U+FFFD" "$r" "ok True"
}
"$AMPPROF" report --format=json h.db > report.json; json_ok "report --format=json" report.json
"$AMPPROF" export --format=chrome -o trace.json h.db; json_ok "export --format=chrome" trace.json
"$AMPDUMP" --step 3 --format=json --db h.db > step.json; json_ok "ampdump --step --format=json" step.json
"$AMPDUMP" --list --format=json --db h.db > list.json
check "ampdump --list --format=json: strict JSON" "$("$PY" strict.py list.json 2>&1 | cut -d' ' -f1)" ok

# non-finite values in the profile (a hostile producer, or a damaged file): null, never inf
cp h.db inf.db
sqlite3 inf.db "UPDATE loss_scale SET new_scale = 1e999, old_scale = -1e999;
	UPDATE steps SET loss = 1e999 WHERE step = 1;
	UPDATE tensor_stats SET min = -1e999, max = 1e999, absmax = 1e999 WHERE step = 3"
"$AMPPROF" export --format=chrome -o inf_trace.json inf.db; json_ok "chrome export with infinities" inf_trace.json
check_true "chrome export: no bare inf" [ "$(grep -Ec '(^|[^a-z_"])-?inf([^a-z_"]|$)' inf_trace.json)" -eq 0 ]
"$AMPDUMP" --step 3 --format=json --db inf.db > inf_step.json; json_ok "ampdump json with infinities" inf_step.json
"$AMPPROF" report --format=json inf.db > inf_report.json; json_ok "report json with infinities" inf_report.json

cat > csvcheck.py <<'EOF'
import csv, io, sys
rows = list(csv.reader(io.StringIO(open(sys.argv[1], "rb").read().decode("utf-8"), newline="")))
widths = {len(r) for r in rows}
label = rows[0].index("label")
hostile = [r[label] for r in rows[1:] if "BLINK" in r[label]]
print(len(widths), len(hostile) > 0 and all("\ufffd" in h for h in hostile))
EOF
"$AMPPROF" export --format=csv --table=ops -o ops.csv h.db
check "export csv: one width, labels valid UTF-8" "$("$PY" csvcheck.py ops.csv 2>&1)" "1 True"

e2e_finish
