#!/usr/bin/env bash
# dump.sh — end-to-end tests of ampdump on synthetic profiles.
#
# The profiles are made here: the schema by executing schema/profile.sql with the sqlite3
# shell, the rows (tensor data as X'..' blobs) printed by /usr/bin/python3 with numpy, which
# is also the reference reader of the exported .npy files.  Checks the step table (origin
# first), csv/json, --list, .npy export (NaN/Inf bit-exact, no path traversal), --compare
# (flags the planted divergences only, tolerance relative for fp16, gradients unscaled, a
# non-finite mismatch preferred as the first divergence) and every bad-input case's exit
# status and message.
# Real-data tests on the `unstable` example come with the runtime side.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
AMPDUMP=$BUILD/bin/ampdump
PY=/usr/bin/python3
e2e_tmpdir T ampdump-e2e

# run NAME EXPECTED_STATUS ARGS...: runs ampdump, output in $T/out, $T/err, status in $st
run() {
	local name=$1 want=$2
	shift 2
	"$AMPDUMP" "$@" >"$T/out" 2>"$T/err"
	st=$?
	if [ "$st" -eq "$want" ]; then
		return 0
	fi
	bad "$name: exit status $st, expected $want" "$(cat "$T/out" "$T/err")"
	return 1
}
# expect NAME FILE REGEX: passes if FILE has a line matching the extended regex
expect() {
	if grep -Eq -- "$3" "$2"; then ok "$1"; else bad "$1: no line matching /$3/ in $(basename "$2")" "$(cat "$2")"; fi
}

for tool in "$AMPDUMP" sqlite3 "$PY"; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		e2e_abort "$tool is missing (build with make, install sqlite3 and python3-numpy)"
	fi
done

# ---- synthetic profiles ---------------------------------------------------------------------
# run.db: an AMP run, 6 steps; step 3 overflows: Exp (seq 3, label blk.exp) is the origin,
# its input and output are dumped, Sum (seq 4) inherits the NaN.  Step 5 has a manual dump.
# fp32.db / amp.db: the same program, step 2 dumped in full; amp.db rounds to fp16, runs an
# extra op first (so its seq numbers are shifted by one) and diverges at LayerNorm (ln1); the
# Softmax output has no name, only its op's label (head).  Step 4 is dumped in both too: fc1's
# output (|x| up to 6) only rounded to fp16, a planted divergence at ln1, then an Inf in amp.db
# only at exp, then fc1's gradient, which amp.db holds multiplied by its loss scale 128.
cat >"$T/gen.py" <<'PY'
import numpy as np

sql = []

def q(s):
    return "NULL" if s is None else "'" + s.replace("'", "''") + "'"

def dump(step, seq, op, role, name, a, reason):
    dt = {"<f2": "fp16", "<f4": "fp32"}[a.dtype.str]
    shape = "(" + ",".join(str(d) for d in a.shape) + ")"
    sql.append("INSERT INTO dumps(step, seq, op, role, name, dtype, shape, reason, bytes, data) "
               "VALUES (%d, %d, %s, %s, %s, %s, %s, %s, %d, X'%s');"
               % (step, seq, q(op), q(role), q(name), q(dt), q(shape), q(reason), a.nbytes,
                  a.tobytes().hex()))

def op(step, seq, sig, start):
    sql.append("INSERT INTO op_events(step, seq, sig, start_ns, dur_ns, thread) "
               "VALUES (%d, %d, %d, %d, 100, 0);" % (step, seq, sig, start))

def sig(i, opname, label, dtype, site):
    sql.append("INSERT INTO op_sigs(id, op, phase, exec_dtype, in_dtype, out_dtype, label, shape, "
               "flops, bytes, aligned, callsite) VALUES (%d, %s, 'forward', %s, %s, %s, %s, '(2,4)', "
               "8, 32, 0, %s);" % (i, q(opname), q(dtype), q(dtype), q(dtype), q(label),
                                    "NULL" if site is None else site))

def steps(n, overflow_step=None, scale=128.0):
    for s in range(n):
        ov = 1 if s == overflow_step else 0
        sql.append("INSERT INTO steps(step, start_ns, dur_ns, loss, scale, overflow, skipped, "
                   "samples, detail, thread) VALUES (%d, %d, 1000, %s, %r, %d, %d, 32, 1, 0);"
                   % (s, s * 1000, "NULL" if ov else "0.5", scale, ov, ov))

def stats(step, seq, op, role, name, dtype, count, nan, inf, lo, hi, absmax, origin, site):
    sql.append("INSERT INTO tensor_stats(step, seq, op, role, name, dtype, count, nan, inf, "
               "underflow, near_overflow, min, max, absmax, origin, callsite) VALUES "
               "(%d, %d, %s, %s, %s, %s, %d, %d, %d, 0, 0, %s, %s, %s, %d, %d);"
               % (step, seq, q(op), q(role), q(name), q(dtype), count, nan, inf, lo, hi, absmax,
                  origin, site))

def run_db():
    sql.append("INSERT INTO meta(key, value) VALUES ('command', './unstable --lr 0.5');")
    sql.append("INSERT INTO callsites(id, address, module, offset, function, file, line, frames) "
               "VALUES (1, 4096, '/x/unstable', 4096, 'forward', 'examples/unstable.c', 42, ''), "
               "(2, 8192, '/x/unstable', 8192, 'loss_fn', 'examples/unstable.c', 88, '');")
    steps(6, overflow_step=3)
    sig(1, "MatMul", "fc1", "fp16", 1)
    sig(2, "ReLU", "act1", "fp16", 1)
    sig(3, "Exp", "blk.exp", "fp32", 2)
    sig(4, "Sum", "loss.sum", "fp32", 2)
    for seq in range(1, 5):
        op(3, seq, seq, 3000 + seq * 100)
    stats(3, 1, "MatMul", "output", "fc1.out", "fp16", 8, 0, 0, -1.5, 2.25, 2.25, 0, 1)
    stats(3, 2, "ReLU", "output", "relu.out", "fp16", 8, 0, 0, 0, 2.25, 2.25, 0, 1)
    stats(3, 3, "Exp", "input", "relu.out", "fp16", 8, 0, 0, 0, 12, 12, 0, 2)
    stats(3, 3, "Exp", "output", "exp.out", "fp16", 8, 2, 2, 1, 7.5, 7.5, 1, 2)
    stats(3, 4, "Sum", "output", "sum.out", "fp32", 1, 1, 0, "NULL", "NULL", "NULL", 0, 2)
    # Exp input and output (the origin): a NaN with a payload, -NaN, +Inf, -Inf
    x = np.array([[0, 1, 2, 3], [4, 5, 12, 0.5]], dtype="<f2")
    dump(3, 3, "Exp", "input", "relu.out", x, "nonfinite")
    y = np.array([[1, 0, 7.5, 2], [0, 3, 0, 0]], dtype="<f2")
    bits = y.view(np.uint16)
    bits[0, 1], bits[1, 0], bits[1, 2], bits[1, 3] = 0x7e01, 0xfe00, 0x7c00, 0xfc00
    dump(3, 3, "Exp", "output", "exp.out", y, "nonfinite")
    # a hostile name, fp32 with NaN and Inf
    dump(3, 4, "Sum", "output", "../../etc/passwd",
         np.array([np.nan, np.inf, -2.5], dtype="<f4"), "nonfinite")
    # two dumps with the same name at step 3: ambiguous
    dump(3, 4, "Sum", "input", "dup", np.array([1, 2], dtype="<f4"), "manual")
    dump(3, 4, "Sum", "grad", "dup", np.array([3, 4], dtype="<f4"), "manual")
    dump(5, 1, "MatMul", "output", "fc1.out", np.arange(6, dtype="<f4").reshape(2, 3), "manual")

