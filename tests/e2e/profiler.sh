#!/usr/bin/env bash
# profiler.sh — end-to-end tests of ampprof: runs it on the test producer and the examples and
# checks the databases with the sqlite3 shell.  Needs $BUILD (default build) built with
# `make all`.  Ends with "N passed, N failed" and exits non-zero if anything failed.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
PRODUCER=$B/tests/trace_producer
CASES=$B/tests/runtime_cases
e2e_tmpdir WORK ampprof-e2e
SHM_BEFORE=$(ls /dev/shm | sort)
# other programs share /tmp: look for what ampprof could leave (spool dirs, session files)
tmp_ampprof() { ls -a /tmp | grep '^\.ampprof-spool-\|^ampprof-session' | sort; }
TMP_BEFORE=$(tmp_ampprof)

q() { sqlite3 -batch "$1" "$2" 2>&1; }
integrity() { q "$1" 'PRAGMA integrity_check'; }

for f in "$AMPPROF" "$PRODUCER" "$CASES"; do
	if [ ! -x "$f" ]; then e2e_abort "missing $f: run 'make all' first"; fi
done
cd "$WORK"

# ---- command line ---------------------------------------------------------------------------
out=$("$AMPPROF" --help); rc=$?
check "help exits 0" "$rc" 0
check_true "help lists exit codes" grep -q "no events" <<<"$out"
check_true "help: --dump-limit defaults to 256M" grep -Eq -- "--dump-limit=<size> .*\(256M\)$" <<<"$out"
check_true "version names the schema" grep -q "profile schema 3" <<<"$("$AMPPROF" --version)"
err=$("$AMPPROF" --nan-check=sometimes -- true 2>&1); rc=$?
check "invalid option value exits 2" "$rc" 2
check_true "invalid value message" grep -q "invalid value 'sometimes' for --nan-check" <<<"$err"
"$AMPPROF" --steps=5-2 -- true 2>/dev/null; check "invalid range exits 2" "$?" 2
"$AMPPROF" --bogus -- true 2>/dev/null; check "unknown option exits 2" "$?" 2
"$AMPPROF" --stats-every=0 -- true 2>/dev/null; check "invalid --stats-every exits 2" "$?" 2
"$AMPPROF" 2>/dev/null; check "no application exits 2" "$?" 2
err=$("$AMPPROF" -o m.db --application="./no-such-program --x" 2>&1); rc=$?
check "missing application exits 127 (not found)" "$rc" 127
check_true "missing application message" grep -q "cannot run './no-such-program'" <<<"$err"
check_true "missing application: no db" test ! -e m.db
printf '#!/bin/sh\n' > noexec.sh; chmod 644 noexec.sh
"$AMPPROF" -o m.db -- ./noexec.sh 2>/dev/null; check "non-executable application exits 126" "$?" 126
printf '#!/nonexistent/interp\n' > badinterp.sh; chmod 755 badinterp.sh
err=$("$AMPPROF" -o m.db -- ./badinterp.sh 2>&1); rc=$?
check_true "a script whose interpreter is missing: 127, the interpreter named, not the path" \
	test "$rc" = 127 -a -n "$(grep "cannot run './badinterp.sh': No such file or directory (its interpreter)" <<<"$err")"
check_true "a launch that fails leaves no profile, and says so" \
	test ! -e m.db -a -n "$(grep "the application was not started; 'm.db' is removed" <<<"$err")"
err=$("$AMPPROF" -o /nonexistent-dir/p.db -- "$PRODUCER" 2>&1); rc=$?
check "output directory missing exits 125 (ampprof failed)" "$rc" 125
check_true "output directory message" grep -q "cannot create '/nonexistent-dir/p.db'" <<<"$err"
"$AMPPROF" -q -o /proc/p.db -- "$PRODUCER" 2>/dev/null; check "output not writable exits 125" "$?" 125

# ---- a normal run ---------------------------------------------------------------------------
"$AMPPROF" -q -o run.db -- "$PRODUCER" --steps 10 --ops 20; rc=$?
check "producer run exits 0" "$rc" 0
check "integrity" "$(integrity run.db)" ok
check "ops rows = producer's own count" "$(q run.db 'SELECT count(*) FROM ops')" \
	"$(q run.db "SELECT value FROM meta WHERE key = 'ops_dispatched'")"
check "steps rows" "$(q run.db 'SELECT count(*), min(step), max(step) FROM steps')" "10|0|9"
check "copies rows (cast and h2d)" "$(q run.db "SELECT group_concat(kind) FROM (SELECT DISTINCT kind FROM copies ORDER BY kind)")" "cast,h2d"
# the producer writes each label into one stack buffer: a pointer the emitter saw comes back
# with other text, and the labels still follow the ops (layer0..3 by seq % 4)
check "labels of a reused buffer follow their ops" \
	"$(q run.db "SELECT count(*) FROM ops WHERE label != 'layer' || (seq % 20 % 4)")" 0
check "call sites name the source file" \
	"$(q run.db "SELECT count(*) > 0 FROM callsites WHERE file LIKE '%trace_producer.c' AND line > 0")" 1
check "overview complete" "$(q run.db 'SELECT complete, steps, overflow_steps, skipped_steps, min_scale, max_scale FROM overview')" "1|10|2|2|64.0|128.0"
check_true "fp16 share in 0..1" test "$(q run.db 'SELECT fp16_share > 0 AND fp16_share < 1 AND fp16_flop_share > 0 FROM overview')" = 1
check "op_summary per op and dtype" "$(q run.db 'SELECT count(*) FROM op_summary')" 3
check "loss_scale rows" "$(q run.db "SELECT count(*), sum(reason = 'overflow') FROM loss_scale")" "10|2"
check "memory rows and peak" "$(q run.db 'SELECT count(*), max(peak) FROM memory')" "10|8000"
check "meta end" "$(q run.db "SELECT value FROM meta WHERE key = 'end'")" exited
check "default --dump-limit is 256 MiB" "$(q run.db "SELECT value FROM meta WHERE key = 'options.dump_limit'")" 268435456
check "runtime meta" "$(q run.db "SELECT value FROM meta WHERE key = 'precision_mode'")" allow_mix_precision
check_true "unaligned GEMM advice" test "$(q run.db "SELECT count(*) FROM advice WHERE rule = 'gemm_unaligned'")" -ge 1
# engines: the producer's MatMuls (fp16) run on fp32-fma unless told otherwise
check "engine column filled" "$(q run.db "SELECT group_concat(r) FROM (SELECT DISTINCT op || ':' || coalesce(engine, 'NULL') AS r FROM ops ORDER BY r)")" \
	"MatMul:fp32-fma,ReLU:fp32-fma,Softmax:fp32-fma"
