#!/usr/bin/env bash
# trace.sh — the Chrome/Perfetto trace, the thread of loss_scale and memory rows, and the
# per-op duration statistics, on real trainings: a 3-thread run (one context per thread) and
# the Fashion-MNIST MLP in AMP.  The trace is validated by trace_check.py (Trace Event Format
# fields, thread_name tracks, nesting of each thread's slices), which is itself shown to fail
# on broken traces.  Reads $BUILD (default build).  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
HERE=$(dirname "${BASH_SOURCE[0]}")
CHECK=$HERE/trace_check.py
PY=/usr/bin/python3
e2e_tmpdir T ampkit_e2e_trace
q() { sqlite3 "$T/$1" "$2"; }

# ---- the validator fails where it must ------------------------------------------------------
bad_trace() { # NAME JSON: trace_check must reject it
	printf '%s\n' "$2" >"$T/bad.json"
	if "$PY" "$CHECK" "$T/bad.json" >"$T/bad.out" 2>&1; then bad "trace_check rejects $1"; else ok "trace_check rejects $1"; fi
}
HEAD='{"displayTimeUnit":"ns","otherData":{"format_version":1},"traceEvents":[{"name":"process_name","cat":"__metadata","ph":"M","pid":5,"args":{"name":"p"}},{"name":"thread_name","cat":"__metadata","ph":"M","pid":5,"tid":6,"args":{"name":"t"}}'
bad_trace "overlapping slices" "$HEAD"',{"name":"a","cat":"op","ph":"X","ts":1.000,"dur":1.000,"pid":5,"tid":6},{"name":"b","cat":"op","ph":"X","ts":1.991,"dur":1.000,"pid":5,"tid":6}]}'
bad_trace "an event without cat" "$HEAD"',{"name":"a","ph":"X","ts":1,"dur":1,"pid":5,"tid":6}]}'
bad_trace "a track without thread_name" "$HEAD"',{"name":"a","cat":"op","ph":"X","ts":1,"dur":1,"pid":5,"tid":7}]}'
bad_trace "a counter with a null value" "$HEAD"',{"name":"c","cat":"c","ph":"C","ts":1,"pid":5,"args":{"v":null}}]}'
printf '%s\n' "$HEAD"',{"name":"a","cat":"op","ph":"X","ts":1,"dur":3,"pid":5,"tid":6},{"name":"b","cat":"op","ph":"X","ts":2,"dur":1,"pid":5,"tid":6},{"name":"c","cat":"op","ph":"X","ts":4,"dur":1,"pid":5,"tid":6}]}' >"$T/good.json"
check_true "trace_check accepts nested and consecutive slices" "$PY" "$CHECK" "$T/good.json"

# ---- three threads, one context each ----------------------------------------------------------
"$BIN/ampprof" -q -o "$T/mt.db" -- "$BUILD/tests/runtime_cases" --threads 3 --steps 12 >/dev/null 2>&1
check "3 threads: exit 0" "$?" 0
check "loss_scale: every row names its thread" "$(q mt.db "SELECT count(*) FROM loss_scale WHERE thread IS NULL")" 0
check "loss_scale: one row per step, decision and thread (no look-alike rows)" \
	"$(q mt.db "SELECT count(DISTINCT thread), count(*) = count(DISTINCT step || '/' || reason || '/' || thread) FROM loss_scale")" "3|1"
check "memory: one row per step and thread" \
	"$(q mt.db "SELECT count(DISTINCT thread), count(*) = count(DISTINCT step || '/' || thread), count(*) FILTER (WHERE thread IS NULL) FROM memory")" "3|1|0"
check "loss_scale: each context's clean steps counted on its own (12 steps: 1 .. 12 each)" \
	"$(q mt.db "SELECT group_concat(c) FROM (SELECT thread, max(clean_steps) c FROM loss_scale
	            WHERE reason = 'hold' GROUP BY thread ORDER BY thread)")" "12,12,12"
check "the threads of loss_scale are those of steps" \
	"$(q mt.db "SELECT group_concat(t) FROM (SELECT DISTINCT thread t FROM loss_scale EXCEPT SELECT DISTINCT thread FROM steps)")" ""
"$BIN/ampprof" export --format=chrome "$T/mt.db" >"$T/mt.json"
check "export chrome: exit 0" "$?" 0
"$PY" "$CHECK" "$T/mt.json" --expect-threads 3 >"$T/check.out"
check_true "3 threads: the trace passes trace_check (fields, names, nesting), 3 tracks" test $? = 0 ||
	cat "$T/check.out"