def compare_db(amp):
    shift = 1 if amp else 0
    sql.append("INSERT INTO meta(key, value) VALUES ('command', './mlp %s');"
               % ("--amp" if amp else "--fp32"))
    steps(5, scale=128.0 if amp else 1.0)
    rng = np.random.default_rng(7)
    layers = [("MatMul", "fc1"), ("ReLU", "act1"), ("MatMul", "fc2"), ("LayerNorm", "ln1"),
              ("Softmax", "head")]
    if amp:
        dump(2, 1, "Scale", "output", "loss.scale", np.ones(4, dtype="<f2"), "step")
    for k, (o, name) in enumerate(layers):
        base = rng.uniform(-1, 1, size=(4, 8)).astype("<f4")
        seq = k + 1 + shift
        sig(k + 1, o, name, "fp16" if amp else "fp32", None)
        op(2, seq, k + 1, 2000 + seq * 100)
        out = base
        if amp:
            out = base.astype("<f2")
            if o == "LayerNorm":
                out = (base * 1.5 + 0.25).astype("<f2")      # the planted divergence
            if o == "Softmax":
                out = (base * 1.3).astype("<f2")             # downstream of it: 1.3 times the norm
        # the head's output is unnamed: it lines up by its op's label
        dump(2, seq, o, "output", None if o == "Softmax" else name + ".out", out, "step")

    big = rng.uniform(-6, 6, size=(4, 8)).astype("<f4")
    ln = rng.uniform(-1, 1, size=(4, 8)).astype("<f4")
    ex = rng.uniform(0, 2, size=(4, 8)).astype("<f4")
    grad = rng.uniform(-1e-3, 1e-3, size=(4, 8)).astype("<f4")
    if amp:
        big = big.astype("<f2")
        ln = (ln * 1.5 + 0.25).astype("<f2")
        ex = ex.astype("<f2")
        ex[1, 2] = np.inf
        grad = (grad * 128).astype("<f2")
    dump(4, 1, "MatMul", "output", "fc1.out", big, "step")
    dump(4, 2, "LayerNorm", "output", "ln1.out", ln, "step")
    dump(4, 3, "Exp", "output", "exp.out", ex, "step")
    dump(4, 4, "MatMul", "grad", "fc1.grad", grad, "step")

def version_db(extra):
    """Two versions of one model (v2 runs an identity Scale 'extra' after fc: every later seq
    moves by one) whose label 's' stands twice; the values are the same."""
    sql.append("INSERT INTO meta(key, value) VALUES ('command', './model %s');"
               % ("v2" if extra else "v1"))
    steps(1, scale=1.0)
    ops = [("MatMul", "fc", 1.0), ("ReLU", "r", 1.0), ("Scale", "s", 2.0), ("Scale", "s", 3.0)]
    if extra:
        ops.insert(1, ("Scale", "extra", 1.0))
    v = np.linspace(-1, 1, 8, dtype="<f4").reshape(2, 4)
    for k, (o, label, f) in enumerate(ops):
        v = np.maximum(v, 0) if o == "ReLU" else (v * f).astype("<f4")
        sig(k + 1, o, label, "fp32", None)
        op(0, k + 1, k + 1, 1000 + k * 100)
        dump(0, k + 1, o, "output", label + ".out", v, "step")

def nonfinite_db(b):
    """A loss that is all NaN/Inf in b (no element finite on both sides), and a tensor whose
    shape differs between the two."""
    sql.append("INSERT INTO meta(key, value) VALUES ('command', './model %s');" % "ab"[b])
    steps(1, scale=1.0)
    sig(1, "Sum", "loss", "fp16" if b else "fp32", None)
    sig(2, "MatMul", "fc", "fp32", None)
    op(0, 1, 1, 1000)
    op(0, 2, 2, 1100)
    loss = np.array([np.nan, np.inf], dtype="<f2") if b else np.array([1.5, -2], dtype="<f4")
    dump(0, 1, "Sum", "output", "loss.out", loss, "nonfinite" if b else "step")
    dump(0, 2, "MatMul", "output", "fc.out",
         np.arange(6, dtype="<f4").reshape((3, 2) if b else (2, 3)), "step")

for name, make in (("run", run_db), ("fp32", lambda: compare_db(False)),
                   ("amp", lambda: compare_db(True)), ("v1", lambda: version_db(False)),
                   ("v2", lambda: version_db(True)), ("nfa", lambda: nonfinite_db(0)),
                   ("nfb", lambda: nonfinite_db(1))):
    sql.clear()
    make()
    with open(name + ".sql", "w") as f:
        f.write("BEGIN;\n" + "\n".join(sql) + "\nCOMMIT;\n")
PY

mkdb() { # mkdb KIND: KIND.db from the schema and KIND.sql
	{ echo "PRAGMA synchronous = OFF;"; cat "$ROOT/schema/profile.sql" "$T/$1.sql"; } | sqlite3 "$T/$1.db"
}
if ! (cd "$T" && "$PY" gen.py) || ! mkdb run || ! mkdb fp32 || ! mkdb amp || ! mkdb v1 || ! mkdb v2 ||
	! mkdb nfa || ! mkdb nfb; then
	e2e_abort "cannot build the synthetic profiles"
fi
cp "$T/run.db" "$T/newer.db" && sqlite3 "$T/newer.db" 'PRAGMA user_version = 4;'
sqlite3 "$T/other.db" 'CREATE TABLE t(x); INSERT INTO t VALUES (1);'
echo "not a database" >"$T/text.db"
cd "$T" || exit 1

