/* collect.c — the profile command: create the database, launch the application, drain its
 * rings into SQLite until it ends, finalize, print the summary.
 *
 * One thread.  The loop drains every ring, then sleeps on the session's futex word for a time
 * set by how fast the rings filled (1 to 50 ms: a run producing a few thousand events a second
 * costs twenty wake-ups a second, not a thousand, which matters when the application shares
 * the cores); a producer whose ring passes half full wakes it at once, as does the child's
 * exit (SIGCHLD).  It never spins and never makes the application wait on SQLite (the rings
 * absorb the latency), and it commits at least every 100 ms while events arrive, so a killed
 * ampprof leaves a valid database.
 *
 * When the database cannot be written (a full disk), recording stops but the collector goes on
 * draining the rings, discarding what it reads, so that the application runs to its end; meta
 * says why and from when data is missing (end 'collector-failed'), written from a reserve of
 * space held for that, and ampprof exits with the application's status.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>

#include "amp_progress.h"
#include "prof.h"
#include "profile_db.h"

#define COMMIT_NS 100000000ull        /* commit at least this often */
#define STATUS_NS 250000000ull        /* status line refresh */
#define DRAIN_MAX 65536u              /* records per ring per round */
#define POLL_MIN_NS 1000000ull        /* shortest sleep between rounds */
#define POLL_MAX_NS 50000000ull       /* longest sleep between rounds */
#define POLL_FILL_DIV 8u              /* aim to find a ring at most 1/8 full at a round */
#define OWNER_CHECK_NS 100000000ull   /* how often idle open rings' owners are checked */
#define ATTACH_GRACE_NS 2000000000ull /* how long a process holding the session's fd after
                                         the launched one ended may take to attach */
#define RESERVE_BYTES (1u << 20)      /* space held for the meta that says recording stopped */

typedef struct collector {
	const prof_options *opts;
	prof_session sess;
	prof_writer *w;
	sqlite3 *db;
	uint64_t *tails;                  /* our read positions, never read back from the ring */
	uint64_t *idle_heads;             /* head of each open ring at the last owner check */
	uint64_t last_owner_check;        /* prof_now_ns() of the last check of open rings' owners */
	uint32_t rings_seen;
	uint64_t bad_slots;
	prof_status status;               /* live status line on stderr */
	uint64_t round_backlog;           /* largest backlog (slots) found in a ring this round */
	int round_more;                   /* a ring still had records when the round ended */
	uint64_t start_mono;
	int reserve_fd;                   /* RESERVE_BYTES in the output's file system, or -1 */
	int64_t committed_step;           /* last step begun at the last commit that succeeded */
	uint64_t committed_events;        /* events written at that commit */
	/* the database could not be written: recording stopped */
	int failed;
	uint64_t failed_ns;               /* when, since the start */
	int64_t failed_step;              /* committed_step then */
	char failed_why[256];             /* SQLite's message */
	uint32_t abandoned;               /* a producer still recording when ampprof was stopped
	                                     while it waited for it (the launched process gone) */
	int failed_meta;                  /* meta could not say so either */
	/* processes other than the launched one: the first 64 seen recording (an open ring's pid),
	 * and the first of them that ampprof, their subreaper, reaped after a signal ended it */
	uint32_t rec_pids[64];
	unsigned n_rec_pids;
	uint32_t killed_pid;
	int killed_sig, killed_core;
	uint64_t killed_ns;
	uint64_t discarded;               /* records drained and not recorded since */
	unsigned char buf[PROF_DECODE_BUF];
} collector;

static volatile sig_atomic_t g_forward_sig;
static volatile sig_atomic_t g_sigint_sent; /* a SIGINT sent to ampprof alone (kill), not by
                                               the terminal to the whole foreground group */

static void on_signal(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	/* the terminal's SIGINT comes from the kernel (SI_KERNEL) and reached the application as
	 * well; one sent with kill(2) or sigqueue(3) (si_code <= 0) reached ampprof only */
	if (sig == SIGINT && si && si->si_code <= 0)
		g_sigint_sent = 1;
	g_forward_sig = sig;
}

/* Once the run has ended no process is left to pass a signal to: the first one says what
 * ampprof is doing, a second ends ampprof by that signal (the profile keeps the steps already
 * committed, without its summary and end; readers call it incomplete). */
static volatile sig_atomic_t g_finalize_signals;