check "schema version 3" "$(q run.db "SELECT value FROM meta WHERE key = 'schema_version'") $(q run.db 'PRAGMA user_version')" "3 3"
check_true "meta cpu_half_features" grep -Eq '^(none|((avx512_bf16|avx512_fp16|amx_bf16|amx_tile) ?)+)$' \
	<<<"$(q run.db "SELECT value FROM meta WHERE key = 'cpu_half_features'")"
check "emulated: native half share 0, half types fp16" "$(q run.db 'SELECT native_half_share, half_types FROM overview')" "0.0|fp16"
check_true "emulated_half advice names the ops and AVX512-FP16" \
	grep -q 'fp16 MatMul.*AVX512-FP16' <<<"$(q run.db "SELECT message FROM advice WHERE rule = 'emulated_half'")"
out=$("$AMPPROF" report run.db 2>/dev/null)
check_true "report: native half line" grep -q '^  native half  *0.0 % of op time on half engines$' <<<"$out"
check_true "report json: both shares" grep -q '"half_share": [0-9.e-]*, "half_types": "fp16", "half_label": "FP16 share", "native_half_share": 0,' \
	<<<"$("$AMPPROF" report --format=json run.db 2>/dev/null)"
"$AMPPROF" -q -o noops.db -- "$PRODUCER" --steps 0
check_true "report of a run without ops: its native half share is n/a because no op ran" \
	grep -q '^  native half  n/a of op time on half engines (no op ran)$' <<<"$("$AMPPROF" report noops.db 2>/dev/null)"
"$AMPPROF" -q -o native.db -- "$PRODUCER" --steps 4 --ops 12 --half bf16 --gemm-engine avx512-bf16 --mode allow_mix_precision_bf16; rc=$?
check "producer bf16 run exits 0" "$rc" 0
check "bf16: native share = MatMul time" "$(q native.db "SELECT abs(native_half_share - (SELECT CAST(sum(dur_ns) AS REAL) FROM ops WHERE engine = 'avx512-bf16') / (SELECT sum(dur_ns) FROM ops)) < 1e-12, half_types FROM overview")" "1|bf16"
check "bf16: no emulated_half advice (the ReLUs convert in registers)" "$(q native.db "SELECT count(*) FROM advice WHERE rule = 'emulated_half'")" 0
check_true "bf16: the report says BF16 share" grep -q '^  BF16 share ' <<<"$("$AMPPROF" report native.db 2>/dev/null)"
# op types by name: a producer's own op type lands in ops and op_types (gray)
"$AMPPROF" -q -o named.db -- "$PRODUCER" --steps 3 --ops 8 --custom-op FlashAttention
check "custom op type stored by name" "$(q named.db "SELECT count(*) > 0 FROM ops WHERE op = 'FlashAttention'") $(q named.db "SELECT list FROM op_types WHERE name = 'FlashAttention'")" "1 gray"
check "ops rows = producer's count with a custom op" "$(q named.db 'SELECT count(*) FROM ops')" \
	"$(q named.db "SELECT value FROM meta WHERE key = 'ops_dispatched'")"
err=$("$AMPPROF" -q -o wire.db -- "$PRODUCER" --fake-wire 4 2>&1); rc=$?
check "wire version mismatch exits 125" "$rc" 125
check_true "wire version mismatch names both versions" grep -q "uses libamprt with wire format 4, this ampprof speaks 3" <<<"$err"
check "wire version mismatch in meta" "$(q wire.db "SELECT value FROM meta WHERE key = 'producer_wire_version'")" 4
"$AMPPROF" -q -o run.db -- "$PRODUCER" 2>/dev/null; check "existing output refused: exit 125" "$?" 125
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
check "export csv steps header" "$("$AMPPROF" export --format=csv --table=steps run.db | head -1)" "step,start_ns,dur_ns,loss,scale,overflow,skipped,samples,detail,thread,loss_state,grad_norm,clipped,micro_batches,rank,context"

# --steps: detail only for the chosen steps, step rows for all
"$AMPPROF" -q -o steps.db --steps=2-3 -- "$PRODUCER" --steps 10 --ops 20
check "--steps ops only in range" "$(q steps.db 'SELECT count(*), min(step), max(step) FROM ops')" "40|2|3"
check "--steps rows for all steps" "$(q steps.db 'SELECT count(*), sum(detail) FROM steps')" "10|2"

# threads: one ring each
"$AMPPROF" -q -o thr.db -- "$PRODUCER" --steps 5 --ops 10 --threads 3
check "threads each have rows" "$(q thr.db 'SELECT count(DISTINCT thread) FROM ops')" 3
check "threads table" "$(q thr.db 'SELECT count(*) FROM threads')" 3
check "threads: ops rows = the threads' ops_dispatched, summed" "$(q thr.db 'SELECT count(*) FROM ops')" \
	"$(q thr.db "SELECT value FROM meta WHERE key = 'ops_dispatched'")"
check "threads: a process-wide counter counts once" "$(q thr.db 'SELECT count(*) FROM ops')" \
	"$(q thr.db "SELECT value FROM meta WHERE key = 'ops_process_total'")"
# the real runtime: four contexts on four threads
"$AMPPROF" -q -o cthr.db -- "$CASES" --threads 4 --steps 20 > /dev/null; rc=$?
check "runtime threads: exit 0, one ring each" "$rc|$(q cthr.db 'SELECT count(*) FROM threads')" "0|4"
check "runtime threads: ops rows = runtime's ops_dispatched (4 contexts)" "$(q cthr.db 'SELECT count(*) FROM ops')" \
	"$(q cthr.db "SELECT coalesce((SELECT value FROM meta WHERE key = 'ops_dispatched'), 'missing')")"
check "runtime threads: copies rows = runtime's copies (4 contexts)" "$(q cthr.db 'SELECT count(*) FROM copies')" \
	"$(q cthr.db "SELECT coalesce((SELECT value FROM meta WHERE key = 'copies'), 'missing')")"
check "runtime threads: clean run, no non-finite rows" "$(q cthr.db 'SELECT count(*) FROM nonfinite')" 0

# the final loss scale is the one after the scaler's last decision: the producer's step 24
# runs with 8 and overflows, leaving 4 (outside [8, 1024])
"$AMPPROF" -q -o s25.db -- "$PRODUCER" --steps 25 --ops 3
check "last step used scale 8, the last decision left 4" \
	"$(q s25.db "SELECT (SELECT scale FROM steps ORDER BY step DESC LIMIT 1), (SELECT new_scale FROM loss_scale ORDER BY step DESC, rowid DESC LIMIT 1)")" "8.0|4.0"
