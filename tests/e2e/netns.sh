#!/usr/bin/env bash
# netns.sh — data parallel past one machine: two "hosts" made of two network namespaces joined
# by a veth pair, Open MPI's TCP transport between them (no shared memory: btl self,tcp), its
# rsh launcher pointed at `ip netns exec`, and the two ranks' profiles merged with the clock
# alignment of the start-up barrier.  Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) for ip netns;
# without it the script says which command failed and counts that as one failure.  Reads
# $BUILD (default build); a few seconds.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${BUILD:-build}
B=$(cd "$BUILD" 2>/dev/null && pwd) || e2e_abort "no build directory $BUILD"
e2e_tmpdir OUT ampkit_e2e_netns
command -v mpirun >/dev/null || e2e_abort "mpirun is missing (make deps installs openmpi-bin)"
command -v ip >/dev/null || e2e_abort "ip is missing (make deps installs iproute2)"
[ -x "$B/tests/dist_cases" ] || e2e_abort "missing $B/tests/dist_cases (run make units)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# two namespaces with addresses on one /24, names unique to this run
NA=ampkit_a$$ NB=ampkit_b$$ VA=ampa$$ VB=ampb$$
HA=10.251.$(($$ % 200)).1 HB=10.251.$(($$ % 200)).2 NET=10.251.$(($$ % 200)).0/24
e2e_on_exit "ip netns del $NA 2>/dev/null; ip netns del $NB 2>/dev/null"
step() { # step DESCRIPTION COMMAND...: runs it, or aborts saying exactly what failed
	local what=$1 err
	shift
	if ! err=$("$@" 2>&1); then
		e2e_abort "two-host setup failed at: $what ('$*': ${err:-no message})"
	fi
}
step "creating namespace $NA" ip netns add "$NA"
step "creating namespace $NB" ip netns add "$NB"
step "creating the veth pair" ip link add "$VA" type veth peer name "$VB"
step "moving $VA into $NA" ip link set "$VA" netns "$NA"
step "moving $VB into $NB" ip link set "$VB" netns "$NB"
step "addressing $HA" ip -n "$NA" addr add "$HA/24" dev "$VA"
step "addressing $HB" ip -n "$NB" addr add "$HB/24" dev "$VB"
for ns in "$NA" "$NB"; do
	step "bringing up lo in $ns" ip -n "$ns" link set lo up
done
step "bringing up $VA" ip -n "$NA" link set "$VA" up
step "bringing up $VB" ip -n "$NB" link set "$VB" up
ok "two hosts: $NA ($HA) and $NB ($HB) over a veth pair"

# the launcher's "ssh": agent [options] HOST COMMAND -> the command in HOST's namespace
cat >"$OUT/agent.sh" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in $HA) ns=$NA ;; $HB) ns=$NB ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
echo "\$host \$ns" >>"$OUT/agent.log"
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$OUT/agent.sh"
MPI=(timeout 120 ip netns exec "$NA" mpirun --host "$HA,$HB" -np 2 --bind-to none
	--mca plm_rsh_agent "$OUT/agent.sh" --mca btl self,tcp --mca btl_tcp_if_include "$NET"
	--mca oob_tcp_if_include "$NET")

cd "$OUT" || e2e_abort "cannot enter $OUT"
AMP_PRECISION_MODE=force_fp32 "${MPI[@]}" -x AMP_PRECISION_MODE "$B/tests/dist_cases" --dist \
	--steps 10 --weights "$OUT/w.%r" >run.out 2>run.err
rc=$?
check "mpirun across the two namespaces: exit 0" "$rc" 0
[ "$rc" = 0 ] || bad "mpirun output" "$(cat run.err)"
check "the launcher reached the second host through ip netns exec" "$(grep -c " $NB\$" agent.log 2>/dev/null)" 1
check_true "two hosts: identical weights on both ranks" cmp -s w.0 w.1
AMP_PRECISION_MODE=force_fp32 "$B/tests/dist_cases" --steps 10 --weights w.one >/dev/null
check_true "two hosts: the same training as one process (fp32, within 1e-5)" \
	python3 -c "
import struct, sys
a = open('w.one', 'rb').read(); b = open('w.0', 'rb').read()
n = len(a) // 4; A = struct.unpack('%df' % n, a); B = struct.unpack('%df' % n, b)
num = sum((x - y) ** 2 for x, y in zip(A, B)) ** 0.5; den = sum(x * x for x in A) ** 0.5
sys.exit(0 if len(a) == len(b) and num / den <= 1e-5 else 1)"

# profiled on both hosts, then merged on the barrier
"${MPI[@]}" "$B/bin/ampprof" -q -o "$OUT/h.%r.db" -- "$B/tests/dist_cases" --dist --steps 10 \
	>prof.out 2>prof.err
check "ampprof -o h.%r.db on the two hosts: exit 0" "$?" 0
check_true "one profile per host" test -s h.0.db -a -s h.1.db
"$B/bin/ampprof" merge -o h.db h.0.db h.1.db >merge.out 2>&1
check "merge of the two hosts' profiles: exit 0" "$?" 0
grep -q "clocks aligned on the start-up barrier (clocks [0-9.]* us apart)" merge.out ||
	bad "merge: clock alignment line" "$(cat merge.out)"
check "merged: both ranks' all-reduces over TCP" \
	"$(sqlite3 h.db "SELECT group_concat(rank || ':' || n) FROM (SELECT rank, count(*) n FROM comm WHERE kind = 'allreduce' GROUP BY rank ORDER BY rank)")" \
	"0:10,1:10"
e2e_finish
