#!/usr/bin/env bash
# profiler.sh — end-to-end tests of ampprof: runs it on the test producer and the examples and
# checks the databases with the sqlite3 shell.  Needs $BUILD (default build) built with
# `make all`.  Ends with "N passed, N failed" and exits non-zero if anything failed.
set -u
export LC_ALL=C TZ=UTC
BUILD=${BUILD:-build}
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
PRODUCER=$B/tests/trace_producer
PASS=0
FAIL=0
WORK=$(mktemp -d /tmp/ampprof-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SHM_BEFORE=$(ls /dev/shm | sort)
# other programs share /tmp: look for what ampprof could leave (spool dirs, session files)
tmp_ampprof() { ls -a /tmp | grep -i 'ampprof\|spool\|amp-session' | grep -v '^ampprof-e2e' | sort; }
TMP_BEFORE=$(tmp_ampprof)

ok() { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1${2:+: $2}"; }
# check NAME ACTUAL EXPECTED
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got '$2', want '$3'"; fi; }
# check_true NAME COMMAND...
check_true() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
q() { sqlite3 -batch "$1" "$2" 2>&1; }
integrity() { q "$1" 'PRAGMA integrity_check'; }

for f in "$AMPPROF" "$PRODUCER"; do
	if [ ! -x "$f" ]; then echo "missing $f: run 'make all' first"; echo "0 passed, 1 failed"; exit 1; fi
done
cd "$WORK"

# ---- command line ---------------------------------------------------------------------------
out=$("$AMPPROF" --help); rc=$?
check "help exits 0" "$rc" 0
check_true "help lists exit codes" grep -q "no events" <<<"$out"
check_true "version names the schema" grep -q "profile schema 1" <<<"$("$AMPPROF" --version)"
err=$("$AMPPROF" --nan-check=sometimes -- true 2>&1); rc=$?
check "invalid option value exits 2" "$rc" 2
check_true "invalid value message" grep -q "invalid value 'sometimes' for --nan-check" <<<"$err"
"$AMPPROF" --steps=5-2 -- true 2>/dev/null; check "invalid range exits 2" "$?" 2
"$AMPPROF" --bogus -- true 2>/dev/null; check "unknown option exits 2" "$?" 2
"$AMPPROF" 2>/dev/null; check "no application exits 2" "$?" 2
err=$("$AMPPROF" -o m.db --application="./no-such-program --x" 2>&1); rc=$?
check "missing application exits 3" "$rc" 3
check_true "missing application message" grep -q "cannot run './no-such-program'" <<<"$err"
check_true "missing application: no db" test ! -e m.db
printf '#!/bin/sh\n' > noexec.sh; chmod 644 noexec.sh
"$AMPPROF" -o m.db -- ./noexec.sh 2>/dev/null; check "non-executable application exits 3" "$?" 3
err=$("$AMPPROF" -o /nonexistent-dir/p.db -- "$PRODUCER" 2>&1); rc=$?
check "output directory missing exits 4" "$rc" 4
check_true "output directory message" grep -q "cannot create '/nonexistent-dir/p.db'" <<<"$err"
"$AMPPROF" -q -o /proc/p.db -- "$PRODUCER" 2>/dev/null; check "output not writable exits 4" "$?" 4

# ---- a normal run ---------------------------------------------------------------------------
"$AMPPROF" -q -o run.db -- "$PRODUCER" --steps 10 --ops 20; rc=$?
check "producer run exits 0" "$rc" 0
check "integrity" "$(integrity run.db)" ok
check "ops rows = producer's own count" "$(q run.db 'SELECT count(*) FROM ops')" \
	"$(q run.db "SELECT value FROM meta WHERE key = 'ops_dispatched'")"
check "steps rows" "$(q run.db 'SELECT count(*), min(step), max(step) FROM steps')" "10|0|9"
check "copies rows (cast and h2d)" "$(q run.db "SELECT group_concat(kind) FROM (SELECT DISTINCT kind FROM copies ORDER BY kind)")" "cast,h2d"
check "call sites name the source file" \
	"$(q run.db "SELECT count(*) > 0 FROM callsites WHERE file LIKE '%trace_producer.c' AND line > 0")" 1
check "overview complete" "$(q run.db 'SELECT complete, steps, overflow_steps, skipped_steps, min_scale, max_scale FROM overview')" "1|10|2|2|64.0|128.0"
check_true "fp16 share in 0..1" test "$(q run.db 'SELECT fp16_share > 0 AND fp16_share < 1 AND fp16_flop_share > 0 FROM overview')" = 1
check "op_summary per op and dtype" "$(q run.db 'SELECT count(*) FROM op_summary')" 3
check "loss_scale rows" "$(q run.db "SELECT count(*), sum(reason = 'overflow') FROM loss_scale")" "10|2"
check "memory rows and peak" "$(q run.db 'SELECT count(*), max(peak) FROM memory')" "10|8000"
check "meta end" "$(q run.db "SELECT value FROM meta WHERE key = 'end'")" exited
check "runtime meta" "$(q run.db "SELECT value FROM meta WHERE key = 'precision_mode'")" allow_mix_precision
check_true "unaligned GEMM advice" test "$(q run.db "SELECT count(*) FROM advice WHERE rule = 'gemm_unaligned'")" -ge 1
"$AMPPROF" -q -o run.db -- "$PRODUCER" 2>/dev/null; check "existing output refused" "$?" 4
"$AMPPROF" -q -f -o run.db -- "$PRODUCER" --steps 10 --ops 20; check "--force overwrites" "$?" 0
check "op row size <= 40 bytes" "$(q run.db "SELECT CASE WHEN sum(pgsize) * 1.0 / (SELECT count(*) FROM op_events) <= 40 OR (SELECT count(*) FROM op_events) < 1000 THEN 1 ELSE 0 END FROM dbstat WHERE name = 'op_events'")" 1

# report and export
out=$("$AMPPROF" report run.db); rc=$?
check "report exits 0" "$rc" 0
check_true "report shows FP16 share" grep -q "FP16 share" <<<"$out"
check_true "report shows top ops" grep -q "MatMul" <<<"$out"
check_true "report --format=json parses" python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["steps"] == 10 and len(d["top_ops"]) == 3' < <("$AMPPROF" report --format=json run.db)
check_true "export chrome parses" python3 -c 'import json,sys; d=json.load(sys.stdin); assert sum(e.get("cat") == "op" for e in d["traceEvents"]) == 200' < <("$AMPPROF" export --format=chrome run.db)
check "export csv rows" "$("$AMPPROF" export --format=csv run.db | wc -l)" 201
check "export csv steps header" "$("$AMPPROF" export --format=csv --table=steps run.db | head -1)" "step,start_ns,dur_ns,loss,scale,overflow,skipped,samples,detail,thread"

# --steps: detail only for the chosen steps, step rows for all
"$AMPPROF" -q -o steps.db --steps=2-3 -- "$PRODUCER" --steps 10 --ops 20
check "--steps ops only in range" "$(q steps.db 'SELECT count(*), min(step), max(step) FROM ops')" "40|2|3"
check "--steps rows for all steps" "$(q steps.db 'SELECT count(*), sum(detail) FROM steps')" "10|2"

# threads: one ring each
"$AMPPROF" -q -o thr.db -- "$PRODUCER" --steps 5 --ops 10 --threads 3
check "threads each have rows" "$(q thr.db 'SELECT count(DISTINCT thread) FROM ops')" 3
check "threads table" "$(q thr.db 'SELECT count(*) FROM threads')" 3

# --application goes through the shell
"$AMPPROF" -q -o app.db --application="$PRODUCER --steps 3 --ops 5 && true"
check "--application through sh" "$(q app.db 'SELECT count(*) FROM steps')" 3

# ---- reliability ----------------------------------------------------------------------------
# the application is SIGKILLed mid-run
"$AMPPROF" -q -o kill.db -- "$PRODUCER" --steps 100000 --ops 10 --sleep-ms 20 &
ap=$!
sleep 1.5
pkill -KILL -P "$ap" -f trace_producer 2>/dev/null || kill -KILL "$(pgrep -P "$ap")"
wait "$ap"; rc=$?
check "app SIGKILL: exit 137" "$rc" 137
check "app SIGKILL: integrity" "$(integrity kill.db)" ok
check "app SIGKILL: meta end" "$(q kill.db "SELECT value FROM meta WHERE key = 'end'")" killed
check "app SIGKILL: steps contiguous" "$(q kill.db 'SELECT count(*) = max(step) + 1 AND count(*) > 10 FROM steps WHERE dur_ns IS NOT NULL')" 1
check "app SIGKILL: not complete" "$(q kill.db 'SELECT complete FROM overview')" 0

# the application segfaults: crash record with a backtrace
"$AMPPROF" -q -o segv.db -- "$PRODUCER" --steps 10 --ops 10 --crash-at 3; rc=$?
check "segfault: exit 139" "$rc" 139
check "segfault: integrity" "$(integrity segv.db)" ok
check "segfault: meta end" "$(q segv.db "SELECT value FROM meta WHERE key = 'end'")" crash
check "segfault: crash row" "$(q segv.db 'SELECT signal FROM crashes')" SIGSEGV
check_true "segfault: backtrace names the faulting function" grep -q "run_thread .*trace_producer.c" <<<"$(q segv.db 'SELECT frames FROM crashes')"
check "segfault: steps before the crash" "$(q segv.db 'SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL')" 3
"$AMPPROF" -q -o abrt.db -- "$PRODUCER" --steps 10 --ops 10 --abort-at 2; rc=$?
check "abort: exit 134 and crash row" "$rc:$(q abrt.db 'SELECT signal FROM crashes')" "134:SIGABRT"

# exit() mid-training
"$AMPPROF" -q -o exit.db -- "$PRODUCER" --steps 10 --ops 10 --exit-at 4; rc=$?
check "exit(): app status" "$rc" 42
check "exit(): meta" "$(q exit.db "SELECT group_concat(value, ',') FROM (SELECT value FROM meta WHERE key IN ('end', 'exit_status') ORDER BY key)")" "exited,42"
check "exit(): steps before exit" "$(q exit.db 'SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL')" 4
check "exit(): integrity" "$(integrity exit.db)" ok

# ampprof itself is SIGKILLed: the db is valid with what was committed
"$AMPPROF" -q -o self.db -- "$PRODUCER" --steps 60 --ops 10 --sleep-ms 25 &
ap=$!
sleep 1
child=$(pgrep -P "$ap")
kill -KILL "$ap"; wait "$ap" 2>/dev/null
for _ in $(seq 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
check "ampprof SIGKILL: app finished on its own" "$(kill -0 "$child" 2>/dev/null && echo running || echo done)" done
check "ampprof SIGKILL: integrity" "$(integrity self.db)" ok
check_true "ampprof SIGKILL: committed steps" test "$(q self.db 'SELECT count(*) FROM steps')" -ge 10
check "ampprof SIGKILL: meta says collecting" "$(q self.db "SELECT value FROM meta WHERE key = 'end'")" collecting
"$AMPPROF" report self.db > /dev/null 2>&1; check "ampprof SIGKILL: report recovers" "$?" 0

# a hostile application writing garbage into its rings
"$AMPPROF" -q -o evil.db -- "$PRODUCER" --steps 5 --ops 10 --garbage; rc=$?
check "garbage: collector survives, app status" "$rc" 0
check "garbage: integrity" "$(integrity evil.db)" ok
check_true "garbage: rejected records counted" test "$(q evil.db "SELECT value FROM meta WHERE key = 'rejected_events'")" -gt 0
check "garbage: real steps kept" "$(q evil.db 'SELECT count(*) >= 5 FROM steps')" 1

# a program not linked with libamprt
err=$("$AMPPROF" -o none.db -- /bin/true 2>&1); rc=$?
check "not linked: exit 7" "$rc" 7
check_true "not linked: message" grep -q "no events received" <<<"$err"
check "not linked: db valid, meta filled" "$(integrity none.db)|$(q none.db "SELECT value FROM meta WHERE key = 'end'")" "ok|exited"

# dumps: the spool directory is created and removed
"$AMPPROF" -q -o dump.db --dump=nonfinite --dump-steps=1,3-4 --dump-limit=64M -- "$PRODUCER" --steps 3 --ops 3
check "dump options in meta" "$(q dump.db "SELECT value FROM meta WHERE key = 'options.dump_steps'")" "1,3-4"
check "no spool directory left" "$(ls -a | grep -c ampprof-spool)" 0

# readers refuse what is not a profile
echo "hello" > notdb.db
err=$("$AMPPROF" report notdb.db 2>&1); rc=$?
check "not a profile: exit 6" "$rc" 6
check_true "not a profile: message" grep -q "not an ampkit profile" <<<"$err"
sqlite3 other.db 'CREATE TABLE t(x)'
"$AMPPROF" report other.db > /dev/null 2>&1; check "other sqlite db refused" "$?" 6
cp run.db newer.db; sqlite3 newer.db 'PRAGMA user_version = 99'
check_true "newer schema refused" grep -q "newer" <<<"$("$AMPPROF" report newer.db 2>&1)"
head -c 8192 run.db > trunc.db
check_true "truncated refused" grep -q "truncated" <<<"$("$AMPPROF" report trunc.db 2>&1)"

# ---- the examples ---------------------------------------------------------------------------
MLP=$B/bin/mlp_fashion
if [ -x "$MLP" ]; then
	"$AMPPROF" -q -o amp.db -- "$MLP" --precision amp --steps 30 --log-every 0 > /dev/null; rc=$?
	check "mlp_fashion amp: exit 0" "$rc" 0
	check "mlp_fashion amp: fp16_share > 0.7" "$(q amp.db 'SELECT fp16_share > 0.7 FROM overview')" 1
	check "mlp_fashion amp: cast and h2d copies" "$(q amp.db "SELECT count(DISTINCT kind) FROM copies WHERE kind IN ('cast', 'master', 'h2d')")" 3
	check "mlp_fashion: call sites name the example's source" \
		"$(q amp.db "SELECT count(*) > 0 FROM callsites WHERE file LIKE '%examples/mlp_fashion.c' AND line > 0")" 1
	check "mlp_fashion: op sigs point at the example" \
		"$(q amp.db "SELECT count(*) = 0 FROM op_sigs s LEFT JOIN callsites c ON c.id = s.callsite WHERE c.file IS NULL OR c.file LIKE '%runtime/%'")" 1
	dispatched=$(q amp.db "SELECT value FROM meta WHERE key = 'ops_dispatched'")
	if [ -n "$dispatched" ]; then
		check "mlp_fashion: ops rows = runtime's count" "$(q amp.db 'SELECT count(*) FROM ops')" "$dispatched"
	else
		echo "skip mlp_fashion: ops rows = runtime's count (the runtime does not report ops_dispatched yet)"
	fi
	"$AMPPROF" -q -o fp32.db -- "$MLP" --precision fp32 --steps 10 --log-every 0 > /dev/null
	check "mlp_fashion fp32: fp16_share = 0" "$(q fp32.db 'SELECT fp16_share FROM overview')" "0.0"
else
	echo "skip examples: $MLP not built"
fi
UNSTABLE=$B/bin/unstable
if [ -x "$UNSTABLE" ]; then
	"$AMPPROF" -q -o unstable.db -- "$UNSTABLE" --precision amp --json > unstable.out 2>/dev/null
	check "unstable: loss_scale rows exist" "$(q unstable.db 'SELECT count(*) > 0 FROM loss_scale')" 1
	check "unstable: overflow decisions = overflow steps" \
		"$(q unstable.db "SELECT count(*) FROM loss_scale WHERE reason = 'overflow'")" \
		"$(q unstable.db 'SELECT overflow_steps FROM overview')"
	check "unstable: each decision continues the previous one" \
		"$(q unstable.db 'SELECT count(*) FROM loss_scale a JOIN loss_scale b ON b.rowid = a.rowid + 1 WHERE b.old_scale <> a.new_scale')" 0
else
	echo "skip unstable: $UNSTABLE not built yet"
fi

# ---- nothing left behind --------------------------------------------------------------------
check "nothing left in /dev/shm" "$(ls /dev/shm | sort)" "$SHM_BEFORE"
check "nothing left in /tmp" "$(tmp_ampprof)" "$TMP_BEFORE"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