check "advice: final loss scale 4 is unusual" \
	"$(q s25.db "SELECT message FROM advice WHERE rule = 'loss_scale_unusual'")" \
	"final loss scale 4 is outside the usual range [8, 1024]"
check "overflow steps without an origin: scaled-gradient overflows, handled" \
	"$(q s25.db "SELECT group_concat(step) || '|' || min(class) || '|' || max(class) || '|' || count(op) FROM (SELECT * FROM nonfinite ORDER BY step)")" \
	"4,9,14,19,24|scaled_grad_overflow|scaled_grad_overflow|0"

# --application goes through the shell
"$AMPPROF" -q -o app.db --application="$PRODUCER --steps 3 --ops 5 && true"
check "--application through sh" "$(q app.db 'SELECT count(*) FROM steps')" 3

# a program that removes the profile ampprof writes: said, not a summary of a file that is gone
"$AMPPROF" -q -o rmdb.db --application="$PRODUCER --steps 2 --ops 2 && rm -f rmdb.db" 2>rmdb.err
check_true "the output removed during the run: ampprof warns" \
	grep -q "^ampprof: warning: 'rmdb.db' was removed while the run was recorded" rmdb.err
# meta command is a command line sh reads back as the same words (ampdump's re-run hint runs it)
"$AMPPROF" -q -o words.db -- printf '[%s]' 'a b' '' "it's" 'a$b' >words.out 2>/dev/null
check "meta command: sh reads the same words back" \
	"$(sh -c "$(q words.db "SELECT value FROM meta WHERE key = 'command'")")" "$(cat words.out)"
# the program starts with the signals its launcher ignored ignored (nohup: SIGHUP; a shell's
# background job: SIGINT, SIGQUIT), the others at their default, as it would without ampprof
sig_ignored() { # sig_ignored SIGNUM: from grep's own /proc status, launched by ampprof
	local m
	m=$("$AMPPROF" -q -f -o sig.db -- grep SigIgn /proc/self/status 2>/dev/null </dev/null | awk '{ print $2 }')
	echo $(( (0x${m:-0} >> ($1 - 1)) & 1 ))
}
check "nohup ampprof: the program ignores SIGHUP" "$(export -f sig_ignored; AMPPROF=$AMPPROF nohup bash -c 'sig_ignored 1' 2>/dev/null)" 1
check "ampprof: the program's SIGHUP at its default" "$(sig_ignored 1)" 0
check "a background ampprof: the program ignores SIGINT" "$(export -f sig_ignored; AMPPROF=$AMPPROF bash -c 'bash -c "sig_ignored 2" & wait')" 1

# call sites of a program under a long path: named up to the interned strings' length (a path
# of 586 bytes once cut at 512), and past it said unnamed rather than left as '??' in silence
mid=$PWD/long; for i in 1 2 3 4 5 6 7 8 9 10 11; do mid=$mid/dddddddddddddddddddddddddddddddddddddddddddddd; done
deep=$mid; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do deep=$deep/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee; done
for d in "$mid" "$deep"; do
	mkdir -p "$d" && cp "$PRODUCER" "$d/" && ln -s "$(dirname "$PRODUCER")/lib" "$d/lib"
done
"$AMPPROF" -q -o long.db -- "$mid/trace_producer" --steps 2 --ops 3 >/dev/null 2>&1
check_true "a program under a ${#mid}-byte path: its call sites named" \
	test "$(q long.db "SELECT count(*) FROM callsites WHERE file LIKE '%trace_producer.c'")" -gt 0
check_true "... every one" test "$(q long.db "SELECT count(*) FROM callsites WHERE file = '??'")" = 0
"$AMPPROF" -q -o deep.db -- "$deep/trace_producer" --steps 2 --ops 3 >/dev/null 2>deep.err
check_true "under a ${#deep}-byte path: ampprof warns that call sites are unnamed" \
	grep -q '^ampprof: warning: call sites left unnamed: [0-9]* frame(s) in 1 module(s) could not be read' deep.err
check_true "... and the report says so" grep -q '^  call sites   unnamed: ' <<<"$("$AMPPROF" report deep.db 2>/dev/null)"

# a plugin unloaded and another loaded at its addresses between steps: each op's call site is
# in the object that ran it (call sites were known by return address alone)
PLUG=$ROOT/tests/progs/plugin
san=; ldd "$B/lib/libamprt.so" | grep -q libasan && san="-fsanitize=address,undefined" # make asan
if cc -shared -fPIC -g -fno-omit-frame-pointer -DOP=amp_relu -I"$ROOT/runtime/include" \
	"$PLUG/plug.c" -o plugA.so && cc -shared -fPIC -g -fno-omit-frame-pointer -DOP=amp_gelu \
	-I"$ROOT/runtime/include" "$PLUG/plug.c" -o plugB.so &&
	cc $san -g -fno-omit-frame-pointer -I"$ROOT/runtime/include" "$PLUG/host.c" -o host -L"$B/lib" \
	-lamprt -ldl -Wl,-rpath,"$B/lib"; then
	"$AMPPROF" -q -o reload.db -- ./host ./plugA.so ./plugB.so
	check "a reloaded plugin: each op's call site in its own object" \
		"$(q reload.db "SELECT group_concat(o.op || ':' || c.module, ' ') FROM ops o JOIN callsites c ON c.id = o.callsite ORDER BY o.id")" \
		"ReLU:./plugA.so GELU:./plugB.so"
else
	bad "the plugin test builds"
fi

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
# the backtrace starts at the faulting store, not in the signal handler that recorded it
fault_line=$(grep -n '^			\*p = 1;$' "$ROOT/tests/progs/trace_producer.c" | cut -d: -f1)
check "segfault: the first frame is the faulting line (trace_producer.c:$fault_line), no handler frame" \
	"$(q segv.db 'SELECT frames FROM crashes' | head -1 | grep -o '^run_thread [^ ]*' | sed 's|.*/||')|$(q segv.db 'SELECT frames FROM crashes' | grep -c 'trace_on_fatal\|sigaction')" \
	"trace_producer.c:$fault_line|0"
"$AMPPROF" report segv.db >segv.rep 2>&1
check "segfault: the report shows the crash and its backtrace from the faulting line" \
	"$(grep -c '^  crash        SIGSEGV (code 1, address 0x40) in pid [0-9]* tid [0-9]*:$' segv.rep)|$(sed -n '/^  crash  /{n;p}' segv.rep | grep -o 'run_thread [^ ]*' | sed 's|.*/||')" \
	"1|trace_producer.c:$fault_line"
