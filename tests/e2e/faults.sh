#!/usr/bin/env bash
# faults.sh — end-to-end tests of what the tools promise under faults and hostile paths: an
# output that is a device, a FIFO or a link, two --force runs on one output, a profile read
# while it is still being recorded or while another process locks it, the journal switch at
# finalize refused, ampprof SIGKILLed inside a WAL checkpoint (strace: SKIPPED without it), a
# start that fails before the application runs, a full disk (a tiny tmpfs: needs root, SKIPPED
# otherwise) and a damaged profile in ampview.  Needs $BUILD (default build) built with `make
# all`.  Ends with "N passed, N failed" and exits non-zero if anything failed.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
B=$(cd "$BUILD" && pwd)
AMPPROF=$B/bin/ampprof
AMPDUMP=$B/bin/ampdump
AMPVIEW=$B/bin/ampview
PRODUCER=$B/tests/trace_producer
GENPROF=$B/tests/gen_profile
e2e_tmpdir WORK ampkit-faults-e2e
for f in "$AMPPROF" "$AMPDUMP" "$AMPVIEW" "$PRODUCER" "$GENPROF"; do
	if [ ! -x "$f" ]; then e2e_abort "missing $f: run 'make all' first"; fi
done
cd "$WORK"

# read-only: a writable sqlite3 would fold a -wal in when it closes, and these checks look at it
q() { sqlite3 -batch -readonly "$1" "$2" 2>&1; }
meta() { q "$1" "SELECT value FROM meta WHERE key = '$2'"; }
# wait_steps DB N: waits (up to 10 s) until DB holds N committed steps
# (read-only: a sqlite3 that got there first would create the file and make ampprof refuse it)
wait_steps() {
	for _ in $(seq 100); do
		[ -s "$1" ] && [ "$(sqlite3 -readonly "$1" 'SELECT count(*) FROM steps' 2>/dev/null)" -ge "$2" ] 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
run_short() { "$AMPPROF" -q "$@" -- "$PRODUCER" --steps 3 --ops 4; }

# ---- outputs that are not regular files ------------------------------------------------------
mkfifo fifo
err=$(run_short -f -o fifo 2>&1); rc=$?
check "--force on a FIFO: refused (exit 125)" "$rc" 125
check_true "--force on a FIFO: it is still a FIFO" test -p fifo
check_true "--force on a FIFO: says so" grep -q "'fifo': is a FIFO, not a regular file" <<<"$err"
if [ "$(id -u)" = 0 ] && mknod chardev c 1 3 2>/dev/null; then
	err=$(run_short -f -o chardev 2>&1); rc=$?
	check "--force on a character device: refused (exit 125)" "$rc" 125
	check_true "--force on a character device: it is still one" test -c chardev
	check_true "--force on a character device: says so" grep -q "is a character device" <<<"$err"
else
	echo "SKIPPED: a character device output needs root (mknod)"
fi
ln -s "$WORK/nowhere/x.db" dangling
err=$(run_short -o dangling 2>&1); rc=$?
check "dangling symlink: refused (exit 125)" "$rc" 125
check_true "dangling symlink: the link is kept" test -L dangling
check_true "dangling symlink: says so" grep -q "is a dangling symbolic link" <<<"$err"
ln -s "$WORK/target.db" dangling2
run_short -f -o dangling2 2>/dev/null; rc=$?
check "dangling symlink with --force: refused, nothing written through it" \
	"$rc:$(test -e target.db && echo written || echo none)" "125:none"
run_short -o plain.db && run_short -f -o plain.db; rc=$?
check "--force on a regular file still overwrites it" "$rc:$(q plain.db 'SELECT count(*) FROM steps')" "0:3"

# ---- two runs on one output -------------------------------------------------------------------
"$AMPPROF" -q -o shared.db -- "$PRODUCER" --steps 60 --ops 5 --sleep-ms 20 &
first=$!
wait_steps shared.db 5 || bad "the first run did not start recording"
err=$(run_short -f -o shared.db 2>&1); rc=$?
check "--force on an output another ampprof writes: refused (exit 125)" "$rc" 125
check_true "--force on a live output: says who holds it" grep -q "another ampprof is writing it" <<<"$err"
wait "$first"; rc=$?
check "the first run is untouched: exit 0, every step" "$rc:$(q shared.db 'SELECT count(*) FROM steps')" "0:60"
# Two --force runs started together on one output: exactly one records, in every pair; the other
# is refused (exit 125) and leaves the winner's profile whole.  Natural pairs first (the old
# mechanism lost both runs in about one pair of 25 to 200: too rare to catch here), then the
# windows of that race held open with strace's delays, which make each interleaving certain.
# race_pair: one pair; pair_codes: their exit statuses, sorted, as "0,125,"
race_pair() {
	"$AMPPROF" -q -f -o race.db -- "$PRODUCER" --steps 3 --ops 4 2>>race.err & a=$!
	"$AMPPROF" -q -f -o race.db -- "$PRODUCER" --steps 3 --ops 4 2>>race.err & b=$!
	wait "$a"; ra=$?
	wait "$b"; rb=$?
	pair_codes="$(printf '%s\n' "$ra" "$rb" | sort -n | tr '\n' ,)"
}
codes="" pairs=0
for i in $(seq 16); do
	race_pair
	codes="$codes $pair_codes"
	[ "$pair_codes" = "0,125," ] && pairs=$((pairs + 1))
done
check "16 pairs of concurrent --force runs: exactly one succeeds in each, the other exits 125 ($codes)" "$pairs" 16
check "the profile the last winner wrote is whole" "$(q race.db 'PRAGMA integrity_check'):$(q race.db 'SELECT count(*) FROM steps')" "ok:3"
# timed_pair NAME: two --force runs on $WORK/NAME.db (absolute: strace's -P matches a path as
# the syscall spells it), A under strace "${A_STRACE[@]}", B once $B_WHEN holds, under
# "${B_STRACE[@]}"; prints their exit statuses "a,b,", their messages in NAME.[ab].err.
# (LeakSanitizer cannot run under ptrace: off for these two in a sanitizer build.)
timed_pair() {
	local name=$1 ra rb asan=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
	{ ASAN_OPTIONS=$asan strace -qq -f -o /dev/null "${A_STRACE[@]}" \
		"$AMPPROF" -q -f -o "$WORK/$name.db" -- "$PRODUCER" --steps 3 --ops 4 2>"$name.a.err"; echo $? >"$name.a.rc"; } &
	local a=$!
	for _ in $(seq 300); do eval "$B_WHEN" && break; sleep 0.01; done
	ASAN_OPTIONS=$asan strace -qq -f -o /dev/null "${B_STRACE[@]}" \
		"$AMPPROF" -q -f -o "$WORK/$name.db" -- "$PRODUCER" --steps 3 --ops 4 2>"$name.b.err"; rb=$?
	wait "$a"; ra=$(cat "$name.a.rc")
	echo "$ra,$rb,"
}
if ! strace -qq -o /dev/null true 2>/dev/null; then
	echo "SKIPPED: the timed --force races need strace (installed, and ptrace allowed)"
else
	# A removes the old profile and stalls just after the unlink of the file; B finds the path
	# free, creates its profile and holds its first -journal open.  A must have removed the old
	# -journal and -wal before its unlink, not B's after it (that refused both: B's SQLite
	# found its journal gone, "disk I/O error", and A found B's file).
	run_short -o timed.db
	A_STRACE=(-P "$WORK/timed.db" -e trace=unlink -e inject=unlink:delay_exit=500000:when=1)
	B_WHEN='[ ! -e timed.db ]'
	B_STRACE=(-P "$WORK/timed.db-journal" -e trace=openat -e inject=openat:delay_exit=1000000:when=1)
	got=$(timed_pair timed)
	check "--force race, the remover stalled after its unlink: A refused, B records" "$got" "125,0,"
	check "... A says B created it" "$(cat timed.a.err)" "ampprof: cannot create '$WORK/timed.db': another run created it at the same time"
	check "... B's profile is whole" "$(q timed.db 'PRAGMA integrity_check'):$(q timed.db 'SELECT count(*) FROM steps'):$(ls timed.db-* 2>/dev/null)" "ok:3:"
	# A creates the file and stalls before it locks it; B finds a file nobody holds, removes
	# it and records; A, once it holds the lock of a file no longer at the path, gives up
	rm -f fresh.db
	A_STRACE=(-P "$WORK/fresh.db" -e trace=openat -e inject=openat:delay_exit=500000:when=1)
	B_WHEN='[ -e fresh.db ]'
	B_STRACE=(-e trace=none)
	got=$(timed_pair fresh)
	check "--force race, the creator stalled before its lock: A refused, B records" "$got" "125,0,"
	check "... A says it was replaced" "$(cat fresh.a.err)" "ampprof: cannot create '$WORK/fresh.db': another ampprof replaced it at the same time"
	check "... B's profile is whole" "$(q fresh.db 'PRAGMA integrity_check'):$(q fresh.db 'SELECT count(*) FROM steps'):$(ls fresh.db-* 2>/dev/null)" "ok:3:"
fi

# A start that fails before the application is launched (here the shared-memory session cannot
# be mapped in a small address space) says that the application was not started and leaves no
# profile behind: not one whose meta says "collecting" for ever.  (A sanitizer's shadow memory
# does not start under ulimit -v: SKIPPED there.)
big_rings=(--rings=4096 --ring-size=16777216)
# (in braces with stderr closed: bash's own "Aborted" line for a sanitizer build is noise)
if { (ulimit -v 4000000; "$AMPPROF" --version) >/dev/null 2>&1; } 2>/dev/null; then
	err=$( (ulimit -v 4000000; "$AMPPROF" -q "${big_rings[@]}" -o unstarted.db -- sh -c 'echo started >started.txt') 2>&1); rc=$?
	check "a start that fails: exit 125, the application not run" "$rc:$(cat started.txt 2>/dev/null)" "125:"
	check_true "a start that fails: says what failed" grep -q "cannot map the shared-memory session" <<<"$err"
	check_true "a start that fails: says the application was not started" grep -q "the application was not started; 'unstarted.db' is removed" <<<"$err"
	check "a start that fails: no profile left" "$(ls unstarted.db* 2>/dev/null)" ""
else
	echo "SKIPPED: a start that fails needs a tool that runs under ulimit -v (not a sanitizer build)"
fi

# ---- a profile still being recorded ------------------------------------------------------------
"$AMPPROF" -q -o live.db -- "$PRODUCER" --steps 80 --ops 5 --sleep-ms 20 &
live=$!
wait_steps live.db 5 || bad "the live run did not start recording"
err=$("$AMPPROF" report live.db 2>&1 >/dev/null); rc=$?
check "report on a live profile: exit 6" "$rc" 6
check_true "report on a live profile: says it is live" grep -q "'live.db' is live: ampprof is still recording it" <<<"$err"
"$AMPPROF" report --format=json live.db >/dev/null 2>&1; rc=$?
check "report --format=json on a live profile: exit 6" "$rc" 6
"$AMPPROF" export --format=csv --table=steps live.db >/dev/null 2>&1; rc=$?
check "export on a live profile: exit 6" "$rc" 6
check "report never writes into a live profile" "$(q live.db 'SELECT count(*) FROM run_summary'):$(meta live.db end)" "0:collecting"
wait "$live"
"$AMPPROF" report live.db >/dev/null 2>&1; rc=$?
check "report after the run: exit 0" "$rc" 0

# a profile whose collector was killed, while another process holds its write lock
"$AMPPROF" -q -o killed.db -- "$PRODUCER" --steps 400 --ops 5 --sleep-ms 10 &
ap=$!
wait_steps killed.db 5 || bad "the killed run did not start recording"
kill -KILL "$ap"; wait "$ap" 2>/dev/null
{ echo "BEGIN IMMEDIATE; INSERT INTO meta VALUES ('lock', 'held'); SELECT 'held';"; sleep 5; } | sqlite3 killed.db >holder.out &
holder=$!
for _ in $(seq 100); do grep -q held holder.out 2>/dev/null && break; sleep 0.05; done
err=$("$AMPPROF" report killed.db 2>&1 >/dev/null); rc=$?
check "report on a locked unfinalized profile: exit 6, not 0" "$rc" 6
check_true "report on a locked profile: says it is locked" grep -q "database is locked" <<<"$err"
wait "$holder"
sleep 1 # the killed run's application ends on its own (it finds its collector gone)
"$AMPPROF" report killed.db >killed.report 2>&1; rc=$?
check "report once the lock is gone: summarized, exit 0" "$rc:$(q killed.db 'SELECT count(*) FROM run_summary')" "0:1"
check_true "report of the killed collector's profile: INCOMPLETE, the collector stopped" \
	grep -q '^  INCOMPLETE   the collector stopped before it finished this profile' killed.report

# ---- the journal switch at finalize is checked --------------------------------------------------
# a reader with the profile open when the run ends keeps it in WAL mode: ampprof says so, and
# every reader opens the file with its -wal
"$AMPPROF" -q -o held.db -- "$PRODUCER" --steps 30 --ops 5 --sleep-ms 20 2>held.err &
ap=$!
wait_steps held.db 3 || bad "the held run did not start recording"
{ echo "SELECT count(*) FROM steps;"; sleep 3; } | sqlite3 held.db >/dev/null &
reader=$!
wait "$ap"; rc=$?
check "a reader at finalize: the run still exits 0" "$rc" 0
check_true "a reader at finalize: ampprof says the -wal holds part of the profile" \
	grep -q "'held.db-wal' holds part of the profile" held.err
wait "$reader"
"$AMPPROF" report held.db >/dev/null 2>&1; rc=$?
check "the profile and its -wal: report reads it" "$rc:$(q held.db 'SELECT count(*) FROM steps')" "0:30"

# ---- SIGKILL inside a WAL checkpoint ---------------------------------------------------------
# strace delivers a real SIGKILL to ampprof as it enters a chosen pwrite64 on the profile's main
# file.  During a run in WAL mode the main file is written only by checkpoints (after the one
# write of page 1 that creates it), so the Nth such write lies inside a checkpoint: the one
# SQLite runs on its own every 4096 frames, or the last one, as finalize folds the -wal in
# (journal_mode DELETE), which ends with one more write of page 1 as the mode switches back.
# Where the checkpoints lie is read from a dry run of the same training (-y names each fd's
# file), not assumed: [first last] of each run of main-file writes that a checkpoint's
# ftruncate ends.  The application never opens the profile, so -P spares it.
# ckpt_spans TRACE DB: "first last" per checkpoint, in order, counting only DB's pwrite64s.
ckpt_spans() {
	awk -v main="<$2>" '
		index($0, "pwrite64(") && index($0, main) { n++; if (n > 1 && !first) first = n }
		index($0, "ftruncate(") && index($0, main) && first { print first, n; first = 0 }
		END { if (n) print "total", n }' "$1"
}
# ckpt_kill NAME N ARGS...: runs ampprof -o NAME.db -- PRODUCER ARGS under strace, SIGKILLed at
# the Nth pwrite64 to NAME.db; the strace log in NAME.trace, its status in ckpt_rc.
ckpt_kill() {
	local name=$1 n=$2
	shift 2
	rm -f "$name".db "$name".db-*
	# in braces with stderr closed: bash's own "Killed" line is noise here
	{
		strace -qq -f -y -P "$WORK/$name.db" -e trace=pwrite64 \
			-e "inject=pwrite64:signal=KILL:when=$n" -o "$name.trace" \
			"$AMPPROF" -q -o "$name.db" -- "$PRODUCER" "$@"
		ckpt_rc=$?
	} 2>/dev/null
}
# short_by DB: the size DB's header says (page count, bytes 28-31, times 4096) minus the file's:
# > 0 when a cut checkpoint wrote page 1 (the new count) but not yet the pages that extend it
short_by() {
	local pages
	pages=$(od -An -tu1 -j28 -N4 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
	echo $((pages * 4096 - $(stat -c %s "$1")))
}
# ckpt_readers NAME WHAT STEPS: the checks every killed profile must pass; the read-only readers
# first (they must leave the file and its -wal as they are), then report (which completes an
# unfinalized profile), then a writable sqlite3.
ckpt_readers() {
	local db=$1.db what=$2 steps=$3 before after out rc
	before=""
	[ -e "$db-wal" ] && before=$(stat -c %s "$db" "$db-wal" | tr '\n' ' ')
	"$AMPDUMP" --list --db "$db" >/dev/null 2>"$1.err"; rc=$?
	check "$what: ampdump opens it" "$rc" 0
	out=$("$AMPVIEW" --headless "$db" 2>&1); rc=$?
	check "$what: ampview --headless opens it" "$rc" 0
	check "$what: sqlite3 -readonly reads every step" "$(q "$db" 'SELECT count(*) FROM steps')" "$steps"
	if [ -n "$before" ]; then
		after=$(stat -c %s "$db" "$db-wal" 2>/dev/null | tr '\n' ' ')
		check "$what: the read-only readers leave the file and its -wal as they are" "$after" "$before"
	fi
	out=$("$AMPPROF" report "$db" 2>&1); rc=$?
	check "$what: ampprof report opens it" "$rc" 0
	[ "$rc" = 0 ] || printf '%s\n' "$out" | head -3
	check "$what: sqlite3 integrity_check" "$(sqlite3 -batch "$db" 'PRAGMA integrity_check' 2>&1)" ok
}
# killed_at NAME: "ampprof at write K" if the process strace killed is the one that wrote
# NAME.db (not the application) and its Kth write to NAME.db was the last thing it did; an
# exit status of 137 alone could be the application's, which ampprof passes through
killed_at() {
	awk -v main="<$WORK/$1.db>" '
		index($0, "pwrite64(") && index($0, main) { last = $1; n++ }
		/\+\+\+ killed by SIGKILL/ { killed[$1] = 1 }
		END { print (last != "" && killed[last]) ? "ampprof at write " n : "not ampprof" }' "$1.trace"
}
if ! strace -qq -o /dev/null true 2>/dev/null; then
	echo "SKIPPED: the checkpoint kills need strace (installed, and ptrace allowed)"
else
	# a small run: one checkpoint, at finalize
	small=(--steps 3 --ops 4)
	strace -qq -f -y -P "$WORK/dry.db" -P "$WORK/dry.db-wal" -e trace=pwrite64,ftruncate \
		-o dry.trace "$AMPPROF" -q -o dry.db -- "$PRODUCER" "${small[@]}"
	spans=$(ckpt_spans dry.trace "$WORK/dry.db")
	read -r first last <<<"$(head -1 <<<"$spans")"
	total=$(awk '/total/ { print $2 }' <<<"$spans")
	check "dry run: one checkpoint (at finalize) from the 2nd write, then the journal switch's" \
		"$(grep -c -v total <<<"$spans"):$first:$((total - last))" "1:2:1"
	# its first write (page 1, nothing written yet), one in its middle (page 1 written: the
	# file is shorter than its header says), and the journal switch just after it
	for at in "first:$first" "middle:$(((first + last) / 2))" "switch:$total"; do
		where=${at%%:*} n=${at#*:}
		what="SIGKILL at finalize's checkpoint ($where, write $n of $total)"
		[ "$where" = switch ] && what="SIGKILL as finalize switches the journal mode (write $n)"
		ckpt_kill "k_$where" "$n" "${small[@]}"
		check "$what: ampprof killed (status 137)" "$ckpt_rc" 137
		check "$what: the process killed is ampprof, at that write" "$(killed_at "k_$where")" "ampprof at write $n"
		if [ "$where" = switch ]; then
			# the checkpoint is whole and the -wal gone; the switch takes no rollback journal
			# (a hot one would need a writer to roll it back): the file still says WAL
			check "$what: no -wal, no -journal, the file format bytes still WAL's" \
				"$(ls k_switch.db-wal k_switch.db-journal 2>/dev/null | wc -l):$(od -An -tu1 -j18 -N2 k_switch.db | xargs)" "0:2 2"
		else
			walsize=$(stat -c %s "k_$where.db-wal" 2>/dev/null || echo 0)
			check_true "$what: the -wal holds pages ($walsize bytes)" test "$walsize" -gt 32
		fi
		if [ "$where" = middle ]; then
			check_true "$what: the file is shorter than its header says" test "$(short_by "k_$where.db")" -gt 0
		fi
		ckpt_readers "k_$where" "$what" 3
		check "$what: the application had exited (ampprof was at its end)" "$(meta "k_$where.db" end)" exited
	done

	# a run whose -wal passes 4096 frames before it ends (the collector commits every 100 ms,
	# a millisecond a step makes it commit as it goes): SQLite's own checkpoint, mid-run
	big=(--steps 1000 --ops 500 --sleep-ms 1)
	strace -qq -f -y -P "$WORK/dry2.db" -P "$WORK/dry2.db-wal" -e trace=pwrite64,ftruncate \
		-o dry2.trace "$AMPPROF" -q -o dry2.db -- "$PRODUCER" "${big[@]}"
	spans=$(ckpt_spans dry2.trace "$WORK/dry2.db")
	nckpt=$(grep -c -v total <<<"$spans")
	check_true "dry run of the longer training: a checkpoint before finalize's ($nckpt in all)" test "$nckpt" -ge 2
	read -r first last <<<"$(head -1 <<<"$spans")"
	if [ "$nckpt" -ge 2 ]; then
		n=$(((first + last) / 2))
		what="SIGKILL in a checkpoint during the run (write $n of $first..$last)"
		ckpt_kill k_run "$n" "${big[@]}"
		check "$what: ampprof killed (status 137)" "$ckpt_rc" 137
		check "$what: the process killed is ampprof, at that write" "$(killed_at k_run)" "ampprof at write $n"
		check "$what: it was still recording" "$(meta k_run.db end)" collecting
		walsize=$(stat -c %s k_run.db-wal 2>/dev/null || echo 0)
		check_true "$what: the -wal holds pages ($walsize bytes)" test "$walsize" -gt 32
		steps=$(q k_run.db 'SELECT count(*) FROM steps')
		check_true "$what: it holds steps ($steps)" test "$steps" -gt 0
		ckpt_readers k_run "$what" "$steps"
	fi
fi

# ---- a damaged profile in ampview ---------------------------------------------------------------
"$GENPROF" --output=damaged.db --ops=20000 --steps=40 2>/dev/null
page=$(q damaged.db "SELECT pageno FROM dbstat WHERE name = 'op_events' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 20")
size=$(q damaged.db 'PRAGMA page_size')
if [ -n "$page" ] && [ "$page" -gt 1 ] 2>/dev/null; then
	head -c "$size" /dev/zero | tr '\0' 'Z' | dd of=damaged.db bs="$size" seek=$((page - 1)) conv=notrunc status=none
	out=$("$AMPVIEW" --headless --panel=steps damaged.db 2>view.err); rc=$?
	check "ampview on a damaged profile: exit 1" "$rc" 1
	check_true "ampview on a damaged profile: says so" grep -q "'damaged.db' is damaged (database disk image is malformed)" view.err
	check_true "ampview on a damaged profile: the screen says so too" grep -q "DAMAGED PROFILE" <<<"$out"
else
	bad "no leaf page of op_events found in damaged.db"
fi
# damage in tensor_stats (what the overview's origin reads at open): the profile is shown,
# the origin said to be unknown, the damage said; the report shows it too (it was refused)
"$GENPROF" --output=dmgts.db --ops=2000 --steps=40 --growth=4 2>/dev/null
root=$(q dmgts.db "SELECT rootpage FROM sqlite_master WHERE name = 'tensor_stats'")
head -c "$size" /dev/zero | tr '\0' '\377' | dd of=dmgts.db bs="$size" seek=$((root - 1)) conv=notrunc status=none
out=$("$AMPVIEW" --headless --panel=overview dmgts.db 2>view.err); rc=$?
check "ampview, tensor_stats damaged: shown (the overview), exit 1, the damage said" \
	"$rc|$(grep -c '^ Steps ' <<<"$out")|$(grep -c '^ Non-finite  unknown: the tensor statistics are damaged$' <<<"$out")|$(grep -c DAMAGED <<<"$out")|$(grep -c "'dmgts.db' is damaged" view.err)" \
	"1|1|1|1|1"

# ---- a full disk -----------------------------------------------------------------------------
TINY=$(mktemp -d "${TMPDIR:-/tmp}/ampkit-tiny.XXXXXX")
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=3m tmpfs "$TINY" 2>/dev/null; then
	e2e_on_exit "umount '$TINY'; rmdir '$TINY'"
	ln -s "$TINY" tiny
	# a millisecond a step, so that the collector commits as it goes (as in a real training)
	# rather than taking the whole run in its first transaction on a loaded machine
	"$AMPPROF" -o tiny/full.db -- "$PRODUCER" --steps 3000 --ops 50 --sleep-ms 1 --exit-at 2990 2>full.err; rc=$?
	check "full disk: the application ran to its end, its status passed through" "$rc" 42
	check "full disk: meta end" "$(meta tiny/full.db end)" collector-failed
	check "full disk: meta says why" "$(meta tiny/full.db collector_error)" "database or disk is full"
	check "full disk: meta keeps the application's status" "$(meta tiny/full.db exit_status)" 42
	from=$(meta tiny/full.db missing_from_step)
	check_true "full disk: meta says from which step data is missing" test "$from" -gt 0 -a "$from" -lt 2990
	check "full disk: the steps before it are there" "$(q tiny/full.db "SELECT count(*) >= $from FROM steps WHERE step < $from")" 1
	check_true "full disk: what was not recorded is counted" test "$(meta tiny/full.db not_recorded)" -gt 0
	check "full disk: not complete" "$(meta tiny/full.db complete)" 0
	check_true "full disk: the summary says recording stopped" grep -q "recording stopped at .* in step $from" full.err
	check_true "full disk: the summary says the application ran on" grep -q "the application ran to its end (exit status 42" full.err
	check "full disk: sqlite3 reads it" "$(q tiny/full.db 'PRAGMA integrity_check')" ok
	walsize=$(stat -c %s tiny/full.db-wal 2>/dev/null || echo 0)
	check_true "full disk: the -wal holds pages" test "$walsize" -gt 32
	out=$("$AMPPROF" report tiny/full.db 2>&1); rc=$?
	check "full disk: report opens it (file and -wal)" "$rc" 0
	check_true "full disk: report says it is incomplete" grep -q "INCOMPLETE   recording stopped" <<<"$out"
	"$AMPDUMP" --list --db tiny/full.db >/dev/null 2>dump.err; rc=$?
	check_true "full disk: ampdump opens it" eval "[ $rc = 0 ] && ! grep -q truncated dump.err"
	out=$("$AMPVIEW" --headless tiny/full.db 2>&1); rc=$?; [ $rc = 0 ] || echo "$out" | head -3
	check "full disk: ampview opens it" "$rc" 0
	check_true "full disk: ampview says the collector failed" grep -q "the collector failed" <<<"$out"
	check "full disk: read-only readers leave the -wal as it is" "$(stat -c %s tiny/full.db-wal)" "$walsize"
else
	rmdir "$TINY"
	echo "SKIPPED: the full-disk checks need root (mount -t tmpfs)"
fi

e2e_finish
