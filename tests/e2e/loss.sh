#!/usr/bin/env bash
# loss.sh — end-to-end tests that nothing the application sends is lost silently: more
# threads and processes than rings (rings reclaimed when their owner ends, --rings, the
# profile marked incomplete in every reader, ops_dispatched counting the threads without a
# ring), --drop with a small ring (definitions and steps kept, drops counted by kind, the
# figures said to cover a sample), a forked child that reuses its parent's context, the spool
# directory of a killed ampprof, and SIGINT sent to ampprof alone.  Needs $BUILD (default
# build) built with `make all`.  Ends with "N passed, N failed".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
AMPDUMP=$B/bin/ampdump
AMPVIEW=$B/bin/ampview
PRODUCER=$B/tests/trace_producer
CASES=$B/tests/runtime_cases
e2e_tmpdir WORK ampprof-loss-e2e
for f in "$AMPPROF" "$AMPDUMP" "$AMPVIEW" "$PRODUCER" "$CASES"; do
	[ -x "$f" ] || e2e_abort "missing $f: run 'make all' first"
done
cd "$WORK"
q() { sqlite3 -batch "$1" "$2" 2>&1; }
meta() { q "$1" "SELECT coalesce((SELECT value FROM meta WHERE key = '$2'), 'missing')"; }
json_get() { /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d[sys.argv[2]])' "$@"; }

# ---- more producers than 16: all recorded ------------------------------------------------
"$AMPPROF" -q -o thr20.db -- "$CASES" --threads 20 --steps 5 > /dev/null; rc=$?
check "20 threads at once: exit 0, 20 threads, 100 steps" \
	"$rc|$(q thr20.db 'SELECT count(*) FROM threads')|$(q thr20.db 'SELECT count(*) FROM steps')" "0|20|100"
check "20 threads: ops rows = the runtime's ops_dispatched" "$(q thr20.db 'SELECT count(*) FROM ops')" \
	"$(meta thr20.db ops_dispatched)"
check "20 threads: complete, nothing missing" "$(meta thr20.db complete)|$(meta thr20.db rings_missing)" "1|0"
check "20 threads: the JSON history is one context's, the lowest thread's, step by step" \
	"$("$AMPPROF" report --format=json thr20.db | /usr/bin/python3 -c 'import json, sys; print(" ".join("%.6g" % s["loss"] for s in json.load(sys.stdin)["history"]["steps"]))')" \
	"$(q thr20.db "SELECT group_concat(printf('%.6g', loss), ' ') FROM (SELECT loss FROM steps WHERE thread = (SELECT min(thread) FROM steps) ORDER BY step)")"

"$AMPPROF" -q -o proc20.db --application="for i in \$(seq 20); do '$CASES' --steps 4 & done; wait" \
	> /dev/null; rc=$?
check "20 processes in one --application: exit 0, 20 threads, 80 steps" \
	"$rc|$(q proc20.db 'SELECT count(DISTINCT pid) FROM threads')|$(q proc20.db 'SELECT count(*) FROM steps')" "0|20|80"
check "20 processes: ops rows = ops_dispatched" "$(q proc20.db 'SELECT count(*) FROM ops')" \
	"$(meta proc20.db ops_dispatched)"
check "20 processes: complete" "$(meta proc20.db complete)" 1

# ---- rings reclaimed: 20 owners one after another through 4 rings -------------------------
"$AMPPROF" -q --rings=4 -o seq.db -- "$PRODUCER" --threads 20 --steps 5 --ops 10 --sequential; rc=$?
check "20 threads in turn on 4 rings: every thread and step recorded" \
	"$rc|$(q seq.db 'SELECT count(*) FROM threads')|$(q seq.db 'SELECT count(*) FROM steps')|$(q seq.db 'SELECT count(DISTINCT thread) FROM ops')" \
	"0|20|100|20"
check "20 threads in turn: ops rows = ops_dispatched, complete" \
	"$(q seq.db 'SELECT count(*) FROM ops')|$(meta seq.db complete)" "$(meta seq.db ops_dispatched)|1"