# ---- usage ----------------------------------------------------------------------------------
run "--help" 0 --help && expect "--help prints usage on stdout" "$T/out" '^usage: ampdump --step'
run "--version" 0 --version && expect "--version" "$T/out" '^ampdump [0-9]+\.[0-9]+'
run "no arguments" 2 && expect "no arguments: usage on stderr" "$T/err" '^usage: '
run "unknown option" 2 --bogus && expect "unknown option named" "$T/err" "unknown option '--bogus'"
run "bad --step value" 2 --step=abc --db run.db && expect "bad --step named" "$T/err" "invalid --step 'abc'"
run "negative --step" 2 --step -1 --db run.db
run "bad --format" 2 --step 3 --db run.db --format=xml && expect "bad --format named" "$T/err" "invalid --format 'xml'"
run "--tensor without --npy" 2 --step 3 --tensor exp.out --db run.db
run "--compare with one profile" 2 --compare fp32.db

# ---- step table -----------------------------------------------------------------------------
if run "step table" 0 --step 3 --db run.db; then
	expect "step table: heading names the origin" "$T/out" '^step 3 of run.db: 8 tensors, 5 dumped; origin \(\*\): Exp at seq 3 \(blk.exp\)'
	# line 2 is the header, lines 3-4 the origin op (input then output), marked *
	if sed -n 2p "$T/out" | grep -Eq '^origin +seq +op +label +role +name +dtype +shape +count +nan +inf +min +max +absmax +dump_id +callsite$'; then
		ok "step table: header"
	else
		bad "step table: header" "$(sed -n 2p "$T/out")"
	fi
	if sed -n 3p "$T/out" | grep -Eq '^\* +3 +Exp +blk\.exp +input +relu\.out +fp16 +\(2,4\) +8 +0 +0 +0 +12 +12 +1 +loss_fn examples/unstable\.c:88$' &&
		sed -n 4p "$T/out" | grep -Eq '^\* +3 +Exp +blk\.exp +output +exp\.out +fp16 +\(2,4\) +8 +2 +2 +1 +7\.5 +7\.5 +2 +loss_fn examples/unstable\.c:88$'; then
		ok "step table: origin op listed first and marked"
	else
		bad "step table: origin op listed first and marked" "$(cat "$T/out")"
	fi
	if sed -n 5p "$T/out" | grep -Eq '^ +1 +MatMul +fc1 +output +fc1\.out +fp16 +- +8 +0 +0 +-1\.5 +2\.25 +2\.25 +- +forward examples/unstable\.c:42$'; then
		ok "step table: then by seq, checked-only tensor without dump"
	else
		bad "step table: then by seq" "$(sed -n 5p "$T/out")"
	fi
	# statistics computed from the data of a dump without a stats row
	expect "step table: stats computed from a dump" "$T/out" '^ +4 +Sum +loss\.sum +input +dup +fp32 +\(2\) +2 +0 +0 +1 +2 +2 +4 '
	expect "step table: hostile name shown as is, nan/inf counted" "$T/out" ' output +\.\./\.\./etc/passwd +fp32 +\(3\) +3 +1 +1 +-2\.5 +-2\.5 +2\.5 +3 '
	expect "step table: stats row with NULL min shows -" "$T/out" ' output +sum\.out +fp32 +- +1 +1 +0 +- +- +- +- '
fi
if run "step table csv" 0 --step 3 --db run.db --format=csv; then
	expect "csv: header" "$T/out" '^origin,seq,op,label,role,name,dtype,shape,count,nan,inf,min,max,absmax,dump_id,callsite$'
	if sed -n 2p "$T/out" | grep -qx '1,3,Exp,blk.exp,input,relu.out,fp16,"(2,4)",8,0,0,0,12,12,1,loss_fn examples/unstable.c:88' &&
		sed -n 3p "$T/out" | grep -q '^1,3,Exp,blk.exp,output,exp.out,'; then
		ok "csv: origin rows first, quoted shape"
	else
		bad "csv: origin rows first" "$(head -4 "$T/out")"
	fi
	[ "$(wc -l <"$T/out")" -eq 9 ] && ok "csv: 8 rows + header" || bad "csv: row count" "$(cat "$T/out")"
fi
if run "step table json" 0 --step 3 --db run.db --format=json; then
	if "$PY" - "$T/out" <<'PY'; then ok "json: parses, same data, origin first"; else bad "json: content" "$(cat "$T/out")"; fi
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["format_version"] == 1, doc.get("format_version")
rows = doc["rows"]
assert len(rows) == 8, len(rows)
assert rows[0]["origin"] is True and rows[1]["origin"] is True and rows[2]["origin"] is False
assert rows[1]["name"] == "exp.out" and rows[1]["nan"] == 2 and rows[1]["inf"] == 2 and rows[1]["dump_id"] == 2
assert rows[0]["min"] == 0 and rows[0]["max"] == 12 and rows[0]["shape"] == "(2,4)"
assert rows[2]["label"] == "fc1" and rows[2]["dump_id"] is None and rows[2]["callsite"] == "forward examples/unstable.c:42"
sums = [r for r in rows if r["name"] == "sum.out"]
assert sums[0]["min"] is None and sums[0]["nan"] == 1
PY
fi
run "profile as argument" 0 --step 5 run.db && expect "profile as argument: manual dump" "$T/out" 'fc1\.out +fp32 +\(2,3\) +6 +0 +0 +0 +5 +5 +6'

# ---- --list ---------------------------------------------------------------------------------
if run "--list" 0 --list --db run.db; then
	expect "--list: heading" "$T/out" '^run.db: 2 of 6 steps with anomalies or dumps$'
	expect "--list: step 3 overflow, origin, dumps" "$T/out" '^ +3 +\* +\* +128 +- +2 +3 +Exp +exp\.out +5 +60$'
	expect "--list: step 5 manual dump" "$T/out" '^ +5 +128 +0\.5 +- +- +- +- +1 +24$'
	[ "$(wc -l <"$T/out")" -eq 4 ] && ok "--list: only steps 3 and 5" || bad "--list: only steps 3 and 5" "$(cat "$T/out")"
fi
run "--list csv" 0 --list --db run.db --format=csv &&
	expect "--list csv" "$T/out" '^3,1,1,128,,2,3,Exp,exp\.out,5,60$'
run "--list json" 0 --list --db fp32.db --format=json &&
	expect "--list json: dumps of step 2" "$T/out" '"step": 2, "overflow": false, "skipped": false'

