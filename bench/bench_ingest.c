/* bench_ingest.c — collector ingest rate into SQLite (decode + writer, commits every 100 ms)
 * against the 1 M events/s goal, and bytes per op row before indexes against 40 bytes.
 *
 * Builds ring images of op records in memory (50 distinct signatures, like a real model's
 * layers), feeds them through prof_decode and prof_writer_put into a fresh profile in a
 * private directory, and removes it afterwards.
 */
#include "bench_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prof.h"
#include "profile_db.h"

#define EVENTS 2000000u
#define SLOTS 4096u

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	bench_no_options(argc, argv, "bench_ingest",
	                 "The collector's ingest rate into SQLite (decode and writer) against the\n"
	                 "1 M events/s goal, and the bytes per op row before indexes against 40, on\n"
	                 "two million op records built in memory, written to a private directory.\n");
	char dir[] = "/tmp/bench_ingest.XXXXXX", path[64];
	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof path, "%s/p.db", dir);
	sqlite3 *db = NULL;
	char err[256];
	int rc = 1;
	prof_writer *w = NULL;
	unsigned char *ring = calloc(SLOTS, AMP_SLOT_SIZE);
	if (amp_profile_create(path, 1, &db, err, sizeof err) != AMP_PROFILE_OK) {
		fprintf(stderr, "bench_ingest: %s\n", err);
		goto out;
	}
	prof_options o;
	memset(&o, 0, sizeof o);
	o.output = path;
	o.ring_count = 1;
	w = prof_writer_new(db, &o, 0);
	if (!w || !ring)
		goto out;
	unsigned char buf[PROF_DECODE_BUF];
	uint64_t pos = 0, t = 1000000, done = 0;
	double t0 = now_s(), last_commit = t0;
	while (done < EVENTS) {
		/* fill the ring with op records, as a producer would */
		uint64_t start = pos;
		while (pos - start + 2 <= SLOTS) {
			amp_rec_op op;
			memset(&op, 0, sizeof op);
			uint64_t i = done + (pos - start) / 2;
			op.h.stamp = (uint32_t)pos;
			op.h.type = AMP_REC_OP;
			op.h.nslots = 2;
			op.t_begin = t;
			t += 1000 + i % 7 * 100;
			op.t_end = t;
			t += 50;
			op.step = (int64_t)(i / 200);
			op.seq = i;
			op.op = (uint8_t)(i % 10);
			op.exec_dtype = (uint8_t)(i % 3 == 0);
			op.flops = 1000 * (i % 50);
			op.bytes = 4096;
			op.ndim = 2;
			op.shape[0] = 128;
			op.shape[1] = (int64_t)(64 * (i % 50 / 10 + 1));
			memcpy(ring + (pos % SLOTS) * AMP_SLOT_SIZE, &op, sizeof op);
			pos += 2;
		}
		for (uint64_t p = start; p < pos;) {
			prof_record r;
			int n = prof_decode(ring, SLOTS, p, pos - p, buf, &r);
			if (n <= 0 || prof_writer_put(w, 0, AMP_CLOCK_MONO, &r) != 0)
				goto out;
			p += (uint64_t)n;
			done++;
		}
		double now = now_s();
		if (now - last_commit >= 0.1) {
			if (prof_writer_commit(w) != 0)
				goto out;
			last_commit = now;
		}
	}
	if (prof_writer_commit(w) != 0)
		goto out;
	double secs = now_s() - t0;
	double rate = (double)done / secs;
	sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
	sqlite3_stmt *st = NULL;
	double bytes = 0;
	if (sqlite3_prepare_v2(db, "SELECT sum(pgsize) FROM dbstat WHERE name = 'op_events'", -1, &st,
	                       NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		bytes = sqlite3_column_double(st, 0);
	sqlite3_finalize(st);
	if (bytes <= 0) {
		struct stat sb;
		if (stat(path, &sb) == 0)
			bytes = (double)sb.st_size;
	}
	printf("ingest: %.2f M events/s (%u op events in %.2f s), goal 1 M/s: ratio %.2f "
	       "(>= 1 meets it)\n", rate / 1e6, (unsigned)done, secs, rate / 1e6);
	printf("op row: %.1f bytes before indexes, goal 40: ratio %.2f (<= 1 meets it)\n",
	       bytes / (double)done, bytes / (double)done / 40.0);
	rc = 0;
out:
	if (w)
		prof_writer_free(w);
	amp_profile_close(db);
	free(ring);
	char side[96];
	unlink(path);
	snprintf(side, sizeof side, "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof side, "%s-shm", path);
	unlink(side);
	rmdir(dir);
	return rc;
}
