/* test_schema.c — the profile database module: create, open, validate, refuse bad files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile_db.h"

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/test_schema.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

static const char *path_in(const char *name)
{
	static char buf[4][128];
	static int next;
	char *p = buf[next++ % 4];
	snprintf(p, 128, "%s/%s", dir, name);
	return p;
}

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, n, f), n);
	fclose(f);
}

TestSuite(schema, .init = setup, .fini = teardown);

Test(schema, create_then_open)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("a.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_meta_set(db, "k", "v"), AMP_PROFILE_OK);
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	char v[16];
	cr_assert_eq(amp_profile_meta_get(db, "k", v, sizeof v), AMP_PROFILE_OK);
	cr_assert_str_eq(v, "v");
	cr_assert_eq(amp_profile_meta_get(db, "schema_version", v, sizeof v), AMP_PROFILE_OK);
	cr_assert_str_eq(v, "3");
	cr_assert_eq(amp_profile_meta_get(db, "absent", v, sizeof v), AMP_PROFILE_ENOENT);
	sqlite3_stmt *st;
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM op_types WHERE list = 'white'",
	                                -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_eq(sqlite3_column_int(st, 0), 4);
	sqlite3_finalize(st);
	amp_profile_close(db);
	amp_profile_close(NULL);
}

Test(schema, existing_needs_force)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("b.db");
	write_file(p, "x", 1);
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_EEXIST);
	cr_assert_null(db);
	cr_assert(strstr(err, "cannot create") != NULL, "%s", err);
	cr_assert_eq(amp_profile_create(p, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	amp_profile_close(db);
}

Test(schema, missing_directory)
{
	sqlite3 *db = NULL;
	char err[256];
	cr_assert_eq(amp_profile_create("/nonexistent-ampkit/x.db", 0, &db, err, sizeof err),
	             AMP_PROFILE_ENOENT);
	cr_assert(strstr(err, "'/nonexistent-ampkit/x.db'") != NULL, "%s", err);
}

Test(schema, open_errors)
{
	sqlite3 *db = NULL;
	char err[256];
	cr_assert_eq(amp_profile_open(path_in("none.db"), 0, &db, err, sizeof err),
	             AMP_PROFILE_ENOENT);
	const char *text = path_in("text.db");
	write_file(text, "hello, this is not a database at all, not even close to one.......\n"
	                 "................................................................\n", 130);
	cr_assert_eq(amp_profile_open(text, 0, &db, err, sizeof err), AMP_PROFILE_ENOTPROFILE);
	cr_assert(strstr(err, "not an ampkit profile") != NULL, "%s", err);
	const char *empty = path_in("empty.db");
	write_file(empty, "", 0);
	cr_assert_eq(amp_profile_open(empty, 0, &db, err, sizeof err), AMP_PROFILE_ENOTPROFILE);

	/* an SQLite file that is not a profile */
	const char *other = path_in("other.db");
	cr_assert_eq(sqlite3_open(other, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	db = NULL;
	cr_assert_eq(amp_profile_open(other, 0, &db, err, sizeof err), AMP_PROFILE_ENOTPROFILE);
	cr_assert_null(db);
}

Test(schema, newer_version_refused)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("new.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK);
	cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version = 7", NULL, NULL, NULL), SQLITE_OK);
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_ENEWER);
	cr_assert(strstr(err, "newer") != NULL, "%s", err);
}

Test(schema, truncated_refused)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("full.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK);
	cr_assert_eq(sqlite3_exec(db, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL), SQLITE_OK);
	amp_profile_close(db);
	FILE *f = fopen(p, "rb");
	char buf[16384];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	cr_assert_gt(n, 8192);
	const char *t = path_in("trunc.db");
	write_file(t, buf, 8192);
	cr_assert_eq(amp_profile_open(t, 0, &db, err, sizeof err), AMP_PROFILE_ECORRUPT);
	cr_assert(strstr(err, "truncated") != NULL, "%s", err);
	write_file(t, buf, 50);
	cr_assert_eq(amp_profile_open(t, 0, &db, err, sizeof err), AMP_PROFILE_ECORRUPT);
}