# ---- .npy export ----------------------------------------------------------------------------
mkdir -p "$T/x"
if run "npy export of every dump" 0 --step 3 --npy "$T/x/a/b" --db run.db; then
	ok "npy export: directory created"
	[ "$(grep -c '\.npy' "$T/out")" -eq 5 ] && ok "npy export: 5 files listed" || bad "npy export: files listed" "$(cat "$T/out")"
	if [ -z "$(find "$T" -name passwd)" ] && [ ! -e "$T/x/etc" ] && [ ! -e "$T/etc" ] &&
		[ "$(find "$T/x" -type f | grep -vc '^'"$T"'/x/a/b/[^/]*\.npy$')" -eq 0 ]; then
		ok "npy export: no path traversal, every file directly in DIR"
	else
		bad "npy export: path traversal" "$(find "$T/x" -type f)"
	fi
	expect "npy export: hostile name sanitized" "$T/out" '/x/a/b/step3_seq4_output_______etc_passwd\.npy'
	if "$PY" - "$T/x/a/b" <<'PY'; then ok "npy export: numpy loads them, NaN/Inf bit-exact"; else bad "npy export: numpy check"; fi
import sys, os
import numpy as np
d = sys.argv[1]
y = np.load(os.path.join(d, "step3_seq3_output_exp.out.npy"))
assert y.dtype == np.dtype("<f2") and y.shape == (2, 4), (y.dtype, y.shape)
bits = y.view(np.uint16)
assert bits[0, 1] == 0x7e01 and bits[1, 0] == 0xfe00, bits   # NaN payload and -NaN kept
assert bits[1, 2] == 0x7c00 and bits[1, 3] == 0xfc00
assert [tuple(p) for p in np.argwhere(np.isnan(y))] == [(0, 1), (1, 0)]
assert [tuple(p) for p in np.argwhere(np.isinf(y))] == [(1, 2), (1, 3)]
assert y[0, 2] == np.float16(7.5)
x = np.load(os.path.join(d, "step3_seq3_input_relu.out.npy"))
assert x.dtype == np.dtype("<f2") and x.tolist() == [[0, 1, 2, 3], [4, 5, 12, 0.5]]
z = np.load(os.path.join(d, "step3_seq4_output_______etc_passwd.npy"))
assert z.dtype == np.dtype("<f4") and z.shape == (3,)
assert np.isnan(z[0]) and np.isposinf(z[1]) and z[2] == -2.5
for f in os.listdir(d):   # header padded to a multiple of 64 bytes, version 1.0
    h = open(os.path.join(d, f), "rb").read(10)
    assert h[:8] == b"\x93NUMPY\x01\x00", f
    assert (10 + h[8] + 256 * h[9]) % 64 == 0, f
PY
fi
if run "npy export by name" 0 --step 3 --tensor exp.out --npy "$T/one" --db run.db; then
	[ "$(ls "$T/one")" = "step3_seq3_output_exp.out.npy" ] && ok "npy by name: one file" || bad "npy by name" "$(ls "$T/one")"
fi
run "npy export by id" 0 --step 3 --tensor 3 --npy "$T/byid" --db run.db &&
	expect "npy by id: the hostile-named dump" "$T/out" 'step3_seq4_output_______etc_passwd\.npy'
run "npy by hostile name" 0 --step 3 --tensor ../../etc/passwd --npy "$T/h/i" --db run.db &&
	{ [ -f "$T/h/i/step3_seq4_output_______etc_passwd.npy" ] && [ ! -e "$T/etc" ] && ok "npy by hostile name stays in DIR" || bad "npy by hostile name" "$(find "$T/h")"; }
run "npy refuses to overwrite" 1 --step 3 --tensor exp.out --npy "$T/one" --db run.db &&
	expect "npy overwrite: message and hint" "$T/err" "cannot write '.*/one/step3_seq3_output_exp.out.npy': file exists"
run "npy --force overwrites" 0 --step 3 --tensor exp.out --npy "$T/one" --force --db run.db
ln -s /nonexistent-target "$T/one/step3_seq3_input_relu.out.npy"
run "npy never writes through a symlink" 1 --step 3 --tensor 1 --npy "$T/one" --force --db run.db &&
	[ ! -e /nonexistent-target ] && ok "npy symlink: target not created"

# ---- compare --------------------------------------------------------------------------------
if run "compare" 1 --compare fp32.db amp.db --step 2; then
	expect "compare: header" "$T/out" '^step +seq +seq_b +op +label +role +name +dtype_a +dtype_b +shape +count +cosine +norm_ratio +max_abs +max_rel +rtol +tol_ratio +nonfinite +status +why$'
	expect "compare: aligned by layer despite shifted seq" "$T/out" '^ +2 +1 +2 +MatMul +fc1 +output +fc1\.out +fp32 +fp16 +\(4,8\) +32 +[0-9.e-]+ +[0-9.e-]+ +[0-9.e-]+ +[0-9.e-]+ +0\.0009765625 +0\.[0-9e-]+ +0 +ok +-$'
	[ "$(grep -c ' ok  *-$' "$T/out")" -eq 3 ] && ok "compare: the equal ops are ok" || bad "compare: ok count" "$(cat "$T/out")"
	expect "compare: planted divergence (cosine 0.96) flagged first" "$T/out" '^ +2 +4 +5 +LayerNorm +ln1 +output +ln1\.out +fp32 +fp16 .* FIRST +drift$'
	expect "compare: downstream op (cosine 1, 1.3 times the norm) over, not first" "$T/out" '^ +2 +5 +6 +Softmax +head +output +- .* 0\.9999[0-9]* +1\.3[0-9]* .* over +drift$'
	expect "compare: summary names it" "$T/out" "^first divergence: step 2 seq 4 LayerNorm \(ln1\) output 'ln1.out': cosine 0\.9"
	expect "compare: unmatched tensor noted" "$T/err" "1 dumped tensor of 'amp.db' has no counterpart in 'fp32.db'"
fi
run "compare without --step" 1 --compare fp32.db amp.db --format=csv &&
	expect "compare csv: threshold divergence of step 2 over, not first" "$T/out" '^2,4,5,LayerNorm,ln1,output,ln1\.out,fp32,fp16,"\(4,8\)",32,[^,]+,[^,]+,[^,]+,[^,]+,0\.0009765625,[^,]+,0,over,drift$' &&
	expect "compare csv: a later non-finite mismatch (step 4) is FIRST" "$T/out" '^4,3,3,Exp,,output,exp\.out,fp32,fp16,"\(4,8\)",32,[^,]+,[^,]+,inf,inf,0\.0009765625,[^,]+,1,FIRST,nonfinite$'
if run "compare of two versions of a model" 0 --compare v1.db v2.db --step 0; then
	[ "$(grep -c ' ok  *-$' "$T/out")" -eq 4 ] && ok "compare of two versions: a label used twice pairs in order, past the added op" ||
		bad "compare of two versions: pairs" "$(cat "$T/out")"
	expect "compare of two versions: the second Scale 's' with the second" "$T/out" '^ +0 +4 +5 +Scale +s +output +s\.out .* ok +-$'
	expect "compare of two versions: the added op noted" "$T/err" "1 dumped tensor of 'v2.db' has no counterpart in 'v1.db' \(first: step 0 seq 2 Scale output 'extra.out'\)"
