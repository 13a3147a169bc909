#!/usr/bin/env bash
# memopt_batch.sh — the largest bert_kjv batch that fits a fixed memory_limit, without and with
# memory_optimize (the design source's BERT figure: 8 -> 12, a 1.5x larger batch), found by a
# binary search over the batch size; then the time per sample the recomputation costs,
# measured at the batch that fits without it, both ways in turns.
#
#   bench/memopt_batch.sh [LIMIT]      LIMIT: bytes with k/m/g suffixes (default 48m)
#
# A probe trains one step (and validates one batch) at that batch size: it fits when the run
# exits 0, and fails to fit when its message says memory_limit refused the step.  Environment:
# BUILD (default build), BERT_FLAGS (extra bert_kjv flags, e.g. --precision=fp32), PAIRS
# (timing runs per side, default 2), STEPS (steps per timing run, default 6).
set -u
export LC_ALL=C
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
BERT=$BUILD/bin/bert_kjv
LIMIT=${1:-48m}
PAIRS=${PAIRS:-2}
STEPS=${STEPS:-6}
FLAGS=${BERT_FLAGS:-}
[ -x "$BERT" ] || { echo "memopt_batch: missing $BERT (run make)" >&2; exit 1; }

# fits B [--memory-optimize]: 0 if a step of batch B fits the limit, 1 if it is refused
fits() {
	local b=$1
	shift
	local err
	# shellcheck disable=SC2086
	err=$("$BERT" --steps 1 --eval-every 0 --eval-batches 1 --batch "$b" --memory-limit "$LIMIT" \
		--log-every 0 $FLAGS "$@" 2>&1 >/dev/null) && return 0
	if grep -q "memory_limit" <<<"$err"; then return 1; fi
	echo "memopt_batch: bert_kjv failed at batch $b for another reason:" >&2
	echo "$err" >&2
	exit 1
}

# largest [--memory-optimize]: the largest batch in 1..512 that fits (0 if none)
largest() {
	local lo=0 hi=513 mid
	while [ $((hi - lo)) -gt 1 ]; do
		mid=$(((lo + hi) / 2))
		if fits "$mid" "$@"; then lo=$mid; else hi=$mid; fi
	done
	echo "$lo"
}

# rate B [--memory-optimize]: samples per second of a STEPS-step run at batch B
rate() {
	local b=$1
	shift
	# shellcheck disable=SC2086
	"$BERT" --steps "$STEPS" --eval-every 0 --eval-batches 1 --batch "$b" --log-every 0 --json \
		$FLAGS "$@" 2>/dev/null | tail -n 1 | sed -n 's/.*"samples_per_sec":\([0-9.e+-]*\).*/\1/p'
}

echo "bert_kjv, memory_limit = $LIMIT ${FLAGS:+($FLAGS)}"
without=$(largest)
with=$(largest --memory-optimize)
echo "largest batch without memory_optimize: $without"
echo "largest batch with memory_optimize:    $with"
if [ "$without" -gt 0 ]; then
	awk -v a="$with" -v b="$without" 'BEGIN { printf "batch ratio: %.2fx (goal >= 1.5x)\n", a / b }'
	# time per sample at the batch both fit, the two runs taking turns
	off=() on=()
	for ((i = 0; i < PAIRS; i++)); do
		off+=("$(rate "$without")")
		on+=("$(rate "$without" --memory-optimize)")
	done
	best_off=$(printf '%s\n' "${off[@]}" | sort -g | tail -n 1)
	best_on=$(printf '%s\n' "${on[@]}" | sort -g | tail -n 1)
	awk -v a="$best_off" -v b="$best_on" -v n="$without" 'BEGIN {
		printf "time per sample at batch %d: %.3f ms without, %.3f ms with memory_optimize (%.2fx; best of the runs)\n",
		       n, 1000 / a, 1000 / b, a / b }'
fi