static void on_signal_finalizing(int sig)
{
	static const char msg[] = "\nampprof: the run has ended; finalizing the profile (interrupt "
	                          "again to stop: it is then left incomplete)\n";
	if (g_finalize_signals++ == 0) {
		ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
		(void)w;
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Installed without SA_RESTART only to cut the collector's sleep short when the child ends. */
static void on_child(int sig)
{
	(void)sig;
}

/* Sleeps until the session's wake word moves away from seen, a signal arrives or ns pass. */
static void sleep_on_wake(amp_session_hdr *h, uint32_t seen, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	syscall(SYS_futex, &h->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* Nonzero when thread tid of process pid is gone (no such task, or a zombie): an open ring it
 * left behind (a process killed, or exited without closing its threads' rings) is then drained
 * in full and reclaimed.  pid and tid come from the application: 0 is never a live owner. */
static int owner_gone(uint32_t pid, uint32_t tid)
{
	char path[64];
	if (pid == 0 || tid == 0 || pid > (uint32_t)INT32_MAX || tid > (uint32_t)INT32_MAX)
		return 1;
	snprintf(path, sizeof path, "/proc/%u/task/%u/stat", pid, tid);
	char state;
	if (prof_proc_stat(path, &state, NULL) != 0)
		return errno == ENOENT || errno == ESRCH;
	return state == 'Z' || state == 'X';
}

/* Whether process pid maps this run's session (its memfd, by inode): one of the run's
 * producers, not a pid that a ring header names (the application writes those). */
static int maps_session(uint32_t pid, ino_t ino)
{
	char path[64], line[512];
	snprintf(path, sizeof path, "/proc/%u/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	int found = 0;
	while (!found && fgets(line, sizeof line, f)) {
		unsigned long long inode = 0;
		if (strstr(line, "memfd:ampprof-session") &&
		    sscanf(line, "%*s %*s %*s %*s %llu", &inode) == 1 && inode == (unsigned long long)ino)
			found = 1;
	}
	fclose(f);
	return found;
}

/* A process of the run still going after the launched one ended (a trainer the command put
 * in the background, or a process it forked): the pid of one that records into an open ring
 * of this session, or that holds the session's fd (inherited, the same number as the
 * launched process's) and maps it, or that holds it while in_grace (it may not have
 * attached yet); 0 if none.  Ring headers name pids as the application wrote them, so a
 * pid counts only if that process maps this session. */
static uint32_t run_process_alive(collector *c, int in_grace)
{
	struct stat sb;
	if (fstat(c->sess.fd, &sb) != 0)
		return 0;
	uint32_t self = (uint32_t)getpid();
	uint32_t claimed = __atomic_load_n(&c->sess.hdr->rings_claimed, __ATOMIC_ACQUIRE);
	uint32_t n = claimed < c->sess.ring_count ? claimed : c->sess.ring_count;
	for (uint32_t i = 0; i < n; i++) {
		amp_ring_hdr *rh = prof_session_ring(&c->sess, i);
		uint32_t pid = __atomic_load_n(&rh->pid, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&rh->state, __ATOMIC_ACQUIRE) == AMP_RING_OPEN && pid != self &&
		    !owner_gone(pid, rh->tid) && maps_session(pid, sb.st_ino))
			return pid;
	}
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	uint32_t found = 0;
	for (struct dirent *e; !found && (e = readdir(d));) {
		char *end;
		unsigned long pid = strtoul(e->d_name, &end, 10);
		if (*end || pid == 0 || pid == self || pid > INT32_MAX)
			continue;
		char path[64];
		struct stat fb;
		snprintf(path, sizeof path, "/proc/%lu/fd/%d", pid, c->sess.fd);
		if (stat(path, &fb) == 0 && fb.st_dev == sb.st_dev && fb.st_ino == sb.st_ino &&
		    !owner_gone((uint32_t)pid, (uint32_t)pid) &&
		    (in_grace || maps_session((uint32_t)pid, sb.st_ino)))
			found = (uint32_t)pid;
	}
	closedir(d);
	return found;
}

/* Drains one ring.  final: the writer is gone (the application ended, or the ring's owner), so
 * records written but not published (stamp valid beyond head) are recovered too.  Returns
 * records written, or -1 on a db error.  *drained: nothing is left to read (the whole
 * published head, or with final, everything the stamps vouch for). */
static int64_t drain_ring_at(collector *c, uint32_t i, int final, int *drained)
{
	amp_ring_hdr *rh = prof_session_ring(&c->sess, i);
	*drained = 0;
	uint32_t state = __atomic_load_n(&rh->state, __ATOMIC_ACQUIRE);
	if (state != AMP_RING_OPEN && state != AMP_RING_CLOSED)
		return 0;
	uint64_t nslots = c->sess.ring_slots;
	uint64_t head = __atomic_load_n(&rh->head, __ATOMIC_ACQUIRE);
	uint64_t pos = c->tails[i];
	uint64_t limit;
	if (final)
		limit = pos + nslots;                /* stamps tell valid records apart */
	else if (head < pos)
		limit = pos;                         /* hostile or garbage: nothing to read */
	else
		limit = head - pos > nslots ? pos + nslots : head;
	if (limit - pos > c->round_backlog)
		c->round_backlog = limit - pos;
	unsigned clock = __atomic_load_n(&rh->clock, __ATOMIC_RELAXED);
	uint64_t kinds[AMP_DROP_KINDS];
	for (unsigned k = 0; k < AMP_DROP_KINDS; k++)
		kinds[k] = __atomic_load_n(&rh->dropped_kind[k], __ATOMIC_RELAXED);
	prof_writer_thread(c->w, i, rh->pid, rh->tid, __atomic_load_n(&rh->dropped, __ATOMIC_RELAXED),
	                   kinds);
	int64_t done = 0;
	int need = 0;
	const unsigned char *slots = (const unsigned char *)rh + AMP_RING_HDR_SIZE;
	while (pos < limit && done < DRAIN_MAX) {
		prof_record rec;
		int n = prof_decode(slots, nslots, pos, limit - pos, c->buf, &rec);
		if (n > 0) {
			if (c->failed)
				c->discarded++;
			else if (prof_writer_put(c->w, i, clock, &rec) != 0)
				return -1;
			pos += (uint64_t)n;
			done++;
			continue;
		}
		if (n == PROF_DECODE_NEED || final) {
			need = 1;
			break;
		}
		pos++;                               /* garbage: skip a slot and resynchronize */
		c->bad_slots++;
	}
	if (pos < limit && done >= DRAIN_MAX)
		c->round_more = 1;
	else
		*drained = final ? 1 : pos == limit && !need && limit == head;
	c->tails[i] = pos;
	__atomic_store_n(&rh->tail, pos, __ATOMIC_RELEASE);
	return done;
}

/* A pid seen recording (its ring open), remembered so that its end can be told once it is
 * reaped: by then the collector may have reclaimed its ring. */
static void note_recording(collector *c, uint32_t pid)
{
	for (unsigned k = 0; k < c->n_rec_pids; k++)
		if (c->rec_pids[k] == pid)
			return;
	if (pid != 0 && c->n_rec_pids < sizeof c->rec_pids / sizeof c->rec_pids[0])
		c->rec_pids[c->n_rec_pids++] = pid;
}

/* Reaps the launched process (*status, *child_done) and, ampprof being the run's subreaper, any
 * process of the run orphaned by its parent's end: one that recorded and was ended by a signal
 * (killed, crashed) is remembered, the profile then not whole. */
static void reap(collector *c, pid_t child, int *status, int *child_done)
{
	int st;
	pid_t r;
	while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
		if (r == child) {
			*status = st;
			*child_done = 1;
			continue;
		}
		if (!WIFSIGNALED(st) || c->killed_pid)
			continue;
		for (unsigned k = 0; k < c->n_rec_pids; k++)
			if (c->rec_pids[k] == (uint32_t)r) {
				c->killed_pid = (uint32_t)r;
				c->killed_sig = WTERMSIG(st);
				c->killed_core = WCOREDUMP(st);
				c->killed_ns = prof_now_ns() - c->start_mono;
				break;
			}
	}
	/* without the subreaper (prctl refused), the launched process alone */
	if (r < 0 && errno == ECHILD && !*child_done && waitpid(child, &st, WNOHANG) == child) {
		*status = st;
		*child_done = 1;
	}
}

/* Drains ring i; a ring whose owner ended (closed, or its thread gone) is then drained in full
 * and handed back for reuse.  Returns records written, or -1 on a db error. */
static int64_t drain_ring(collector *c, uint32_t i, int final, int check_owner)
{
	amp_ring_hdr *rh = prof_session_ring(&c->sess, i);
	uint32_t state = __atomic_load_n(&rh->state, __ATOMIC_ACQUIRE);
	if (state == AMP_RING_OPEN)
		note_recording(c, __atomic_load_n(&rh->pid, __ATOMIC_ACQUIRE));
	int drained;
	int64_t got = drain_ring_at(c, i, final, &drained);
	if (got < 0 || final)
		return got;
	int gone = 0;
	if (state == AMP_RING_CLOSED) {
		gone = drained;
	} else if (state == AMP_RING_OPEN && check_owner) {
		uint64_t head = __atomic_load_n(&rh->head, __ATOMIC_ACQUIRE);
		if (head == c->idle_heads[i] && owner_gone(rh->pid, rh->tid)) {
			int64_t more = drain_ring_at(c, i, 1, &drained);
			if (more < 0)
				return -1;
			got += more;
			gone = drained;
		}
		c->idle_heads[i] = head;
	}
	if (!gone)
		return got;
	/* a stopped recording writes nothing, but the ring still goes back to the application */
	if (!c->failed && prof_writer_ring_retire(c->w, i) != 0)
		return -1;
	c->idle_heads[i] = c->tails[i];
	prof_session_ring_reset(&c->sess, i, c->tails[i]);
	return got;
}

static int64_t drain_all(collector *c, int final)
{
	int64_t total = 0;
	c->round_backlog = 0;
	c->round_more = 0;
	uint32_t claimed = __atomic_load_n(&c->sess.hdr->rings_claimed, __ATOMIC_ACQUIRE);
	uint32_t n = claimed < c->sess.ring_count ? claimed : c->sess.ring_count;
	uint64_t now = prof_now_ns();
	int check_owner = now - c->last_owner_check >= OWNER_CHECK_NS;
	if (check_owner)
		c->last_owner_check = now;
	for (uint32_t i = 0; i < n; i++) {
		int64_t got = drain_ring(c, i, final, check_owner);
		if (got < 0)
			return -1;
		total += got;
	}
	if (n > c->rings_seen)
		c->rings_seen = n;
	return total;
}

static uint64_t file_size(const char *path)
{
	struct stat st;
	char wal[4200];
	uint64_t total = 0;
	if (stat(path, &st) == 0)
		total += (uint64_t)st.st_size;
	snprintf(wal, sizeof wal, "%s-wal", path);
	if (stat(wal, &st) == 0)
		total += (uint64_t)st.st_size;
	return total;
}

static void status_update(collector *c, uint64_t elapsed, double rate)
{
	int64_t step = prof_writer_last_step(c->w);
	char stepbuf[32], line[512];
	if (step >= 0)
		snprintf(stepbuf, sizeof stepbuf, "%" PRId64, step);
	else
		snprintf(stepbuf, sizeof stepbuf, "-");
	if (c->failed)
		snprintf(line, sizeof line, "ampprof: %.1f s  RECORDING STOPPED at %.1f s: %s",
		         (double)elapsed / 1e9, (double)c->failed_ns / 1e9, c->failed_why);
	else
		snprintf(line, sizeof line, "ampprof: %.1f s  step %s  %.1f k events/s  %" PRIu64
		         " events  db %.1f MB", (double)elapsed / 1e9, stepbuf, rate / 1e3,
		         prof_writer_events(c->w), (double)file_size(c->opts->output) / 1e6);
	prof_status_draw(&c->status, line);
}

/* Sets meta key; 0, or -1 if the database could not be written. */
static int meta_set(sqlite3 *db, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int meta_set(sqlite3 *db, const char *key, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return amp_profile_meta_set(db, key, buf) == AMP_PROFILE_OK ? 0 : -1;
}

static void ranges_text(char *buf, size_t len, const amp_step_range *r, int n)
{
	size_t used = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && used < len; i++) {
		if (r[i].hi == INT64_MAX)
			used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64 "-", i ? "," : "",
			                         r[i].lo);
		else if (r[i].lo == r[i].hi)
			used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? "," : "",
			                         r[i].lo);
		else
			used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64 "-%" PRId64,
			                         i ? "," : "", r[i].lo, r[i].hi);
	}
}

/* Appends word to buf[*used..len) as sh reads it back as one word: as it is when it holds
 * only characters no shell treats specially, else in single quotes (' as '\''). */
static void put_sh_word(char *buf, size_t len, size_t *used, const char *word)
{
	const char *plain = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-";
	int quote = !*word || strspn(word, plain) != strlen(word);
	char piece[8];
	for (const char *p = quote ? "'" : ""; *used + 1 < len; ) {
		if (p && *p) {
			buf[(*used)++] = *p++;
			continue;
		}
		if (!*word)
			break;
		if (quote && *word == '\'') {
			snprintf(piece, sizeof piece, "'\\''");
			p = piece;
			word++;
			continue;
		}
		buf[(*used)++] = *word++;
	}
	if (quote && *used + 1 < len)
		buf[(*used)++] = '\'';
	buf[*used] = '\0';
}

/* The meta known before launch; 0, or -1 if the database could not be written. */
static int write_start_meta(collector *c, uint64_t start_mono)
{
	const prof_options *o = c->opts;
	sqlite3 *db = c->db;
	char buf[8192], host[256] = "unknown", cpu[256], ranges[512];
	struct utsname un;
	int bad = 0;
	if (o->application) {
		bad |= meta_set(db, "command", "%s", o->application);
	} else {
		/* a command line sh reads back as these words (ampdump --application re-runs it) */
		size_t used = 0;
		buf[0] = '\0';
		for (char **a = o->argv; *a && used + 1 < sizeof buf; a++) {
			if (a != o->argv)
				buf[used++] = ' ';
			put_sh_word(buf, sizeof buf, &used, *a);
		}
		bad |= meta_set(db, "command", "%s", buf);
	}
	if (getcwd(buf, sizeof buf))
		bad |= meta_set(db, "cwd", "%s", buf);
	if (gethostname(host, sizeof host) != 0)
		snprintf(host, sizeof host, "unknown");
	host[sizeof host - 1] = '\0';
	bad |= meta_set(db, "host", "%s", host);
	if (uname(&un) == 0)
		bad |= meta_set(db, "os", "%s %s %s", un.sysname, un.release, un.machine);
	prof_cpu_model(cpu, sizeof cpu);
	bad |= meta_set(db, "cpu", "%s", cpu);
	prof_cpu_vendor(cpu, sizeof cpu);
	bad |= meta_set(db, "cpu_vendor", "%s", cpu);
	prof_cpu_half_features(buf, sizeof buf);
	bad |= meta_set(db, "cpu_half_features", "%s", buf);
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
	bad |= meta_set(db, "start_time", "%s", buf);
	bad |= meta_set(db, "start_mono_ns", "%" PRIu64, start_mono);
	bad |= meta_set(db, "clock", "%s", prof_tsc_invariant() ? "tsc" : "monotonic");
	bad |= meta_set(db, "ampprof_version", "%s", AMP_VERSION);
	bad |= meta_set(db, "wire_version", "%u", AMP_WIRE_VERSION);
	bad |= meta_set(db, "output", "%s", o->output);
	ranges_text(ranges, sizeof ranges, o->steps, o->n_steps);
	bad |= meta_set(db, "options.steps", "%s", o->n_steps ? ranges : "all");
	bad |= meta_set(db, "options.callstack", "%s", o->callstack ? "on" : "off");
	bad |= meta_set(db, "options.nan_check", "%s",
	         o->nan_check == AMP_NAN_CHECK_OP ? "op"
	         : o->nan_check == AMP_NAN_CHECK_STEP ? "step" : "off");
	if (o->stats_every > 0) {
		bad |= meta_set(db, "options.stats_every", "%u", o->stats_every);
	} else {
		/* inherited from the environment: what the runtime takes (a whole 1..1000000),
		 * else it takes statistics every step, and meta says so */
		const char *every = getenv(PROF_STATS_EVERY_ENV);
		char *end = NULL;
		long v = every && *every ? strtol(every, &end, 10) : 1;
		if (every && *every && (*end || v < 1 || v > 1000000)) {
			fprintf(stderr, "ampprof: warning: %s='%s' is not a whole number from 1 to 1000000 "
			        "and is ignored: statistics every step\n", PROF_STATS_EVERY_ENV, every);
			v = 1;
		}
		bad |= meta_set(db, "options.stats_every", "%ld", v);
	}
	bad |= meta_set(db, "options.dump", "%s", o->dump == AMP_DUMP_NONFINITE ? "nonfinite" : "off");
	ranges_text(ranges, sizeof ranges, o->dump_steps, o->n_dump_steps);
	bad |= meta_set(db, "options.dump_steps", "%s", ranges);
	bad |= meta_set(db, "options.dump_limit", "%" PRIu64, o->dump_limit);
	bad |= meta_set(db, "options.fp16_threshold", "%.9g", o->fp16_threshold);
	bad |= meta_set(db, "options.memcpy_threshold", "%.9g", o->memcpy_threshold);
	bad |= meta_set(db, "options.drop", "%s", o->drop ? "on" : "off");
	bad |= meta_set(db, "end", "collecting");
	bad |= meta_set(db, "complete", "0");
	return bad ? -1 : 0;
}

/* meta 'dropped.<kind>': the records of a kind dropped (drop mode, or a dead collector). */
static int meta_set_dropped(sqlite3 *db, unsigned kind, uint64_t n)
{
	char key[64];
	snprintf(key, sizeof key, "dropped.%s", amp_drop_kind_name(kind));
	return meta_set(db, key, "%" PRIu64, n);
}

/* Why the profile does not hold the whole run, "" if it does: threads that found no ring, and
 * records dropped (the figures then cover a sample).  meta 'incomplete'. */
static void incomplete_reason(char *buf, size_t len, uint64_t missing, uint64_t dropped,
                              const uint64_t by_kind[AMP_DROP_KINDS], uint32_t rings)
{
	size_t used = 0;
	buf[0] = '\0';
	if (missing > 0)
		used += (size_t)snprintf(buf, len, "%" PRIu64 " thread(s) or process(es) found none of "
		                         "the %u rings free: their events were not recorded (raise "
		                         "--rings)", missing, rings);
	if (dropped > 0 && used < len) {
		used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64 " records dropped (",
		                         used ? "; " : "", dropped);
		for (unsigned k = 0, n = 0; k < AMP_DROP_KINDS && used < len; k++)
			if (by_kind[k] > 0)
				used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64 " %s",
				                         n++ ? ", " : "", by_kind[k], amp_drop_kind_name(k));
		if (used < len)
			snprintf(buf + used, len - used, "): the figures cover a sample of the run (run "
			         "without --drop, or with a larger --ring-size, to record all of it)");
	}
}

