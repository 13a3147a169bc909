/* merge.c — per-rank profiles of a data-parallel run: the `-o run.%r.db` pattern, and
 * `ampprof merge`, which writes one database from them with each row's rank.
 *
 * Every event table is copied with its rank and its ids moved past those already merged (the
 * references between tables move with them: op_events.sig, .thread, op_sigs.callsite, ...).
 * Times are nanoseconds since each profile's own start; the merge moves each rank's times so
 * that the ends of its start-up barriers (the `comm` rows of kind 'barrier' that libamprt_mpi
 * records in amp_mpi_attach, several rounds) fall where rank 0's do — by the median over the
 * rounds — and says how far apart the clocks were.  A profile without a barrier is aligned on the monotonic clocks' start times, which
 * only holds on one host.  The summary and the advice are then computed on the whole.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp_opt.h"
#include "amp_progress.h"
#include "prof.h"
#include "profile_db.h"

int prof_output_expand(const char *pattern, char *out, size_t len, const char **bad)
{
	static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
	                                        "SLURM_PROCID"};
	size_t used = 0;
	*bad = pattern;
	for (const char *p = pattern; *p; p++) {
		char tmp[32];
		const char *piece = tmp;
		if (*p != '%') {
			tmp[0] = *p;
			tmp[1] = 0;
		} else if (p[1] == '%') {
			piece = "%";
			p++;
		} else if (p[1] == 'p') {
			snprintf(tmp, sizeof tmp, "%ld", (long)getpid());
			p++;
		} else if (p[1] == 'r') {
			piece = "0";
			for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0]; i++) {
				const char *v = getenv(rank_vars[i]);
				if (v && *v && strspn(v, "0123456789") == strlen(v) && strlen(v) < 12) {
					piece = v;
					break;
				}
			}
			p++;
		} else {
			*bad = p;
			return -1;
		}
		size_t n = strlen(piece);
		if (used + n + 1 > len)
			return -1;
		memcpy(out + used, piece, n);
		used += n;
	}
	out[used] = 0;
	return 0;
}

/* ---- merge ---------------------------------------------------------------------------------- */
#define MAX_BARRIERS 16

typedef struct input {
	const char *path;
	int64_t rank;
	int64_t barrier_ns[MAX_BARRIERS]; /* ends of its start-up barriers (its own clock) */
	int n_barriers;
	int64_t start_mono_ns;  /* meta start_mono_ns */
	int64_t shift_ns;       /* added to its times */
	char end[32], exit_status[16], exit_signal[16], complete[8];
	int64_t world_size;     /* meta world_size, 0 if none */
	char command[1024];     /* meta command */
	char run_id[24];        /* meta run_id (the data-parallel runtime's), "" if none */
	int merged;             /* already a merged profile (meta merged_from) */
} input;

/* Columns of a table that hold an id of another table (or of itself): they move by that
 * table's offset.  Times move by the rank's shift. */
static const struct {
	const char *table, *column, *target;
} refs[] = {
    {"strings", "id", "strings"},         {"threads", "id", "threads"},
    {"callsites", "id", "callsites"},     {"op_sigs", "id", "op_sigs"},
    {"op_sigs", "callsite", "callsites"}, {"op_events", "id", "op_events"},
    {"op_events", "sig", "op_sigs"},      {"op_events", "thread", "threads"},
    {"copy_sigs", "id", "copy_sigs"},     {"copy_sigs", "callsite", "callsites"},
    {"copy_events", "id", "copy_events"}, {"copy_events", "sig", "copy_sigs"},
    {"copy_events", "thread", "threads"}, {"steps", "thread", "threads"},
    {"tensor_stats", "id", "tensor_stats"}, {"tensor_stats", "callsite", "callsites"},
    {"tensor_stats", "thread", "threads"}, {"dumps", "id", "dumps"},
    {"crashes", "id", "crashes"},         {"crashes", "thread", "threads"},
    {"nonfinite", "callsite", "callsites"}, {"nonfinite", "stats_id", "tensor_stats"},
    {"nonfinite", "thread", "threads"},   {"comm", "id", "comm"},
    {"comm", "thread", "threads"},        {"loss_scale", "thread", "threads"},
    {"memory", "thread", "threads"},      {"context_ends", "thread", "threads"},
    {"loss_scale", "cause_callsite", "callsites"},
    {"loss_scale", "cause_fwd_callsite", "callsites"},
    {"nonfinite", "src_callsite", "callsites"}, {"nonfinite", "fwd_callsite", "callsites"},
};
static const struct {
	const char *table, *column;
} times[] = {
    {"op_events", "start_ns"}, {"copy_events", "start_ns"}, {"steps", "start_ns"},
    {"loss_scale", "t_ns"},    {"memory", "t_ns"},          {"crashes", "t_ns"},
    {"comm", "start_ns"},      {"context_ends", "t_ns"},
};
/* Copied table by table, referenced tables first. */
static const char *const tables[] = {
    "strings", "threads", "callsites", "op_sigs", "op_events", "copy_sigs", "copy_events",
    "steps", "loss_scale", "memory", "context_ends", "tensor_stats", "dumps", "crashes",
    "nonfinite", "comm",
};
#define N_TABLES (sizeof tables / sizeof tables[0])