/* A checkpoint cut short (ampprof SIGKILLed inside it, or the disk full) leaves a main file
 * whose header already counts the pages the checkpoint had not yet written, and the pages in
 * the -wal: SQLite reads it whole, so every reader must open it, read-only, and leave the -wal
 * as it is.  The cut is made by RLIMIT_FSIZE in a child, after page 1 is written. */
Test(schema, wal_of_an_interrupted_checkpoint_is_read)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("wal.db"), *wal = path_in("wal.db-wal");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(sqlite3_exec(db, "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT "
	                              "i + 1 FROM n WHERE i < 3000) INSERT INTO steps(step, start_ns)"
	                              " SELECT i, i FROM n; COMMIT",
	                          NULL, NULL, NULL),
	             SQLITE_OK, "%s", sqlite3_errmsg(db));
	struct stat before;
	cr_assert_eq(stat(p, &before), 0);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		/* the checkpoint may write page 1 (and what fits) but cannot extend the file */
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit lim = {(rlim_t)before.st_size + 4096, (rlim_t)before.st_size + 4096};
		setrlimit(RLIMIT_FSIZE, &lim);
		sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
		int rc = sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
		_exit(rc == SQLITE_OK ? 1 : 0); /* must have failed part-way */
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the checkpoint was not cut");
	sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	amp_profile_close(db);
	struct stat st_db, st_wal;
	cr_assert_eq(stat(p, &st_db), 0);
	cr_assert_eq(stat(wal, &st_wal), 0);
	cr_assert_gt(st_wal.st_size, 32, "the -wal holds pages");
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	int64_t n = 0;
	cr_assert_eq(amp_profile_query_int64(db, &n, "SELECT count(*) FROM steps", NULL),
	             AMP_PROFILE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(n, 3000);
	amp_profile_close(db);
	struct stat after_db, after_wal;
	cr_assert_eq(stat(p, &after_db), 0);
	cr_assert_eq(stat(wal, &after_wal), 0, "a read-only reader leaves the -wal");
	cr_assert_eq(after_db.st_size, st_db.st_size);
	cr_assert_eq(after_wal.st_size, st_wal.st_size);
}

/* A hot journal (a rollback-mode write cut short by SIGKILL, as when ampprof is killed while
 * finalize switches the journal mode back) is rolled back by a read-only open, which SQLite
 * alone refuses ("attempt to write a readonly database"): the committed rows are read. */
Test(schema, hot_journal_is_rolled_back_by_a_reader)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("hot.db"), *journal = path_in("hot.db-journal");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(sqlite3_exec(db, "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT "
	                              "i + 1 FROM n WHERE i < 3000) INSERT INTO steps(step, start_ns)"
	                              " SELECT i, i FROM n; COMMIT; PRAGMA journal_mode = DELETE",
	                          NULL, NULL, NULL),
	             SQLITE_OK, "%s", sqlite3_errmsg(db));
	amp_profile_close(db);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		/* a cache of a few pages spills the changed ones into the file before the commit */
		sqlite3 *w = NULL;
		if (sqlite3_open(p, &w) != SQLITE_OK ||
		    sqlite3_exec(w, "PRAGMA cache_size = 2; BEGIN; UPDATE steps SET start_ns = -1",
		                 NULL, NULL, NULL) != SQLITE_OK)
			_exit(1);
		kill(getpid(), SIGKILL);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status), "the writer was not killed mid-transaction");
	struct stat st;
	cr_assert(stat(journal, &st) == 0 && st.st_size > 512, "no hot journal left");
	cr_assert_neq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	                  sqlite3_exec(db, "SELECT count(*) FROM steps", NULL, NULL, NULL) ==
	                      SQLITE_OK,
	              1, "SQLite reads it read-only after all: the test shows nothing");
	sqlite3_close(db);
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	int64_t n = 0;
	cr_assert_eq(amp_profile_query_int64(db, &n, "SELECT count(*) FROM steps WHERE start_ns = "
	                                         "step", NULL),
	             AMP_PROFILE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(n, 3000, "the committed rows");
	amp_profile_close(db);
}

