/* test_profiler.c — ampprof internals: the ring decoder's bounds checks on valid, truncated
 * and garbage rings, option value parsers, the writer fed records with unknown ids, counters
 * from several rings and tensor statistics, finalize's non-finite classes and loss-scale
 * advice, the half and native half shares and the emulated-half advice on synthetic profiles,
 * the FP16 headroom of bf16 tensors, and the session's spool directory. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "genprof.h"
#include "model.h"
#include "prof.h"
#include "profile_db.h"

#define NSLOTS 64u

static unsigned char ring[NSLOTS * AMP_SLOT_SIZE];

/* Writes a record of n slots at pos with the given type; body after the header is zeroed. */
static void put_rec(uint64_t pos, unsigned type, unsigned n, unsigned len)
{
	unsigned char *s = ring + (pos % NSLOTS) * AMP_SLOT_SIZE;
	uint64_t room = NSLOTS - pos % NSLOTS;
	memset(s, 0, (n < room ? n : room) * AMP_SLOT_SIZE);
	amp_rec_hdr h = {(uint32_t)pos, (uint8_t)type, (uint8_t)n, (uint16_t)len};
	memcpy(s, &h, sizeof h);
}

Test(decode, valid_records)
{
	unsigned char buf[PROF_DECODE_BUF];
	prof_record r;
	memset(ring, 0, sizeof ring);
	put_rec(0, AMP_REC_OP, 2, 0);
	put_rec(2, AMP_REC_STRING, 1, 5);
	amp_rec_string s = {{2, AMP_REC_STRING, 1, 5}, 7, 0};
	memcpy(ring + 2 * AMP_SLOT_SIZE, &s, sizeof s);
	memcpy(ring + 2 * AMP_SLOT_SIZE + AMP_REC_STRING_FIXED, "hello", 5);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, 3, buf, &r), 2);
	cr_assert_eq(r.type, AMP_REC_OP);
	cr_assert_eq(prof_decode(ring, NSLOTS, 2, 1, buf, &r), 1);
	cr_assert_eq(r.type, AMP_REC_STRING);
	cr_assert(memcmp((const char *)r.rec + AMP_REC_STRING_FIXED, "hello", 5) == 0);
	/* only one slot readable of a two-slot record */
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, 1, buf, &r), PROF_DECODE_NEED);
}

Test(decode, rejects_bad_headers)
{
	unsigned char buf[PROF_DECODE_BUF];
	prof_record r;
	memset(ring, 0, sizeof ring);
	put_rec(5, AMP_REC_OP, 2, 0);
	cr_assert_eq(prof_decode(ring, NSLOTS, 5 + NSLOTS, 4, buf, &r), PROF_DECODE_BAD); /* stamp */
	put_rec(5, AMP_REC_OP, 1, 0);                 /* wrong size for the type */
	cr_assert_eq(prof_decode(ring, NSLOTS, 5, 4, buf, &r), PROF_DECODE_BAD);
	put_rec(5, AMP_REC_COPY, 0, 0);               /* zero slots */
	cr_assert_eq(prof_decode(ring, NSLOTS, 5, 4, buf, &r), PROF_DECODE_BAD);
	put_rec(5, 200, 1, 0);                        /* unknown type */
	cr_assert_eq(prof_decode(ring, NSLOTS, 5, 4, buf, &r), PROF_DECODE_BAD);
	put_rec(5, AMP_REC_STRING, 1, 200);           /* length past the record */
	cr_assert_eq(prof_decode(ring, NSLOTS, 5, 4, buf, &r), PROF_DECODE_BAD);
	put_rec(NSLOTS - 1, AMP_REC_OP, 2, 0);        /* would wrap the ring */
	cr_assert_eq(prof_decode(ring, NSLOTS, NSLOTS - 1, 4, buf, &r), PROF_DECODE_BAD);
	put_rec(NSLOTS - 2, AMP_REC_PAD, 3, 0);       /* padding past the end */
	cr_assert_eq(prof_decode(ring, NSLOTS, NSLOTS - 2, 4, buf, &r), PROF_DECODE_BAD);
	put_rec(NSLOTS - 2, AMP_REC_PAD, 2, 0);
	cr_assert_eq(prof_decode(ring, NSLOTS, NSLOTS - 2, 4, buf, &r), 2);
	put_rec(9, AMP_REC_META, 1, 10);              /* klen + vlen != len */
	cr_assert_eq(prof_decode(ring, NSLOTS, 9, 4, buf, &r), PROF_DECODE_BAD);
	cr_assert_eq(prof_decode(ring, 48, 0, 4, buf, &r), PROF_DECODE_NEED); /* not a power of 2 */
	cr_assert_eq(prof_decode(NULL, NSLOTS, 0, 4, buf, &r), PROF_DECODE_NEED);
}

/* Garbage with plausible stamps: every position decodes to BAD, NEED or a record that fits. */
Test(decode, garbage_never_escapes)
{
	unsigned char buf[PROF_DECODE_BUF];
	uint64_t rng = 0x9E3779B97F4A7C15ull;
	for (int round = 0; round < 2000; round++) {
		for (size_t i = 0; i < sizeof ring; i += 8) {
			rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
			memcpy(ring + i, &rng, 8);
		}
		for (uint64_t pos = 0; pos < NSLOTS; pos++) {
			if (rng & 1) {
				amp_rec_hdr h;
				memcpy(&h, ring + pos * AMP_SLOT_SIZE, sizeof h);
				h.stamp = (uint32_t)pos;
				h.type = (uint8_t)(h.type % AMP_REC_TYPE_COUNT);
				h.nslots = (uint8_t)(h.nslots % 8);
				memcpy(ring + pos * AMP_SLOT_SIZE, &h, sizeof h);
			}
			rng = rng * 6364136223846793005ull + 1;
		}
		for (uint64_t pos = 0; pos < NSLOTS; pos++) {
			prof_record r;
			int n = prof_decode(ring, NSLOTS, pos, NSLOTS - pos, buf, &r);
			cr_assert(n >= PROF_DECODE_BAD);
			if (n > 0)
				cr_assert_leq(pos + (uint64_t)n, NSLOTS);
		}
	}
}

Test(options, ranges)
{
	amp_step_range r[AMP_MAX_RANGES];
	cr_assert_eq(prof_parse_ranges("10", r, AMP_MAX_RANGES), 1);
	cr_assert_eq(r[0].lo, 10);
	cr_assert_eq(r[0].hi, 10);
	cr_assert_eq(prof_parse_ranges("1,5-7,100-", r, AMP_MAX_RANGES), 3);
	cr_assert_eq(r[1].lo, 5);
	cr_assert_eq(r[1].hi, 7);
	cr_assert_eq(r[2].hi, INT64_MAX);
	cr_assert_eq(prof_parse_ranges("7-5", r, AMP_MAX_RANGES), -1);
	cr_assert_eq(prof_parse_ranges("", r, AMP_MAX_RANGES), -1);
	cr_assert_eq(prof_parse_ranges("a", r, AMP_MAX_RANGES), -1);
	cr_assert_eq(prof_parse_ranges("1,", r, AMP_MAX_RANGES), -1);
	cr_assert_eq(prof_parse_ranges("-3", r, AMP_MAX_RANGES), -1);
	cr_assert_eq(prof_parse_ranges("1,2,3", r, 2), -1);
}

