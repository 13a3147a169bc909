#!/usr/bin/env bash
# transcripts.sh — regenerates the README's transcripts of the BF16 and engine walkthrough:
# runs each command as the README shows it, from the top of the checkout, and prints it after
# "$ " with its output, one fenced block per command.  Needs `make all` (and the data
# packages); writes bf16.db and fp16.db in the top folder (the README's session uses them).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
show() { # show CMD...: one block with the command and what it prints (stderr included)
	echo '```'
	echo "\$ $*"
	"$@" 2>&1 || true
	echo '```'
	echo
}
show "$B/bin/ampprof" info
show "$B/bin/ampprof" --force --quiet --output=bf16.db -- "$B/bin/mlp_fashion" --precision=bf16 --epochs 1 --log-every 0
show "$B/bin/ampprof" report bf16.db
show "$B/bin/ampview" --headless --panel=overview bf16.db
show sqlite3 -header -column bf16.db "select op, phase, exec_dtype, engine, count(*) as calls, round(sum(dur_ns)/1e6, 1) as ms from ops group by 1, 2, 3, 4 order by ms desc limit 8"
show "$B/bin/ampprof" --force --quiet --output=fp16.db -- "$B/bin/mlp_fashion" --precision=amp --epochs 1 --log-every 0
show "$B/bin/ampprof" report fp16.db