/* Appends one more cause to why ("; " between causes). */
static void add_cause(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_cause(char *why, size_t len, const char *fmt, ...)
{
	size_t used = strlen(why);
	if (used && used + 2 < len) {
		memcpy(why + used, "; ", 3);
		used += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why + used, len - used, fmt, ap);
	va_end(ap);
}

/* The counters of threads that found no ring (the session's lost counters) join the run's
 * totals, so ops_dispatched counts every thread's ops.  0 or -1 (reported). */
static int record_unrecorded(collector *c)
{
	const amp_lost_counter *lc = c->sess.hdr->lost;
	char names[AMP_LOST_COUNTERS][AMP_LOST_NAME];
	int64_t values[AMP_LOST_COUNTERS];
	int n = 0;
	for (int i = 0; i < AMP_LOST_COUNTERS; i++) {
		if (__atomic_load_n(&lc[i].state, __ATOMIC_ACQUIRE) != 2)
			continue;
		char name[AMP_LOST_NAME];
		memcpy(name, lc[i].name, sizeof name);
		name[sizeof name - 1] = '\0';
		if (!name[0])
			continue;
		/* the session header is the application's: slots of one name are summed */
		int64_t v = __atomic_load_n(&lc[i].value, __ATOMIC_RELAXED);
		int k = 0;
		while (k < n && strcmp(names[k], name) != 0)
			k++;
		if (k == n) {
			memcpy(names[n], name, sizeof name);
			values[n++] = v;
		} else {
			values[k] = (int64_t)((uint64_t)values[k] + (uint64_t)v);
		}
	}
	for (int k = 0; k < n; k++)
		if (prof_writer_lost_counter(c->w, names[k], values[k]) != 0)
			return -1;
	return 0;
}

/* Two calibration pairs 10 ms apart before launch; later pairs refine the ratio. */
static void calibrate_start(prof_writer *w)
{
	uint64_t t = prof_ticks(), m = prof_now_ns();
	prof_writer_calibrate(w, t, m);
	struct timespec ts = {0, 10000000};
	nanosleep(&ts, NULL);
	prof_writer_calibrate(w, prof_ticks(), prof_now_ns());
}

/* ---- a database that cannot be written ----------------------------------------------------- */
/* Holds RESERVE_BYTES of the output's file system in an unlinked file (O_TMPFILE: nothing is
 * left behind, even by a SIGKILL), so that when the disk fills up the meta saying so still
 * fits.  The descriptor, or -1 if the file system offers no such file (then meta is written as
 * far as the space left allows). */
static int reserve_take(const char *output)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", output);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (posix_fallocate(fd, 0, RESERVE_BYTES) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void reserve_release(collector *c)
{
	if (c->reserve_fd >= 0)
		close(c->reserve_fd);
	c->reserve_fd = -1;
}

/* Writes the meta of a stopped recording in one transaction: 0, or -1. */
static int failed_meta(collector *c)
{
	int bad = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK;
	bad = bad || meta_set(c->db, "end", "collector-failed") != 0;
	bad = bad || meta_set(c->db, "complete", "0") != 0;
	bad = bad || meta_set(c->db, "collector_error", "%s", c->failed_why) != 0;
	bad = bad || meta_set(c->db, "missing_from_ns", "%" PRIu64, c->failed_ns) != 0;
	bad = bad || meta_set(c->db, "missing_from_step", "%" PRId64,
	                      c->failed_step < 0 ? 0 : c->failed_step) != 0;
	bad = bad || sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK;
	if (bad && !sqlite3_get_autocommit(c->db))
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
	return bad ? -1 : 0;
}

/* The database could not be written (SQLite's message is the reason): recording stops here.
 * What was not committed is rolled back, the reserve is freed and meta says why and from
 * when data is missing; from now on the rings are drained and discarded, so that the
 * application is never made to wait on a collector that cannot record. */
static void collector_fail(collector *c)
{
	if (c->failed)
		return;
	c->failed = 1;
	c->failed_ns = prof_now_ns() - c->start_mono;
	c->failed_step = c->committed_step;
	snprintf(c->failed_why, sizeof c->failed_why, "%s", sqlite3_errmsg(c->db));
	if (c->w) /* what the rollback takes back was not recorded either */
		c->discarded += prof_writer_events(c->w) - c->committed_events;
	if (!sqlite3_get_autocommit(c->db))
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
	/* the frames the rollback left in the -wal are reused first; the reserve, kept for the
	 * summary at the end if it can be, is the fallback */
	if (failed_meta(c) != 0) {
		reserve_release(c);
		c->failed_meta = failed_meta(c) != 0;
	}
}

/* How the application ended into meta (end, exit_status, exit_signal); its exit code in
 * *app_code.  0, or -1 if the database could not be written. */
static int end_meta(collector *c, int status, int *app_code)
{
	int64_t crash_rows = 0;
	amp_profile_query_int64(c->db, &crash_rows, "SELECT count(*) FROM crashes", NULL);
	const char *end = "exited";
	int bad = 0;
	/* under --application the shell reports a command a signal ended as 128 + its number */
	int shell_sig = c->opts->application && WIFEXITED(status) && WEXITSTATUS(status) > 128 &&
	                        WEXITSTATUS(status) < 128 + 32
	                    ? WEXITSTATUS(status) - 128
	                    : 0;
	if (WIFEXITED(status) && !shell_sig) {
		*app_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status) || shell_sig) {
		int sig = shell_sig ? shell_sig : WTERMSIG(status);
		*app_code = 128 + sig;
		end = crash_rows > 0 ? "crash" : sig == SIGKILL ? "killed" : "signal";
		bad |= meta_set(c->db, "exit_signal", "%s", prof_signal_name(sig));
	} else {
		*app_code = PROF_EXIT_FAILED;
		end = "unknown";
	}
	bad |= meta_set(c->db, "exit_status", "%d", *app_code);
	bad |= meta_set(c->db, "end", "%s", c->failed ? "collector-failed" : end);
	return bad ? -1 : 0;
}

