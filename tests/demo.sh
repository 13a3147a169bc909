#!/usr/bin/env bash
# `make demo`: train the Fashion-MNIST MLP in FP32 and in AMP, print both results side by side,
# then profile the AMP training with ampprof into profile.db and print its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
EPOCHS=${DEMO_EPOCHS:-1}

run() { "$B/bin/mlp_fashion" --precision="$1" --epochs "$EPOCHS" --json | tail -n 1; }
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

echo "== mlp_fashion, $EPOCHS epoch(s), FP32 and AMP =="
fp32=$(run fp32)
amp=$(run amp)
printf '%-18s %14s %14s\n' "" fp32 amp
for k in test_accuracy final_loss samples_per_sec peak_bytes overflow_steps final_scale; do
	printf '%-18s %14s %14s\n' "$k" "$(field "$k" <<<"$fp32")" "$(field "$k" <<<"$amp")"
done

if [ -x "$B/bin/ampprof" ]; then
	echo
	echo "== ampprof --application=\"$B/bin/mlp_fashion --precision=amp --epochs $EPOCHS\" =="
	"$B/bin/ampprof" --force --output=profile.db \
		--application="$B/bin/mlp_fashion --precision=amp --epochs $EPOCHS"
	echo
	echo "Next: $B/bin/ampview profile.db    (or: sqlite3 profile.db 'select * from overview')"
fi