"$AMPPROF" report --format=json segv.db >segv.json 2>&1
check "segfault: the JSON report's crashes" \
	"$(/usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["crashes"]; print(len(c), c[0]["signal"], c[0]["frames"][0].split()[0])' segv.json)" \
	"1 SIGSEGV run_thread"
# more crashes than the text shows (a merged run's ranks): the rest counted, the JSON has all
cp segv.db segv5.db
q segv5.db "INSERT INTO crashes (thread, signo, signal, code, addr, t_ns, frames, rank)
	SELECT thread, signo, signal, code, addr, t_ns + 1, frames, value FROM crashes,
	generate_series(1, 5)" 2>/dev/null ||
	q segv5.db "INSERT INTO crashes (thread, signo, signal, code, addr, t_ns, frames, rank)
	SELECT thread, signo, signal, code, addr, t_ns + 1, frames, 1 FROM crashes, (SELECT 1
	UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5)"
check "six crashes: the report shows 4 and counts the rest, the JSON holds all 6" \
	"$("$AMPPROF" report segv5.db | grep -c '^  crash        SIG')|$("$AMPPROF" report segv5.db | grep -c '^  crash        ... 2 more crash(es): ampprof export --table=crashes$')|$("$AMPPROF" report --format=json segv5.db | /usr/bin/python3 -c 'import json, sys; print(len(json.load(sys.stdin)["crashes"]))')" \
	"4|1|6"
"$B/bin/ampview" --headless --width=120 segv.db >segv.view 2>&1
check "segfault: ampview at 60 columns keeps the line number (the path shortened)" \
	"$("$B/bin/ampview" --headless --width=60 segv.db | grep -c "^ Crashed     SIGSEGV in run_thread trace_producer.c:$fault_line\$")" 1
check "segfault: ampview's overview says where it crashed" \
	"$(grep -c "^ Crashed     SIGSEGV in run_thread .*/trace_producer.c:$fault_line . backtrace: ampprof report$" segv.view)" 1
check "segfault: steps before the crash" "$(q segv.db 'SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL')" 3
# the same through --application, behind a shell that does not exec it (two commands): the
# shell reports 128 + the signal, which is the program's crash, not an exit
"$AMPPROF" -q -o segv_app.db --application="true; $PRODUCER --steps 10 --ops 10 --crash-at 3" \
	2>/dev/null; rc=$?
check "segfault under --application: exit 139, end crash, SIGSEGV" \
	"$rc:$(q segv_app.db "SELECT group_concat(value, ',') FROM (SELECT value FROM meta WHERE key IN ('end', 'exit_signal') ORDER BY key)")" \
	"139:crash,SIGSEGV"
"$AMPPROF" -q -o abrt.db -- "$PRODUCER" --steps 10 --ops 10 --abort-at 2; rc=$?
check "abort: exit 134 and crash row" "$rc:$(q abrt.db 'SELECT signal FROM crashes')" "134:SIGABRT"
# an abort's si_addr is its sender's pid, not an address; ampview names the program's frame,
# not the C library's raise and abort
abort_line=$(grep -n '^			abort();$' "$ROOT/tests/progs/trace_producer.c" | cut -d: -f1)
check "abort: the report gives no address, ampview names trace_producer.c:$abort_line" \
	"$("$AMPPROF" report abrt.db | grep -c '^  crash        SIGABRT (code -6) in pid [0-9]* tid [0-9]*:$')|$("$B/bin/ampview" --headless --width=120 abrt.db | grep -c "^ Crashed     SIGABRT in run_thread .*/trace_producer.c:$abort_line ")" \
	"1|1"

# SIGTERM to ampprof under --application reaches the program behind the shell, which a shell
# waiting for its command would not pass on: ampprof ends, and the program with it.  A simple
# command is exec'd by the shell: the program is ampprof's child itself
"$AMPPROF" -q -o term_app.db --application="$PRODUCER --steps 100000 --ops 10 --sleep-ms 5" \
	>/dev/null 2>&1 &
ap=$!
for _ in $(seq 100); do [ -s term_app.db ] && [ "$(q term_app.db 'SELECT count(*) FROM steps' 2>/dev/null)" -gt 0 ] 2>/dev/null && break; sleep 0.05; done
check "--application with a simple command: the shell execs it" \
	"$(cat /proc/"$(pgrep -P "$ap" | head -1)"/comm 2>/dev/null)" trace_producer
kill -TERM "$ap"
for _ in $(seq 100); do kill -0 "$ap" 2>/dev/null || break; sleep 0.05; done
left=$(pgrep -f -- '--steps 100000 --ops 10 --sleep-ms 5' | tr '\n' ' ')
check "SIGTERM under --application: ampprof ended, the program too" \
	"$(kill -0 "$ap" 2>/dev/null && echo running || echo ended)|$left" "ended|"
[ -n "$left" ] && kill -KILL $left 2>/dev/null
wait "$ap"; rc=$?
check "SIGTERM under --application: exit 143, end signal" \
	"$rc:$(q term_app.db "SELECT value FROM meta WHERE key = 'end'")" "143:signal"

# exit() mid-training
"$AMPPROF" -q -o exit.db -- "$PRODUCER" --steps 10 --ops 10 --exit-at 4; rc=$?
check "exit(): app status" "$rc" 42
check "exit(): meta" "$(q exit.db "SELECT group_concat(value, ',') FROM (SELECT value FROM meta WHERE key IN ('end', 'exit_status') ORDER BY key)")" "exited,42"
check "exit(): steps before exit" "$(q exit.db 'SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL')" 4
check "exit(): integrity" "$(integrity exit.db)" ok

# ampprof itself is SIGKILLed: the db is valid with what was committed (--dump=off: a killed
# collector cannot remove its spool directory, which the checks below would then find)
"$AMPPROF" -q -o self.db --dump=off -- "$PRODUCER" --steps 60 --ops 10 --sleep-ms 25 &
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
check "garbage: no step number below -1 (ops) or 0 (steps) gets in" \
	"$(q evil.db 'SELECT (SELECT count(*) FROM steps WHERE step < 0) + (SELECT count(*) FROM ops WHERE step < -1) + (SELECT count(*) FROM tensor_stats WHERE step < -1)')" 0
check "garbage: the profile is not called complete, and says why" \
	"$(q evil.db "SELECT (SELECT value FROM meta WHERE key = 'complete') || '|' || (SELECT value LIKE '%malformed record(s) rejected%' FROM meta WHERE key = 'incomplete')")" "0|1"