Test(options, sizes)
{
	uint64_t v;
	cr_assert_eq(prof_parse_size("512M", &v), 0);
	cr_assert_eq(v, 512ull << 20);
	cr_assert_eq(prof_parse_size("2G", &v), 0);
	cr_assert_eq(v, 2ull << 30);
	cr_assert_eq(prof_parse_size("1000", &v), 0);
	cr_assert_eq(v, 1000);
	cr_assert_eq(prof_parse_size("12X", &v), -1);
	cr_assert_eq(prof_parse_size("-1", &v), -1);
	cr_assert_eq(prof_parse_size("", &v), -1);
}

/* Records that name undefined string and call-site ids become NULLs, not crashes. */
Test(writer, unknown_ids)
{
	char path[] = "/tmp/test_profiler.XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	sqlite3 *db = NULL;
	char err[256];
	cr_assert_eq(amp_profile_create(path, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = path;
	o.ring_count = 2;
	prof_writer *w = prof_writer_new(db, &o, 0);
	cr_assert_not_null(w);
	unsigned char rec[2 * AMP_SLOT_SIZE];
	memset(rec, 0, sizeof rec);
	amp_rec_op op;
	memset(&op, 0, sizeof op);
	op.label = 12345;
	op.callsite = 999;
	op.op = AMP_OP_MATMUL;
	op.t_begin = 10;
	op.t_end = 5; /* ends before it begins */
	op.ndim = 2;
	memcpy(rec, &op, sizeof op);
	prof_record r = {AMP_REC_OP, 2, rec};
	cr_assert_eq(prof_writer_put(w, 0, AMP_CLOCK_MONO, &r), 0);
	cr_assert_eq(prof_writer_put(w, 7, AMP_CLOCK_MONO, &r), 0); /* ring out of range */
	amp_rec_counter c;
	memset(&c, 0, sizeof c);
	c.name = 77;
	prof_record rc = {AMP_REC_COUNTER, 1, &c};
	cr_assert_eq(prof_writer_put(w, 1, AMP_CLOCK_TSC, &rc), 0);
	cr_assert_gt(prof_writer_rejected(w), 0);
	cr_assert_eq(prof_writer_finish(w), 0);
	prof_writer_free(w);
	sqlite3_stmt *st;
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*), max(label IS NULL), max(dur_ns) FROM ops",
	                                -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_eq(sqlite3_column_int(st, 0), 1);
	cr_assert_eq(sqlite3_column_int(st, 1), 1);
	cr_assert_eq(sqlite3_column_int(st, 2), 0);
	sqlite3_finalize(st);
	cr_assert_eq(prof_summarize(db, 70, 15), 0);
	amp_profile_close(db);
	unlink(path);
	char side[64];
	snprintf(side, sizeof side, "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof side, "%s-shm", path);
	unlink(side);
}

/* ---- the status line on a pseudo-terminal ---------------------------------------------------- */
#include <fcntl.h>
#include <stddef.h>
#include <sys/ioctl.h>

/* A pseudo-terminal pair of size rows x cols (posix_openpt: no libutil needed). */
static int pty_open(int *master, int *slave, struct winsize *ws)
{
	*master = posix_openpt(O_RDWR | O_NOCTTY);
	if (*master < 0 || grantpt(*master) != 0 || unlockpt(*master) != 0)
		return -1;
	*slave = open(ptsname(*master), O_RDWR | O_NOCTTY);
	if (*slave < 0)
		return -1;
	return ioctl(*slave, TIOCSWINSZ, ws);
}

/* Reads what is pending on the pty master (non-blocking) into buf, NUL-terminated. */
static size_t pty_drain(int master, char *buf, size_t cap)
{
	size_t used = 0;
	for (;;) {
		ssize_t n = read(master, buf + used, cap - 1 - used);
		if (n <= 0)
			break;
		used += (size_t)n;
	}
	buf[used] = '\0';
	return used;
}

Test(status, off_when_not_a_terminal)
{
	prof_status s;
	int fds[2];
	cr_assert_eq(pipe(fds), 0);
	prof_status_init(&s, fds[1]);
	cr_assert_eq(s.fd, -1);
	prof_status_draw(&s, "ampprof: 1.0 s");
	prof_status_end(&s);
	close(fds[1]);
	char buf[16];
	cr_assert_eq(read(fds[0], buf, sizeof buf), 0, "nothing is written to a pipe");
	close(fds[0]);
}

Test(status, last_row_cut_to_width_and_restored)
{
	int master, slave;
	struct winsize ws = {.ws_row = 10, .ws_col = 30};
	cr_assert_eq(pty_open(&master, &slave, &ws), 0);
	fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
	setenv("TERM", "xterm", 1);
	prof_status s;
	prof_status_init(&s, slave);
	cr_assert_eq(s.fd, slave);
	char buf[4096];
	prof_status_draw(&s, "ampprof: 1.0 s  step 3  0.1 k events/s  12 events  db 0.1 MB");
	pty_drain(master, buf, sizeof buf);
	/* scroll region set to rows 1..9, the text drawn on row 10, cut to 29 columns */
	cr_assert(strstr(buf, "\033[1;9r") != NULL, "region: %s", buf);
	cr_assert(strstr(buf, "\0337\033[10;1H\033[2Kampprof: 1.0 s  step 3  0.1 k\0338") != NULL,
	          "draw: %s", buf);
	prof_status_draw(&s, "ampprof: 1.2 s");
	pty_drain(master, buf, sizeof buf);
	cr_assert(strstr(buf, "\033[1;9r") == NULL, "region set once: %s", buf);
	cr_assert(strstr(buf, "\033[10;1H\033[2Kampprof: 1.2 s\0338") != NULL, "update: %s", buf);
	/* resized: the old row is cleared, the region set again for the new height */
	ws.ws_row = 20;
	ioctl(slave, TIOCSWINSZ, &ws);
	prof_status_draw(&s, "ampprof: 1.4 s");
	pty_drain(master, buf, sizeof buf);
	cr_assert(strstr(buf, "\033[r") != NULL && strstr(buf, "\033[1;19r") != NULL &&
	          strstr(buf, "\033[20;1H\033[2Kampprof: 1.4 s") != NULL, "resize: %s", buf);
	prof_status_end(&s);
	pty_drain(master, buf, sizeof buf);
	cr_assert(strstr(buf, "\033[20;1H\033[2K\033[r") != NULL, "end: %s", buf);
	prof_status_end(&s);
	cr_assert_eq(pty_drain(master, buf, sizeof buf), 0, "end is idempotent");
	close(slave);
	close(master);
}

/* The wake word was added to the session header within wire version 1: it must sit past every
 * field an older peer knows, inside the header page. */
Test(session, wake_word_appended)
{
	cr_assert_gt(offsetof(amp_session_hdr, wake), offsetof(amp_session_hdr, rings_missing));
	cr_assert_eq(offsetof(amp_session_hdr, wake) % 4, 0);
	cr_assert_leq(sizeof(amp_session_hdr), AMP_SESSION_HDR_SIZE);
}

/* ---- the writer and finalize on records as the runtime sends them ---------------------------- */
typedef struct temp_profile {
	char path[64];
	sqlite3 *db;
} temp_profile;

static void temp_profile_create(temp_profile *t)
{
	char err[256];
	snprintf(t->path, sizeof t->path, "/tmp/test_profiler.XXXXXX");
	int fd = mkstemp(t->path);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(amp_profile_create(t->path, 1, &t->db, err, sizeof err), AMP_PROFILE_OK, "%s",
	             err);
}

static void temp_profile_release(temp_profile *t)
{
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	char side[80];
	amp_profile_close(t->db);
	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		snprintf(side, sizeof side, "%s%s", t->path, suffix[i]);
		unlink(side);
	}
}

/* First column of the first row of sql as text ("" for none, "NULL" for NULL). */
static const char *query_text(sqlite3 *db, const char *sql)
{
	static char buf[1024];
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
	             sqlite3_errmsg(db));
	buf[0] = '\0';
	if (sqlite3_step(st) == SQLITE_ROW) {
		const unsigned char *v = sqlite3_column_text(st, 0);
		snprintf(buf, sizeof buf, "%s", v ? (const char *)v : "NULL");
	}
	sqlite3_finalize(st);
	return buf;
}

