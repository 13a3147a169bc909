/* profile.c — what every ampdump subcommand needs from a profile: opening it through
 * schema/profile_db (with a hint for each way it can fail), checking a step number against
 * the run, the queries and tensor rows the subcommands share, and the suggestion of how to
 * record a step in full.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump.h"
#include "profile_db.h"

void dump_error(const char *hint, const char *fmt, ...)
{
	/* messages and hints quote names and command lines from profiles: sanitized */
	char msg[4096];
	va_list ap;
	fflush(stdout);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fputs("ampdump: ", stderr);
	amp_text_put(stderr, msg);
	fputc('\n', stderr);
	if (hint) {
		fputs("hint: ", stderr);
		amp_text_put(stderr, hint);
		fputc('\n', stderr);
	}
}

static int64_t g_rank = -1; /* --rank: the rank to read, -1 for the lowest */
static int64_t g_rank_step = -1; /* --step without --rank: the rank of its origin */
static int64_t g_rank_second = -1; /* --rank A,B: B, for the second profile of --compare */

void dump_select_rank(int64_t rank)
{
	g_rank = rank;
}

void dump_select_rank_for_step(int64_t step)
{
	g_rank_step = step;
}

void dump_select_rank_second(int64_t rank)
{
	g_rank_second = rank;
}

void dump_use_rank_second(void)
{
	if (g_rank_second >= 0)
		g_rank = g_rank_second;
}

/* A merged data-parallel profile holds every rank's steps, statistics and dumps under the same
 * step numbers: ampdump reads one rank's (--rank, the lowest by default), through temporary
 * views that shadow the tables.  Returns 0, or -1 with the message printed. */
static int select_rank(sqlite3 *db, const char *path)
{
	int64_t ranks = 1, lowest = 0, have = 0;
	if (!amp_profile_has_column(db, "steps", "rank")) {
		if (g_rank <= 0)
			return 0;
	} else {
		amp_profile_query_int64(db, &ranks, "SELECT count(DISTINCT rank) FROM steps", NULL);
		amp_profile_query_int64(db, &lowest, "SELECT coalesce(min(rank), 0) FROM steps", NULL);
	}
	int64_t r = g_rank >= 0 ? g_rank : lowest, origin = -1;
	/* a step asked for: the rank where its non-finite values began, if one rank's did */
	if (g_rank < 0 && g_rank_step >= 0 && ranks > 1 &&
	    amp_profile_has_column(db, "nonfinite", "rank") &&
	    amp_profile_query_int64(db, &origin,
	                            "SELECT min(rank) FROM nonfinite WHERE step = ?1 AND "
	                            "stats_id IS NOT NULL", "i", g_rank_step) == AMP_PROFILE_OK &&
	    origin >= 0)
		r = origin;
	if (ranks < 2 && r == lowest)
		return 0;
	if (amp_profile_has_column(db, "steps", "rank"))
		amp_profile_query_int64(db, &have, "SELECT count(*) FROM steps WHERE rank = ?1", "i",
		                        r);
	if (!have) {
		dump_error("ampprof report lists its ranks", "'%s' has no rank %lld", path,
		           (long long)r);
		return -1;
	}
	if (g_rank < 0 && origin >= 0)
		fprintf(stderr, "ampdump: '%s' holds %lld ranks: reading rank %lld, where step %lld's "
		        "non-finite values began (--rank to choose)\n", path, (long long)ranks,
		        (long long)r, (long long)g_rank_step);
	else if (g_rank < 0)
		fprintf(stderr, "ampdump: '%s' holds %lld ranks: reading rank %lld (--rank to choose)\n",
		        path, (long long)ranks, (long long)r);
	static const char *const tables[] = {"steps", "tensor_stats", "dumps", "ops", "loss_scale",
	                                     "nonfinite"};
	if (amp_profile_shadow_rank(db, r, tables, sizeof tables / sizeof tables[0]) !=
	    AMP_PROFILE_OK) {
		dump_error(NULL, "cannot read '%s': %s", path, sqlite3_errmsg(db));
		return -1;
	}
	return 0;
}

/* A profile ampprof is still writing, or whose collector never finalized it, is read as it
 * stands; the user is told (what it shows may change, or lack its last steps). */
static void note_unfinished(sqlite3 *db, const char *path)
{
	char end[32] = "";
	if (amp_profile_meta_get(db, "end", end, sizeof end) != AMP_PROFILE_OK ||
	    strcmp(end, "collecting") != 0)
		return;
	if (amp_profile_live(path) == 1)
		fprintf(stderr, "ampdump: note: '%s' is still being written (ampprof is recording it): "
		        "what is shown is the steps so far\n", path);
	else
		fprintf(stderr, "ampdump: note: '%s' was never finalized (its collector was killed): "
		        "its last steps may be missing (`ampprof report` says more)\n", path);
}