static int table_index(const char *name)
{
	for (size_t i = 0; i < N_TABLES; i++)
		if (strcmp(tables[i], name) == 0)
			return (int)i;
	return -1;
}

static int exec(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
		return 0;
	if (!amp_profile_damaged(NULL, 0)) /* else the caller names the damaged input */
		prof_error(NULL, "merge: %s", msg ? msg : sqlite3_errmsg(db));
	sqlite3_free(msg);
	return -1;
}

/* Nonzero if the attached source has table.column. */
static int src_has(sqlite3 *db, const char *table, const char *column)
{
	int64_t n = 0;
	amp_profile_query_int64(db, &n, "SELECT count(*) FROM pragma_table_info(?1, 'src')"
	                                " WHERE name = ?2", "tt", table, column);
	return n > 0;
}

/* INSERT INTO main.t (cols) SELECT <moved cols> FROM src.t for one input. */
static int copy_table(sqlite3 *db, const char *table, const input *in, const int64_t *offset)
{
	sqlite3_stmt *st = NULL;
	char *cols = sqlite3_mprintf(""), *exprs = sqlite3_mprintf("");
	int rc = -1;
	if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?1, 'main') ORDER BY cid", -1,
	                       &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	int n = 0;
	while (sqlite3_step(st) == SQLITE_ROW && cols && exprs) {
		const char *c = (const char *)sqlite3_column_text(st, 0);
		char *e = NULL;
		if (strcmp(c, "rank") == 0) {
			e = sqlite3_mprintf("%" PRId64, in->rank);
		} else if (!src_has(db, table, c)) {
			continue;
		} else {
			for (size_t i = 0; i < sizeof refs / sizeof refs[0] && !e; i++) {
				if (strcmp(refs[i].table, table) != 0 || strcmp(refs[i].column, c) != 0)
					continue;
				int64_t off = offset[table_index(refs[i].target)];
				/* a call site an earlier rank has too is that rank's row (site_map) */
				e = strcmp(refs[i].target, "callsites") == 0 && strcmp(table, "callsites") != 0
				        ? sqlite3_mprintf("coalesce((SELECT dst FROM temp.site_map WHERE src = "
				                          "\"%w\" + %" PRId64 "), \"%w\" + %" PRId64 ")",
				                          c, off, c, off)
				        : sqlite3_mprintf("\"%w\" + %" PRId64, c, off);
			}
			for (size_t i = 0; i < sizeof times / sizeof times[0] && !e; i++)
				if (strcmp(times[i].table, table) == 0 && strcmp(times[i].column, c) == 0)
					e = sqlite3_mprintf("\"%w\" + %" PRId64, c, in->shift_ns);
			if (!e)
				e = sqlite3_mprintf("\"%w\"", c);
		}
		char *nc = sqlite3_mprintf("%s%s\"%w\"", cols, n ? ", " : "", c);
		char *ne = sqlite3_mprintf("%s%s%s", exprs, n ? ", " : "", e ? e : "NULL");
		sqlite3_free(e);
		sqlite3_free(cols);
		sqlite3_free(exprs);
		cols = nc;
		exprs = ne;
		n++;
	}
	if (cols && exprs) {
		char *sql = sqlite3_mprintf("INSERT INTO main.\"%w\" (%s) SELECT %s FROM src.\"%w\"", table,
		                            cols, exprs, table);
		rc = sql ? exec(db, sql) : -1;
		sqlite3_free(sql);
	}