static void put_string(prof_writer *w, uint32_t rn, uint32_t id, const char *text)
{
	unsigned char rec[PROF_DECODE_BUF];
	memset(rec, 0, sizeof rec);
	size_t n = strlen(text);
	amp_rec_string s = {{0, AMP_REC_STRING, 1, (uint16_t)n}, id, 0};
	memcpy(rec, &s, sizeof s);
	memcpy(rec + AMP_REC_STRING_FIXED, text, n);
	prof_record r = {AMP_REC_STRING, 1, rec};
	cr_assert_eq(prof_writer_put(w, rn, AMP_CLOCK_MONO, &r), 0);
}

static void put_counter(prof_writer *w, uint32_t rn, uint32_t name, uint32_t scope,
                        int64_t value)
{
	amp_rec_counter c;
	memset(&c, 0, sizeof c);
	c.h.type = AMP_REC_COUNTER;
	c.h.nslots = 1;
	c.name = name;
	c.scope = scope;
	c.value = value;
	prof_record r = {AMP_REC_COUNTER, 1, &c};
	cr_assert_eq(prof_writer_put(w, rn, AMP_CLOCK_MONO, &r), 0);
}

/* Several threads (rings) report their own running totals: meta holds the sum of each ring's
 * latest value, whichever ring reported last.  Process-wide totals count once per process. */
static const uint64_t no_drops[AMP_DROP_KINDS];

Test(writer, counters_summed_over_rings)
{
	temp_profile t;
	temp_profile_create(&t);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = t.path;
	o.ring_count = 4;
	prof_writer *w = prof_writer_new(t.db, &o, 0);
	cr_assert_not_null(w);
	prof_writer_thread(w, 0, 100, 100, 0, no_drops);
	prof_writer_thread(w, 1, 100, 101, 0, no_drops);
	prof_writer_thread(w, 2, 200, 200, 0, no_drops); /* another process */
	for (uint32_t rn = 0; rn < 3; rn++) {
		put_string(w, rn, 1, "ops_dispatched");
		put_string(w, rn, 2, "dumps_written");
	}
	put_counter(w, 0, 1, AMP_COUNTER_RING, 10);
	put_counter(w, 1, 1, AMP_COUNTER_RING, 5);
	put_counter(w, 0, 1, AMP_COUNTER_RING, 20); /* ring 0 again: its latest value counts */
	put_counter(w, 2, 1, AMP_COUNTER_RING, 7);
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'ops_dispatched'"),
	                 "32");
	put_counter(w, 1, 1, AMP_COUNTER_RING, 6);
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'ops_dispatched'"),
	                 "33");
	/* process 100: rings 0 and 1 both report the process's total; process 200 its own */
	put_counter(w, 0, 2, AMP_COUNTER_PROCESS, 3);
	put_counter(w, 1, 2, AMP_COUNTER_PROCESS, 4);
	put_counter(w, 2, 2, AMP_COUNTER_PROCESS, 1);
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'dumps_written'"),
	                 "5");
	put_counter(w, 0, 2, AMP_COUNTER_PROCESS, 4); /* a tie counts once */
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'dumps_written'"),
	                 "5");
	cr_assert_eq(prof_writer_finish(w), 0);
	prof_writer_free(w);
	temp_profile_release(&t);
}

/* A ring reused by another thread (its first owner ended): what the first owner counted stays
 * in the totals, the new owner's events carry a thread id of their own, and the counters of
 * threads that found no ring join the total. */
Test(writer, counters_survive_ring_reuse)
{
	temp_profile t;
	temp_profile_create(&t);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = t.path;
	o.ring_count = 2;
	prof_writer *w = prof_writer_new(t.db, &o, 0);
	cr_assert_not_null(w);
	uint64_t drops[AMP_DROP_KINDS] = {[AMP_DROP_OP] = 3};
	prof_writer_thread(w, 0, 100, 100, 3, drops);
	prof_writer_thread(w, 1, 100, 101, 0, no_drops);
	for (uint32_t rn = 0; rn < 2; rn++) {
		put_string(w, rn, 1, "ops_dispatched");
		put_string(w, rn, 2, "dumps_written");
	}
	put_counter(w, 0, 1, AMP_COUNTER_RING, 10);
	put_counter(w, 1, 1, AMP_COUNTER_RING, 5);
	put_counter(w, 0, 2, AMP_COUNTER_PROCESS, 4);
	cr_assert_eq(prof_writer_ring_retire(w, 0), 0);
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'ops_dispatched'"),
	                 "15");
	/* the new owner of ring 0: another thread of process 100, its own string ids */
	prof_writer_thread(w, 0, 100, 102, 0, no_drops);
	put_string(w, 0, 7, "ops_dispatched");
	put_string(w, 0, 8, "dumps_written");
	put_counter(w, 0, 7, AMP_COUNTER_RING, 2);
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'ops_dispatched'"),
	                 "17");
	put_counter(w, 0, 8, AMP_COUNTER_PROCESS, 6); /* the process's total grew: counts once */
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'dumps_written'"),
	                 "6");
	cr_assert_eq(prof_writer_lost_counter(w, "ops_dispatched", 40), 0);
	cr_assert_str_eq(query_text(t.db, "SELECT value FROM meta WHERE key = 'ops_dispatched'"),
	                 "57");
	cr_assert_str_eq(
	    query_text(t.db, "SELECT value FROM meta WHERE key = 'unrecorded.ops_dispatched'"), "40");
	uint64_t by_kind[AMP_DROP_KINDS];
	cr_assert_eq(prof_writer_dropped(w, by_kind), 3);
	cr_assert_eq(by_kind[AMP_DROP_OP], 3);
	cr_assert_eq(prof_writer_finish(w), 0);
	/* three owners, three threads rows: the reused ring's second owner has a new id */
	cr_assert_str_eq(query_text(t.db, "SELECT group_concat(id || ':' || tid, ' ') FROM "
	                                  "(SELECT id, tid FROM threads ORDER BY id)"),
	                 "0:100 1:101 2:102");
	prof_writer_free(w);
	temp_profile_release(&t);
}