# a program not linked with libamprt
err=$("$AMPPROF" -o none.db -- /bin/true 2>&1); rc=$?
check "not linked: exit 125" "$rc" 125
check_true "not linked: message" grep -q "no events received" <<<"$err"
check_true "not linked: the message gives the application's own status" grep -q "no events received from '/bin/true' (its exit status: 0)" <<<"$err"
# the application's small statuses pass through and never read as ampprof's failures
for st in 1 2 3 4 5 6 7; do
	"$AMPPROF" -q -f -o st.db --application="$PRODUCER --steps 2 --ops 2; exit $st" >/dev/null 2>"st.err"
	rc=$?
	[ "$rc" = "$st" ] && [ ! -s st.err ] || bad "application status $st passes through, silently" "got $rc: $(cat st.err)"
done
ok "application statuses 1-7 pass through"
check "not linked: db valid, meta filled" "$(integrity none.db)|$(q none.db "SELECT value FROM meta WHERE key = 'end'")" "ok|exited"

# dumps: the spool directory is created and removed
"$AMPPROF" -q -o dump.db --dump=nonfinite --dump-steps=1,3-4 --dump-limit=64M -- "$PRODUCER" --steps 3 --ops 3
check "dump options in meta" "$(q dump.db "SELECT value FROM meta WHERE key = 'options.dump_steps'")" "1,3-4"
check "no spool directory left" "$(ls -a | grep -c ampprof-spool)" 0

# ---- non-finite values: an invalid operation (Log of negatives) through the real runtime ------
# The application changes its working directory before it dumps: the spool directory it was
# given must be absolute.  Steps 2 and 4 feed Log negative values: NaN and no Inf.
mkdir -p elsewhere
"$AMPPROF" -o inv.db --dump=nonfinite -- "$CASES" --steps 6 --bad-step 2 --bad-step 4 --chdir elsewhere > inv.out 2> inv.err; rc=$?
check "invalid op: exit 0" "$rc" 0
check "invalid op: classified, origin Log (log) at steps 2 and 4" \
	"$(q inv.db "SELECT group_concat(r, ' ') FROM (SELECT step || ':' || class || ':' || op || ':' || label || ':' || phase || ':' || nan || ':' || inf AS r FROM nonfinite ORDER BY step)")" \
	"2:invalid_operation:Log:log:forward:128:0 4:invalid_operation:Log:log:forward:128:0"
log_line=$(grep -n RUNTIME_CASES_LOG_LINE "$ROOT/tests/progs/runtime_cases.c" | cut -d: -f1)
check "invalid op: call site is the amp_log line" \
	"$(q inv.db "SELECT c.file LIKE '%tests/progs/runtime_cases.c', c.line FROM nonfinite n JOIN callsites c ON c.id = n.callsite WHERE n.step = 2")" "1|$log_line"
check "invalid op: advice row" "$(q inv.db "SELECT severity, step, op FROM advice WHERE rule = 'invalid_operation'")" "error|2|Log"
check "tensor_stats: phase and -Inf count filled, -Inf <= Inf" \
	"$(q inv.db "SELECT count(*) > 0, sum(phase IS NULL OR neg_inf IS NULL OR neg_inf > inf), sum(thread IS NULL) FROM tensor_stats")" "1|0|0"
check "chdir: the dumps still reached the spool (all with data, none skipped)" \
	"$(q inv.db "SELECT count(*), sum(data IS NOT NULL), (SELECT value FROM meta WHERE key = 'dumps_written'), (SELECT value FROM meta WHERE key = 'dumps_skipped') FROM dumps")" "4|4|4|0"
check "chdir: no spool directory left in either directory" "$(ls -a . elsewhere | grep -c ampprof-spool)" 0
check_true "summary: non-finite heading" grep -q "^  non-finite:" inv.err
check_true "summary: NaN from an invalid operation, Log, step 2, call site" \
	grep -Eq "invalid_operation: NaN from an invalid operation at step 2 \(first of 2 steps\): Log \(log\) output .*has NaN and no Inf .*runtime_cases\.c:$log_line" inv.err
check_true "summary: dumps written and skipped" grep -Eq "^  dumps +4 written \(2\.0 KiB\), 0 skipped$" inv.err
check_true "summary: suggests ampdump for the first origin, the one beside ampprof ($B/bin)" \
	grep -q "^  next         $B/bin/ampdump --step 2 --db inv.db " inv.err
check "report = the summary" "$("$AMPPROF" report inv.db)" "$(cat inv.err)"
check_true "json: nonfinite class, dumps and next" python3 -c '
import json, sys
d = json.load(sys.stdin)
n = d["nonfinite"]
assert [(c["class"], c["first_step"], c["steps"], c["op"], c["label"], c["phase"], c["nan"], c["inf"], c["loss_finite"]) for c in n] == [("invalid_operation", 2, 2, "Log", "log", "forward", 128, 0, False)], n
assert n[0]["file"].endswith("tests/progs/runtime_cases.c") and n[0]["line"] == int(sys.argv[1]), n
assert d["dumps"]["written"] == 4 and d["dumps"]["skipped"] == 0 and d["dumps"]["skipped_by_reason"]["limit"] == 0, d["dumps"]
assert d["next"] == "ampdump --step 2 --db inv.db", d["next"]
' "$log_line" < <("$AMPPROF" report --format=json inv.db)
# a profile older than the nonfinite table still reports
cp inv.db old.db; sqlite3 old.db "DROP TABLE nonfinite; DELETE FROM advice WHERE rule IN ('forward_overflow', 'invalid_operation', 'scaled_grad_overflow')"
"$AMPPROF" report old.db > old.report 2>&1; rc=$?
check "older profile without the nonfinite table: report exits 0, no non-finite claim" "$rc|$(grep -c 'non-finite' old.report)" "0|0"

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
# Each example is checked once its binary is in $BUILD/bin.  With --steps unset every step is
# traced in detail, so the ops and copies rows must match the runtime's own counters exactly.