out:
	sqlite3_finalize(st);
	sqlite3_free(cols);
	sqlite3_free(exprs);
	return rc;
}

/* Reads what the merge needs from one input (opened and validated on its own first). */
static int read_input(input *in, int index)
{
	sqlite3 *db = NULL;
	char err[1024];
	if (amp_profile_open(in->path, 0, &db, err, sizeof err) != AMP_PROFILE_OK) {
		prof_error(NULL, "%s", err);
		return -1;
	}
	if (prof_refuse_live(db, in->path, "merge the ranks' profiles when the run has ended")) {
		amp_profile_close(db);
		return -1;
	}
	in->rank = index;
	amp_profile_query_int64(db, &in->rank, "SELECT CAST(value AS INTEGER) FROM meta"
	                                       " WHERE key = 'rank'", NULL);
	in->n_barriers = 0;
	sqlite3_stmt *st = NULL;
	if (amp_profile_has_table(db, "comm") &&
	    sqlite3_prepare_v2(db, "SELECT start_ns + dur_ns FROM comm WHERE kind = 'barrier'"
	                           " ORDER BY id", -1, &st, NULL) == SQLITE_OK)
		while (in->n_barriers < MAX_BARRIERS && sqlite3_step(st) == SQLITE_ROW)
			in->barrier_ns[in->n_barriers++] = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	in->start_mono_ns = 0;
	amp_profile_query_int64(db, &in->start_mono_ns, "SELECT CAST(value AS INTEGER) FROM meta"
	                                                " WHERE key = 'start_mono_ns'", NULL);
	snprintf(in->end, sizeof in->end, "unknown");
	amp_profile_meta_get(db, "end", in->end, sizeof in->end);
	amp_profile_meta_get(db, "exit_status", in->exit_status, sizeof in->exit_status);
	amp_profile_meta_get(db, "exit_signal", in->exit_signal, sizeof in->exit_signal);
	snprintf(in->complete, sizeof in->complete, "0");
	amp_profile_meta_get(db, "complete", in->complete, sizeof in->complete);
	in->world_size = 0;
	amp_profile_query_int64(db, &in->world_size, "SELECT CAST(value AS INTEGER) FROM meta"
	                                             " WHERE key = 'world_size'", NULL);
	in->command[0] = 0;
	amp_profile_meta_get(db, "command", in->command, sizeof in->command);
	in->run_id[0] = 0;
	amp_profile_meta_get(db, "run_id", in->run_id, sizeof in->run_id);
	char from[8] = "";
	in->merged = amp_profile_meta_get(db, "merged_from", from, sizeof from) == AMP_PROFILE_OK;
	amp_profile_close(db);
	return 0;
}

/* path as a read-only SQLite URI ("file:run%3F.db?mode=ro"), sqlite3_mprintf'd. */
static char *readonly_uri(const char *path)
{
	char *uri = sqlite3_mprintf("file:");
	for (const char *p = path; *p && uri; p++) {
		char *next = *p == '%' || *p == '?' || *p == '#'
		                 ? sqlite3_mprintf("%s%%%02X", uri, (unsigned char)*p)
		                 : sqlite3_mprintf("%s%c", uri, *p);
		sqlite3_free(uri);
		uri = next;
	}
	char *ro = uri ? sqlite3_mprintf("%s?mode=ro", uri) : NULL;
	sqlite3_free(uri);
	return ro;
}

/* The call sites this input just added (ids from first) that an earlier input has too (the
 * same code: module, offset and frames) map to the earlier row in temp.site_map and are
 * dropped, so that a merged profile lists each site once, with every rank's ops. */
static int fold_sites(sqlite3 *db, int64_t first)
{
	char *sql = sqlite3_mprintf(
	    "INSERT INTO temp.site_map SELECT src, dst FROM (SELECT n.id AS src, (SELECT min(o.id)"
	    " FROM main.callsites o WHERE o.id < %lld AND o.module IS n.module AND o.offset IS"
	    " n.offset AND o.frames IS n.frames) AS dst FROM main.callsites n WHERE n.id >= %lld)"
	    " WHERE dst IS NOT NULL;"
	    " DELETE FROM main.callsites WHERE id IN (SELECT src FROM temp.site_map)",
	    (long long)first, (long long)first);
	int rc = sql ? exec(db, sql) : -1;
	sqlite3_free(sql);
	return rc;
}