static void put_tstats(prof_writer *w, uint32_t rn, int64_t step, uint64_t seq, unsigned op,
                       unsigned role, int origin, uint64_t nan, uint64_t inf, int ext,
                       unsigned phase, uint64_t ninf)
{
	unsigned char rec[PROF_DECODE_BUF];
	amp_rec_tstats ts;
	memset(&ts, 0, sizeof ts);
	ts.h.type = AMP_REC_TSTATS;
	ts.h.nslots = (uint8_t)AMP_REC_SLOTS(amp_rec_tstats);
	ts.step = step;
	ts.seq = seq;
	ts.count = 32;
	ts.nan = nan;
	ts.inf = inf;
	ts.op = (uint8_t)op;
	ts.role = (uint8_t)role;
	ts.dtype = 1;
	ts.origin = (uint8_t)origin;
	ts.phase = (uint8_t)phase;
	ts.flags = ext ? AMP_TSTATS_EXT : 0;
	ts.ninf = ninf;
	memset(rec, 0xAB, sizeof rec); /* what an old producer leaves past its record */
	memcpy(rec, &ts, ext ? sizeof ts : offsetof(amp_rec_tstats, ninf));
	prof_record r = {AMP_REC_TSTATS, ts.h.nslots, rec};
	cr_assert_eq(prof_writer_put(w, rn, AMP_CLOCK_MONO, &r), 0);
}

static void put_step(prof_writer *w, int64_t step, double loss, double scale, int overflow)
{
	amp_rec_step s;
	memset(&s, 0, sizeof s);
	s.h.type = AMP_REC_STEP_END;
	s.h.nslots = 1;
	s.step = step;
	s.t_begin = 1;
	s.t_end = 2;
	s.loss = loss;
	s.scale = scale;
	s.overflow = (uint8_t)overflow;
	s.skipped = (uint8_t)overflow;
	prof_record r = {AMP_REC_STEP_END, 1, &s};
	cr_assert_eq(prof_writer_put(w, 0, AMP_CLOCK_MONO, &r), 0);
}

static void put_scale(prof_writer *w, int64_t step, double old_scale, double new_scale,
                      unsigned reason)
{
	amp_rec_scale s;
	memset(&s, 0, sizeof s);
	s.h.type = AMP_REC_SCALE;
	s.h.nslots = 1;
	s.step = step;
	s.old_scale = old_scale;
	s.new_scale = new_scale;
	s.reason = reason;
	prof_record r = {AMP_REC_SCALE, 1, &s};
	cr_assert_eq(prof_writer_put(w, 0, AMP_CLOCK_MONO, &r), 0);
}

/* The new tensor_stats fields: -Inf count and phase when the producer fills them, NULL from a
 * producer that predates them (whatever lies past its record); the ring as the thread. */
Test(writer, tstats_neg_inf_and_phase)
{
	temp_profile t;
	temp_profile_create(&t);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = t.path;
	o.ring_count = 2;
	prof_writer *w = prof_writer_new(t.db, &o, 0);
	cr_assert_not_null(w);
	put_tstats(w, 1, 5, 9, AMP_OP_EXP, 1, 1, 0, 3, 1, AMP_PHASE_FORWARD, 2);
	put_tstats(w, 0, 6, 9, AMP_OP_LINEAR, 2, 0, 0, 1, 1, AMP_PHASE_BACKWARD, 9); /* ninf > inf */
	put_tstats(w, 0, 7, 9, AMP_OP_EXP, 1, 0, 1, 1, 0, 0, 0);
	cr_assert_eq(prof_writer_finish(w), 0);
	prof_writer_free(w);
	cr_assert_str_eq(query_text(t.db, "SELECT group_concat(r, ';') FROM (SELECT step || ',' || "
	                                  "inf || ',' || coalesce(neg_inf, 'NULL') || ',' || "
	                                  "coalesce(phase, 'NULL') || ',' || thread AS r "
	                                  "FROM tensor_stats ORDER BY id)"),
	                 "5,3,2,forward,1;6,1,1,backward,0;7,1,NULL,NULL,0");
	/* the origin was listed for finalize as it arrived */
	cr_assert_str_eq(query_text(t.db, "SELECT step || ',' || op || ',' || stats_id || ',' || "
	                                  "thread FROM nonfinite"), "5,Exp,1,1");
	temp_profile_release(&t);
}

Test(decode, tstats_phase_checked)
{
	unsigned char buf[PROF_DECODE_BUF];
	prof_record r;
	unsigned n = AMP_REC_SLOTS(amp_rec_tstats);
	memset(ring, 0, sizeof ring);
	put_rec(0, AMP_REC_TSTATS, n, 0);
	amp_rec_tstats ts;
	memcpy(&ts, ring, sizeof ts);
	ts.phase = 7; /* ignored without the flag */
	memcpy(ring, &ts, sizeof ts);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, n, buf, &r), (int)n);
	ts.flags = AMP_TSTATS_EXT;
	memcpy(ring, &ts, sizeof ts);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, n, buf, &r), PROF_DECODE_BAD);
	ts.phase = AMP_PHASE_OPTIMIZER;
	memcpy(ring, &ts, sizeof ts);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, n, buf, &r), (int)n);
}

/* The three classes of non-finite origins, an overflow step without an origin, and the final
 * loss scale taken from the scaler's last decision, not from the scale the last step used. */
Test(finalize, nonfinite_classes_and_final_scale)
{
	temp_profile t;
	temp_profile_create(&t);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = t.path;
	o.ring_count = 1;
	prof_writer *w = prof_writer_new(t.db, &o, 0);
	cr_assert_not_null(w);
	put_scale(w, 0, 128, 128, AMP_SCALE_INIT);
	/* step 0: forward Exp output overflows, loss lost */
	put_step(w, 0, (double)INFINITY, 128, 1);
	put_scale(w, 0, 128, 64, AMP_SCALE_OVERFLOW);
	put_tstats(w, 0, 0, 4, AMP_OP_EXP, 1, 1, 0, 2, 1, AMP_PHASE_FORWARD, 0);
	/* step 1: a backward Linear's gradient overflows; loss finite; scaler backs off */
	put_step(w, 1, 0.5, 64, 1);
	put_scale(w, 1, 64, 32, AMP_SCALE_OVERFLOW);
	put_tstats(w, 0, 1, 9, AMP_OP_LINEAR, 2, 1, 0, 1, 1, AMP_PHASE_BACKWARD, 1);
	/* step 2: Log of a negative: NaN only, from finite inputs */
	put_step(w, 2, (double)NAN, 32, 0);
	put_scale(w, 2, 32, 32, AMP_SCALE_HOLD);
	put_tstats(w, 0, 2, 3, AMP_OP_LOG, 0, 0, 0, 0, 1, AMP_PHASE_FORWARD, 0);
	put_tstats(w, 0, 2, 3, AMP_OP_LOG, 1, 1, 5, 0, 1, AMP_PHASE_FORWARD, 0);
	/* step 3: NaN only from a GEMM: an overflow inside its sums, not an invalid operation */
	put_step(w, 3, (double)NAN, 32, 1);
	put_scale(w, 3, 32, 16, AMP_SCALE_OVERFLOW);
	put_tstats(w, 0, 3, 2, AMP_OP_MATMUL, 1, 1, 4, 0, 1, AMP_PHASE_FORWARD, 0);
	/* step 4: NaN only from an Add whose (cast) input held Inf: an overflow too */
	put_step(w, 4, (double)NAN, 16, 1);
	put_scale(w, 4, 16, 8, AMP_SCALE_OVERFLOW);
	put_tstats(w, 0, 4, 6, AMP_OP_ADD, 0, 0, 0, 3, 1, AMP_PHASE_FORWARD, 0);
	put_tstats(w, 0, 4, 6, AMP_OP_ADD, 1, 1, 3, 0, 1, AMP_PHASE_FORWARD, 0);
	/* step 5: the gradients overflow, no origin recorded; the last decision leaves the scale
	 * at 4 (outside [8, 1024]) while the step itself ran with 8 */
	put_step(w, 5, 0.25, 8, 1);
	put_scale(w, 5, 8, 4, AMP_SCALE_OVERFLOW);
	cr_assert_eq(prof_writer_finish(w), 0);
	prof_writer_free(w);
	cr_assert_eq(prof_summarize(t.db, 70, 15), 0, "%s", sqlite3_errmsg(t.db));
	cr_assert_str_eq(query_text(t.db, "SELECT group_concat(r, ';') FROM (SELECT step || ':' || "
	                                  "class || ':' || coalesce(op, '-') || ':' || "
	                                  "coalesce(phase, '-') || ':' "
	                                  "|| coalesce(old_scale, '-') || '>' || "
	                                  "coalesce(new_scale, '-') AS r FROM nonfinite "
	                                  "ORDER BY step)"),
	                 "0:forward_overflow:Exp:forward:128.0>64.0;"
	                 "1:scaled_grad_overflow:Linear:backward:64.0>32.0;"
	                 "2:invalid_operation:Log:forward:32.0>32.0;"
	                 "3:forward_overflow:MatMul:forward:32.0>16.0;"
	                 "4:forward_overflow:Add:forward:16.0>8.0;"
	                 "5:scaled_grad_overflow:-:-:8.0>4.0");
	cr_assert_str_eq(query_text(t.db, "SELECT group_concat(rule || '@' || step, ',') FROM "
	                                  "(SELECT rule, step FROM advice WHERE rule IN "
	                                  "('forward_overflow', 'invalid_operation', "
	                                  "'scaled_grad_overflow') ORDER BY id)"),
	                 "forward_overflow@0,invalid_operation@2,scaled_grad_overflow@1");
	cr_assert(strstr(query_text(t.db, "SELECT message FROM advice WHERE rule = "
	                                  "'scaled_grad_overflow'"),
	                 "handled by the loss scaler (scale 64 -> 32)"));
	cr_assert(strstr(query_text(t.db, "SELECT message FROM advice WHERE rule = "
	                                  "'scaled_grad_overflow'"), "(first of 2 steps)"));
	cr_assert(strstr(query_text(t.db, "SELECT message FROM advice WHERE rule = "
	                                  "'loss_scale_unusual'"), "final loss scale 4 "),
	          "%s", query_text(t.db, "SELECT group_concat(message) FROM advice"));
	/* idempotent */
	cr_assert_eq(prof_summarize(t.db, 70, 15), 0);
	cr_assert_str_eq(query_text(t.db, "SELECT count(*) FROM nonfinite"), "6");
	temp_profile_release(&t);
}