fi
if run "compare json" 1 --compare fp32.db amp.db --format=json; then
	if "$PY" - "$T/out" <<'PY'; then ok "compare json: metrics"; else bad "compare json: metrics" "$(cat "$T/out")"; fi
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["format_version"] == 1, doc.get("format_version")
rows = doc["rows"]
st = {(r["step"], r["name"] or r["label"]): r for r in rows}
assert [r["status"] for r in rows] == ["ok", "ok", "ok", "over", "over", "ok", "over", "FIRST", "ok"], \
    [r["status"] for r in rows]
for n in ("fc1.out", "act1.out", "fc2.out"):
    assert st[2, n]["cosine"] > 0.9999 and st[2, n]["max_abs"] <= 0.0005, st[2, n]
assert st[2, "ln1.out"]["max_abs"] > 0.1
assert st[2, "ln1.out"]["why"] == "drift" and st[2, "head"]["why"] == "drift"
assert abs(st[2, "head"]["norm_ratio"] - 1.3) < 0.01 and st[2, "head"]["cosine"] > 0.9999
# fp16 rounding at |x| up to 6 exceeds 0.001 but not 0.001 + 2^-10*|x|
big = st[4, "fc1.out"]
assert big["max_abs"] > 1e-3 and big["rtol"] == 2**-10 and 0 < big["tol_ratio"] <= 1, big
assert big["why"] is None and st[4, "exp.out"]["why"] == "nonfinite", (big, st[4, "exp.out"])
# the gradient: amp.db holds it times 128; unscaled, only fp16 rounding is left
g = st[4, "fc1.grad"]
assert g["status"] == "ok" and g["max_abs"] < 1e-6 and g["max_rel"] <= 2**-11, g
# not finite: null, and the flag member says which
assert st[4, "exp.out"]["nonfinite"] == 1 and st[4, "exp.out"]["max_abs"] is None
assert st[4, "exp.out"]["max_abs_nonfinite"] == "inf", st[4, "exp.out"]
PY
fi
if run "compare prefers a non-finite mismatch" 1 --compare fp32.db amp.db --step 4; then
	expect "compare: the criterion heads the output" "$T/out" '^flag: nonfinite = Inf/NaN that differ; drift = cosine < 0\.99 or norm ratio off 1 by > 0\.1, with some \|a-b\| > 0\.001 \+ rtol\*\|a\|; floor = cosine < 0\.9; ceiling = some \|a-b\| > 1 \+ rtol\*\|a\|$'
	expect "compare: then the rtol of the pairs" "$T/out" '^rtol: 0\.0009765625; a: the reference$'
	expect "compare: the loss scales of the gradients" "$T/out" "^grads: divided by their run's loss scale \(a: 1, b: 128\)$"
	expect "compare: fp16 rounding at |x| ~ 6 is ok" "$T/out" '^ +4 +1 +1 +MatMul +- +output +fc1\.out .* ok +-$'
	expect "compare: earlier threshold divergence is over" "$T/out" '^ +4 +2 +2 +LayerNorm .* over +drift$'
	expect "compare: the Inf in amp.db only is FIRST" "$T/out" '^ +4 +3 +3 +Exp .* 1 +FIRST +nonfinite$'
	expect "compare: unscaled gradient is ok" "$T/out" '^ +4 +4 +4 +MatMul +- +grad +fc1\.grad .* ok +-$'
	expect "compare: summary names the non-finite mismatch" "$T/out" "^first divergence: step 4 seq 3 Exp output 'exp.out': cosine [0-9.]+, max abs error inf; Inf/NaN in 'amp.db' only at 1 of 32 elements; 2 of 4 tensors flagged, 1 with Inf/NaN in one run only$"
fi
if run "compare --rtol=0 --max-abs-ceiling=0.001" 1 --compare fp32.db amp.db --step 4 --rtol=0 --max-abs-ceiling=0.001; then
	expect "compare --rtol=0 --max-abs-ceiling=0.001: criterion" "$T/out" '^flag: .*; ceiling = some \|a-b\| > 0\.001 \+ rtol\*\|a\|$'
	expect "compare --rtol=0: rtol line" "$T/out" '^rtol: 0; a: the reference$'
	expect "compare --rtol=0 --max-abs-ceiling=0.001: fp16 rounding at |x| ~ 6 is now over" "$T/out" '^ +4 +1 +1 +MatMul +- +output +fc1\.out .* 0 +[0-9.]+ +0 +over +ceiling$'
fi
run "compare --rtol and --max-abs loosened" 0 --compare fp32.db amp.db --step 2 --rtol=1 --max-abs=1 &&
	expect "compare: a cosine of 0.96 with small errors is not flagged" "$T/out" "^no divergence: 5 of 5 tensors compared, none flagged; lowest cosine 0\.96[0-9]* \(step 2 seq 4 LayerNorm \(ln1\) output 'ln1.out'\)$"
run "compare --cosine-floor=0.99" 1 --compare fp32.db amp.db --step 2 --rtol=1 --max-abs=1 --cosine-floor=0.99 &&
	expect "compare: the floor flags a cosine alone" "$T/out" "^first divergence: step 2 seq 4 LayerNorm \(ln1\) output 'ln1.out': cosine 0\.9[0-9]+, max abs error [0-9.]+; cosine below 0\.99; 1 of 5 tensors flagged$"
run "compare --norm-diff=0.5" 1 --compare fp32.db amp.db --step 2 --norm-diff=0.5 --format=csv &&
	expect "compare --norm-diff=0.5: 1.3 times the norm is within" "$T/out" '^2,5,6,Softmax,head,output,,.*,ok,$'
cp amp.db noscale.db && sqlite3 noscale.db 'UPDATE steps SET scale = NULL'
run "compare without a loss scale" 1 --compare fp32.db noscale.db --step 4 &&
	expect "compare without a loss scale: note" "$T/err" "^ampdump: note: step 4 of 'noscale.db' has no loss scale; its gradients are compared as dumped$" &&
	expect "compare without a loss scale: gradient compared as dumped, 128 times the norm" "$T/out" '^ +4 +4 +4 +MatMul +- +grad +fc1\.grad .* 0\.9999[0-9]* +12[78]\.[0-9]* .* over +drift$'
run "compare identical runs" 0 --compare fp32.db fp32.db && expect "compare identical: no divergence" "$T/out" '^no divergence: 9 of 9 tensors compared, none flagged; lowest cosine 1 '
run "compare thresholds are options" 0 --compare fp32.db amp.db --step 2 --max-abs=10 --cosine=-1 &&
	{ ! grep -q 'FIRST' "$T/out" && ok "compare: loose thresholds flag nothing" || bad "compare: loose thresholds" "$(cat "$T/out")"; }