# callsite_lines DB SRC: prints "file:line: text" for every call site of DB in the example's
# source SRC (examples/x.c) whose line does not call an amp_ function; prints nothing when all
# of them do.  The line is read from the file the debug info names (absolute, or from the repo).
callsite_lines() {
	local db=$1 src=$2 file line text path
	while IFS='|' read -r file line; do
		path=$file; [ -f "$path" ] || path=$ROOT/$file
		text=$(sed -n "${line}p" "$path" 2>/dev/null)
		grep -q 'amp_[a-z0-9_]*(' <<<"$text" || echo "$file:$line: $text"
	done < <(q "$db" "SELECT DISTINCT file, line FROM callsites WHERE file LIKE '%$src' ORDER BY file, line")
}
# example_checks NAME DB: the checks every example run must pass
example_checks() {
	local name=$1 db=$2 n
	check "$name: integrity" "$(integrity "$db")" ok
	check "$name: ops rows = runtime's ops_dispatched" "$(q "$db" 'SELECT count(*) FROM ops')" \
		"$(q "$db" "SELECT coalesce((SELECT value FROM meta WHERE key = 'ops_dispatched'), 'missing')")"
	check "$name: copies rows = runtime's copies count" "$(q "$db" 'SELECT count(*) FROM copies')" \
		"$(q "$db" "SELECT coalesce((SELECT value FROM meta WHERE key = 'copies'), 'missing')")"
	n=$(q "$db" "SELECT count(*) FROM callsites WHERE file LIKE '%examples/$name.c' AND line > 0")
	check_true "$name: call sites name examples/$name.c:LINE ($n)" test "$n" -gt 0
	check "$name: every call-site line calls an amp_ function" "$(callsite_lines "$db" "examples/$name.c")" ""
	check "$name: every op and copy has a call site in the example" \
		"$(q "$db" "SELECT (SELECT count(*) FROM op_sigs s LEFT JOIN callsites c ON c.id = s.callsite WHERE c.file IS NULL OR c.file NOT LIKE '%examples/$name.c') + (SELECT count(*) FROM copy_sigs s LEFT JOIN callsites c ON c.id = s.callsite WHERE c.file IS NULL OR c.file NOT LIKE '%examples/$name.c')")" 0
}

MLP=$B/bin/mlp_fashion
if [ -x "$MLP" ]; then
	"$AMPPROF" -q -o amp.db -- "$MLP" --precision amp --steps 30 --log-every 0 > /dev/null; rc=$?
	check "mlp_fashion amp: exit 0" "$rc" 0
	example_checks mlp_fashion amp.db
	# the FLOP share does not depend on timing; the time share only in an optimized build (a
	# sanitizer slows the C loops of the FP32 optimizer, not the half GEMMs' assembly)
	check "mlp_fashion amp: fp16_flop_share > 0.9" "$(q amp.db 'SELECT fp16_flop_share > 0.9 FROM overview')" 1
	case $(basename "$B") in
	*asan*) ;;
	*) check "mlp_fashion amp: fp16_share > 0.7" "$(q amp.db 'SELECT fp16_share > 0.7 FROM overview')" 1 ;;
	esac
	# --steps past step 0: the checks of the untraced steps see the call sites first, and a
	# site defined inside a statistics record's reservation overwrote it (records rejected,
	# call sites lost for the traced steps)
	"$AMPPROF" -q -o later.db --steps=3 -- "$MLP" --precision amp --steps 5 --log-every 0 --test-limit 100 > /dev/null
	check "mlp_fashion --steps=3: every op and statistics row has its call site, no record rejected" \
		"$(q later.db "SELECT ((SELECT count(*) FROM ops WHERE callsite IS NULL) + (SELECT count(*) FROM tensor_stats WHERE callsite IS NULL)) || '|' || (SELECT count(*) > 0 FROM ops) || '|' || (SELECT value FROM meta WHERE key = 'rejected_events')")" "0|1|0"
	# a trainer the command puts in the background: ampprof waits for it, it is profiled
	"$AMPPROF" -q -o bg.db --application="$MLP --precision amp --steps 20 --log-every 0 --test-limit 100 >/dev/null 2>&1 &"
	check "a backgrounded trainer: exit 0, all its steps recorded, complete" \
		"$?|$(q bg.db "SELECT count(*) FROM steps WHERE dur_ns IS NOT NULL")|$(q bg.db "SELECT value FROM meta WHERE key = 'complete'")" "0|21|1"
	# a background process that never attaches holds ampprof 2 s at most, not its 37
	t0=$(date +%s)
	"$AMPPROF" -q -o bgsleep.db --application="sleep 37 & true" 2>/dev/null
	rc=$?
	check_true "a background process without libamprt: exit 125 within 10 s (exit $rc)" \
		test "$rc" = 125 -a $(($(date +%s) - t0)) -lt 10
	pkill -f "^sleep 37$" 2>/dev/null
	# the runtime records an engine for every op ('none' where its kernels do not say yet)
	check "mlp_fashion amp: every op has an engine" "$(q amp.db 'SELECT count(*) FROM ops WHERE engine IS NULL')" 0
	check "mlp_fashion amp: casts (and master refreshes) and input staging" \
		"$(q amp.db "SELECT group_concat(kind) FROM (SELECT DISTINCT kind FROM copies WHERE kind IN ('cast', 'master', 'h2d') ORDER BY kind)")" "cast,h2d,master"
	h2d_line=$(q amp.db "SELECT c.line FROM copies p JOIN callsites c ON c.id = p.callsite WHERE p.kind = 'h2d' AND p.src_dtype = 'fp32' ORDER BY p.id LIMIT 1")
	check_true "mlp_fashion amp: the h2d call site is an amp_tensor_from_f32 line ($h2d_line)" \
		grep -q 'amp_tensor_from_f32(' <<<"$(sed -n "${h2d_line:-0}p" "$ROOT/examples/mlp_fashion.c")"
	# ReLU on fp16 bits: vmaxph / vcmpph on the avx512-fp16 path, integer selects counted as
	# the path's FP32 engine elsewhere
	AMP_KERNELS=$EMU_KERNELS "$AMPPROF" -q -o relu_emu.db -- "$MLP" --precision amp --steps 3 --log-every 0 > /dev/null
	check "mlp_fashion amp on $EMU_KERNELS: fp16 ReLU on fp32-fma" \
		"$(q relu_emu.db "SELECT group_concat(r) FROM (SELECT DISTINCT phase || ':' || engine AS r FROM ops WHERE op = 'ReLU' AND exec_dtype = 'fp16' ORDER BY r)")" \
		"backward:fp32-fma,forward:fp32-fma"
	if grep -qw avx512_fp16 /proc/cpuinfo; then
		AMP_KERNELS=avx512-fp16 "$AMPPROF" -q -o relu_nat.db -- "$MLP" --precision amp --steps 3 --log-every 0 > /dev/null
		check "mlp_fashion amp on avx512-fp16: fp16 ReLU on avx512-fp16" \
			"$(q relu_nat.db "SELECT group_concat(r) FROM (SELECT DISTINCT phase || ':' || engine AS r FROM ops WHERE op = 'ReLU' AND exec_dtype = 'fp16' ORDER BY r)")" \
			"backward:avx512-fp16,forward:avx512-fp16"
	else
		echo "SKIPPED: the avx512-fp16 ReLU engine check needs avx512_fp16"
	fi
	"$AMPPROF" -q -o fp32.db -- "$MLP" --precision fp32 --steps 10 --log-every 0 > /dev/null
	check "mlp_fashion fp32: fp16_share = 0" "$(q fp32.db 'SELECT fp16_share FROM overview')" "0.0"
	check "mlp_fashion fp32: no casts" "$(q fp32.db "SELECT count(*) FROM copies WHERE kind IN ('cast', 'master')")" 0