/* run_facts: this input's meta is the run's (the lowest rank given, rank 0 normally). */
static int merge_one(sqlite3 *db, const input *in, int run_facts)
{
	/* read-only, as every reader of a profile: an input is never written to (its -wal, left
	 * by a killed rank, is read where it is, not folded into it) */
	char *uri = readonly_uri(in->path);
	char *sql = uri ? sqlite3_mprintf("ATTACH DATABASE %Q AS src", uri) : NULL;
	sqlite3_free(uri);
	int rc = sql ? exec(db, sql) : -1;
	sqlite3_free(sql);
	if (rc)
		return -1;
	if (exec(db, "BEGIN") != 0) {
		exec(db, "DETACH DATABASE src");
		return -1;
	}
	int64_t offset[N_TABLES];
	for (size_t i = 0; i < N_TABLES; i++) {
		offset[i] = 0;
		char q[128];
		snprintf(q, sizeof q, "SELECT coalesce(max(%s) + 1, 0) FROM main.%s",
		         strcmp(tables[i], "steps") == 0 || strcmp(tables[i], "loss_scale") == 0 ||
		                 strcmp(tables[i], "memory") == 0 ||
		                 strcmp(tables[i], "context_ends") == 0 ||
		                 strcmp(tables[i], "nonfinite") == 0
		             ? "rowid" : "id",
		         tables[i]);
		amp_profile_query_int64(db, &offset[i], q, NULL);
	}
	rc = exec(db, "CREATE TEMP TABLE IF NOT EXISTS site_map(src INTEGER PRIMARY KEY, dst INTEGER);"
	              " DELETE FROM temp.site_map");
	for (size_t i = 0; i < N_TABLES && rc == 0; i++) {
		int64_t have = 0;
		amp_profile_query_int64(db, &have, "SELECT count(*) FROM src.sqlite_master WHERE"
		                                   " type = 'table' AND name = ?1", "t", tables[i]);
		if (have)
			rc = copy_table(db, tables[i], in, offset);
		if (rc == 0 && have && strcmp(tables[i], "callsites") == 0)
			rc = fold_sites(db, offset[i]);
	}
	/* op types other producers named: the first profile's ids stand, new names are added */
	if (rc == 0)
		rc = exec(db, "INSERT INTO main.op_types(name, list) SELECT name, list FROM src.op_types s"
		              " WHERE NOT EXISTS (SELECT 1 FROM main.op_types m WHERE m.name = s.name)"
		              " ORDER BY id");
	if (rc == 0 && run_facts)
		rc = exec(db, "INSERT OR REPLACE INTO main.meta(key, value) SELECT key, value FROM src.meta");
	if (exec(db, rc == 0 ? "COMMIT" : "ROLLBACK") != 0)
		rc = -1;
	if (exec(db, "DETACH DATABASE src") != 0)
		rc = -1;
	return rc;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* What moves x's times onto ref's clock: the median over the barrier rounds of the difference
 * between the instants both left the same barrier. */
static int64_t barrier_shift(const input *ref, const input *x)
{
	int64_t d[MAX_BARRIERS];
	int n = x->n_barriers;
	for (int k = 0; k < n; k++)
		d[k] = ref->barrier_ns[k] - x->barrier_ns[k];
	qsort(d, (size_t)n, sizeof *d, cmp_i64);
	return n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
}

static int by_rank(const void *a, const void *b)
{
	const input *x = a, *y = b;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

static int meta_rank(sqlite3 *db, int64_t rank, const char *key, const char *value)
{
	char k[64];
	snprintf(k, sizeof k, "rank.%" PRId64 ".%s", rank, key);
	return amp_profile_meta_set(db, k, value) == AMP_PROFILE_OK ? 0 : -1;
}

static const char *const merge_usage[] = {
    "ampprof merge -o <merged.db> [--force] <rank0.db> <rank1.db>...", NULL};

static const amp_opt merge_opts[] = {
    {'o', 'o', "output", "<file>", "database to write (required)", NULL},
    {'f', 'f', "force", NULL, "overwrite an existing output", NULL},
    {'h', 'h', "help", NULL, "show this help", NULL},
};

static const amp_opt_spec merge_spec = {
    .tool = "ampprof",
    .usage = merge_usage,
    .about = "Merges the per-rank profiles of a data-parallel run (ampprof -o run.%r.db under\n"
             "mpirun) into one database with a rank column on every event table.  Each rank's\n"
             "times are moved so that its start-up barrier ends where rank 0's does; the merge\n"
             "prints how far apart the clocks were and how each rank ended.  Each input is a\n"
             "rank's profile of one run: its meta 'rank', 'world_size' and 'run_id' are written\n"
             "by libamprt_mpi (amp_mpi_attach).  report, ampview and ampdump read the merged\n"
             "file.",
    .opts = merge_opts,
    .n_opts = sizeof merge_opts / sizeof merge_opts[0],
    .footer = "Exit status: 0, 2 usage error, 4 the output cannot be written, 6 an input\n"
              "could not be read or is not a rank of the run (another run's, a rank given\n"
              "twice, a merged profile, a profile of no data-parallel run).\n",
    .in_order = 0,
};

/* Gives up on the merged output: removed under its lock (a profile another --force run put at
 * the path meanwhile is never touched). */
int prof_cmd_merge(int argc, char **argv)
{
	const amp_opt_spec *sp = &merge_spec;
	const char *output = NULL, *val;
	int force = 0, c;
	amp_opt_state ps;
	amp_opt_begin(&ps, sp, argc, argv);
	while ((c = amp_opt_next(&ps, &val)) != AMP_OPT_END) {
		switch (c) {
		case AMP_OPT_ERROR: return PROF_EXIT_USAGE;
		case 'o': output = val; break;
		case 'f': force = 1; break;
		case 'h':
			amp_opt_help(sp, stdout);
			return fflush(stdout) == 0 ? 0 : 1;
		default: amp_opt_error(sp, NULL, "unhandled option '%s'", argv[ps.optind - 1]);
			return PROF_EXIT_USAGE;
		}
	}
	if (!output || !*output) {
		amp_opt_error(sp, "name the merged database with -o", "%s", "merge needs --output");
		return PROF_EXIT_USAGE;
	}
	int n = argc - ps.optind;
	if (n < 1) {
		amp_opt_error(sp, NULL, "%s", "no profiles to merge");
		return PROF_EXIT_USAGE;
	}
	input *in = calloc((size_t)n, sizeof *in);
	if (!in)
		return PROF_EXIT_FAILED;
	int code = PROF_EXIT_PROFILE;
	for (int i = 0; i < n; i++) {
		in[i].path = argv[ps.optind + i];
		if (strcmp(in[i].path, output) == 0 || prof_same_file(in[i].path, output)) {
			amp_opt_error(sp, NULL, "the output '%s' is also an input", output);
			free(in);
			return PROF_EXIT_USAGE;
		}
		if (read_input(&in[i], i) != 0)
			goto out_free;
		if (in[i].merged) {
			prof_error("merge the ranks' own profiles (run.%r.db)",
			           "'%s' is a merged profile already", in[i].path);
			goto out_free;
		}
		/* a profile without a world size is not a rank's (amp_mpi_attach records it): a
		 * single process's, whose steps would be taken for another rank's */
		if (in[i].world_size <= 0) {
			prof_error("merge the rank profiles of an mpirun whose program attached "
			           "libamprt_mpi (amp_mpi_attach)",
			           "'%s' is not a rank's profile of a data-parallel run (no rank and "
			           "world size in its meta)",
			           in[i].path);
			goto out_free;
		}
		/* the rank and world size amp_mpi_attach wrote: anything else is a profile whose
		 * meta was edited or damaged, whose rows would land beside another rank's */
		if (in[i].rank < 0 || in[i].rank >= in[i].world_size) {
			prof_error("merge the rank profiles ampprof wrote",
			           "'%s' says it is rank %" PRId64 " of a run of %" PRId64
			           " ranks (its meta is damaged)",
			           in[i].path, in[i].rank, in[i].world_size);
			goto out_free;
		}
		for (int j = 0; j < i; j++)
			if (in[j].world_size != in[i].world_size) {
				prof_error("merge the rank profiles one mpirun wrote",
				           "'%s' and '%s' are ranks of runs of %" PRId64
				           " and %" PRId64 " ranks",
				           in[j].path, in[i].path, in[j].world_size,
				           in[i].world_size);
				goto out_free;
			}
		for (int j = 0; j < i; j++)
			if (in[j].run_id[0] && in[i].run_id[0] && strcmp(in[j].run_id, in[i].run_id)) {
				prof_error("merge the rank profiles one mpirun wrote",
				           "'%s' and '%s' are ranks of different runs (run ids %s and %s)",
				           in[j].path, in[i].path, in[j].run_id, in[i].run_id);
				goto out_free;
			}
		for (int j = 0; j < i; j++)
			if (in[j].rank == in[i].rank) {
				prof_error("each rank's profile once: ampprof -o run.%r.db",
				           "'%s' and '%s' are both rank %" PRId64, in[j].path, in[i].path,
				           in[i].rank);
				goto out_free;
			}
	}
	/* by rank, so that ids follow the ranks; rank 0 (the lowest given) is the reference clock */
	qsort(in, (size_t)n, sizeof *in, by_rank);
	/* what the profiles say of their run: the ranks it had, one command */
	int64_t world = 0;
	for (int i = 0; i < n; i++)
		world = in[i].world_size > world ? in[i].world_size : world;
	if (world > n || in[0].rank != 0)
		fprintf(stderr, "ampprof merge: warning: %d of the run's %" PRId64 " rank profile(s) "
		        "given%s: the merged profile covers those ranks only\n", n, world > n ? world : n,
		        in[0].rank != 0 ? ", not rank 0's" : "");
	for (int i = 1; i < n; i++)
		if (strcmp(in[i].command, in[0].command) != 0) {
			fprintf(stderr, "ampprof merge: warning: '%s' and '%s' profiled different commands "
			        "('%s', '%s'): not the ranks of one run?\n", in[0].path, in[i].path,
			        in[0].command, in[i].command);
			break;
		}
	const int ref = 0;
	int barriers = 1;
	for (int i = 0; i < n; i++)
		barriers &= in[i].n_barriers > 0 && in[i].n_barriers == in[ref].n_barriers;
	int64_t spread_lo = 0, spread_hi = 0;
	for (int i = 0; i < n; i++) {
		int64_t mono = in[i].start_mono_ns - in[ref].start_mono_ns; /* same host: exact */
		in[i].shift_ns = barriers ? barrier_shift(&in[ref], &in[i]) : mono;
		int64_t off = in[i].shift_ns - mono; /* what the barrier says beyond the start times */
		if (off < spread_lo)
			spread_lo = off;
		if (off > spread_hi)
			spread_hi = off;
	}
	sqlite3 *db = NULL;
	char err[1024];
	/* written beside the output and put in its place at the end (amp_profile_replace: the
	 * rules of --output): a merge that fails part way leaves the output as it was (a --force
	 * merge too), never half a profile */
	int vrc = amp_profile_replace(NULL, output, force, err, sizeof err);
	if (vrc != AMP_PROFILE_OK) { /* refused now, before the work */
		prof_error(vrc == AMP_PROFILE_EEXIST ? "use --force to overwrite it" : NULL, "%s",
		           err);
		code = PROF_EXIT_DB;
		goto out_free;
	}
	char *tmp = sqlite3_mprintf("%s.merging-%d", output, (int)getpid());
	int crc = tmp ? amp_profile_create(tmp, 1, &db, err, sizeof err) : AMP_PROFILE_EIO;
	if (crc != AMP_PROFILE_OK) {
		prof_error(NULL, "cannot write '%s': %s", output, tmp ? err : "out of memory");
		sqlite3_free(tmp);
		code = PROF_EXIT_DB;
		goto out_free;
	}
	code = PROF_EXIT_DB;
	/* the schema's own rows (op_types) come from the inputs */
	if (exec(db, "DELETE FROM op_types; DELETE FROM meta") != 0)
		goto out_db;
	int all_complete = 1, all_exited = 1;
	char *files = sqlite3_mprintf("");
	amp_progress pr; /* on a terminal; finalize then draws its own line */
	amp_progress_begin(&pr, "ampprof", "merge", (uint64_t)n);
	amp_progress_watch(&pr, db);
	for (int k = 0; k < n; k++) {
		input *x = &in[k];
		amp_progress_set(&pr, "rank profiles", (uint64_t)k);
		if (merge_one(db, x, k == 0) != 0) {
			amp_progress_end(&pr);
			char why[256];
			if (amp_profile_damaged(why, sizeof why)) {
				prof_error("record the run again, or merge the other ranks without it",
				           "'%s' is damaged: %s", x->path, why);
				code = PROF_EXIT_PROFILE;
			}
			goto out_db;
		}
		char v[32];
		snprintf(v, sizeof v, "%" PRId64, x->shift_ns - (x->start_mono_ns - in[ref].start_mono_ns));
		if (meta_rank(db, x->rank, "file", x->path) || meta_rank(db, x->rank, "end", x->end) ||
		    meta_rank(db, x->rank, "exit_status", x->exit_status) ||
		    meta_rank(db, x->rank, "exit_signal", x->exit_signal) ||
		    meta_rank(db, x->rank, "complete", x->complete) ||
		    meta_rank(db, x->rank, "clock_offset_ns", v)) {
			amp_progress_end(&pr);
			goto out_db;
		}
		all_complete &= strcmp(x->complete, "1") == 0;
		/* a rank that ended otherwise than with status 0 failed the run */
		all_exited &= strcmp(x->end, "exited") == 0 && strcmp(x->exit_status, "0") == 0;
		char *nf = sqlite3_mprintf("%s%s%s", files, k ? "\n" : "", x->path);
		sqlite3_free(files);
		files = nf;
	}
	amp_progress_end(&pr);
	char v[32];
	snprintf(v, sizeof v, "%d", n);
	snprintf(err, sizeof err, "%" PRId64, spread_hi - spread_lo);
	if (amp_profile_meta_set(db, "ranks", v) || amp_profile_meta_set(db, "merged_from", files) ||
	    amp_profile_meta_set(db, "clock_spread_ns", err) ||
	    amp_profile_meta_set(db, "clock_alignment", barriers ? "barrier" : "monotonic") ||
	    amp_profile_meta_set(db, "complete", all_complete ? "1" : "0") ||
	    (!all_exited && amp_profile_meta_set(db, "end", "rank-failed"))) {
		sqlite3_free(files);
		goto out_db;
	}
	sqlite3_free(files);
	char why[256];
	if (amp_profile_damaged(why, sizeof why)) {
		prof_error(NULL, "cannot read all of the rank profiles: %s", why);
		code = PROF_EXIT_PROFILE;
		goto out_db;
	}
	char buf[64];
	double fp16 = 70, copy = 15;
	if (amp_profile_meta_get(db, "options.fp16_threshold", buf, sizeof buf) == 0)
		fp16 = strtod(buf, NULL);
	if (amp_profile_meta_get(db, "options.memcpy_threshold", buf, sizeof buf) == 0)
		copy = strtod(buf, NULL);
	if (prof_summarize(db, fp16, copy) != 0)
		goto out_db;
	/* one file, as a recorded profile: a WAL profile cannot be read from a read-only
	 * folder (its readers need the -shm) */
	if (amp_profile_fold_wal(db, why, sizeof why) != 0) {
		prof_error(NULL, "cannot write the merged profile: %s", why);
		goto out_db;
	}
	amp_profile_close(db);
	if (amp_profile_replace(tmp, output, force, err, sizeof err) != AMP_PROFILE_OK) {
		prof_error(NULL, "%s", err);
		unlink(tmp);
		sqlite3_free(tmp);
		free(in);
		return PROF_EXIT_DB;
	}
	sqlite3_free(tmp);
	printf("ampprof merge: %d profile(s) into %s, clocks aligned on %s", n, output,
	       barriers ? "the start-up barrier" : "the monotonic clock (no barrier recorded)");
	if (barriers)
		printf(" (clocks %.1f us apart)", (double)(spread_hi - spread_lo) / 1e3);
	printf("\n");
	for (int k = 0; k < n; k++) {
		input *x = &in[k];
		printf("  rank %" PRId64 ": %s, ", x->rank, x->path);
		if (strcmp(x->end, "exited") == 0)
			printf("exited with status %s", x->exit_status[0] ? x->exit_status : "?");
		else if (x->exit_signal[0])
			printf("%s by %s", strcmp(x->end, "crash") == 0 ? "crashed" : "killed",
			       x->exit_signal);
		else
			printf("ended: %s", x->end);
		printf("%s, clock offset %+.1f us\n", strcmp(x->complete, "1") == 0 ? "" : " (incomplete)",
		       (double)(x->shift_ns - (x->start_mono_ns - in[ref].start_mono_ns)) / 1e3);
	}
	free(in);
	return 0;
out_db:
	free(in);
	amp_profile_discard(db); /* the temporary file: the output is untouched */
	sqlite3_free(tmp);
	return code == PROF_EXIT_PROFILE ? code : PROF_EXIT_DB;
out_free:
	free(in);
	return code;
}