if run "compare with nothing finite on one side" 1 --compare nfa.db nfb.db --format=json; then
	if "$PY" - "$T/out" <<'PY'; then ok "compare json: no finite pair, no cosine; B's shape"; else bad "compare json: no finite pair" "$(cat "$T/out")"; fi
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))["rows"]}
loss, fc = rows["loss.out"], rows["fc.out"]
# nothing to measure a cosine or a norm on: null, not a perfect 1
assert loss["cosine"] is None and loss["norm_ratio"] is None and loss["tol_ratio"] is None, loss
assert loss["nonfinite"] == 2 and loss["why"] == "nonfinite" and loss["status"] == "FIRST", loss
assert fc["status"] == "shape" and fc["shape"] == "(2,3)" and fc["why"] == "b (3,2)", fc
PY
fi
run "compare with nothing finite on one side, text" 1 --compare nfa.db nfb.db &&
	expect "compare: the summary says no element is finite on both sides" "$T/out" "^first divergence: step 0 seq 1 Sum \(loss\) output 'loss.out': no element finite on both sides; Inf/NaN in 'nfb.db' only at 2 of 2 elements" &&
	expect "compare: empty cosine and norm ratio" "$T/out" '^ +0 +1 +1 +Sum +loss +output +loss\.out +fp32 +fp16 +\(2\) +2 +- +- +'
run "compare NaN side" 0 --compare run.db run.db --step 3 &&
	expect "compare same NaN/Inf positions agree" "$T/out" 'exp\.out .* 1 +1 +0 +0 +0\.0009765625 +0 +0 +ok +-$'
run "bad --rtol" 2 --compare fp32.db amp.db --rtol=-1 && expect "bad --rtol named" "$T/err" "invalid --rtol '-1': expected a number >= 0"
run "--rtol without --compare" 2 --step 2 --rtol=0 --db fp32.db && expect "--rtol without --compare named" "$T/err" "--rtol cannot be used with --step alone"
run "bad --cosine-floor" 2 --compare fp32.db amp.db --cosine-floor=1.5 && expect "bad --cosine-floor named" "$T/err" "invalid --cosine-floor '1.5': expected a number in \[-1, 1\]"
run "bad --max-abs-ceiling" 2 --compare fp32.db amp.db --max-abs-ceiling=x && expect "bad --max-abs-ceiling named" "$T/err" "invalid --max-abs-ceiling 'x': expected a number >= 0"
run "--norm-diff without --compare" 2 --step 2 --norm-diff=1 --db fp32.db && expect "--norm-diff without --compare named" "$T/err" "--norm-diff cannot be used with --step alone"

# ---- bad input ------------------------------------------------------------------------------
run "step never reached" 1 --step 1234 --db run.db &&
	expect "step never reached: message" "$T/err" '^ampdump: step 1234 was never reached \(the run in .run\.db. has 6 steps\)$' &&
	expect "step never reached: hint" "$T/err" '^hint: .*ampdump --list'
run "step with nothing recorded" 1 --step 1 --db run.db &&
	expect "nothing recorded: message" "$T/err" "^ampdump: nothing was recorded at step 1 in 'run.db'" &&
	expect "nothing recorded: re-run hint" "$T/err" '^hint: .*ampdump --application="./unstable --lr 0.5" --step 1 --output=dump.db'
run "missing profile" 1 --step 3 --db nosuch.db && expect "missing profile: message" "$T/err" "^ampdump: cannot open 'nosuch.db': no such file"
run "default profile.db missing" 1 --list && expect "default profile.db" "$T/err" "cannot open 'profile.db'"
run "text file" 1 --step 3 --db text.db && expect "text file: not a profile" "$T/err" "^ampdump: cannot open 'text.db': .*not an ampkit profile"
run "other sqlite db" 1 --list --db other.db && expect "other db: not a profile" "$T/err" "^ampdump: cannot open 'other.db': not an ampkit profile"
run "newer schema" 1 --step 3 --db newer.db &&
	expect "newer schema: message" "$T/err" "^ampdump: cannot open 'newer.db': profile schema version 4 is newer than this tool's 3" &&
	expect "newer schema: hint" "$T/err" '^hint: '
run "unknown tensor" 1 --step 3 --tensor nosuch --npy "$T/u" --db run.db &&
	expect "unknown tensor: message" "$T/err" "^ampdump: no tensor 'nosuch' was dumped at step 3$"
run "unknown tensor id" 1 --step 3 --tensor 999 --npy "$T/u" --db run.db
run "tensor id of another step" 1 --step 3 --tensor 6 --npy "$T/u" --db run.db &&
	expect "tensor of another step: message" "$T/err" "dump 6 is a tensor of step 5, not of step 3"
run "ambiguous tensor name" 1 --step 3 --tensor dup --npy "$T/u" --db run.db &&
	expect "ambiguous name: message" "$T/err" "tensor name 'dup' is ambiguous at step 3: 2 dumps have it" &&
	expect "ambiguous name: candidates listed" "$T/err" '^  dump_id 5: seq 4 Sum grad, fp32 \(2\)$'
[ ! -e "$T/u" ] && ok "failed selection creates no directory" || bad "failed selection created $T/u"
: >"$T/plainfile"
run "export dir is a file" 1 --step 3 --tensor exp.out --npy "$T/plainfile" --db run.db &&
	expect "export dir is a file: message" "$T/err" "^ampdump: cannot write to '.*/plainfile': Not a directory"
run "export dir under a file" 1 --step 3 --tensor exp.out --npy "$T/plainfile/sub" --db run.db &&
	expect "export dir under a file: message" "$T/err" "^ampdump: cannot create directory '.*/plainfile/sub': Not a directory"
if [ "$(id -u)" -ne 0 ]; then
	mkdir "$T/ro" && chmod 555 "$T/ro"
	run "read-only export dir" 1 --step 3 --tensor exp.out --npy "$T/ro" --db run.db &&
		expect "read-only dir: message" "$T/err" "permission denied|Permission denied"
fi
run "npy at a step without dumps" 1 --step 1 --npy "$T/v" --db run.db &&
	expect "npy nothing dumped: message" "$T/err" "nothing was dumped at step 1"
run "compare step never reached" 2 --compare fp32.db amp.db --step 9 &&
	expect "compare step never reached: message" "$T/err" "step 9 was never reached \(the run in 'fp32\.db' has 5 steps\)"
run "compare step not dumped" 2 --compare fp32.db amp.db --step 1 &&
	expect "compare step not dumped: message" "$T/err" "nothing was dumped at step 1 in 'fp32.db'"
run "compare no common step" 2 --compare fp32.db run.db &&
	expect "compare no common step: message" "$T/err" "have no dumped step in common"