/* The run's totals into meta, in one transaction.  0, or -1. */
static int totals_meta(collector *c, int status, int app_code, uint64_t wall_ns)
{
	uint64_t by_kind[AMP_DROP_KINDS];
	uint64_t dropped = prof_writer_dropped(c->w, by_kind);
	uint64_t missing = __atomic_load_n(&c->sess.hdr->rings_missing, __ATOMIC_RELAXED);
	char why[768];
	incomplete_reason(why, sizeof why, missing, dropped, by_kind, c->opts->ring_count);
	uint64_t rejected = prof_writer_rejected(c->w) + c->bad_slots;
	if (rejected) /* the runtime writes none: a damaged or foreign producer */
		add_cause(why, sizeof why, "%" PRIu64 " malformed record(s) rejected (meta "
		          "rejected_events): written by something other than libamprt, or damaged in "
		          "shared memory", rejected);
	if (c->abandoned)
		add_cause(why, sizeof why, "process %u of the run was still recording when ampprof "
		          "was stopped: the rest of its run is not in the profile", c->abandoned);
	if (c->killed_pid)
		add_cause(why, sizeof why,
		          "process %u of the run (not the launched one) was ended by "
		          "%s%s at %.3f s: its recording stops there",
		          c->killed_pid, prof_signal_name(c->killed_sig),
		          c->killed_core ? " (core dumped)" : "", (double)c->killed_ns / 1e9);
	if (c->failed)
		add_cause(why, sizeof why, "recording stopped at %.3f s: the profile could not be "
		          "written (%s; give it room, or write it elsewhere with -o)",
		          (double)c->failed_ns / 1e9, c->failed_why);
	time_t now = time(NULL);
	struct tm tm;
	char when[64];
	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	int bad = sqlite3_exec(c->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK;
	bad |= meta_set(c->db, "events", "%" PRIu64,
	                c->failed ? c->committed_events : prof_writer_events(c->w));
	bad |= meta_set(c->db, "dropped_events", "%" PRIu64, dropped);
	for (unsigned k = 0; k < AMP_DROP_KINDS; k++)
		bad |= meta_set_dropped(c->db, k, by_kind[k]);
	bad |= meta_set(c->db, "rejected_events", "%" PRIu64, rejected);
	bad |= meta_set(c->db, "rings_missing", "%" PRIu64, missing);
	bad |= meta_set(c->db, "wall_ns", "%" PRIu64, wall_ns);
	if (why[0])
		bad |= meta_set(c->db, "incomplete", "%s", why);
	bad |= meta_set(c->db, "complete", "%d",
	                !c->failed && WIFEXITED(status) && app_code == 0 && !why[0] ? 1 : 0);
	if (c->failed)
		bad |= meta_set(c->db, "not_recorded", "%" PRIu64, c->discarded);
	bad |= meta_set(c->db, "finalized_at", "%s", when);
	bad = bad || sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK;
	if (bad && !sqlite3_get_autocommit(c->db))
		sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
	return bad ? -1 : 0;
}

/* Stderr lines for a recording that stopped: what happened, what the profile holds. */
static void report_failure(const collector *c, int app_code)
{
	const char *out = c->opts->output;
	if (c->failed_step >= 0)
		prof_error(NULL, "recording stopped at %.3f s, in step %" PRId64 ": '%s' could not be "
		           "written (%s); the steps before %" PRId64 " are whole, %" PRIu64
		           " events from there on were not recorded",
		           (double)c->failed_ns / 1e9, c->failed_step, out, c->failed_why,
		           c->failed_step, c->discarded);
	else
		prof_error(NULL, "recording stopped at %.3f s, before the first step: '%s' could not "
		           "be written (%s); %" PRIu64 " events were not recorded",
		           (double)c->failed_ns / 1e9, out, c->failed_why, c->discarded);
	prof_error(c->failed_meta ? "free space on the output's file system; its meta could not "
	                            "record the failure (it says 'collecting')"
	                          : "free space on the output's file system, or record to another "
	                            "with --output",
	           "the application ran to its end (exit status %d, passed through); the profile "
	           "'%s' is incomplete (meta end 'collector-failed')", app_code, out);
}

int prof_run(const prof_options *opts)
{
	collector c;
	char err[1024];
	int code = PROF_EXIT_FAILED;
	pid_t child = -1;
	int status = 0, child_done = 0, launched = 0, waiting = 0, stop_waiting = 0;
	int said_waiting = 0;
	uint64_t last_waited = 0, child_done_ns = 0;
	memset(&c, 0, sizeof c);
	c.opts = opts;
	c.sess.fd = -1;
	c.status.fd = -1;
	c.reserve_fd = -1;
	c.committed_step = -1;

	int launch = prof_launch_check(opts);
	if (launch != 0)
		return launch;
	int rc = amp_profile_create(opts->output, opts->force, &c.db, err, sizeof err);
	if (rc != AMP_PROFILE_OK) {
		prof_error(rc == AMP_PROFILE_EEXIST ? "use --force to overwrite it, or --output=FILE"
		           : rc == AMP_PROFILE_EACCES ? "choose a writable directory with --output"
		           : rc == AMP_PROFILE_ENOTREG ? "give --output a new file, or a regular file "
		                                         "with --force"
		                                       : NULL,
		           "%s", err);
		return PROF_EXIT_FAILED;
	}
	/* the file made, to tell at the end whether it is still the one the path names */
	struct stat made;
	int have_made = stat(opts->output, &made) == 0;
	c.reserve_fd = reserve_take(opts->output);
	uint64_t start_mono = prof_now_ns();
	c.start_mono = start_mono;
	if (write_start_meta(&c, start_mono) != 0) {
		prof_error(NULL, "cannot write '%s': %s (meta)", opts->output, sqlite3_errmsg(c.db));
		code = PROF_EXIT_FAILED;
		goto out;
	}
	if (prof_session_init(&c.sess, opts) != 0)
		goto out;
	c.tails = calloc(opts->ring_count, sizeof *c.tails);
	c.idle_heads = calloc(opts->ring_count, sizeof *c.idle_heads);
	c.w = prof_writer_new(c.db, opts, start_mono);
	if (!c.tails || !c.idle_heads || !c.w) {
		if (c.w)
			prof_error(NULL, "out of memory");
		goto out;
	}
	prof_writer_set_spool(c.w, c.sess.spool_dir);
	calibrate_start(c.w);
	if (prof_writer_commit(c.w) != 0) {
		code = PROF_EXIT_FAILED;
		goto out;
	}

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	/* a signal the job ignores (nohup: SIGHUP) is neither caught nor passed on */
	const int passed_on[] = {SIGTERM, SIGHUP, SIGINT};
	for (size_t i = 0; i < sizeof passed_on / sizeof passed_on[0]; i++)
		if (!prof_signal_was_ignored(passed_on[i]))
			sigaction(passed_on[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa_child;
	memset(&sa_child, 0, sizeof sa_child);
	sa_child.sa_handler = on_child;
	sigemptyset(&sa_child.sa_mask);
	sa_child.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa_child, NULL);

	/* the run's processes that outlive their parent come to ampprof, which can then tell how
	 * they ended */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if ((launch = prof_launch(opts, &c.sess, &child)) != 0) {
		code = launch; /* nothing ran (fork or exec failed): no profile, as for a missing one */
		goto out;
	}
	launched = 1;
	if (meta_set(c.db, "pid", "%d", (int)child) != 0)
		collector_fail(&c);

	int tty = 0;
	if (!opts->quiet) {
		prof_status_init(&c.status, 2);
		tty = c.status.fd >= 0;
	}
	uint64_t last_commit = prof_now_ns(), last_status = last_commit, status_events = 0;
	uint64_t last_round = last_commit, poll_ns = POLL_MIN_NS;
	for (;;) {
		uint32_t wake_seen = __atomic_load_n(&c.sess.hdr->wake, __ATOMIC_ACQUIRE);
		int64_t got = drain_all(&c, 0);
		if (got < 0)
			collector_fail(&c);
		uint64_t now = prof_now_ns();
		prof_writer_calibrate(c.w, prof_ticks(), prof_now_ns());
		c.sess.hdr->heartbeat++;
		if (!c.failed && now - last_commit >= COMMIT_NS &&
		    prof_writer_events(c.w) != c.committed_events) {
			int64_t step = prof_writer_last_step(c.w);
			if (prof_writer_commit(c.w) != 0) {
				collector_fail(&c);
			} else {
				last_commit = now;
				c.committed_events = prof_writer_events(c.w);
				c.committed_step = step;
			}
		}
		if (tty && now - last_status >= STATUS_NS) {
			uint64_t ev = prof_writer_events(c.w);
			status_update(&c, now - start_mono,
			              (double)(ev - status_events) * 1e9 / (double)(now - last_status));
			status_events = ev;
			last_status = now;
		}
		if (g_forward_sig) {
			/* relayed, except a SIGINT the terminal already sent to the whole group */
			int sig = g_forward_sig;
			g_forward_sig = 0;
			if (child_done) { /* reaped: its pid may be another process's by now */
				if (waiting)
					c.abandoned = run_process_alive(&c, 0);
				waiting = 0;
				stop_waiting = 1;
			} else if (sig != SIGINT || g_sigint_sent) {
				if (opts->application)
					prof_signal_tree(child, sig); /* the shell's command too */
				else
					kill(child, sig);
			}
			g_sigint_sent = 0;
		}
		reap(&c, child, &status, &child_done);
		if (child_done && !c.failed && !stop_waiting && now - last_waited >= OWNER_CHECK_NS) {
			/* the launched process is gone, not necessarily the run */
			if (!child_done_ns)
				child_done_ns = now;
			last_waited = now;
			uint32_t other = run_process_alive(&c, now - child_done_ns < ATTACH_GRACE_NS);
			uint32_t recording = other && !said_waiting ? run_process_alive(&c, 0) : 0;
			if (recording && !opts->quiet) {
				fprintf(stderr, "ampprof: the application's process has ended; process %u "
				        "of the run is still recording: waiting for it (Ctrl-C stops "
				        "ampprof)\n", recording);
				said_waiting = 1;
			}
			waiting = other != 0;
		}
		if (child_done && !waiting) {
			/* drain what is still published, then recover unpublished records (discarded
			 * once the database failed) */
			while ((got = drain_all(&c, 0)) != 0)
				if (got < 0)
					collector_fail(&c);
			if (drain_all(&c, 1) < 0) {
				collector_fail(&c);
				drain_all(&c, 1);
			}
			break;
		}
		if (c.round_more)
			continue;
		/* next sleep: the time in which the fastest ring would fill 1/POLL_FILL_DIV of itself
		 * at the rate just seen */
		uint64_t since = now - last_round, target = c.sess.ring_slots / POLL_FILL_DIV;
		last_round = now;
		if (c.round_backlog == 0)
			poll_ns *= 2;
		else
			poll_ns = (uint64_t)((double)since * (double)target / (double)c.round_backlog);
		poll_ns = poll_ns < POLL_MIN_NS ? POLL_MIN_NS : poll_ns > POLL_MAX_NS ? POLL_MAX_NS
		                                                                    : poll_ns;
		if (tty && poll_ns > STATUS_NS / 4)
			poll_ns = STATUS_NS / 4;
		sleep_on_wake(c.sess.hdr, wake_seen, poll_ns);
	}
	signal(SIGCHLD, SIG_DFL);
	prof_status_end(&c.status);
	for (size_t i = 0; i < sizeof passed_on / sizeof passed_on[0]; i++)
		if (!prof_signal_was_ignored(passed_on[i]))
			signal(passed_on[i], on_signal_finalizing);

	/* ---- how the run ended, finalize: every step checked; a failure stops recording as
	 * a failure in the loop does, and the application's status is passed through all the
	 * same ---- */
	int app_code = PROF_EXIT_FAILED;
	uint64_t end_mono = prof_now_ns();
	if (!c.failed) {
		amp_progress pr;
		amp_progress_begin(&pr, "ampprof", "finalize", 0);
		amp_progress_set(&pr, "open steps, call sites, totals", 0);
		amp_progress_watch(&pr, c.db);
		int bad = end_meta(&c, status, &app_code) != 0 || prof_writer_finish(c.w) != 0 ||
		          record_unrecorded(&c) != 0;
		amp_progress_end(&pr);
		if (bad)
			collector_fail(&c);
	}
	if (!c.failed) { /* every step is whole from here on */
		c.committed_step = prof_writer_last_step(c.w) + 1;
		c.committed_events = prof_writer_events(c.w);
	}
	if (c.failed) {
		/* best effort: the space the rollback and the reserve freed may hold the rest */
		reserve_release(&c);
		if (sqlite3_exec(c.db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
		    end_meta(&c, status, &app_code) != 0 ||
		    sqlite3_exec(c.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
			if (!sqlite3_get_autocommit(c.db))
				sqlite3_exec(c.db, "ROLLBACK", NULL, NULL, NULL);
		}
	}
	if (totals_meta(&c, status, app_code, end_mono - start_mono) != 0)
		collector_fail(&c);
	/* a stopped recording is summarized too if space allows (readers do it otherwise) */
	int summarized = prof_summarize(c.db, opts->fp16_threshold, opts->memcpy_threshold) == 0;
	/* its own transaction, rolled back: the events recorded before stay whole (not a stop) */
	int summary_failed = !summarized && !c.failed;
	uint64_t events = prof_writer_events(c.w);
	prof_writer_free(c.w);
	c.w = NULL;
	char why[256];
	int folded = amp_profile_fold_wal(c.db, why, sizeof why) == 0;

	uint32_t wire = __atomic_load_n(&c.sess.hdr->producer_wire, __ATOMIC_ACQUIRE);
	if (!c.failed && events == 0 && c.sess.hdr->attached == 0 && wire != 0 &&
	    wire != AMP_WIRE_VERSION) {
		meta_set(c.db, "producer_wire_version", "%u", wire);
		prof_error("rebuild the program against this ampkit's libamprt, or profile it with the "
		           "ampprof of its own version",
		           "'%s' uses libamprt with wire format %u, this ampprof speaks %u: it sent no "
		           "events (its exit status: %d); the profile '%s' holds only the run's meta",
		           opts->argv ? opts->argv[0] : opts->application, wire, AMP_WIRE_VERSION,
		           app_code, opts->output);
		code = PROF_EXIT_FAILED;
		goto out;
	}
	if (!c.failed && events == 0 && c.sess.hdr->attached == 0) {
		/* 127 from a program that did start: the shell's "not found", or the loader's
		 * "cannot open shared object file" (a libamprt.so outside the loader's path) */
		prof_error(app_code == 127
		               ? "exit status 127: a command or a shared library it needs was not found "
		                 "(its message is above); for a libamprt.so installed outside the "
		                 "loader's path, set LD_LIBRARY_PATH or link with -Wl,-rpath,<libdir>"
		               : "link the program with libamprt (-lamprt) and run its training through "
		                 "it (a libamprt older than wire format 2 does not attach to this "
		                 "ampprof)",
		           "no events received from '%s' (its exit status: %d); the profile '%s' holds "
		           "only the run's meta",
		           opts->argv ? opts->argv[0] : opts->application, app_code, opts->output);
		code = PROF_EXIT_FAILED;
		goto out;
	}
	if (!opts->quiet && summarized)
		prof_report_text(c.db, stderr, opts->output);
	if (c.failed)
		report_failure(&c, app_code);
	if (summary_failed)
		prof_error("its tables are whole; ampprof report and ampview read it without the summary",
		           "'%s' holds the whole run but no summary: finalizing it failed (above)",
		           opts->output);
	if (!folded)
		prof_error(c.failed ? NULL : "keep the two files together (a copy needs both)",
		           "the write-ahead log could not be folded into '%s' (%s): '%s-wal' holds "
		           "part of the profile", opts->output, why, opts->output);
	struct stat now;
	int gone = stat(opts->output, &now) != 0;
	if (have_made && (gone || now.st_dev != made.st_dev || now.st_ino != made.st_ino))
		fprintf(stderr, "ampprof: warning: '%s' was %s while the run was recorded: the profile "
		        "written is not there\n", opts->output, gone ? "removed" : "replaced");
	code = app_code;
out:
	signal(SIGCHLD, SIG_DFL);
	prof_status_end(&c.status);
	if (c.w) {
		if (launched)
			sqlite3_exec(c.db, "COMMIT", NULL, NULL, NULL);
		prof_writer_free(c.w);
	}
	if (launched) {
		amp_profile_close(c.db);
	} else {
		/* nothing ran: no profile of a run that never was (its meta would say 'collecting') */
		amp_profile_discard(c.db);
		prof_error(NULL, "the application was not started; '%s' is removed", opts->output);
	}
	reserve_release(&c);
	prof_session_release(&c.sess);
	free(c.tails);
	free(c.idle_heads);
	return code;
}