q mt.db "SELECT pid || ' ' || tid FROM threads ORDER BY id" >"$T/threads"
"$PY" - "$T/mt.json" "$T/threads" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["traceEvents"]
want = [tuple(map(int, l.split())) for l in open(sys.argv[2]) if l.strip()]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in d if e["name"] == "thread_name"}
assert sorted(names) == sorted(want), (names, want)
assert all(e["pid"] != 1 for e in d), "pid 1 is not the run's"
assert sum(n == "main" for n in names.values()) == 1, names
assert all(n == "main" or n.startswith("thread ") for n in names.values()), names
tracks = {(e["pid"], e["tid"]) for e in d if e["ph"] == "X"}
assert tracks <= set(want), tracks
scale = [e for e in d if e["name"] == "loss_scale"]
assert len({e["id"] for e in scale}) == 3, "one loss_scale series per context"
assert all(e["ph"] == "C" and e["cat"] == "loss_scale" for e in scale)
mem = [e for e in d if e["name"] == "memory"]
assert len({e["id"] for e in mem}) == 3, "one memory series per context"
keys = {"master_weights", "working_copies", "activations", "grads", "optimizer_state"}
assert all(set(e["args"]) == keys for e in mem), mem[0]
assert all(e["cat"] for e in d)
PY
check_true "3 threads: real pid/tid tracks named main/thread N, counters per thread and per memory category" test $? = 0

# a step that never ended (a killed run's last: its dur_ns NULL) lasts to its last op's or
# cast's end,
# so that it holds its ops, and says ended: false (it was a zero-length slice)
cp "$T/mt.db" "$T/unended.db"
q unended.db "UPDATE steps SET dur_ns = NULL WHERE thread = (SELECT min(thread) FROM steps) AND step = 11"
want=$(q unended.db "SELECT max(e.start_ns + e.dur_ns) - s.start_ns FROM steps s JOIN (SELECT
	thread, step, start_ns, dur_ns FROM op_events UNION ALL SELECT thread, step, start_ns, dur_ns
	FROM copy_events) e ON e.thread = s.thread AND e.step = s.step WHERE s.dur_ns IS NULL")
"$BIN/ampprof" export --format=chrome "$T/unended.db" >"$T/unended.json"
"$PY" - "$T/unended.json" "$want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["traceEvents"]
steps = [e for e in d if e["cat"] == "step"]
un = [e for e in steps if not e["args"]["ended"]]
assert len(un) == 1 and un[0]["args"]["step"] == 11, un
assert round(un[0]["dur"] * 1000) == int(sys.argv[2]) > 0, (un[0]["dur"], sys.argv[2])
assert sum(e["args"]["ended"] for e in steps) == len(steps) - 1
PY
check_true "an unended step: a slice to its last op's or cast's end, ended false (the others true)" test $? = 0
"$PY" "$CHECK" "$T/unended.json" >"$T/check.out"
check_true "an unended step: the trace passes trace_check (its ops nest in it)" test $? = 0 ||
	cat "$T/check.out"

# ---- a real training: ops, casts and steps of one thread ------------------------------------
"$BIN/ampprof" -q -o "$T/amp.db" -- "$BIN/mlp_fashion" --precision=amp --steps 30 --log-every 0 >/dev/null 2>&1
check "mlp_fashion amp: exit 0" "$?" 0
"$BIN/ampprof" export --format=chrome --output="$T/amp.json" "$T/amp.db"
"$PY" "$CHECK" "$T/amp.json" --expect-threads 1 >"$T/check2.out"
check_true "mlp_fashion amp: the trace passes trace_check (steps hold ops, casts never overlap)" \
	test $? = 0 || cat "$T/check2.out"
check "the database itself: no two slices of a thread overlap" "$(q amp.db "
	WITH s(b, e, th) AS (SELECT start_ns, start_ns + dur_ns, thread FROM op_events
	  UNION ALL SELECT start_ns, start_ns + dur_ns, thread FROM copy_events)
	SELECT count(*) FROM s x JOIN s y ON x.th = y.th AND y.b > x.b AND y.b < x.e AND y.e > x.e")" 0

# ---- per-op duration statistics ---------------------------------------------------------------
q amp.db "SELECT s.op, s.exec_dtype, e.dur_ns FROM op_events e JOIN op_sigs s ON s.id = e.sig" >"$T/durs"
q amp.db "SELECT op, exec_dtype, calls, median_ns, min_ns, max_ns, stddev_ns, mean_ns FROM op_summary" >"$T/stats"
"$PY" - "$T/durs" "$T/stats" <<'PY'
import statistics, sys
groups = {}
for line in open(sys.argv[1]):
    op, dt, d = line.rstrip("\n").split("|")
    groups.setdefault((op, dt), []).append(int(d))
n = 0
for line in open(sys.argv[2]):
    op, dt, calls, med, mn, mx, sd, mean = line.rstrip("\n").split("|")
    v = groups[(op, dt)]
    assert int(calls) == len(v), (op, calls, len(v))
    assert abs(float(med) - statistics.median(v)) <= 1e-6 * max(1, statistics.median(v)), (op, med)
    assert int(mn) == min(v) and int(mx) == max(v), (op, mn, mx)
    assert abs(float(sd) - statistics.pstdev(v)) <= 1e-6 * max(1, statistics.pstdev(v)), (op, sd)
    assert abs(float(mean) - statistics.fmean(v)) <= 1e-6 * statistics.fmean(v), (op, mean)
    n += 1