/* The output lock: held from create to close, so a second creator with force is refused
 * (the first one's file untouched) and readers can tell a profile being recorded. */
Test(schema, output_lock_refuses_a_second_writer)
{
	sqlite3 *a = NULL, *b = (sqlite3 *)1, *w = (sqlite3 *)1;
	char err[256];
	const char *p = path_in("locked.db");
	cr_assert_eq(amp_profile_create(p, 0, &a, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_meta_set(a, "who", "first"), AMP_PROFILE_OK);
	cr_assert_eq(amp_profile_live(p), 1);
	cr_assert_eq(amp_profile_create(p, 1, &b, err, sizeof err), AMP_PROFILE_EBUSY);
	cr_assert_null(b);
	cr_assert(strstr(err, "another ampprof is writing it"), "%s", err);
	cr_assert_eq(amp_profile_open(p, 1, &w, err, sizeof err), AMP_PROFILE_EBUSY);
	cr_assert_null(w);
	char v[16];
	cr_assert_eq(amp_profile_meta_get(a, "who", v, sizeof v), AMP_PROFILE_OK, "still there");
	amp_profile_close(a);
	cr_assert_eq(amp_profile_live(p), 0);
	cr_assert_eq(amp_profile_open(p, 1, &w, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_live(p), 1, "a writable reader holds it too");
	amp_profile_close(w);
	cr_assert_eq(amp_profile_create(p, 1, &b, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	amp_profile_close(b);
	cr_assert_eq(amp_profile_live(path_in("absent.db")), AMP_PROFILE_ENOENT);
}

/* A writer that gives up removes its profile under its lock: all of it, and only its own. */
Test(schema, discard_removes_only_its_own_profile)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("given-up.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_meta_set(db, "who", "first"), AMP_PROFILE_OK);
	amp_profile_discard(db);
	cr_assert_neq(access(p, F_OK), 0, "the profile is removed");
	cr_assert_neq(access(path_in("given-up.db-wal"), F_OK), 0, "its -wal too");
	cr_assert_neq(access(path_in("given-up.db-shm"), F_OK), 0, "its -shm too");
	/* the file at the path is no longer the one it created: kept */
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(rename(p, path_in("moved.db")), 0);
	write_file(p, "another's", 9);
	amp_profile_discard(db);
	struct stat st;
	cr_assert(stat(p, &st) == 0 && st.st_size == 9, "another's file is kept");
	amp_profile_discard(NULL);
}

/* Only new or regular files are written: a FIFO and a dangling link are refused and kept. */
Test(schema, create_refuses_what_is_not_a_regular_file)
{
	sqlite3 *db = (sqlite3 *)1;
	char err[256];
	const char *fifo = path_in("fifo"), *link = path_in("link"), *target = path_in("t.db");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(amp_profile_create(fifo, 1, &db, err, sizeof err), AMP_PROFILE_ENOTREG);
	cr_assert_null(db);
	cr_assert(strstr(err, "is a FIFO"), "%s", err);
	struct stat st;
	cr_assert(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
	cr_assert_eq(symlink(target, link), 0);
	cr_assert_eq(amp_profile_create(link, 0, &db, err, sizeof err), AMP_PROFILE_ENOTREG);
	cr_assert(strstr(err, "dangling symbolic link"), "%s", err);
	cr_assert(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
	cr_assert_neq(access(target, F_OK), 0, "nothing written through the link");
}

/* The embedded schema is schema/profile.sql, byte for byte. */
Test(schema, embedded_sql_matches_file)
{
	FILE *f = fopen("schema/profile.sql", "rb");
	if (!f)
		cr_skip_test("run from the repository root");
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	cr_assert_str_eq(amp_profile_schema_sql(), buf);
	cr_assert(strstr(buf, "PRAGMA user_version = 3;") != NULL);
}

Test(schema, strerror_never_null)
{
	for (int c = 1; c >= -10; c--)
		cr_assert_not_null(amp_profile_strerror(c));
}

static int column_count(sqlite3 *db, const char *table, const char *column)
{
	char sql[160];
	sqlite3_stmt *st = NULL;
	int n = -1;
	snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s'",
	         table, column);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

/* A profile written before the columns and table added within version 1 is brought up to date
 * in place, keeping its rows; a second upgrade changes nothing. */
Test(schema, upgrade_adds_what_version_1_gained)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("old.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert(amp_profile_has_table(db, "nonfinite"));
	cr_assert_eq(column_count(db, "tensor_stats", "neg_inf"), 1);
	/* make it look like a profile of the first revision */
	cr_assert_eq(sqlite3_exec(db,
	                          "DROP TABLE nonfinite; "
	                          /* the first revision's tensor_stats (DROP COLUMN cannot drop a
	                           * last column followed by a comment) */
	                          "DROP TABLE tensor_stats; CREATE TABLE tensor_stats ("
	                          "id INTEGER PRIMARY KEY, step INTEGER, seq INTEGER, op TEXT, "
	                          "role TEXT, name TEXT, dtype TEXT, "
	                          "count INTEGER, nan INTEGER, inf INTEGER, underflow INTEGER, "
	                          "near_overflow INTEGER, min REAL, max REAL, absmax REAL, "
	                          "origin INTEGER, exp_hist BLOB, callsite INTEGER);"
	                          "INSERT INTO tensor_stats(step, op, nan, inf, origin) "
	                          "VALUES (3, 'Exp', 0, 2, 1)", NULL, NULL, NULL), SQLITE_OK,
	             "%s", sqlite3_errmsg(db));
	cr_assert_not(amp_profile_has_table(db, "nonfinite"));
	cr_assert_eq(column_count(db, "tensor_stats", "neg_inf"), 0);
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(amp_profile_upgrade(db), AMP_PROFILE_OK, "round %d: %s", round,
		             sqlite3_errmsg(db));
		cr_assert(amp_profile_has_table(db, "nonfinite"));
		cr_assert_eq(column_count(db, "tensor_stats", "neg_inf"), 1);
		cr_assert_eq(column_count(db, "tensor_stats", "phase"), 1);
		cr_assert_eq(column_count(db, "tensor_stats", "thread"), 1);
		cr_assert_eq(column_count(db, "nonfinite", "class"), 1);
	}
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT step, inf, neg_inf IS NULL FROM tensor_stats", -1,
	                                &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_eq(sqlite3_column_int(st, 0), 3);
	cr_assert_eq(sqlite3_column_int(st, 1), 2);
	cr_assert_eq(sqlite3_column_int(st, 2), 1, "the runtime did not say: NULL, not 0");
	sqlite3_finalize(st);
	amp_profile_close(db);
	/* readers open it */
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	amp_profile_close(db);
}

/* A version-1 profile (no engines) still opens read-only, without the version-2 columns; the
 * upgrade adds them with NULL (unknown) engines, the ops view gains its column, and the file
 * becomes the current version (with the version-3 columns too: comm, the rank columns,
 * run_summary.comm_share, ...). */
Test(schema, version_1_opens_and_upgrades)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("v1.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(sqlite3_exec(db,
	                          "DROP VIEW ops; DROP TABLE op_sigs; CREATE TABLE op_sigs ("
	                          "id INTEGER PRIMARY KEY, op TEXT NOT NULL, phase TEXT NOT NULL, "
	                          "exec_dtype TEXT NOT NULL, in_dtype TEXT, out_dtype TEXT, label "
	                          "TEXT, shape TEXT, flops INTEGER, bytes INTEGER, aligned INTEGER, "
	                          "callsite INTEGER, calls INTEGER, total_ns INTEGER);"
	                          "CREATE VIEW ops AS SELECT e.id, e.step, e.seq, s.phase, s.op, "
	                          "s.label, s.exec_dtype, s.in_dtype, s.out_dtype, e.start_ns, "
	                          "e.dur_ns, s.flops, s.bytes, s.shape, s.aligned, s.callsite, "
	                          "e.thread FROM op_events e JOIN op_sigs s ON s.id = e.sig;"
	                          "DROP VIEW overview; DROP TABLE run_summary; CREATE TABLE "
	                          "run_summary (fp16_share REAL, fp16_flop_share REAL);"
	                          "CREATE VIEW overview AS SELECT * FROM run_summary;"
	                          "INSERT INTO op_sigs(id, op, phase, exec_dtype) VALUES "
	                          "(1, 'MatMul', 'forward', 'fp16');"
	                          "INSERT INTO op_events(step, sig, dur_ns) VALUES (0, 1, 5);"
	                          "UPDATE meta SET value = '1' WHERE key = 'schema_version';"
	                          "DROP TABLE comm; DROP TABLE rank_summary;"
	                          "PRAGMA user_version = 1;", NULL, NULL, NULL), SQLITE_OK, "%s",
	             sqlite3_errmsg(db));
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_not(amp_profile_has_column(db, "ops", "engine"));
	cr_assert_not(amp_profile_has_column(db, "run_summary", "native_half_share"));
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_upgrade(db), AMP_PROFILE_OK, "%s", sqlite3_errmsg(db));
	cr_assert(amp_profile_has_column(db, "ops", "engine"));
	cr_assert(amp_profile_has_column(db, "op_summary", "native_ns"));
	cr_assert(amp_profile_has_column(db, "run_summary", "half_types"));
	cr_assert(amp_profile_has_column(db, "loss_scale", "thread"));
	cr_assert(amp_profile_has_column(db, "memory", "thread"));
	cr_assert(amp_profile_has_column(db, "op_summary", "median_ns"));
	cr_assert(amp_profile_has_column(db, "op_summary", "stddev_ns"));
	cr_assert(amp_profile_has_column(db, "run_summary", "scale_history"));
	cr_assert(amp_profile_has_column(db, "tensor_stats", "src_seq"));
	cr_assert(amp_profile_has_column(db, "steps", "loss_state"));
	cr_assert(amp_profile_has_column(db, "loss_scale", "cause_fwd_callsite"));
	cr_assert(amp_profile_has_column(db, "nonfinite", "src_callsite"));
	cr_assert(amp_profile_has_column(db, "run_summary", "comm_share"));
	cr_assert(amp_profile_has_column(db, "overview", "comm_share"));
	cr_assert(amp_profile_has_column(db, "ops", "rank"));
	cr_assert(amp_profile_has_column(db, "comm", "wait_ns"));
	cr_assert(amp_profile_has_table(db, "rank_summary"));
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT op, engine IS NULL, (SELECT value FROM meta "
	                                "WHERE key = 'schema_version') FROM ops", -1, &st, NULL),
	             SQLITE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "MatMul");
	cr_assert_eq(sqlite3_column_int(st, 1), 1, "unknown engine: NULL");
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 2), "3");
	sqlite3_finalize(st);
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_eq(sqlite3_column_int(st, 0), AMP_PROFILE_VERSION);
	sqlite3_finalize(st);
	amp_profile_close(db);
}