run "compare not a profile" 2 --compare fp32.db text.db && expect "compare not a profile" "$T/err" "cannot open 'text.db'"
run "re-run of a missing program" 1 --application="./no-such-program" --step 1 --output="$T/re.db"

# ---- bf16: fp32.db's step-2 dumps rounded to bf16 (round to nearest even) ----------------
cp fp32.db bf16.db
if "$PY" - bf16.db <<'PY'; then ok "bf16.db: fp32 dumps rounded to bf16"; else bad "bf16.db: cannot build"; fi
import sqlite3, sys
import numpy as np
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT id, data FROM dumps WHERE step = 2 AND dtype = 'fp32' AND data IS NOT NULL").fetchall()
assert rows
for i, data in rows:
    u = np.frombuffer(data, dtype="<u4").astype(np.uint64)
    b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    db.execute("UPDATE dumps SET dtype = 'bf16', bytes = ?, data = ? WHERE id = ?", (b.nbytes, b.tobytes(), i))
db.commit()
PY
if run "compare fp32 bf16" 0 --compare fp32.db bf16.db --step 2; then
	expect "compare fp32 bf16: rtol 2^-7 with a bf16 side" "$T/out" '^rtol: 0\.0078125; a: the reference$'
	expect "compare fp32 bf16: bf16 rounding alone is no divergence" "$T/out" '^no divergence: '
fi
if run "compare fp32 bf16 json" 0 --compare fp32.db bf16.db --step 2 --format=json; then
	if "$PY" - "$T/out" <<'PY'; then ok "compare fp32 bf16 json: every pair rtol 2^-7, ok, within a third of the tolerance"; else bad "compare fp32 bf16 json" "$(cat "$T/out")"; fi
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert rows and all(r["rtol"] == 2**-7 and r["status"] == "ok" for r in rows), rows
# bf16 rounds to 8 significant bits: |a-b| <= 2^-8 |a|, half of 2^-7 |a| (plus max-abs)
worst = max(r["tol_ratio"] for r in rows)
print("     worst |a-b| / (0.001 + 2^-7 |a|) over the pairs: %.4g" % worst)
assert worst <= 0.5, worst
PY
fi
if run "npy export of bf16 dumps" 0 --step 2 --npy "$T/b16" --db bf16.db; then
	expect "npy export of bf16: listed as <f4-exported bf16" "$T/out" 'bf16'
	if "$PY" - "$T/b16" fp32.db <<'PY'; then ok "npy export of bf16: float32 files, the bf16 values exactly, within 2^-8 of fp32"; else bad "npy export of bf16: content"; fi
import glob, sqlite3, sys, os
import numpy as np
files = sorted(glob.glob(os.path.join(sys.argv[1], "*.npy")))
ref = sqlite3.connect(sys.argv[2])
want = {}
for data, in ref.execute("SELECT data FROM dumps WHERE step = 2 AND dtype = 'fp32' AND data IS NOT NULL"):
    f = np.frombuffer(data, dtype="<f4")
    u = f.view("<u4").astype(np.uint64)
    r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype("<u4").view("<f4")
    want[r.tobytes()] = f
assert len(files) == len(want), (files, len(want))
worst = 0.0
for path in files:
    x = np.load(path)
    assert x.dtype == np.dtype("<f4"), (path, x.dtype)
    f = want[x.ravel().tobytes()]  # exactly the bf16 values, widened
    worst = max(worst, float(np.max(np.abs(x.ravel() - f) / np.maximum(np.abs(f), 1e-30))))
print("     max relative difference to the fp32 dump: %.4g (bound 2^-8 = %.4g)" % (worst, 2**-8))
assert worst <= 2**-8
PY
fi

# ---- --compare's exit status, as cmp(1): 0 same, 1 a divergence, 2 trouble -----------------
run "compare identical runs: exit 0" 0 --compare fp32.db fp32.db --step 2 && ok "compare identical runs: exit 0"
run "compare a divergence: exit 1" 1 --compare fp32.db amp.db --step 2 && ok "compare a divergence: exit 1, results on stdout" &&
	expect "compare a divergence: the first divergence still printed" "$T/out" '^first divergence: '
run "compare an unreadable profile: exit 2" 2 --compare fp32.db no-such.db && ok "compare an unreadable profile: exit 2"
run "compare json: first divergence" 1 --compare fp32.db amp.db --format=json &&
	if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); i=d["first_divergence"]; assert d["rows"][i]["status"] == "FIRST", i; assert sum(r["status"] == "FIRST" for r in d["rows"]) == 1' "$T/out"; then
		ok "compare json: first_divergence is the index of the FIRST row"
	else bad "compare json: first_divergence" "$(head -c 600 "$T/out")"; fi
run "compare json: no divergence" 0 --compare fp32.db fp32.db --format=json &&
	if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["first_divergence"] is None and d["rows"]' "$T/out"; then
		ok "compare json: first_divergence null when nothing is flagged"
	else bad "compare json: no divergence" "$(head -c 600 "$T/out")"; fi

# ---- what the reader is told -----------------------------------------------------------------
# tensors of another shape are not compared: said, and a difference (exit 1); nothing compared
# at all is trouble (exit 2), never "no divergence"
cp amp.db shape1.db && sqlite3 shape1.db "UPDATE dumps SET shape = '(7)' WHERE name = 'ln1.out'"
run "compare: a tensor of another shape" 1 --compare fp32.db shape1.db --step 2 --rtol=1 --max-abs=1 &&
	expect "compare: the tensor of another shape is said" "$T/out" '^1 of 5 tensors differ in shape and were not compared'
cp amp.db shapes.db && sqlite3 shapes.db "UPDATE dumps SET shape = '(7)'"
run "compare: every tensor of another shape" 2 --compare fp32.db shapes.db --step 2 &&
	expect "compare: nothing compared, said" "$T/err" "^ampdump: nothing was compared: of 5 tensors lined up, 5 differ in shape and 0 have no data"
# dumps the run did not keep, and a profile never finalized, are said on every read
cp run.db skipped.db && sqlite3 skipped.db "INSERT OR REPLACE INTO meta VALUES ('dumps_skipped', '31'), ('dumps_skipped_limit', '31')"
run "--list of a profile with dumps skipped" 0 --list --db skipped.db &&
	expect "dumps skipped: said" "$T/err" "^ampdump: note: 'skipped.db': 31 tensor dumps of the run were not kept \(31: --dump-limit reached\): they are missing here$"
cp run.db unfinished.db && sqlite3 unfinished.db "INSERT OR REPLACE INTO meta VALUES ('end', 'collecting')"
run "--step of a profile never finalized" 0 --step 3 --db unfinished.db &&
	expect "never finalized: said" "$T/err" "^ampdump: note: 'unfinished.db' was never finalized"