"$AMPPROF" -q --rings=3 -o seqp.db --application="for i in \$(seq 12); do '$CASES' --steps 3 || exit 1; done" \
	> /dev/null; rc=$?
check "12 processes in turn on 3 rings: all recorded" \
	"$rc|$(q seqp.db 'SELECT count(DISTINCT pid) FROM threads')|$(q seqp.db 'SELECT count(*) FROM steps')|$(meta seqp.db complete)" \
	"0|12|36|1"
# processes SIGKILLed: their rings stay open, the collector finds their owners gone
"$AMPPROF" -q --rings=2 -o killed.db --application="for i in 1 2 3 4; do '$PRODUCER' --steps 400 --sleep-ms 5 & p=\$!; sleep 0.4; kill -KILL \$p; wait \$p; done; exit 0" \
	2> /dev/null; rc=$?
check "4 processes killed in turn on 2 rings: each recorded" \
	"$rc|$(q killed.db 'SELECT count(DISTINCT s.thread) FROM steps s')|$(meta killed.db rings_missing)" "0|4|0"

# ---- fewer rings than producers at once: incomplete, loudly, in every reader --------------
# (6 threads at once, each for 5 steps of 30 ms: 2 find a ring, 4 none)
"$AMPPROF" -q --rings=2 -o few.db -- "$PRODUCER" --threads 6 --steps 5 --ops 10 --sleep-ms 30; rc=$?
check "6 threads at once on 2 rings: 4 missing, not complete" \
	"$rc|$(meta few.db rings_missing)|$(meta few.db complete)" "0|4|0"
check "missing threads: ops_dispatched still counts their ops" "$(meta few.db ops_dispatched)" 300
check "missing threads: what they did is kept apart" "$(meta few.db unrecorded.ops_dispatched)" 200
check_true "meta incomplete says why" grep -q "4 thread(s) or process(es) found none of the 2 rings" <<<"$(meta few.db incomplete)"
out=$("$AMPPROF" report few.db)
check_true "report: INCOMPLETE line" grep -q "^  INCOMPLETE   4 thread(s)" <<<"$out"
adv=$(grep -A1 "^  advice" <<<"$out" | tail -n 1)
check_true "report: the advice says it first" grep -q "warning  incomplete: the profile does not hold the whole run" <<<"$adv"
"$AMPPROF" report --format=json few.db > few.json
check "report json: complete 0, incomplete named" \
	"$(json_get few.json complete)|$(json_get few.json incomplete | cut -c1-9)" "0|4 thread("
err=$("$AMPDUMP" --list --db few.db 2>&1 >/dev/null)
check_true "ampdump: says the profile is incomplete" grep -q "INCOMPLETE: 4 thread(s)" <<<"$err"
view=$("$AMPVIEW" --headless --width 160 few.db)
check_true "ampview: INCOMPLETE and why" grep -q "not recorded: 4 thread(s)" <<<"$view"
out=$("$AMPPROF" --rings=2 -o few2.db -- "$PRODUCER" --threads 3 --steps 3 --sleep-ms 30 2>&1 >/dev/null)
check_true "end-of-run summary: INCOMPLETE" grep -q "INCOMPLETE   1 thread(s)" <<<"$out"
check_true "--help: --rings" grep -q -- "--rings=<n>" <<<"$("$AMPPROF" --help)"
"$AMPPROF" --rings=0 -- true 2>/dev/null; check "--rings=0 is a usage error" "$?" 2

# ---- --drop with a small ring: definitions and step boundaries are never dropped ------------
"$AMPPROF" -q --drop --ring-size=1024 -o drop.db -- "$PRODUCER" --steps 200 --ops 200 --unique-labels; rc=$?
check "drop: exit 0, every step row" "$rc|$(q drop.db 'SELECT count(*) FROM steps')" "0|200"
check "drop: no op row lost its label or op type" \
	"$(q drop.db "SELECT count(*) FROM ops WHERE label IS NULL OR op IS NULL OR op = '?'")" 0
dropped_ops=$(meta drop.db dropped.ops)
check_true "drop: ops were dropped (a 1024-slot ring)" [ "$dropped_ops" -gt 0 ]
check "drop: recorded + dropped ops = the producer's ops" \
	"$(( $(q drop.db 'SELECT count(*) FROM ops') + dropped_ops ))" 40000