assert n == len(groups) and n >= 3, n
PY
check_true "op_summary: median, min, max, stddev, mean of each op's durations match a reference" test $? = 0
"$BIN/ampprof" report "$T/amp.db" >"$T/report.txt"
check_true "report: the top ops table has count, total, mean, median, min, max, stddev" \
	grep -Eq '^ +op +dtype +calls +total ms +share +mean +median +min +max +stddev$' "$T/report.txt"
"$PY" - "$T/report.txt" "$T/stats" <<'PY'
import sys
ref = {}
for line in open(sys.argv[2]):
    op, dt, calls, med, mn, mx, sd, mean = line.rstrip("\n").split("|")
    ref[(op, dt)] = [float(x) / 1e3 for x in (mean, med, mn, mx, sd)]
lines = open(sys.argv[1]).read().split("\n")
i = next(i for i, l in enumerate(lines) if l.strip().startswith("op ") and "stddev" in l)
rows = 0
for l in lines[i + 1:]:
    f = l.split()
    if len(f) != 10 or (f[0], f[1]) not in ref:
        break
    got = [float(x) for x in f[5:10]]
    assert all(abs(g - w) <= 0.006 for g, w in zip(got, ref[(f[0], f[1])])), (l, ref[(f[0], f[1])])
    rows += 1
assert rows >= 3, rows
PY
check_true "report: each top op's mean, median, min, max, stddev (us) as in op_summary" test $? = 0
"$BIN/ampprof" report --format=json "$T/amp.db" >"$T/report.json"
"$PY" - "$T/report.json" "$T/stats" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ref = {}
for line in open(sys.argv[2]):
    op, dt, calls, med, mn, mx, sd, mean = line.rstrip("\n").split("|")
    ref[(op, dt)] = (int(calls), float(med), int(mn), int(mx), float(sd))
for o in d["top_ops"]:
    r = ref[(o["op"], o["dtype"])]
    assert (o["calls"], o["min_ns"], o["max_ns"]) == (r[0], r[2], r[3]), o
    assert abs(o["median_ns"] - r[1]) < 1e-3 and abs(o["stddev_ns"] - r[4]) < 1e-3 * max(1, r[4]), o
    assert isinstance(o["mean_ns"], (int, float)) and isinstance(o["total_ns"], int)
assert d["top_ops"], d
PY
check_true "report JSON: top_ops carry calls, total, mean, median, min, max, stddev as numbers" test $? = 0

# ---- progress of the long operations, on a terminal only --------------------------------------
# script(1) gives the command a terminal; AMP_PROGRESS_DELAY_MS=0 shows the line at once.
on_tty() { TERM=xterm AMP_PROGRESS_DELAY_MS=0 script -qec "$1" /dev/null; }
on_tty "$BIN/ampprof export --format=chrome --output=$T/p.json $T/amp.db" >"$T/pty.out" 2>&1
progress_has() { # FILE PYTHON-REGEX: the pty output matches (bytes)
	"$PY" -c 'import re,sys; d=open(sys.argv[1],"rb").read(); sys.exit(0 if re.search(sys.argv[2].encode(), d) else 1)' "$1" "$2"
}
check_true "export on a terminal: a progress line with the rows done" \
	progress_has "$T/pty.out" '\rampprof: export: events [0-9]+/[0-9]+ \([0-9]+ %\) \([0-9.]+ s\)\x1b\[K'
check_true "export on a terminal: the line is erased at the end, the trace intact" \
	sh -c "'$PY' -c 'import sys; sys.exit(0 if open(sys.argv[1],\"rb\").read().endswith(b\"\\r\\x1b[K\") else 1)' '$T/pty.out' && '$PY' '$CHECK' '$T/p.json' >/dev/null"
TERM=xterm AMP_PROGRESS_DELAY_MS=0 "$BIN/ampprof" export --format=chrome --output="$T/p2.json" "$T/amp.db" 2>"$T/p2.err"
check "export, stderr not a terminal: no progress" "$(cat "$T/p2.err")" ""
on_tty "$BIN/ampprof -q -o $T/pf.db -- $BUILD/tests/runtime_cases --steps 3" >"$T/pty2.out" 2>&1
check_true "finalize on a terminal: its phases (advice i/n)" \
	progress_has "$T/pty2.out" '\rampprof: finalize: advice [0-9]+/[0-9]+'
check_true "finalize on a terminal: the line erased before the end" \
	progress_has "$T/pty2.out" '\r\x1b\[K$' 
"$BIN/ampprof" -q -o "$T/c1.db" --dump-steps=1 -- "$BUILD/tests/runtime_cases" --steps 3 >/dev/null 2>&1
"$BIN/ampprof" -q -o "$T/c2.db" --dump-steps=1 -- "$BUILD/tests/runtime_cases" --steps 3 >/dev/null 2>&1
on_tty "$BIN/ampdump --compare $T/c1.db $T/c2.db --step 1" >"$T/pty3.out" 2>&1
check_true "ampdump --compare on a terminal: tensors i/n" \
	progress_has "$T/pty3.out" '\rampdump: compare: tensors [0-9]+/[0-9]+' 

e2e_finish
