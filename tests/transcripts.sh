#!/usr/bin/env bash
# transcripts.sh — regenerates every transcript of the README: each fenced block between
# `<!-- transcript NAME -->` and `<!-- /transcript -->` is rewritten with the commands the
# table below gives for NAME, run from the top of the checkout, each printed after "$ " with
# what it prints (stderr included).  The blocks are run in the table's order (later ones read
# the profiles earlier ones write), whatever their order in the README.
#
#   tests/transcripts.sh            build (make all), run every block, rewrite README.md
#   tests/transcripts.sh NAME...    the same for these blocks only (the profiles they read must
#                                   be there from a whole run)
#   tests/transcripts.sh --check    only check that the README's marked blocks and the table
#                                   agree (the same names, the same "$ " command lines) and
#                                   that every block holds output; fast, run by
#                                   tests/e2e/analyses.sh
#
# Run it from a clean clone (the paths it prints are the clone's): it needs nothing outside
# the repository but the packages `make deps` installs, and writes its profiles (profile.db,
# bf16.db, run.db, ...: ignored by git) in the top folder of the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build
README=README.md

# NAME|command: a block's commands in order.  "make demo" runs tests/demo.sh after a build,
# shown as make shows it ("..." for the build lines).
table='session|make demo
session-sql|sqlite3 -header -column profile.db '"'"'select round(fp16_share,3) fp16_share, round(native_half_share,3) native_half_share, half_types, round(copy_share,3) copy_share, steps, overflow_steps, skipped_steps, min_scale, max_scale, complete from overview'"'"'
view-keys|build/bin/ampview --headless --keys='"'"'?'"'"' profile.db
view-overview|build/bin/ampview --headless --panel=overview profile.db
view-ops|build/bin/ampview --headless --panel=ops profile.db
view-steps|build/bin/ampview --headless --panel=steps profile.db
view-callsites|build/bin/ampview --headless --panel=callsites profile.db
view-memory|build/bin/ampview --headless --panel=memory profile.db
report-memory|build/bin/ampprof report profile.db | grep '"'"'^  memory'"'"'
info|build/bin/ampprof info
bf16-run|build/bin/ampprof --force --quiet --output=bf16.db -- build/bin/mlp_fashion --precision=bf16 --epochs 1 --log-every 0
bf16-report|build/bin/ampprof report bf16.db
bf16-view|build/bin/ampview --headless --panel=overview bf16.db
bf16-engines|sqlite3 -header -column bf16.db '"'"'select op, phase, exec_dtype, engine, count(*) as calls, round(sum(dur_ns)/1e6, 1) as ms from ops group by 1, 2, 3, 4 order by ms desc limit 8'"'"'
fp16-run|AMP_KERNELS=avx512 build/bin/ampprof --force --quiet --output=fp16.db -- build/bin/mlp_fashion --precision=amp --epochs 1 --log-every 0
fp16-report|build/bin/ampprof report fp16.db
fp32-run|build/bin/ampprof --force --quiet --output=fp32-epoch.db -- build/bin/mlp_fashion --precision=fp32 --epochs 1 --log-every 0
diff|build/bin/ampprof diff fp32-epoch.db bf16.db
diff-view|build/bin/ampview --headless --diff=fp32-epoch.db fp16.db
nan-run|build/bin/unstable --precision=fp16 --steps 260 --log-every 50
nan-profile|build/bin/ampprof -o run.db --dump=nonfinite -- build/bin/unstable --precision=fp16 --steps 260 --log-every 0
nan-list|build/bin/ampdump --list --db run.db
nan-list|build/bin/ampdump --step 250 --db run.db | head -8
nan-list|sed -n 176p examples/unstable.c
nan-npy|build/bin/ampdump --step 250 --db run.db --npy npy
nan-npy|/usr/bin/python3 -c "import numpy as np; y = np.load('"'"'npy/step250_seq6254_output_rate.npy'"'"'); x = np.load('"'"'npy/step250_seq6254_input_rate_in0.npy'"'"'); print(y.dtype, y.shape, '"'"'inf at'"'"', np.argwhere(np.isinf(y)).tolist(), '"'"'input there'"'"', x[np.isinf(y)], '"'"'exp:'"'"', np.exp(x[np.isinf(y)].astype(np.float64)))"
nan-amp|build/bin/unstable --precision=amp --steps 320 --log-every 0 | tail -1
nan-scale|build/bin/ampview --headless --panel=scale run.db
nan-anomalies|build/bin/ampview --headless --panel=anomalies run.db
nan-step|build/bin/ampview --headless --panel=scale --keys='"'"'<enter>'"'"' run.db
hist|build/bin/ampdump --hist run.db | head -8
hist|build/bin/ampdump --hist --step 250 --tensor rate run.db | sed -n '"'"'1,4p;30,35p'"'"'
hist-view|build/bin/ampview --headless --panel=hist --keys='"'"'/rate<enter>jj'"'"' run.db
compare|build/bin/ampprof -q -o fp32.db --dump-steps=0 -- build/bin/mlp_fashion --precision=fp32 --steps 1 --seed 7
compare|build/bin/ampprof -q -o amp.db --dump-steps=0 -- build/bin/mlp_fashion --precision=amp --steps 1 --seed 7
compare|build/bin/ampdump --compare fp32.db amp.db --step 0
compare-unstable|build/bin/ampprof -q -o un_fp32.db --dump-steps=250 -- build/bin/unstable --precision=fp32 --steps 251 | tail -1
compare-unstable|build/bin/ampprof -q -o un_fp16.db --dump-steps=250 -- build/bin/unstable --precision=fp16 --steps 251 | tail -1
compare-unstable|build/bin/ampdump --compare un_fp32.db un_fp16.db --step 250 | tail -1
dist-run|mpirun -np 2 build/bin/ampprof -q -o dp.%r.db -- build/bin/mlp_fashion --dist --precision=amp --steps 100 --log-every 50
dist-run|build/bin/ampprof merge -o dp.db dp.0.db dp.1.db
dist-run|build/bin/ampprof report dp.db
dist-view|build/bin/ampview --headless --width=100 dp.db | grep -A3 '"'"'^ Comm share'"'"''

