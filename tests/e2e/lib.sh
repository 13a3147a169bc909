# lib.sh — the harness every end-to-end script sources (it is not a test itself): the pass and
# fail counters, ok/bad/check/check_true, a temporary directory removed at exit (kept with
# KEEP=1), exit hooks, and the closing "N passed, N failed" line with the script's status.
#
#   . "$(dirname "$0")/lib.sh"
#   e2e_tmpdir T ampkit-x-e2e        # T=/tmp/ampkit-x-e2e.XXXXXX, removed at exit
#   check "name" "$actual" "$expected"
#   check_true "name" grep -q x file
#   e2e_finish                       # prints the counts, exits 0 only if nothing failed
set -u
export LC_ALL=C TZ=UTC
pass=0
fail=0

# ok NAME: one passed check.
ok() { pass=$((pass + 1)); echo "ok   $1"; }
# bad NAME [DETAIL]: one failed check; DETAIL (any number of lines, the first 40 shown) is
# printed indented under it.  Returns 0, so that a script goes on.
bad() {
	fail=$((fail + 1))
	echo "FAIL $1"
	[ -n "${2:-}" ] && printf '%s\n' "$2" | head -n 40 | sed 's/^/     /'
	return 0
}
# check NAME ACTUAL EXPECTED: passes when the two strings are equal (the one meaning of check).
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "got '$2', want '$3'"; fi; }
# check_true NAME COMMAND...: passes when the command succeeds.
check_true() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }

# e2e_on_exit COMMAND: runs COMMAND (with eval) when the script exits, in the order given.
E2E_EXIT_HOOKS=()
e2e_on_exit() { E2E_EXIT_HOOKS+=("$1"); }
e2e_run_exit_hooks() {
	local h
	for h in ${E2E_EXIT_HOOKS[@]+"${E2E_EXIT_HOOKS[@]}"}; do eval "$h"; done
}
trap e2e_run_exit_hooks EXIT

# e2e_tmpdir VAR PREFIX: makes ${TMPDIR:-/tmp}/PREFIX.XXXXXX, stores its path in VAR and
# removes it at exit (unless KEEP is set: then its path is printed).
e2e_tmpdir() {
	local d
	d=$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX") || e2e_abort "cannot create a temporary directory"
	printf -v "$1" '%s' "$d"
	e2e_on_exit "if [ -n \"\${KEEP:-}\" ]; then echo \"kept $d\"; else rm -rf '$d'; fi"
}

# e2e_finish: prints "N passed, N failed" and exits 0 if nothing failed, else 1.
e2e_finish() {
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ] && exit 0
	exit 1
}

# e2e_path_runs AMPPROF PATH: true if the kernel path PATH (an AMP_KERNELS value) runs on this
# CPU, as `ampprof info` lists it; a test that forces a path checks this first and prints
# "SKIPPED: ..." otherwise.
e2e_path_runs() { "$1" info 2>/dev/null | grep -Eq "^  $2 +runs\$"; }

# e2e_abort MESSAGE: the script cannot go on (a missing tool, no test data): MESSAGE counts as
# one failure, then e2e_finish.
e2e_abort() {
	echo "$(basename "$0"): $1"
	fail=$((fail + 1))
	e2e_finish
}