else
	echo "skip mlp_fashion: $MLP not built"
fi

UNSTABLE=$B/bin/unstable
if [ -x "$UNSTABLE" ]; then
	"$AMPPROF" -q -o unstable.db --dump=nonfinite -- "$UNSTABLE" --precision amp --json > unstable.out 2>/dev/null; rc=$?
	check "unstable amp: exit 0" "$rc" 0
	example_checks unstable unstable.db
	# The example prints, per step, "step S  loss L  scale X ..." with the scale it trained with
	# and "(overflow: step skipped)" when the scaler backed off: the loss_scale rows (one
	# decision per step after the 'init' row) must say the same, step by step.
	grep -E '^step +[0-9]+ +loss ' unstable.out |
		awk '{ printf "%d|%.9g|%d\n", $2, $6, /overflow: step skipped/ ? 1 : 0 }' > scale.printed
	q unstable.db "SELECT step, old_scale, reason = 'overflow' FROM loss_scale WHERE reason <> 'init' ORDER BY step, rowid" |
		awk -F'|' '{ printf "%d|%.9g|%d\n", $1, $2, $3 }' > scale.db
	check_true "unstable: the example printed its per-step scale ($(wc -l < scale.printed) steps)" \
		test "$(wc -l < scale.printed)" -ge 300
	check "unstable: loss_scale rows = the scaler's decisions the example printed" \
		"$(diff scale.printed scale.db > scale.diff && echo same || head -3 scale.diff)" same
	check "unstable: the documented back-off (step 299, 128 -> 64)" \
		"$(q unstable.db "SELECT step, old_scale, new_scale FROM loss_scale WHERE reason = 'overflow' ORDER BY step LIMIT 1")" "299|128.0|64.0"
	check "unstable: overflow decisions = overflow steps" \
		"$(q unstable.db "SELECT count(*) FROM loss_scale WHERE reason = 'overflow'")" \
		"$(q unstable.db 'SELECT overflow_steps FROM overview')"
	check "unstable: each decision continues the previous one" \
		"$(q unstable.db 'SELECT count(*) FROM loss_scale a JOIN loss_scale b ON b.rowid = a.rowid + 1 WHERE b.old_scale <> a.new_scale')" 0
	check "unstable: steps.scale = the decision's old scale" \
		"$(q unstable.db "SELECT count(*) FROM steps s JOIN loss_scale l ON l.step = s.step AND l.reason <> 'init' WHERE s.scale <> l.old_scale")" 0
	# (b) the overflow of step 299 is only in the scaled gradients, handled by the scaler
	check "unstable amp: non-finite rows: only the scaled-gradient overflow of step 299" \
		"$(q unstable.db "SELECT group_concat(r, ' ') FROM (SELECT step || ':' || class || ':' || op || ':' || phase || ':' || role || ':' || old_scale || '>' || new_scale AS r FROM nonfinite ORDER BY step)")" \
		"299:scaled_grad_overflow:Linear:backward:grad:128.0>64.0"
	"$AMPPROF" report unstable.db > unstable.report 2>&1
	check_true "unstable amp report: overflow only in the scaled gradients, handled by the scaler (128 -> 64)" \
		grep -Eq "info +scaled_grad_overflow: overflow only in the scaled gradients at step 299 \(1 step\): Linear \(.*\) backward .*the loss was finite; handled by the loss scaler \(scale 128 -> 64\)" unstable.report
	check "unstable amp report: no forward overflow or invalid operation claimed" \
		"$(grep -c 'forward_overflow\|invalid_operation' unstable.report)" 0
	check_true "unstable amp report: ampdump --step 299" grep -q "next *[^ ]*/ampdump --step 299 --db unstable.db" unstable.report
	# +Inf and -Inf counted apart: the origin's counts = its dumped fp16 values
	check_true "unstable amp: origin -Inf/+Inf counts match its dump" python3 -c '
