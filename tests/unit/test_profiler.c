/* test_profiler.c — ampprof internals: the ring decoder's bounds checks on valid, truncated
 * and garbage rings, option value parsers, and the writer fed records with unknown ids. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, pipe2, dladdr1, sigabbrev_np */
#endif
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