/* A profile of the first revision (no nonfinite table, no new columns) that was never finalized
 * gets both, and its origins found, when it is summarized. */
Test(finalize, old_profile_upgraded)
{
	temp_profile t;
	temp_profile_create(&t);
	cr_assert_eq(sqlite3_exec(t.db,
	                          "DROP TABLE nonfinite; "
	                          /* the first revision's tensor_stats (DROP COLUMN cannot drop a
	                           * last column followed by a comment) */
	                          "DROP TABLE tensor_stats; CREATE TABLE tensor_stats ("
	                          "id INTEGER PRIMARY KEY, step INTEGER, seq INTEGER, op TEXT, "
	                          "role TEXT, name TEXT, dtype TEXT, "
	                          "count INTEGER, nan INTEGER, inf INTEGER, underflow INTEGER, "
	                          "near_overflow INTEGER, min REAL, max REAL, absmax REAL, "
	                          "origin INTEGER, exp_hist BLOB, callsite INTEGER);"
	                          "INSERT INTO steps(step, loss, scale, overflow, skipped) "
	                          "VALUES (3, NULL, 128, 1, 1);"
	                          "INSERT INTO tensor_stats(step, seq, op, role, name, dtype, nan, "
	                          "inf, origin) VALUES (3, 7, 'Exp', 'output', 'rate', 'fp16', 0, "
	                          "2, 1)", NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(t.db));
	cr_assert_eq(prof_summarize(t.db, 70, 15), 0, "%s", sqlite3_errmsg(t.db));
	cr_assert_str_eq(query_text(t.db, "SELECT step || ':' || class || ':' || op || ':' || label || "
	                                  "':' || phase FROM nonfinite"),
	                 "3:forward_overflow:Exp:rate:forward");
	temp_profile_release(&t);
}

/* The spool directory handed to the application is absolute even for a relative --output:
 * the application may change its working directory before it dumps. */
Test(session, spool_dir_absolute)
{
	char dir[] = "/tmp/test_profiler_spool.XXXXXX", cwd[4096];
	cr_assert_not_null(mkdtemp(dir));
	cr_assert_not_null(getcwd(cwd, sizeof cwd));
	cr_assert_eq(chdir(dir), 0);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = "rel.db";
	o.dump = AMP_DUMP_NONFINITE;
	o.ring_slots = 1024;
	o.ring_count = 1;
	prof_session s;
	cr_assert_eq(prof_session_init(&s, &o), 0);
	char want[128];
	snprintf(want, sizeof want, "%s/.ampprof-spool-", dir);
	cr_assert_eq(strncmp(s.spool_dir, want, strlen(want)), 0, "%s", s.spool_dir);
	cr_assert_str_eq(s.hdr->spool_dir, s.spool_dir);
	prof_session_release(&s);
	cr_assert_eq(chdir(cwd), 0);
	cr_assert_eq(rmdir(dir), 0, "the spool directory is gone");
}

/* ---- engines, the half shares and the emulated-half advice ------------------------------------
 * Synthetic profiles (genprof) summarized by finalize, checked against the shares recomputed
 * here from the ops view. */
static void gen_summarized(temp_profile *t, genprof_opts *o)
{
	char err[512];
	snprintf(t->path, sizeof t->path, "/tmp/test_profiler.XXXXXX");
	int fd = mkstemp(t->path);
	cr_assert_geq(fd, 0);
	close(fd);
	o->path = t->path;
	o->force = 1;
	o->quiet = 1;
	o->ops = 1200;
	o->steps = 12;
	cr_assert_eq(genprof_write(o, NULL, err, sizeof err), 0, "%s", err);
	cr_assert_eq(amp_profile_open(t->path, 1, &t->db, err, sizeof err), AMP_PROFILE_OK, "%s",
	             err);
	cr_assert_eq(prof_summarize(t->db, 70, 15), 0, "%s", sqlite3_errmsg(t->db));
}

/* The profile of gen_summarized changed by sql, then summarized again. */
static void summarize_after(temp_profile *t, const char *sql)
{
	cr_assert_eq(sqlite3_exec(t->db, sql, NULL, NULL, NULL), SQLITE_OK, "%s",
	             sqlite3_errmsg(t->db));
	cr_assert_eq(prof_summarize(t->db, 70, 15), 0, "%s", sqlite3_errmsg(t->db));
}

static double query_real(sqlite3 *db, const char *sql)
{
	const char *v = query_text(db, sql);
	cr_assert(strcmp(v, "NULL") != 0 && v[0], "%s: no value", sql);
	return strtod(v, NULL);
}

/* Asserts |got - want| <= 1e-12 (the shares are sums of the same integers, divided once). */
static void assert_share(const char *what, double got, double want)
{
	double diff = fabs(got - want);
	cr_log_info("%s: %.17g vs %.17g, difference %.3g (tolerance 1e-12)", what, got, want, diff);
	cr_assert_leq(diff, 1e-12, "%s: %.17g, recomputed %.17g", what, got, want);
}

/* The message of rule's advice ("" if none), copied: query_text's buffer is reused. */
static const char *advice_of(sqlite3 *db, const char *rule)
{
	static char msg[2][1024];
	static int k;
	char sql[160];
	snprintf(sql, sizeof sql, "SELECT message FROM advice WHERE rule = '%s'", rule);
	k ^= 1;
	snprintf(msg[k], sizeof msg[k], "%s", query_text(db, sql));
	return msg[k];
}

/* An fp16 run whose GEMMs ran on FP32 arithmetic (the AMD class): half share as before, native
 * share 0, and the advice names the ops, their share, the missing AVX512-FP16 and the bf16
 * mode the CPU's AVX512_BF16 would serve, with the GEMM ratio bench_kernels measured. */
Test(engines, fp16_emulated_on_a_bf16_cpu)
{
	temp_profile t;
	genprof_opts o;
	genprof_defaults(&o);
	gen_summarized(&t, &o);
	cr_assert_str_eq(query_text(t.db, "SELECT half_types FROM run_summary"), "fp16");
	cr_assert_str_eq(amp_profile_half_label("fp16"), "FP16 share");
	assert_share("half share", query_real(t.db, "SELECT fp16_share FROM run_summary"),
	             query_real(t.db, "SELECT CAST(sum(CASE WHEN exec_dtype IN ('fp16', 'bf16') "
	                              "THEN dur_ns ELSE 0 END) AS REAL) / sum(dur_ns) FROM ops"));
	assert_share("native half share",
	             query_real(t.db, "SELECT native_half_share FROM run_summary"), 0.0);
	cr_assert_str_eq(query_text(t.db, "SELECT count(*) FROM ops WHERE engine IS NULL"), "0");
	const char *msg = advice_of(t.db, "emulated_half");
	cr_log_info("%s", msg);
	char want[64];
	snprintf(want, sizeof want, "for %.1f %% of op time",
	         100 * query_real(t.db, "SELECT CAST(sum(CASE WHEN exec_dtype = 'fp16' AND engine IN "
	                                "('fp32-fma', 'scalar') THEN dur_ns ELSE 0 END) AS REAL) "
	                                "/ sum(dur_ns) FROM ops"));
	cr_assert(strstr(msg, want), "want '%s' in: %s", want, msg);
	cr_assert(strstr(msg, "fp16 Linear"), "%s", msg);
	cr_assert(strstr(msg, "lacks AVX512-FP16"), "%s", msg);
	cr_assert(strstr(msg, "precision_mode = allow_mix_precision_bf16"), "%s", msg);
	cr_assert(strstr(msg, "whose GEMM runs 1.76x the FP32 GEMM on the AMD class"),
	          "the measured ratio of avx512-bf16: %s", msg);
	cr_assert_str_eq(query_text(t.db, "SELECT op FROM advice WHERE rule = 'emulated_half'"),
	                 "Linear");
	temp_profile_release(&t);
}

/* The same run forced onto a path below the CPU's (kernels = avx2): the advice says so, and
 * the bf16 mode it names needs the automatic choice of paths, which a forced avx2 would deny. */
Test(engines, fp16_emulated_on_a_forced_path)
{
	temp_profile t;
	genprof_opts o;
	genprof_defaults(&o);
	gen_summarized(&t, &o);
	summarize_after(&t, "DELETE FROM meta WHERE key IN ('kernels', 'kernels_top');"
	                    "INSERT INTO meta (key, value) VALUES ('kernels', 'avx2'), "
	                    "('kernels_top', 'avx512-bf16')");
	const char *msg = advice_of(t.db, "emulated_half");
	cr_log_info("%s", msg);
	cr_assert(strstr(msg, "lacks AVX512-FP16, so fp16 is storage only here (and the run forced "
	                      "kernels = avx2)"),
	          "%s", msg);
	cr_assert(strstr(msg, "precision_mode = allow_mix_precision_bf16 with kernels = auto would "
	                      "run the white list in bf16"),
	          "%s", msg);
	cr_assert(strstr(msg, "1.76x the FP32 GEMM on the AMD class in the kernel bench"), "%s",
	          msg);
	temp_profile_release(&t);
}

/* A bf16 run with its GEMMs on avx512-bf16: the native share is the GEMMs' time; the bf16
 * gray ops converting in registers are not "emulated"; the low share is labelled BF16 and does
 * not recommend the mixed mode already in force. */
Test(engines, bf16_native_gemms)
{
	temp_profile t;
	genprof_opts o;
	genprof_defaults(&o);
	o.half_dtype = "bf16";
	o.gemm_engine = "avx512-bf16";
	o.precision_mode = "allow_mix_precision_bf16";
	o.fp16_share = 0.55;
	o.overflow_steps = 0;
	gen_summarized(&t, &o);
	cr_assert_str_eq(query_text(t.db, "SELECT half_types FROM run_summary"), "bf16");
	double native = query_real(t.db, "SELECT native_half_share FROM run_summary");
	assert_share("native half share", native,
	             query_real(t.db, "SELECT CAST(sum(CASE WHEN engine = 'avx512-bf16' THEN dur_ns "
	                              "ELSE 0 END) AS REAL) / sum(dur_ns) FROM ops"));
	double half = query_real(t.db, "SELECT fp16_share FROM run_summary");
	cr_assert(native > 0 && native < half, "native %g, half %g", native, half);
	assert_share("op_summary native_ns",
	             query_real(t.db, "SELECT CAST(sum(native_ns) AS REAL) FROM op_summary"),
	             query_real(t.db, "SELECT CAST(sum(dur_ns) AS REAL) FROM ops WHERE engine = "
	                              "'avx512-bf16'"));
	cr_assert_str_eq(advice_of(t.db, "emulated_half"), "");
	const char *low = advice_of(t.db, "low_fp16_share");
	cr_assert(strncmp(low, "BF16 share is ", 14) == 0, "%s", low);
	cr_assert_null(strstr(low, "precision_mode ="), "%s", low);
	cr_assert(strstr(low, "custom_white_list"), "%s", low);
	temp_profile_release(&t);
}

/* A low half share whose FP32 time is all on the black list (the optimizer's master update):
 * the advice names where that time goes, and says the optimizer's FP32 is by design, instead
 * of "check whether they need FP32". */
Test(engines, low_share_in_black_list_ops)
{
	temp_profile t;
	genprof_opts o;
	genprof_defaults(&o);
	o.fp16_share = 0.55;
	o.overflow_steps = 0;
	gen_summarized(&t, &o);
	summarize_after(&t, "UPDATE op_sigs SET op = 'Optimizer', label = NULL WHERE "
	                    "exec_dtype = 'fp32'");
	const char *low = advice_of(t.db, "low_fp16_share");
	cr_assert(strstr(low, "the FP32 time is in black-list ops (Optimizer "), "%s", low);
	cr_assert(strstr(low, "the optimizer updates the FP32 master weights by design"), "%s", low);
	cr_assert_null(strstr(low, "custom_white_list"), "%s", low);
	temp_profile_release(&t);
}

/* The advice never recommends the mode in force, says when the CPU has the engine the ops did
 * not use, and says when the profile does not tell what the CPU has. */
Test(engines, emulated_advice_follows_the_cpu_and_the_mode)
{
	static const struct {
		const char *features, *mode, *has, *hasnt, *vendor, *half;
	} cases[] = {
	    {"avx512_bf16", "allow_mix_precision_bf16", "lacks AVX512-FP16",
	     "precision_mode =", NULL, NULL},
	    {"avx512_bf16 avx512_fp16", "allow_mix_precision", "has AVX512-FP16 but these ops",
	     "precision_mode =", NULL, NULL},
	    {"none", "allow_mix_precision", "lacks AVX512-FP16", "precision_mode =", NULL, NULL},
	    /* no half engine at all (the AVX2 class): what the half types buy, as information */
	    {"none", "allow_mix_precision", "no half arithmetic of any type",
	     "precision_mode =", NULL, NULL},
	    /* AMX measured on the Intel class: its own ratio, not avx512-bf16's */
	    {"amx_bf16 amx_tile", "force_fp16", "(amx-bf16, whose GEMM runs", "AMD class", NULL,
	     NULL},
	    /* Intel without AMX: bf16 runs on FP32 FMA by the library's choice, fp16 is native */
	    {"avx512_bf16 avx512_fp16", "allow_mix_precision_bf16",
	     "the CPU has AVX512_BF16, but on GenuineIntel cores it computes fewer products per "
	     "cycle than FP32 FMA, so the library runs bf16 products on FP32 FMA; it has "
	     "AVX512-FP16 (avx512-fp16, whose GEMM runs 1.80x the FP32 GEMM on the Intel class in "
	     "the kernel bench): "
	     "precision_mode = allow_mix_precision_fp16",
	     "did not use it", "GenuineIntel", "bf16"},
	    /* Intel with AVX512_BF16 only (no AMX, no AVX512-FP16): nothing beats FP32 FMA */
	    {"avx512_bf16", "allow_mix_precision_bf16", "no half arithmetic of this CPU beats",
	     "precision_mode =", "GenuineIntel", "bf16"},
	    /* the same features on AMD: its vdpbf16ps is the engine the ops did not use */
	    {"avx512_bf16", "allow_mix_precision_bf16", "has AMX-BF16 or AVX512_BF16 but these ops",
	     "fewer products", "AuthenticAMD", "bf16"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		temp_profile t;
		genprof_opts o;
		genprof_defaults(&o);
		o.cpu_features = cases[i].features;
		o.precision_mode = cases[i].mode;
		if (cases[i].vendor)
			o.cpu_vendor = cases[i].vendor;
		if (cases[i].half)
			o.half_dtype = cases[i].half;
		gen_summarized(&t, &o);
		const char *msg = advice_of(t.db, "emulated_half");
		cr_log_info("%s / %s: %s", cases[i].features, cases[i].mode, msg);
		cr_assert(strstr(msg, cases[i].has), "case %zu: want '%s' in: %s", i, cases[i].has,
		          msg);
		cr_assert_null(strstr(msg, cases[i].hasnt), "case %zu: '%s' in: %s", i,
		               cases[i].hasnt, msg);
		/* a warning only where another mode or path would help */
		cr_assert_str_eq(query_text(t.db, "SELECT severity FROM advice WHERE rule = "
		                                  "'emulated_half'"),
		                 strcmp(cases[i].features, "none") == 0 ||
		                         strstr(cases[i].has, "beats") ? "info" : "warning",
		                 "case %zu", i);
		temp_profile_release(&t);
	}
}

/* Ops with no recorded engine (a version-1 profile): the native share is unknown, not 0, and
 * no emulated-half advice is made up; the viewer's model says unknown too. */
Test(engines, unknown_engine_is_not_zero)
{
	temp_profile t;
	genprof_opts o;
	genprof_defaults(&o);
	o.no_engine = 1;
	gen_summarized(&t, &o);
	cr_assert_str_eq(query_text(t.db, "SELECT native_half_share FROM run_summary"), "NULL");
	cr_assert_str_eq(advice_of(t.db, "emulated_half"), "");
	amp_profile_close(t.db);
	t.db = NULL;
	view_model *m = NULL;
	char err[512];
	cr_assert_eq(view_model_open(t.path, NULL, &m, err, sizeof err), VIEW_OK, "%s", err);
	const view_run *r = view_model_run(m);
	cr_assert(isnan(r->native_half_share));
	cr_assert_str_eq(r->half_label, "FP16 share");
	view_model_free(m);
	temp_profile_release(&t);
}

/* FP16 headroom: a bf16 tensor has about FP32's range, so its values above 32768 are no
 * warning; fp16 tensors count, and fp32 ones too (an FP32 run's FP16 readiness). */
Test(headroom, bf16_tensors_have_fp32_range)
{
	temp_profile t;
	genprof_opts o;
	genprof_defaults(&o);
	gen_summarized(&t, &o);
	cr_assert_eq(sqlite3_exec(t.db,
	                          "INSERT INTO tensor_stats(step, seq, op, role, name, dtype, count, "
	                          "nan, inf, underflow, near_overflow) VALUES "
	                          "(0, 1, 'Exp', 'output', 'hr.bf16', 'bf16', 1000, 0, 0, 30, 400),"
	                          "(0, 2, 'Exp', 'output', 'hr.fp16', 'fp16', 1000, 0, 0, 30, 400),"
	                          "(0, 3, 'Exp', 'output', 'hr.fp32', 'fp32', 1000, 0, 0, 0, 7)",
	                          NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(t.db));
	amp_profile_close(t.db);
	t.db = NULL;
	view_model *m = NULL;
	char err[512];
	cr_assert_eq(view_model_open(t.path, NULL, &m, err, sizeof err), VIEW_OK, "%s", err);
	const view_headroom *h = NULL;
	long n = view_model_headroom(m, &h);
	cr_assert_geq(n, 0);
	int seen_fp16 = 0, seen_fp32 = 0;
	for (long i = 0; i < n; i++) {
		cr_assert_str_neq(h[i].name, "hr.bf16", "a bf16 tensor in the FP16 headroom");
		if (!strcmp(h[i].name, "hr.fp16"))
			seen_fp16 = h[i].near_overflow == 400 && h[i].underflow == 30;
		if (!strcmp(h[i].name, "hr.fp32"))
			seen_fp32 = h[i].near_overflow == 7;
	}
	cr_assert(seen_fp16 && seen_fp32);
	view_model_free(m);
	temp_profile_release(&t);
}

/* ---- op types by name (wire v2) ------------------------------------------------------------ */
static void put_named_op(prof_writer *w, unsigned op, uint32_t op_name, amp_engine engine)
{
	unsigned char rec[2 * AMP_SLOT_SIZE];
	memset(rec, 0, sizeof rec);
	amp_rec_op o;
	memset(&o, 0, sizeof o);
	o.op = (uint8_t)op;
	o.op_name = op_name;
	o.engine = (uint8_t)engine;
	o.exec_dtype = AMP_DTYPE_F16;
	o.t_begin = 0;
	o.t_end = 100;
	memcpy(rec, &o, sizeof o);
	prof_record r = {AMP_REC_OP, 2, rec};
	cr_assert_eq(prof_writer_put(w, 0, AMP_CLOCK_MONO, &r), 0);
}

/* A producer names its own op type: it is stored by name and added to op_types as gray, once;
 * a known name sent as a string adds nothing; the runtime's enum still names its ops; an
 * engine value the collector does not know is NULL. */
Test(writer, op_types_by_name)
{
	temp_profile t;
	temp_profile_create(&t);
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = t.path;
	o.ring_count = 1;
	prof_writer *w = prof_writer_new(t.db, &o, 0);
	cr_assert_not_null(w);
	put_string(w, 0, 1, "FlashAttention");
	put_string(w, 0, 2, "MatMul");
	put_named_op(w, AMP_OP_BY_NAME, 1, AMP_ENGINE_AVX512_FP16);
	put_named_op(w, AMP_OP_BY_NAME, 1, AMP_ENGINE_AVX512_FP16);
	put_named_op(w, AMP_OP_BY_NAME, 2, AMP_ENGINE_FP32_FMA);
	put_named_op(w, AMP_OP_RELU, 0, (amp_engine)200);
	cr_assert_eq(prof_writer_finish(w), 0);
	prof_writer_free(w);
	cr_assert_str_eq(query_text(t.db, "SELECT group_concat(r, ',') FROM (SELECT op || ':' || "
	                                  "coalesce(engine, 'NULL') || ':' || count(*) AS r FROM "
	                                  "ops GROUP BY op, engine ORDER BY op)"),
	                 "FlashAttention:avx512-fp16:2,MatMul:fp32-fma:1,ReLU:NULL:1");
	/* the runtime's op types take ids 0 .. AMP_OP_COUNT - 1; a named one comes after them */
	char by_name[128];
	snprintf(by_name, sizeof by_name, "SELECT group_concat(name || ':' || list) FROM op_types "
	                                  "WHERE id >= %d", (int)AMP_OP_COUNT);
	cr_assert_str_eq(query_text(t.db, by_name), "FlashAttention:gray");
	cr_assert_str_eq(query_text(t.db, "SELECT count(*) FROM op_types WHERE name = 'MatMul'"),
	                 "1");
	cr_assert_eq(prof_summarize(t.db, 70, 15), 0, "%s", sqlite3_errmsg(t.db));
	temp_profile_release(&t);
}

/* An op byte outside the enum needs a name; with one it decodes. */
Test(decode, op_by_name_needs_a_name)
{
	unsigned char buf[PROF_DECODE_BUF];
	prof_record r;
	memset(ring, 0, sizeof ring);
	amp_rec_op o;
	memset(&o, 0, sizeof o);
	o.h = (amp_rec_hdr){0, AMP_REC_OP, 2, 0};
	o.op = AMP_OP_BY_NAME;
	memcpy(ring, &o, sizeof o);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, 2, buf, &r), PROF_DECODE_BAD);
	o.op_name = 3;
	memcpy(ring, &o, sizeof o);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, 2, buf, &r), 2);
	o.op = AMP_OP_COUNT;
	o.op_name = 0;
	memcpy(ring, &o, sizeof o);
	cr_assert_eq(prof_decode(ring, NSLOTS, 0, 2, buf, &r), PROF_DECODE_BAD);
}