check "drop: the kinds add up to dropped_events" \
	"$(q drop.db "SELECT sum(value) FROM meta WHERE key LIKE 'dropped.%'")" "$(meta drop.db dropped_events)"
out=$("$AMPPROF" report drop.db)
check_true "drop report: the figures cover a sample" grep -q "INCOMPLETE .*records dropped ($dropped_ops ops" <<<"$out"
check_true "drop report: the advice is from a sample" grep -q "advice (from a sample" <<<"$out"
check "drop: an advice row says so" "$(q drop.db "SELECT count(*) FROM advice WHERE rule = 'incomplete' AND message LIKE '%cover a sample%'")" 1

# the loss scaler's record waits for ring space (a definition: never dropped); it is written
# after the optimizer's op ends, so the wait is not billed to the optimizer's time
"$AMPPROF" -q --drop --ring-size=1024 -o dropopt.db -- "$B/bin/unstable" --precision=amp \
	--steps 100 --log-every 0 >/dev/null; rc=$?
check "drop, real optimizer: exit 0, a scale record per step" \
	"$rc|$(q dropopt.db "SELECT count(*) FROM loss_scale WHERE reason <> 'init'")" "0|100"
check "drop, real optimizer: every scale record after its step's optimizer op ended" \
	"$(q dropopt.db "SELECT count(*) FROM loss_scale l JOIN ops o ON o.step = l.step
	                 AND o.thread = l.thread AND o.op = 'Optimizer'
	                 WHERE l.reason <> 'init' AND l.t_ns < o.start_ns + o.dur_ns")" 0
"$AMPPROF" report --format=json drop.db > drop.json
check "drop json: sampled, ops dropped by kind" \
	"$(/usr/bin/python3 -c 'import json,sys; d=json.load(open("drop.json")); print(d["sampled"], d["dropped"]["ops"])')" \
	"True $dropped_ops"

# ---- a child process that goes on with its parent's context ---------------------------------
"$AMPPROF" -q -o fork.db -- "$CASES" --fork-at 3 --steps 8 > /dev/null; rc=$?
check "fork: exit 0, two processes, 8 steps" \
	"$rc|$(q fork.db 'SELECT count(DISTINCT pid) FROM threads')|$(q fork.db 'SELECT count(*) FROM steps')" "0|2|8"
check "fork: ops_dispatched = ops rows (the parent's ops counted once)" \
	"$(meta fork.db ops_dispatched)" "$(q fork.db 'SELECT count(*) FROM ops')"
check "fork: copies = copy rows" "$(meta fork.db copies)" "$(q fork.db 'SELECT count(*) FROM copies')"
"$AMPPROF" -q -o forkd.db -- "$CASES" --fork-at 2 --bad-step 1 --bad-step 4 --steps 6 > /dev/null
check "fork after a dump: dumps_written and nonfinite_origins count each process's own" \
	"$(meta forkd.db dumps_written)|$(meta forkd.db nonfinite_origins)" \
	"$(q forkd.db 'SELECT count(*) FROM dumps')|$(q forkd.db 'SELECT count(*) FROM nonfinite')"

# ---- a child that outlives its parent (an orphan: ampprof, the run's subreaper, reaps it) ----
"$AMPPROF" -q -o orphan.db -- "$CASES" --orphan-at 2 --steps 8 > /dev/null; rc=$?
check "orphan: exit 0, all 8 steps, the profile whole" \
	"$rc|$(q orphan.db 'SELECT count(*) FROM steps')|$(meta orphan.db complete)|$(meta orphan.db incomplete)" "0|8|1|missing"
"$AMPPROF" -q -o orphank.db -- "$CASES" --orphan-at 2 --die-at 5 --steps 8 > /dev/null 2>&1; rc=$?
check "orphan killed at step 5: the launched process's status (0), 5 steps, not complete" \
	"$rc|$(q orphank.db 'SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL')|$(meta orphank.db complete)" "0|5|0"
