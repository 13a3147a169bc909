#!/usr/bin/env bash
# `make demo`: train the Fashion-MNIST MLP in FP32, in FP16 AMP and in BF16 AMP, print the
# results side by side, then profile the FP16 AMP training with ampprof into profile.db and
# print its summary.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
EPOCHS=${DEMO_EPOCHS:-1}

run() { "$B/bin/mlp_fashion" --precision="$1" --epochs "$EPOCHS" --json | tail -n 1; }
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

echo "== mlp_fashion, $EPOCHS epoch(s), FP32, AMP (FP16) and BF16 =="
fp32=$(run fp32)
amp=$(run amp)
bf16=$(run bf16)
printf '%-22s %14s %14s %14s\n' "" fp32 amp bf16
for k in test_accuracy final_loss samples_per_sec param_act_peak_bytes overflow_steps final_scale; do
	printf '%-22s %14s %14s %14s\n' "$k" "$(field "$k" <<<"$fp32")" "$(field "$k" <<<"$amp")" \
		"$(field "$k" <<<"$bf16")"
done

if [ -x "$B/bin/ampprof" ]; then
	echo
	echo "== ampprof --application=\"$B/bin/mlp_fashion --precision=amp --epochs $EPOCHS\" =="
	"$B/bin/ampprof" --force --output=profile.db \
		--application="$B/bin/mlp_fashion --precision=amp --epochs $EPOCHS"
	echo
	echo "Next: $B/bin/ampview profile.db    (or: sqlite3 profile.db 'select * from overview')"
fi