/* A static loss scale of 1 (the BF16 modes' default) is not a scale stuck at its floor, and in a
 * BF16 mode not an unusual one either; the same scale reached by dynamic scaling is, when it
 * overflows there (case 2), and is not when it merely sits on it (case 1: a loss_scale_init at
 * the floor, no overflow: "gradients overflow even unscaled" would be false). */
Test(finalize, static_scale_is_not_a_floor)
{
	for (int c = 0; c < 3; c++) {
		int dynamic = c > 0;
		temp_profile t;
		temp_profile_create(&t);
		prof_options o;
		memset(&o, 0, sizeof o);
		o.output = t.path;
		o.ring_count = 1;
		prof_writer *w = prof_writer_new(t.db, &o, 0);
		cr_assert_not_null(w);
		for (int s = 0; s < 5; s++) {
			put_step(w, s, 0.5, 1, c == 2 && s >= 2);
			put_scale(w, s, 1, 1, dynamic ? AMP_SCALE_HOLD : AMP_SCALE_STATIC);
		}
		cr_assert_eq(prof_writer_finish(w), 0);
		prof_writer_free(w);
		cr_assert_eq(amp_profile_meta_set(t.db, "precision_mode", "allow_mix_precision_bf16"),
		             AMP_PROFILE_OK);
		cr_assert_eq(amp_profile_meta_set(t.db, "loss_scale", dynamic ? "dynamic" : "1"),
		             AMP_PROFILE_OK);
		cr_assert_eq(prof_summarize(t.db, 70, 15), 0, "%s", sqlite3_errmsg(t.db));
		cr_assert_str_eq(query_text(t.db, "SELECT coalesce(group_concat(rule), '-') FROM "
		                                  "(SELECT rule FROM advice WHERE rule LIKE "
		                                  "'loss_scale%' ORDER BY id)"),
		                 c == 2 ? "loss_scale_floor,loss_scale_unusual"
		                 : c    ? "loss_scale_unusual"
		                        : "-");
		temp_profile_release(&t);
	}
}