/* Dumps the run left out (--dump-limit reached, the caps) are missing from every listing,
 * export and comparison: said once, with the reasons. */
static void note_skipped_dumps(sqlite3 *db, const char *path)
{
	char v[32];
	if (amp_profile_meta_get(db, "dumps_skipped", v, sizeof v) != AMP_PROFILE_OK ||
	    strtoll(v, NULL, 10) <= 0)
		return;
	char why[256] = "";
	size_t n = 0;
	for (int i = 0; i < AMP_DUMP_SKIP_REASONS && n < sizeof why; i++) {
		char c[32];
		const amp_dump_skip_reason *r = &amp_dump_skip_reasons[i];
		long long k = amp_profile_meta_get(db, r->key, c, sizeof c) == AMP_PROFILE_OK
		                  ? strtoll(c, NULL, 10)
		                  : 0;
		if (k > 0)
			n += (size_t)snprintf(why + n, sizeof why - n, "%s%lld: %s", n ? ", " : "", k,
			                      r->text);
	}
	fprintf(stderr, "ampdump: note: '%s': %s tensor dumps of the run were not kept (%s): they "
	        "are missing here\n", path, v, why[0] ? why : "see `ampprof report`");
}

static sqlite3 *open_profile(const char *path, int db_option);

sqlite3 *dump_open_profile(const char *path)
{
	return open_profile(path, 1);
}

sqlite3 *dump_open_profile_arg(const char *path)
{
	return open_profile(path, 0);
}

static sqlite3 *open_profile(const char *path, int db_option)
{
	sqlite3 *db = NULL;
	char err[1200];
	int rc = amp_profile_open(path, 0, &db, err, sizeof err);
	if (rc == AMP_PROFILE_OK) {
		/* what the run did not record (threads without a ring, drops) is said every time */
		char why[1024];
		if (amp_profile_meta_get(db, "incomplete", why, sizeof why) == AMP_PROFILE_OK && why[0])
			dump_error(NULL, "'%s' is INCOMPLETE: %s", path, why);
		note_unfinished(db, path);
		note_skipped_dumps(db, path);
		if (select_rank(db, path) != 0) {
			amp_profile_close(db);
			return NULL;
		}
		return db;
	}

	const char *hint = NULL;
	switch (rc) {
	case AMP_PROFILE_ENOENT:
		hint = db_option && strcmp(path, "profile.db") == 0
		           ? "record one with `ampprof --application=\"./train\" "
		             "--output=profile.db`, or name another with --db=FILE"
		           : "check the path, or record a profile with "
		             "`ampprof --application=\"./train\" --output=FILE`";
		break;
	case AMP_PROFILE_ENOTPROFILE:
		hint = "ampdump reads the databases that ampprof writes";
		break;
	case AMP_PROFILE_ENEWER:
		hint = "read it with the ampdump of the ampkit version that wrote it";
		break;
	case AMP_PROFILE_ECORRUPT:
		hint = "the file was cut short or damaged; record the run again";
		break;
	default: break;
	}
	dump_error(hint, "%s", err);
	return NULL;
}

void dump_sql_error(sqlite3 *db, const char *path)
{
	dump_error(NULL, "cannot read '%s': %s", path, sqlite3_errmsg(db));
}

int dump_query_int(sqlite3 *db, const char *sql, int64_t param, int64_t *out, int *null)
{
	int rc = amp_profile_query_int64(db, out, sql, strchr(sql, '?') ? "i" : NULL, param);
	if (rc == AMP_PROFILE_EIO)
		return -1;
	*null = rc == AMP_PROFILE_ENOENT;
	if (*null)
		*out = 0;
	return 0;
}

int dump_check_step(sqlite3 *db, const char *path, int64_t step)
{
	int64_t last = 0;
	int none = 1;
	if (dump_query_int(db,
	                   "SELECT max(m) FROM (SELECT max(step) AS m FROM steps"
	                   " UNION ALL SELECT max(step) FROM tensor_stats"
	                   " UNION ALL SELECT max(step) FROM dumps)",
	                   0, &last, &none) != 0) {
		dump_sql_error(db, path);
		return DUMP_EXIT_FAIL;
	}
	if (none) {
		dump_error("was the program built with libamprt, and did it call amp_step_begin?",
		           "step %lld was never reached (the run in '%s' recorded no steps)",
		           (long long)step, path);
		return DUMP_EXIT_FAIL;
	}
	if (step < 0 || step > last) {
		char hint[160];
		snprintf(hint, sizeof hint,
		         "steps are numbered from 0 to %lld; `ampdump --list` shows the steps with "
		         "anomalies or dumps",
		         (long long)last);
		dump_error(hint, "step %lld was never reached (the run in '%s' has %lld steps)",
		           (long long)step, path, (long long)last + 1);
		return DUMP_EXIT_FAIL;
	}
	return DUMP_EXIT_OK;
}