check_true "orphan killed: the profile says which process, by what, and that its recording stops" \
	grep -Eq '^process [0-9]+ of the run \(not the launched one\) was ended by SIGKILL at [0-9.]+ s: its recording stops there$' \
	<(meta orphank.db incomplete)

# ---- a process that execs itself: each image's ring is reclaimed (they ran out at 64) --------
"$AMPPROF" -q -o exec.db -- "$CASES" --steps 1 --exec 100 > /dev/null
check "100 execs of one process: every image's step, complete, no ring missing" \
	"$(q exec.db 'SELECT count(*) FROM steps')|$(meta exec.db complete)|$(meta exec.db rings_missing)" "101|1|0"
# --dump-limit bounds the run, not each process: 4 processes dump 8 tensors of 512 bytes
"$AMPPROF" -q --dump-limit=3000 -o plimit.db -- "$CASES" --procs 4 --bad-step 1 --steps 3 > /dev/null
check "4 processes under --dump-limit=3000: 5 dumps written (2560 bytes), 3 refused by the limit" \
	"$(q plimit.db 'SELECT count(*) || ":" || sum(bytes) FROM dumps')|$(meta plimit.db dumps_skipped_limit)" "5:2560|3"

# ---- contexts one after another in one thread, in two threads at once ------------------------
"$AMPPROF" -q -o serial.db -- "$CASES" --serial 5 --steps 3 --threads 2 > /dev/null
check "5 contexts in turn in each of 2 threads: ops_dispatched = ops rows" \
	"$(meta serial.db ops_dispatched)" "$(q serial.db 'SELECT count(*) FROM ops')"
check "... copies = copy rows" "$(meta serial.db copies)" "$(q serial.db 'SELECT count(*) FROM copies')"

# ---- memory and the scale history of contexts that did not live at the same time ------------
# Each context reports its own memory; contexts one after another in a thread, or in images of
# one process, are not added together (they were, at equal step numbers), and ones alive at
# once in one thread are.  The report, its JSON and ampview say the same peak.
PY=/usr/bin/python3
json_peak() { "$AMPPROF" report --format=json "$1" | $PY -c 'import json,sys; print(json.load(sys.stdin)["memory"]["peak_bytes"])'; }
view_peak() { "$AMPVIEW" --headless --panel=memory "$1" | sed -n 's/.* peak \(.*\) at step .*/\1/p'; }
"$AMPPROF" -q -o one.db -- "$CASES" --steps 4 > /dev/null
one=$(q one.db 'SELECT peak_bytes FROM overview')
one_view=$(view_peak one.db)
check_true "one context: a memory peak ($one bytes, $one_view in ampview)" test "${one:-0}" -gt 0 -a -n "$one_view"
for args in "--serial 3" "--exec 2" "--exec-live 2"; do
	"$AMPPROF" -q -f -o nc.db -- "$CASES" --steps 4 $args > /dev/null
	check "contexts one after another ($args): the peak is one context's, in the overview, JSON and ampview" \
		"$(q nc.db 'SELECT peak_bytes FROM overview')|$(json_peak nc.db)|$(view_peak nc.db)" "$one|$one|$one_view"
done
check "--exec-live 2: only the last image freed its context" "$(q nc.db 'SELECT count(*) FROM context_ends')" 1
# contexts that ended without saying so: an orphaned parent's (it exited with it), a killed
# process's; one context stepped by three threads in turn is one context, not three
for args in "--orphan-at 2" "--serial 2 --orphan-at 1" "--hand-off 3"; do
	"$AMPPROF" -q -f -o nc.db -- "$CASES" --steps 4 $args > /dev/null
	check "$args: the peak is one context's" "$(q nc.db 'SELECT peak_bytes FROM overview')" "$one"
done
"$AMPPROF" -q -f -o nc.db -- sh -c "'$CASES' --steps 3 --die-at 2; '$CASES' --steps 3" > /dev/null 2>&1
check "a process killed with its context, then another: the peak is one context's" \
	"$(q nc.db 'SELECT peak_bytes FROM overview')" "$one"