/* A version-2 profile (loss_scale and memory without their thread, op_summary without its
 * duration statistics) opens read-only as it is; the upgrade adds the version-3 columns as
 * NULL and keeps the rows. */
Test(schema, version_2_upgrades_to_3)
{
	sqlite3 *db = NULL;
	char err[256];
	const char *p = path_in("v2.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(sqlite3_exec(db,
	                          "DROP TABLE loss_scale; CREATE TABLE loss_scale (step INTEGER, "
	                          "t_ns INTEGER, old_scale REAL, new_scale REAL, reason TEXT);"
	                          "INSERT INTO loss_scale VALUES (3, 10, 128, 64, 'overflow');"
	                          "DROP TABLE memory; CREATE TABLE memory (step INTEGER, t_ns "
	                          "INTEGER, master_weights INTEGER, working_copies INTEGER, "
	                          "activations INTEGER, grads INTEGER, optimizer_state INTEGER, "
	                          "total INTEGER, peak INTEGER);"
	                          "DROP TABLE op_summary; CREATE TABLE op_summary (op TEXT, "
	                          "exec_dtype TEXT, calls INTEGER, total_ns INTEGER, mean_ns REAL, "
	                          "flops INTEGER, share REAL, native_ns INTEGER);"
	                          "UPDATE meta SET value = '2' WHERE key = 'schema_version';"
	                          "PRAGMA user_version = 2;", NULL, NULL, NULL), SQLITE_OK, "%s",
	             sqlite3_errmsg(db));
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_not(amp_profile_has_column(db, "loss_scale", "thread"));
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_upgrade(db), AMP_PROFILE_OK, "%s", sqlite3_errmsg(db));
	cr_assert(amp_profile_has_column(db, "memory", "thread"));
	cr_assert(amp_profile_has_column(db, "op_summary", "min_ns"));
	int64_t v = 0;
	cr_assert_eq(amp_profile_query_int64(db, &v, "SELECT count(*) FROM loss_scale WHERE "
	                                     "step = 3 AND thread IS NULL", NULL), 0);
	cr_assert_eq(v, 1, "the old row kept, its thread unknown");
	cr_assert_eq(amp_profile_query_int64(db, &v, "PRAGMA user_version", NULL), 0);
	cr_assert_eq(v, 3);
	amp_profile_close(db);
}