sqlite3 *dump_open_step(const char *path, int64_t step)
{
	sqlite3 *db = dump_open_profile(path);
	if (db && dump_check_step(db, path, step) != DUMP_EXIT_OK) {
		amp_profile_close(db);
		db = NULL;
	}
	return db;
}

int64_t dump_count_dumps(sqlite3 *db, int64_t step)
{
	int64_t n = 0;
	int null = 0;
	if (dump_query_int(db, "SELECT count(*) FROM dumps WHERE step = ?", step, &n, &null) != 0)
		return -1;
	return n;
}

int dump_data_query(sqlite3 *db, int64_t id, sqlite3_stmt **st)
{
	int rc = sqlite3_prepare_v2(db, "SELECT data FROM dumps WHERE id = ?", -1, st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(*st, 1, id);
	return sqlite3_step(*st);
}

char *dump_column_strdup(sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	return t ? strdup((const char *)t) : NULL;
}

void *dump_grow(void *v, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return v;
	size_t ncap = *cap ? *cap * 2 : 32;
	void *nv = realloc(v, ncap * size);
	if (nv)
		*cap = ncap;
	return nv;
}

void dump_tensor_read(sqlite3_stmt *st, int col, dump_tensor *t)
{
	t->step = sqlite3_column_int64(st, col);
	t->seq = sqlite3_column_int64(st, col + 1);
	t->op = dump_column_strdup(st, col + 2);
	t->role = dump_column_strdup(st, col + 3);
	t->name = dump_column_strdup(st, col + 4);
	t->dtype = dump_column_strdup(st, col + 5);
	t->shape = dump_column_strdup(st, col + 6);
}

void dump_tensor_release(dump_tensor *t)
{
	free(t->op);
	free(t->role);
	free(t->name);
	free(t->dtype);
	free(t->shape);
	t->op = t->role = t->name = t->dtype = t->shape = NULL;
}

int dump_null_strcmp(const char *a, const char *b)
{
	if (!a || !b)
		return (a != NULL) - (b != NULL);
	return strcmp(a, b);
}

int dump_tensor_cmp(const dump_tensor *a, const dump_tensor *b)
{
	if (a->step != b->step)
		return a->step < b->step ? -1 : 1;
	if (a->seq != b->seq)
		return a->seq < b->seq ? -1 : 1;
	int ra = dump_role_rank(a->role), rb = dump_role_rank(b->role);
	if (ra != rb)
		return ra < rb ? -1 : 1;
	int c = dump_null_strcmp(a->role, b->role);
	return c ? c : dump_null_strcmp(a->name, b->name);
}

/* Appends s to buf quoted for a POSIX shell: as is inside "..." when that is safe, else in
 * single quotes. */
static void shell_quote(char *buf, size_t len, const char *s)
{
	size_t used = strlen(buf);
	if (!strpbrk(s, "\"$`\\!")) {
		snprintf(buf + used, len - used, "\"%s\"", s);
		return;
	}
	if (used + 1 < len)
		buf[used++] = '\'';
	for (const char *p = s; *p && used + 5 < len; p++) {
		if (*p == '\'') {
			memcpy(buf + used, "'\\''", 4);
			used += 4;
		} else {
			buf[used++] = *p;
		}
	}
	if (used + 1 < len)
		buf[used++] = '\'';
	buf[used] = '\0';
}

char *dump_rerun_hint(sqlite3 *db, int64_t step, char *buf, size_t len)
{
	char command[1024];
	if (!db || amp_profile_meta_get(db, "command", command, sizeof command) != AMP_PROFILE_OK ||
	    !command[0])
		snprintf(command, sizeof command, "./train ...");
	snprintf(buf, len, "to dump every tensor of that step, re-run it: ampdump --application=");
	shell_quote(buf, len, command);
	size_t used = strlen(buf);
	snprintf(buf + used, len - used, " --step %lld --output=dump.db", (long long)step);
	return buf;
}

int dump_role_rank(const char *role)
{
	if (!role)
		return 3;
	if (strcmp(role, "input") == 0)
		return 0;
	if (strcmp(role, "output") == 0)
		return 1;
	if (strcmp(role, "grad") == 0)
		return 2;
	return 3;
}