# ends are boundaries: drop mode keeps them (16 contexts, 2 at a time)
"$AMPPROF" -q -f --drop --ring-size=1024 -o nc.db -- "$CASES" --steps 200 --serial 8 --threads 2 > /dev/null
check "--drop: every context's end kept, the peak at most two contexts'" \
	"$(q nc.db 'SELECT count(*) FROM context_ends')|$(q nc.db "SELECT peak_bytes <= $((2 * one)) FROM overview")" "16|1"
# a rank's own profile: the ends are that rank's too when finalize gives the rows its rank
"$AMPPROF" -q -f -o nc.db -- "$CASES" --steps 3 --serial 3 > /dev/null
q nc.db "INSERT OR REPLACE INTO meta VALUES ('rank', '1'), ('world_size', '2'), ('run_id', 'x'); DELETE FROM run_summary" > /dev/null
"$AMPPROF" report nc.db > /dev/null 2>&1
check "rank 1's profile finalized again: its contexts' ends are rank 1's, the peak one context's" \
	"$(q nc.db 'SELECT group_concat(DISTINCT rank) FROM context_ends')|$(q nc.db 'SELECT peak_bytes FROM overview')" "1|$one"
"$AMPPROF" -q -o inter.db -- "$CASES" --steps 4 --interleave 3 > /dev/null
check "3 contexts alive at once in one thread: the peak is their sum, each freed" \
	"$(q inter.db 'SELECT peak_bytes FROM overview')|$(json_peak inter.db)|$(q inter.db 'SELECT count(*) FROM context_ends')" \
	"$((3 * one))|$((3 * one))|3"
# the step history follows one context: the first one's losses, not a mix of both
"$AMPPROF" -q -o ser2.db -- "$CASES" --steps 4 --serial 2 > /dev/null
check "2 contexts in turn in a thread: the JSON history holds the first context's losses" \
	"$("$AMPPROF" report --format=json ser2.db | $PY -c 'import json,sys; print(" ".join("%.6f" % s["loss"] for s in json.load(sys.stdin)["history"]["steps"]))')" \
	"$(q ser2.db "SELECT group_concat(printf('%.6f', loss), ' ') FROM (SELECT loss FROM steps WHERE context = 1 ORDER BY step)")"
check "... whose losses differ from the second's" \
	"$(q ser2.db "SELECT count(*) FROM steps a JOIN steps b ON a.step = b.step AND a.context = 1 AND b.context = 2 WHERE a.loss <> b.loss")" 4

# ---- the spool directory of a killed ampprof --------------------------------------------------
mkdir spool && cd spool
"$AMPPROF" -q --dump=nonfinite -o k.db -- "$PRODUCER" --steps 200 --sleep-ms 10 & ap=$!
for _ in $(seq 50); do ls -a | grep -q '^\.ampprof-spool-' && break; sleep 0.1; done
kill -KILL "$ap"; wait "$ap" 2>/dev/null
check "SIGKILL leaves its spool directory" "$(ls -a | grep -c '^\.ampprof-spool-')" 1
mkdir -p .ampprof-spool-1-keepme # pid 1 is alive: not ours to remove
"$AMPPROF" -q -o next.db -- "$PRODUCER" --steps 2; rc=$?
check "the next run in the directory removes it" "$rc|$(ls -a | grep '^\.ampprof-spool-' | tr '\n' ' ')" \
	"0|.ampprof-spool-1-keepme "
cd ..

# ---- SIGINT sent to ampprof alone reaches the application -----------------------------------
# (with job control on: a script's background job without it ignores SIGINT, and so does the
# program ampprof starts, as it would started alone)
start=$(date +%s)
set -m
"$AMPPROF" -q -o int.db -- "$PRODUCER" --steps 300 --sleep-ms 20 & ap=$!
set +m
sleep 1
kill -INT "$ap"; wait "$ap"; rc=$?
check "SIGINT to ampprof: relayed, the application ends by it" \
	"$rc|$(meta int.db end)|$(meta int.db exit_signal)" "130|signal|SIGINT"
check_true "SIGINT: it ended early" [ $(( $(date +%s) - start )) -lt 5 ]

e2e_finish