Test(schema, half_share_label)
{
	cr_assert_str_eq(amp_profile_half_label(NULL), "FP16 share");
	cr_assert_str_eq(amp_profile_half_label(""), "FP16 share");
	cr_assert_str_eq(amp_profile_half_label("fp16"), "FP16 share");
	cr_assert_str_eq(amp_profile_half_label("bf16"), "BF16 share");
	cr_assert_str_eq(amp_profile_half_label("fp16+bf16"), "half share (fp16+bf16)");
}

/* The tables added within version 1 sit after every table of the first revision, and the
 * added tensor_stats columns at its end, so no reader's column positions move. */
Test(schema, additions_at_the_end)
{
	const char *sql = amp_profile_schema_sql();
	const char *ts = strstr(sql, "CREATE TABLE tensor_stats (");
	cr_assert_not_null(ts);
	const char *end = strstr(ts, "\n);");
	const char *cs = strstr(ts, "callsite      INTEGER,");
	const char *neg = strstr(ts, "neg_inf ");
	cr_assert(cs && neg && cs < neg && neg < end, "neg_inf follows callsite in tensor_stats");
	cr_assert(strstr(ts, "thread        INTEGER") < end);
}

/* The single-value helpers: bound arguments of each type, no row and NULL apart from errors,
 * the output untouched unless a value was read. */