/* ---- time conversion ------------------------------------------------------------------- */
#include "writer_int.h"

/* Ticks to ns is one increasing function while calibration pairs keep refining the slope (with
 * jitter in the pairs): ticks converted in order come out in order, and a tick converted again
 * later comes out the same (a time once written never moves).  Without the segments the slope
 * of the latest pair was applied from the first pair on, and a time converted after a refined
 * slope could land before one converted just before it. */
Test(writer, tick_conversion_increasing_and_stable)
{
	prof_writer *w = calloc(1, sizeof *w);
	cr_assert_not_null(w);
	w->run_start = 1000;
	w->ns_per_tick = 1.0;
	const double true_k = 1.0 / 2.9; /* a 2.9 GHz TSC */
	uint64_t t0 = 5000000;
	prof_writer_calibrate(w, t0, 1000);
	prof_writer_calibrate(w, t0 + 29000000, 1000 + 10000000 + 700); /* 10 ms, 700 ns off */
	uint64_t t = t0 + 29000000, seen_t[64];
	int64_t prev = prof_writer_ns(w, AMP_CLOCK_TSC, t), seen_ns[64];
	int n_seen = 0;
	srand(7);
	for (int i = 0; i < 200000; i++) {
		t += 1 + (uint64_t)(rand() % 3000); /* ~0.5 us apart */
		if (i % 997 == 0) {
			/* a calibration pair at about the same time, +-1 us of jitter */
			uint64_t ct = t - (uint64_t)(rand() % 2000);
			double mono = 1000 + (double)(ct - t0) * true_k + (rand() % 2001 - 1000);
			prof_writer_calibrate(w, ct, (uint64_t)mono);
		}
		int64_t ns = prof_writer_ns(w, AMP_CLOCK_TSC, t);
		cr_assert_geq(ns, prev, "tick %llu: %lld ns before %lld", (unsigned long long)t,
		              (long long)ns, (long long)prev);
		prev = ns;
		if (i % 4000 == 0 && n_seen < 64) {
			seen_t[n_seen] = t;
			seen_ns[n_seen++] = ns;
		}
	}
	for (int i = 0; i < n_seen; i++)
		cr_assert_eq(prof_writer_ns(w, AMP_CLOCK_TSC, seen_t[i]), seen_ns[i]);
	/* the slope converged: the last time is within 0.01 % of the true one */
	double want = (double)(t - t0) * true_k;
	cr_assert(fabs((double)prev - want) < want * 1e-4, "%lld vs %.0f", (long long)prev, want);
	/* a duration is the difference of the converted ends */
	cr_assert_eq(prof_writer_dur(w, AMP_CLOCK_TSC, seen_t[1], seen_t[2]), seen_ns[2] - seen_ns[1]);
	free(w);
}