# a profile that is a pipe is refused, not waited on (opening a FIFO waits for a writer)
mkfifo "$T/fifo.db"
timeout 10 "$AMPDUMP" --list "$T/fifo.db" >"$T/out" 2>"$T/err"
check "a FIFO as the profile: refused at once (exit 1)" "$?" 1
expect "a FIFO as the profile: says it is a pipe" "$T/err" "fifo\.db.*is a pipe, not a file"
timeout 10 "$AMPDUMP" --list <(cat run.db) >"$T/out" 2>"$T/err"
check "a process substitution as the profile: refused (exit 1)" "$?" 1
expect "a process substitution as the profile: says it is a pipe" "$T/err" "is a pipe, not a file"
# an export over a FIFO is refused, not waited on; a lost list of the files is an error
run "npy export" 0 --step 3 --db run.db --npy fx
f=$(head -1 "$T/out" | cut -f1)
rm -f "$f" && mkfifo "$f"
timeout 20 "$AMPDUMP" --step 3 --db run.db --npy fx --force >"$T/out" 2>"$T/err"
check "npy export over a FIFO: refused (exit 1, no wait)" "$?" 1
expect "npy export over a FIFO: says why" "$T/err" "not a regular file"
rm -f "$f"
"$AMPDUMP" --step 3 --db run.db --npy fx --force >/dev/full 2>"$T/err"
check "npy export with stdout full: exit 1" "$?" 1
"$AMPDUMP" --help >/dev/full 2>/dev/null
check "--help with stdout full: exit 1" "$?" 1
# a re-run: the program's output goes to stderr, ampdump's JSON alone to stdout
if [ -x "$ROOT/$BUILD/bin/unstable" ] || [ -x "$BUILD/bin/unstable" ]; then
	U=$(cd "$ROOT" && realpath "$BUILD/bin/unstable")
	"$AMPDUMP" --application="$U --precision=fp16 --steps 252 --log-every 0" --step 250 \
		--output=rerun.db --format=json >"$T/out" 2>"$T/err"
	check "re-run --format=json: exit 0" "$?" 0
	if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rows"], d' "$T/out"; then
		ok "re-run --format=json: stdout is one JSON document with the step's tensors"
	else bad "re-run --format=json: not JSON" "$(head -5 "$T/out")"; fi
	# histograms every 10 steps: a step without one is named as such, with the steps that have
	"$(dirname "$AMPDUMP")/ampprof" -q -o hist10.db --stats-every=10 -- "$U" --steps 30 \
		--log-every 0 >/dev/null 2>&1
	run "--hist at a step without histograms" 1 --hist --step 5 hist10.db &&
		expect "--hist --step 5: that step has none, the others are named" "$T/err" \
			"no exponent histogram at step 5 in 'hist10.db' \(steps with one: 0, 10, 20\)"
	run "--hist at a step with histograms" 0 --hist --step 10 hist10.db
fi

# ---- names an application wrote: invalid UTF-8, terminal escapes, a newline -----------------
# a, 0x80 (invalid), b, ESC [2J (clear screen), LF, "new", ESC ]0;t BEL (set the title)
HOSTILE="X'6180621b5b324a0a6e65771b5d303b7407'"
cp run.db hostile.db
sqlite3 hostile.db "UPDATE tensor_stats SET name = CAST($HOSTILE AS TEXT) WHERE name = 'exp.out';
	UPDATE dumps SET name = CAST($HOSTILE AS TEXT) WHERE name = 'exp.out';
	UPDATE tensor_stats SET op = CAST($HOSTILE AS TEXT) WHERE op = 'Exp';
	UPDATE dumps SET op = CAST($HOSTILE AS TEXT) WHERE op = 'Exp'"
for fmt in text csv json; do
	if run "hostile names: --step 3 --format=$fmt" 0 --step 3 --db hostile.db --format=$fmt; then
		if LC_ALL=C grep -q $'\x1b' "$T/out"; then bad "hostile names ($fmt): an ESC byte reached the output"; else ok "hostile names ($fmt): no ESC byte"; fi
	fi
done
run "hostile names: json" 0 --step 3 --db hostile.db --format=json &&
	if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1], encoding="utf-8")); n=[r["name"] for r in d["rows"]]; assert "a\ufffdb\x1b[2J\nnew\x1b]0;t\x07" in n, n' "$T/out"; then
		ok "hostile names (json): valid UTF-8 JSON, invalid byte as U+FFFD, the rest escaped and kept"
	else bad "hostile names (json)" "$(cat "$T/out")"; fi
run "hostile names: csv" 0 --step 3 --db hostile.db --format=csv &&
	if "$PY" -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1], encoding="utf-8", newline=""))); assert len(r) == 8, len(r); assert any(x["name"] == "a\ufffdb\ufffd[2J\nnew\ufffd]0;t\ufffd" for x in r), [x["name"] for x in r]' "$T/out"; then
		ok "hostile names (csv): 8 rows, controls but the newline as U+FFFD"
	else bad "hostile names (csv)" "$(cat "$T/out")"; fi
run "hostile names: text" 0 --step 3 --db hostile.db &&
	expect "hostile names (text): one line per tensor, controls as '?'" "$T/out" 'a\?b\?\[2J\?new\?\]0;t\?'
[ "$(wc -l <"$T/out")" -eq 10 ] && ok "hostile names (text): the newline forged no line" || bad "hostile names (text): line count" "$(cat "$T/out")"
# the re-run hint quotes the run's command line, sanitized wherever it is printed
sqlite3 hostile.db "UPDATE meta SET value = CAST(X'2e2f756e737461626c65201b5d303b540720782e1b5b33316d' AS TEXT) WHERE key = 'command'"
for args in "--step 1 --db hostile.db" "--step 1 --db hostile.db --npy $T/hnpy"; do
	# shellcheck disable=SC2086 # the words of args
	run "hostile command: $args" 1 $args &&
		expect "hostile command ($args): the hint, its controls as '?'" "$T/err" \
			'^hint: .*--application=.\./unstable \?\]0;T\? x\.\?\[31m' &&
		if LC_ALL=C grep -q $'\x1b' "$T/err"; then bad "hostile command ($args): an ESC byte reached stderr"; else ok "hostile command ($args): no ESC byte"; fi
done
run "hostile names: compare" 0 --compare hostile.db run.db --step 3 &&
	if LC_ALL=C grep -q $'\x1b' "$T/out" "$T/err"; then bad "hostile names (compare): an ESC byte reached the output"; else ok "hostile names (compare): no ESC byte on stdout or stderr"; fi
grep -q "no counterpart" "$T/err" && ok "hostile names (compare): the unmatched names are noted on stderr" || bad "hostile names (compare): no note" "$(cat "$T/err")"

e2e_finish