names() { cut -d'|' -f1 <<< "$table" | uniq; }
commands_of() { awk -F'|' -v n="$1" '$1 == n { sub(/^[^|]*\|/, ""); print }' <<< "$table"; }

# The "$ " lines of each marked block of the README, as "NAME|command".
readme_commands() {
	awk '/^<!-- transcript [a-z0-9-]+ -->$/ { name = $3; inb = 1; next }
	     /^<!-- \/transcript -->$/ { inb = 0; next }
	     inb && /^\$ / { print name "|" substr($0, 3) }' "$README"
}

check() {
	local want got
	want=$(printf '%s\n' "$table")
	got=$(readme_commands)
	# every block once, in a well-formed pair of markers
	local opens closes
	opens=$(grep -c '^<!-- transcript [a-z0-9-]* -->$' "$README" || true)
	closes=$(grep -c '^<!-- /transcript -->$' "$README" || true)
	if [ "$opens" != "$closes" ]; then
		echo "transcripts: $opens opening markers, $closes closing ones in $README" >&2
		return 1
	fi
	if [ "$(sort <<< "$want")" != "$(sort <<< "$got")" ]; then
		echo "transcripts: the README's blocks and the table differ (< table, > README):" >&2
		diff <(sort <<< "$want") <(sort <<< "$got") >&2 || true
		return 1
	fi
	# a block with its commands and nothing they printed was never run (a rewrite fills it)
	[ "${1:-}" = --commands-only ] && return 0
	local empty
	empty=$(awk '/^<!-- transcript [a-z0-9-]+ -->$/ { name = $3; inb = 1; out = 0; next }
	             /^<!-- \/transcript -->$/ { if (inb && !out) print name; inb = 0; next }
	             inb && !/^\$ / && !/^```$/ && !/^$/ { out = 1 }' "$README")
	if [ -n "$empty" ]; then
		echo "transcripts: block(s) without output: $(tr '\n' ' ' <<< "$empty")(run tests/transcripts.sh NAME)" >&2
		return 1
	fi
	echo "transcripts: $(names | wc -l) blocks, $(wc -l <<< "$want") commands, README and table agree"
}

if [ "${1:-}" = --check ]; then
	check
	exit
fi
case ${1:-} in -*) echo "usage: tests/transcripts.sh [--check | NAME...]" >&2; exit 2 ;; esac
check --commands-only > /dev/null || { check --commands-only; exit 1; }
run_names=$(names)
if [ $# -gt 0 ]; then
	for n in "$@"; do
		grep -qx -- "$n" <<< "$run_names" || { echo "transcripts: no block '$n'" >&2; exit 2; }
	done
	run_names=$(printf '%s\n' "$@")
fi

make -j2 all > /dev/null
# what the blocks write, so that each command runs as on a clean clone
[ $# -gt 0 ] || rm -rf npy profile.db bf16.db fp16.db fp32-epoch.db run.db fp32.db amp.db \
	un_fp32.db un_fp16.db dp.db dp.0.db dp.1.db
# the data-parallel block writes its profiles without --force: run alone, it starts afresh too
! grep -qx dist-run <<< "$run_names" || rm -f dp.db dp.0.db dp.1.db
# the data-parallel blocks' mpirun, as root (a fresh machine's user here) and on one host
[ "$(id -u)" != 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
out=$(mktemp -d "${TMPDIR:-/tmp}/ampkit-transcripts.XXXXXX")
trap 'rm -rf "$out"' EXIT
while read -r name; do
	{
		echo '```'
		first=1
		while IFS= read -r cmd; do
			[ $first -eq 1 ] || echo
			first=0
			echo "\$ $cmd"
			# stdin from /dev/null: a command that reads it (mpirun forwards it to rank 0)
			# would eat the block's next commands
			if [ "$cmd" = "make demo" ]; then
				echo "..."
				LC_ALL=C.UTF-8 bash tests/demo.sh </dev/null 2>&1 || true
			else
				LC_ALL=C.UTF-8 bash -c "$cmd" </dev/null 2>&1 || true
			fi
		done <<< "$(commands_of "$name")"
		echo '```'
	} > "$out/$name"
	echo "transcripts: $name" >&2
done <<< "$run_names"
awk -v dir="$out" '
	/^<!-- transcript [a-z0-9-]+ -->$/ {
		print; f = dir "/" $3
		if ((getline line < f) <= 0) next # a block not run: kept as it is
		print line
		while ((getline line < f) > 0) print line
		close(f); skip = 1; next
	}
	/^<!-- \/transcript -->$/ { skip = 0 }
	!skip { print }' "$README" > "$out/README.md"
cp "$out/README.md" "$README"
echo "transcripts: $README rewritten ($(wc -l <<< "$run_names") blocks)" >&2