Test(schema, single_value_queries)
{
	sqlite3 *db = NULL;
	char err[256], buf[8];
	cr_assert_eq(amp_profile_create(path_in("q.db"), 0, &db, err, sizeof err), AMP_PROFILE_OK,
	             "%s", err);
	cr_assert_eq(amp_profile_meta_set(db, "k", "value"), AMP_PROFILE_OK);
	int64_t i = -1;
	double d = -1;
	cr_assert_eq(amp_profile_query_int64(db, &i, "SELECT ?1 + ?2", "ii", (int64_t)40,
	                                     (int64_t)2), AMP_PROFILE_OK);
	cr_assert_eq(i, 42);
	cr_assert_eq(amp_profile_query_double(db, &d, "SELECT ? * 2", "d", 0.25), AMP_PROFILE_OK);
	cr_assert_eq(d, 0.5);
	cr_assert_eq(amp_profile_query_text(db, buf, sizeof buf, "SELECT value FROM meta WHERE "
	                                    "key = ?", "t", "k"), AMP_PROFILE_OK);
	cr_assert_str_eq(buf, "value");
	cr_assert_eq(amp_profile_query_text(db, buf, 4, "SELECT 'truncated'", NULL), AMP_PROFILE_OK);
	cr_assert_str_eq(buf, "tru");
	i = 7;
	cr_assert_eq(amp_profile_query_int64(db, &i, "SELECT 1 FROM meta WHERE key = ?", "t",
	                                     "absent"), AMP_PROFILE_ENOENT);
	cr_assert_eq(amp_profile_query_int64(db, &i, "SELECT NULL", ""), AMP_PROFILE_ENOENT);
	cr_assert_eq(amp_profile_query_int64(db, &i, "SELECT ?", "t", (const char *)NULL),
	             AMP_PROFILE_ENOENT);
	cr_assert_eq(amp_profile_query_int64(db, &i, "SELECT nosuch FROM meta", NULL),
	             AMP_PROFILE_EIO);
	cr_assert_eq(amp_profile_query_int64(db, &i, "SELECT 1", "i", (int64_t)1), AMP_PROFILE_EIO,
	             "an argument with no parameter for it");
	cr_assert_eq(i, 7, "left as it was");
	amp_profile_close(db);
}