import sqlite3, struct, sys
con = sqlite3.connect(sys.argv[1])
step, seq, name, inf, ninf = con.execute("SELECT step, seq, name, inf, neg_inf FROM tensor_stats WHERE origin = 1").fetchone()
data, = con.execute("SELECT data FROM dumps WHERE step = ? AND seq = ? AND name = ? AND dtype = ?", (step, seq, name, "fp16")).fetchone()
v = struct.unpack("<%de" % (len(data) // 2), data)
neg = sum(1 for x in v if x == float("-inf")); pos = sum(1 for x in v if x == float("inf"))
assert (neg, pos) == (ninf, inf - ninf) and inf > 0, (neg, pos, ninf, inf)
' unstable.db
	# (a) fp16: the forward Exp overflows at the documented step 250
	S=$(sed -n 's/^#define UNSTABLE_OVERFLOW_STEP *\([0-9][0-9]*\).*/\1/p' "$ROOT/examples/unstable.c")
	"$AMPPROF" -o fp16.db --dump=nonfinite -- "$UNSTABLE" --precision=fp16 --steps $((S + 10)) --log-every 0 > /dev/null 2> fp16.err; rc=$?
	check "unstable fp16: exit 0" "$rc" 0
	check "unstable fp16: forward overflows only, the first at step $S: Exp (rate) output" \
		"$(q fp16.db "SELECT min(step), min(class), max(class), op, label, phase, role FROM nonfinite")" "$S|forward_overflow|forward_overflow|Exp|rate|forward|output"
	exp_line=$(q fp16.db "SELECT c.line FROM nonfinite n JOIN callsites c ON c.id = n.callsite WHERE n.step = $S")
	check_true "unstable fp16: origin call site is the amp_exp(ctx, \"rate\", ...) line ($exp_line)" \
		grep -q 'amp_exp(ctx, "rate"' <<<"$(sed -n "${exp_line:-0}p" "$ROOT/examples/unstable.c")"
	check_true "unstable fp16 summary: forward overflow named with op, label, step and call site" \
		grep -Eq "error +forward_overflow: forward overflow at step $S \(first of [0-9]+ steps\): Exp \(rate\) output went non-finite in fp16 .*called at .*examples/unstable\.c:$exp_line" fp16.err
	check_true "unstable fp16 summary: dumps and ampdump --step $S" \
		grep -Eq "^  next +[^ ]*/ampdump --step $S --db fp16\.db" fp16.err
	check_true "unstable fp16 json: forward_overflow first" python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d["nonfinite"][0]
assert (c["class"], c["first_step"], c["op"], c["label"], c["phase"]) == ("forward_overflow", int(sys.argv[1]), "Exp", "rate", "forward"), c
assert c["inf"] > 0 and c["neg_inf"] == 0 and len(d["nonfinite"]) == 1, d["nonfinite"]
' "$S" < <("$AMPPROF" report --format=json fp16.db)
	# every step overflows under a huge static scale: the dumps skipped, by reason, and the
	# overflow not handled by a scaler that cannot back off
	AMP_LOSS_SCALE=1e30 "$AMPPROF" -o every1e30.db --dump=nonfinite --dump-limit=400 -- "$UNSTABLE" \
		--precision=amp --steps 20 --log-every 0 > /dev/null 2> every1e30.err
	check_true "summary: skipped dumps by reason (--dump-limit reached)" \
		grep -Eq "^  dumps +[0-9]+ written \([0-9.]+ KiB\), [1-9][0-9]* skipped \([0-9.]+ KiB: [0-9]+ --dump-limit reached" every1e30.err
	check "summary: skipped = meta dumps_skipped" "$(sed -n 's/^  dumps .*, \([0-9]*\) skipped.*/\1/p' every1e30.err)" \
		"$(q every1e30.db "SELECT value FROM meta WHERE key = 'dumps_skipped'")"
	check_true "summary: a static scale does not handle the overflow" \
		grep -Eq "warning +scaled_grad_overflow: .*NOT handled: the scaler kept its scale 1e\+30 \(static\)" every1e30.err
	# --stats-every: full statistics on steps 0, 5, 10, 15 only
	"$AMPPROF" -q -o every.db --stats-every=5 -- "$UNSTABLE" --precision amp --steps 20 > /dev/null 2>&1
	check "--stats-every=5: statistics every 5th step" \
		"$(q every.db "SELECT group_concat(step) FROM (SELECT DISTINCT step FROM tensor_stats ORDER BY step)")|$(q every.db "SELECT value FROM meta WHERE key = 'options.stats_every'")" "0,5,10,15|5"
else
	echo "skip unstable: $UNSTABLE not built"
fi

CNN=$B/bin/cnn_fashion
if [ -x "$CNN" ]; then
	"$AMPPROF" -q -o cnn.db -- "$CNN" --precision amp --steps 3 --log-every 0 > /dev/null; rc=$?
	check "cnn_fashion amp: exit 0" "$rc" 0
	example_checks cnn_fashion cnn.db
	check "cnn_fashion amp: Conv2D ran in fp16" "$(q cnn.db "SELECT count(*) > 0 FROM ops WHERE op = 'Conv2D' AND exec_dtype = 'fp16'")" 1
	# fp16 2x2 max pooling compares in fp16 on the avx512-fp16 path, widened to FP32 elsewhere;
	# its backward (windows that do not overlap) scatters the gradient's bits: no arithmetic
	pool_engines() {
		q "$1" "SELECT group_concat(r) FROM (SELECT DISTINCT phase || ':' || engine AS r FROM ops WHERE op = 'MaxPool2D' AND exec_dtype = 'fp16' ORDER BY r)"
	}
	AMP_KERNELS=$EMU_KERNELS "$AMPPROF" -q -o cnn_emu.db -- "$CNN" --precision amp --steps 2 --log-every 0 > /dev/null
	check "cnn_fashion amp on $EMU_KERNELS: MaxPool2D on fp32-fma, its backward none" \
		"$(pool_engines cnn_emu.db)" "backward:none,forward:fp32-fma"
	if grep -qw avx512_fp16 /proc/cpuinfo; then
		AMP_KERNELS=avx512-fp16 "$AMPPROF" -q -o cnn_nat.db -- "$CNN" --precision amp --steps 2 --log-every 0 > /dev/null
		check "cnn_fashion amp on avx512-fp16: MaxPool2D forward on avx512-fp16" \
			"$(pool_engines cnn_nat.db)" "backward:none,forward:avx512-fp16"
	else
		echo "SKIPPED: the avx512-fp16 MaxPool2D engine check needs avx512_fp16"
	fi
else
	echo "skip cnn_fashion: $CNN not built"
fi

CHARLM=$B/bin/charlm
if [ -x "$CHARLM" ]; then
	"$AMPPROF" -q -o charlm.db -- "$CHARLM" --precision amp --steps 3 --log-every 0 --eval-batches 1 --sample-len 10 > /dev/null; rc=$?
	check "charlm amp: exit 0" "$rc" 0
	example_checks charlm charlm.db
else
	echo "skip charlm: $CHARLM not built"
fi

# ---- the live status line on a terminal (tmux on a private socket) ------------------------------
if command -v tmux > /dev/null; then
	TM="tmux -L ampprof-e2e-$$"
	$TM new-session -d -x 100 -y 12 "'$AMPPROF' -o tty.db -- '$PRODUCER' --steps 30 --ops 10 --sleep-ms 50; echo END; sleep 60" 2>/dev/null
	sleep 0.7; cap1=$($TM capture-pane -p 2>/dev/null)
	sleep 0.6; cap2=$($TM capture-pane -p 2>/dev/null)
	for _ in $(seq 50); do grep -q '^END' <<<"$($TM capture-pane -p 2>/dev/null)" && break; sleep 0.1; done
	cap3=$($TM capture-pane -p -J -S -100 2>/dev/null)
	$TM kill-server 2>/dev/null
	status_re='^ampprof: [0-9.]+ s  step'
	check "status line: one line, on the last row" "$(grep -cE "$status_re" <<<"$cap1")|$(tail -1 <<<"$cap1" | grep -cE "$status_re")" "1|1"
	check_true "status line: updates" test "$(grep -E "$status_re" <<<"$cap1")" != "$(grep -E "$status_re" <<<"$cap2")"
	check "status line: erased before the summary" "$(grep -cE "$status_re" <<<"$cap3")" 0
	check_true "status line: the summary follows" grep -q "exited with status 0" <<<"$cap3"
else
	echo "skip status line: tmux not installed"
fi

# ---- nothing left behind --------------------------------------------------------------------
check "nothing left in /dev/shm" "$(ls /dev/shm | sort)" "$SHM_BEFORE"
check "nothing left in /tmp" "$(tmp_ampprof)" "$TMP_BEFORE"

e2e_finish