/* A version-2 profile (no gradient norm, micro-batch or unoptimized memory columns) opens,
 * and the upgrade adds the version-3 columns with NULL in the old rows. */
Test(schema, version_2_gains_training_columns)
{
	sqlite3 *db;
	char err[256];
	const char *p = path_in("v2.db");
	cr_assert_eq(amp_profile_create(p, 0, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(sqlite3_exec(db,
	                          "DROP TABLE steps; CREATE TABLE steps (step INTEGER, loss REAL);"
	                          "DROP TABLE memory; CREATE TABLE memory (step INTEGER, peak INTEGER);"
	                          "INSERT INTO steps(step, loss) VALUES (0, 1.5);"
	                          "UPDATE meta SET value = '2' WHERE key = 'schema_version';"
	                          "PRAGMA user_version = 2;", NULL, NULL, NULL), SQLITE_OK, "%s",
	             sqlite3_errmsg(db));
	amp_profile_close(db);
	cr_assert_eq(amp_profile_open(p, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_not(amp_profile_has_column(db, "steps", "grad_norm"));
	cr_assert_eq(amp_profile_upgrade(db), AMP_PROFILE_OK, "%s", sqlite3_errmsg(db));
	cr_assert(amp_profile_has_column(db, "steps", "grad_norm"));
	cr_assert(amp_profile_has_column(db, "steps", "clipped"));
	cr_assert(amp_profile_has_column(db, "steps", "micro_batches"));
	cr_assert(amp_profile_has_column(db, "memory", "activations_unopt"));
	cr_assert(amp_profile_has_column(db, "memory", "peak_unopt"));
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT loss, grad_norm IS NULL, micro_batches IS NULL, "
	                                "(SELECT value FROM meta WHERE key = 'schema_version') "
	                                "FROM steps ORDER BY step", -1, &st, NULL),
	             SQLITE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_float_eq(sqlite3_column_double(st, 0), 1.5, 0);
	cr_assert_eq(sqlite3_column_int(st, 1), 1);
	cr_assert_eq(sqlite3_column_int(st, 2), 1);
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "3");
	sqlite3_finalize(st);
	amp_profile_close(db);
}
