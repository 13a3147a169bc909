/* step.c — `ampdump --step N`: every tensor recorded at one step, origin first.
 *
 * A tensor can have a tensor_stats row (checked), a dumps row (dumped), or both; rows of the
 * two tables are paired on (seq, role, name) in id order.  Statistics of a dumped tensor
 * without a stats row are computed from its data.  Layer labels and call sites come from the
 * ops view (step, seq) and the callsites table.
 */
#include <stdlib.h>
#include <string.h>

#include "dump.h"
#include "profile_db.h"

typedef struct tensor_row {
	dump_tensor meta;          /* shape only from a dumps row */
	int64_t stats_id, dump_id; /* 0: no such row */
	int has_count, has_nonfinite, has_min, has_max, has_absmax;
	int64_t count, nan, inf;
	double min, max, absmax;
	int64_t callsite; /* 0: none */
	int origin;       /* tensor_stats.origin */
	int origin_op;    /* belongs to the origin op: listed first, marked */
	int has_data;     /* dump with a data blob */
	int64_t bytes;
} tensor_row;

typedef struct row_list {
	tensor_row *v;
	size_t n, cap;
} row_list;

typedef struct op_info {
	int64_t seq;
	char *label;
	int64_t callsite;
} op_info;

static void rows_release(row_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		dump_tensor_release(&l->v[i].meta);
	free(l->v);
	memset(l, 0, sizeof *l);
}

static tensor_row *rows_push(row_list *l)
{
	tensor_row *v = dump_grow(l->v, &l->cap, l->n, sizeof *v);
	if (!v)
		return NULL;
	l->v = v;
	tensor_row *r = &l->v[l->n++];
	memset(r, 0, sizeof *r);
	return r;
}

/* Order of pairing: seq, role, name (dump_tensor_cmp; the step is the same), then id. */
static int row_sort_cmp(const void *pa, const void *pb)
{
	const tensor_row *a = pa, *b = pb;
	int c = dump_tensor_cmp(&a->meta, &b->meta);
	if (c)
		return c;
	int64_t ia = a->stats_id ? a->stats_id : a->dump_id;
	int64_t ib = b->stats_id ? b->stats_id : b->dump_id;
	return (ia > ib) - (ia < ib);
}

/* Final order: the origin op first, then by op sequence. */
static int display_cmp(const void *pa, const void *pb)
{
	const tensor_row *a = pa, *b = pb;
	if (a->origin_op != b->origin_op)
		return a->origin_op ? -1 : 1;
	return row_sort_cmp(pa, pb);
}

/* Appends the tensor_stats rows (from_dumps 0) or the dumps rows (1) of step to out, in id
 * order.  Returns 0 or -1. */
static int load_rows(sqlite3 *db, int64_t step, int from_dumps, row_list *out)
{
	/* columns 1..7 are dump_tensor_read's; a stats row has no shape */
	static const char *const sql[2] = {
	    "SELECT id, step, seq, op, role, name, dtype, NULL, count, nan, inf, min, max, absmax, "
	    "origin, callsite FROM tensor_stats WHERE step = ? ORDER BY id",
	    "SELECT id, step, seq, op, role, name, dtype, shape, bytes, data IS NOT NULL "
	    "FROM dumps WHERE step = ? ORDER BY id",
	};
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(db, sql[from_dumps], -1, &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(st, 1, step);
	int s;
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		tensor_row *r = rows_push(out);
		if (!r)
			goto out;
		dump_tensor_read(st, 1, &r->meta);
		if (from_dumps) {
			r->dump_id = sqlite3_column_int64(st, 0);
			r->bytes = sqlite3_column_int64(st, 8);
			r->has_data = sqlite3_column_int(st, 9);
			continue;
		}
		r->stats_id = sqlite3_column_int64(st, 0);
		r->has_count = sqlite3_column_type(st, 8) != SQLITE_NULL;
		r->count = sqlite3_column_int64(st, 8);
		r->has_nonfinite = sqlite3_column_type(st, 9) != SQLITE_NULL;
		r->nan = sqlite3_column_int64(st, 9);
		r->inf = sqlite3_column_int64(st, 10);
		r->has_min = sqlite3_column_type(st, 11) != SQLITE_NULL;
		r->min = sqlite3_column_double(st, 11);
		r->has_max = sqlite3_column_type(st, 12) != SQLITE_NULL;
		r->max = sqlite3_column_double(st, 12);
		r->has_absmax = sqlite3_column_type(st, 13) != SQLITE_NULL;
		r->absmax = sqlite3_column_double(st, 13);
		r->origin = sqlite3_column_int(st, 14) != 0;
		r->callsite = sqlite3_column_int64(st, 15);
	}
	rc = s == SQLITE_DONE ? 0 : -1;
out:
	sqlite3_finalize(st);
	return rc;
}

/* Fills the statistics of a dumped tensor from its data. */
static int stats_from_data(sqlite3 *db, tensor_row *r)
{
	int64_t dims[DUMP_MAX_DIMS];
	int ndim = dump_parse_shape(r->meta.shape, dims);
	if (ndim >= 0) {
		r->has_count = 1;
		r->count = (int64_t)dump_shape_count(dims, ndim);
	}
	dump_dtype dt = dump_dtype_parse(r->meta.dtype);
	if (!r->has_data || dt == DUMP_DT_UNKNOWN)
		return 0;

	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (dump_data_query(db, r->dump_id, &st) != SQLITE_ROW)
		goto out;
	const unsigned char *data = sqlite3_column_blob(st, 0);
	size_t bytes = (size_t)sqlite3_column_bytes(st, 0);
	size_t n = bytes / dump_dtype_size(dt);
	if (data || n == 0) {
		dump_stats s;
		dump_stats_compute(data, dt, n, &s);
		if (!r->has_count) {
			r->has_count = 1;
			r->count = (int64_t)n;
		}
		r->has_nonfinite = 1;
		r->nan = (int64_t)s.nan;
		r->inf = (int64_t)s.inf;
		r->has_min = r->has_max = r->has_absmax = s.finite > 0;
		r->min = s.min;
		r->max = s.max;
		r->absmax = s.absmax;
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

/* Pairs stats rows with dump rows into out.  Both inputs are sorted by row_sort_cmp; strings
 * move into out. */
static int merge_rows(row_list *stats, row_list *dumps, row_list *out)
{
	size_t i = 0, j = 0;
	while (i < stats->n || j < dumps->n) {
		int c = i == stats->n   ? 1
		        : j == dumps->n ? -1
		                        : dump_tensor_cmp(&stats->v[i].meta, &dumps->v[j].meta);
		tensor_row *r = rows_push(out);
		if (!r)
			return -1;
		if (c <= 0) {
			*r = stats->v[i];
			memset(&stats->v[i++], 0, sizeof(tensor_row));
			if (c == 0) {
				tensor_row *d = &dumps->v[j++];
				r->dump_id = d->dump_id;
				r->meta.shape = d->meta.shape;
				r->bytes = d->bytes;
				r->has_data = d->has_data;
				d->meta.shape = NULL;
				if (!r->meta.dtype) {
					r->meta.dtype = d->meta.dtype;
					d->meta.dtype = NULL;
				}
			}
		} else {
			*r = dumps->v[j];
			memset(&dumps->v[j++], 0, sizeof(tensor_row));
		}
	}
	return 0;
}

static int load_ops(sqlite3 *db, int64_t step, op_info **out, size_t *nout)
{
	sqlite3_stmt *st = NULL;
	op_info *v = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;
	/* first execution of each seq in the step */
	if (sqlite3_prepare_v2(db,
	                       "SELECT seq, label, callsite, min(id) FROM ops WHERE step = ? "
	                       "GROUP BY seq ORDER BY seq",
	                       -1, &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(st, 1, step);
	int s;
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		op_info *nv = dump_grow(v, &cap, n, sizeof *nv);
		if (!nv)
			goto out;
		v = nv;
		v[n].seq = sqlite3_column_int64(st, 0);
		v[n].label = dump_column_strdup(st, 1);
		v[n].callsite = sqlite3_column_int64(st, 2);
		n++;
	}
	if (s != SQLITE_DONE)
		goto out;
	*out = v;
	*nout = n;
	v = NULL;
	n = 0;
	rc = 0;
out:
	for (size_t i = 0; i < n; i++)
		free(v[i].label);
	free(v);
	sqlite3_finalize(st);
	return rc;
}

static const op_info *find_op(const op_info *ops, size_t n, int64_t seq)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ops[mid].seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && ops[lo].seq == seq ? &ops[lo] : NULL;
}

/* "function file:line" of a call site into buf; "" if unknown. */
static const char *callsite_text(sqlite3_stmt *st, int64_t id, char *buf, size_t len)
{
	buf[0] = '\0';
	if (!id)
		return buf;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		const unsigned char *fn = sqlite3_column_text(st, 0);
		const unsigned char *file = sqlite3_column_text(st, 1);
		int line = sqlite3_column_int(st, 2);
		if (file && strcmp((const char *)file, "??") != 0 && line > 0)
			snprintf(buf, len, "%s %s:%d", fn ? (const char *)fn : "??",
			         (const char *)file, line);
		else if (file && strcmp((const char *)file, "??") != 0)
			snprintf(buf, len, "%s %s", fn ? (const char *)fn : "??",
			         (const char *)file);
		else
			snprintf(buf, len, "%s", fn ? (const char *)fn : "??");
	}
	return buf;
}

static const amp_column step_cols[] = {
    {"origin", AMP_COL_FLAG},   {"seq", AMP_COL_INT},     {"op", AMP_COL_TEXT},
    {"label", AMP_COL_TEXT},    {"role", AMP_COL_TEXT},   {"name", AMP_COL_TEXT},
    {"dtype", AMP_COL_TEXT},    {"shape", AMP_COL_TEXT},  {"count", AMP_COL_INT},
    {"nan", AMP_COL_INT},       {"inf", AMP_COL_INT},     {"min", AMP_COL_REAL},
    {"max", AMP_COL_REAL},      {"absmax", AMP_COL_REAL}, {"dump_id", AMP_COL_INT},
    {"callsite", AMP_COL_TEXT},
};
enum {
	C_ORIGIN,
	C_SEQ,
	C_OP,
	C_LABEL,
	C_ROLE,
	C_NAME,
	C_DTYPE,
	C_SHAPE,
	C_COUNT,
	C_NAN,
	C_INF,
	C_MIN,
	C_MAX,
	C_ABSMAX,
	C_DUMP,
	C_CALLSITE,
	C_NCOLS
};

static int fill_table(amp_table *t, sqlite3 *db, const row_list *rows, const op_info *ops,
                      size_t nops)
{
	sqlite3_stmt *cs = NULL;
	int rc = -1;
	char site[1200];
	if (sqlite3_prepare_v2(db, "SELECT function, file, line FROM callsites WHERE id = ?", -1,
	                       &cs, NULL) != SQLITE_OK)
		goto out;
	for (size_t i = 0; i < rows->n; i++) {
		const tensor_row *r = &rows->v[i];
		const op_info *o = find_op(ops, nops, r->meta.seq);
		int64_t site_id = r->callsite ? r->callsite : o ? o->callsite : 0;
		const char *site_text = callsite_text(cs, site_id, site, sizeof site);
		int e = amp_table_add_row(t);
		e |= amp_table_set_int(t, C_ORIGIN, r->origin_op);
		e |= amp_table_set_int(t, C_SEQ, r->meta.seq);
		e |= amp_table_set_text(t, C_OP, r->meta.op);
		e |= amp_table_set_text(t, C_LABEL, o ? o->label : NULL);
		e |= amp_table_set_text(t, C_ROLE, r->meta.role);
		e |= amp_table_set_text(t, C_NAME, r->meta.name);
		e |= amp_table_set_text(t, C_DTYPE, r->meta.dtype);
		e |= amp_table_set_text(t, C_SHAPE, r->meta.shape);
		if (r->has_count)
			e |= amp_table_set_int(t, C_COUNT, r->count);
		if (r->has_nonfinite) {
			e |= amp_table_set_int(t, C_NAN, r->nan);
			e |= amp_table_set_int(t, C_INF, r->inf);
		}
		if (r->has_min)
			e |= amp_table_set_real(t, C_MIN, r->min);
		if (r->has_max)
			e |= amp_table_set_real(t, C_MAX, r->max);
		if (r->has_absmax)
			e |= amp_table_set_real(t, C_ABSMAX, r->absmax);
		if (r->dump_id)
			e |= amp_table_set_int(t, C_DUMP, r->dump_id);
		e |= amp_table_set_text(t, C_CALLSITE, site_text[0] ? site_text : NULL);
		if (e)
			goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(cs);
	return rc;
}

/* 1 if the steps table says step overflowed. */
static int step_overflowed(sqlite3 *db, int64_t step)
{
	int64_t overflow = 0;
	int null = 1;
	return dump_query_int(db, "SELECT max(overflow) FROM steps WHERE step = ?", step, &overflow,
	                      &null) == 0 &&
	       !null && overflow != 0;
}

int dump_cmd_step(const char *db_path, int64_t step, amp_format fmt, FILE *out)
{
	row_list stats = {0}, dumps = {0}, rows = {0};
	op_info *ops = NULL;
	size_t nops = 0;
	amp_table *t = NULL;
	int code = DUMP_EXIT_FAIL;

	sqlite3 *db = dump_open_step(db_path, step);
	if (!db)
		return DUMP_EXIT_FAIL;
	if (load_rows(db, step, 0, &stats) != 0 || load_rows(db, step, 1, &dumps) != 0) {
		dump_sql_error(db, db_path);
		goto out;
	}
	if (stats.n == 0 && dumps.n == 0) {
		char hint[1400];
		if (step_overflowed(db, step))
			dump_error(
			    "ampprof records them with --nan-check=op (the default) and "
			    "--dump=nonfinite",
			    "nothing was recorded at step %lld in '%s': the step overflowed, but "
			    "no tensor was checked or dumped",
			    (long long)step, db_path);
		else
			dump_error(
			    "`ampdump --list` shows the steps that have anomalies or dumps",
			    "nothing was recorded at step %lld in '%s' (no anomaly, no dump)",
			    (long long)step, db_path);
		/* the hint quotes the run's command line: sanitized */
		fputs("hint: ", stderr);
		amp_text_put(stderr, dump_rerun_hint(db, step, hint, sizeof hint));
		fputc('\n', stderr);
		goto out;
	}
	for (size_t i = 0; i < dumps.n; i++)
		if (stats_from_data(db, &dumps.v[i]) != 0) {
			dump_sql_error(db, db_path);
			goto out;
		}
	if (stats.n)
		qsort(stats.v, stats.n, sizeof *stats.v, row_sort_cmp);
	if (dumps.n)
		qsort(dumps.v, dumps.n, sizeof *dumps.v, row_sort_cmp);
	if (merge_rows(&stats, &dumps, &rows) != 0)
		goto oom;

	/* the origin op: every tensor sharing a seq with a row marked origin */
	size_t n_origin = 0, n_dumped = 0;
	const tensor_row *origin = NULL;
	for (size_t i = 0; i < rows.n; i++)
		if (rows.v[i].origin && (!origin || rows.v[i].stats_id < origin->stats_id))
			origin = &rows.v[i];
	int64_t origin_seq = origin ? origin->meta.seq : 0;
	for (size_t i = 0; i < rows.n; i++) {
		if (origin && rows.v[i].meta.seq == origin_seq) {
			rows.v[i].origin_op = 1;
			n_origin++;
		}
		n_dumped += rows.v[i].dump_id != 0;
	}
	if (rows.n)
		qsort(rows.v, rows.n, sizeof *rows.v, display_cmp);

	if (load_ops(db, step, &ops, &nops) != 0) {
		dump_sql_error(db, db_path);
		goto out;
	}
	t = amp_table_new(step_cols, C_NCOLS);
	if (!t || fill_table(t, db, &rows, ops, nops) != 0)
		goto oom;

	if (fmt == AMP_FMT_TEXT) {
		fprintf(out, "step %lld of %s: %zu tensors, %zu dumped", (long long)step, db_path,
		        rows.n, n_dumped);
		if (n_origin) {
			const op_info *o = find_op(ops, nops, origin_seq);
			/* the report's verdict: an automatic cast that overflowed is the origin, not
			 * the op it feeds (whose half input already holds the Inf) */
			char cls[32] = "";
			if (amp_profile_has_table(db, "nonfinite"))
				amp_profile_query_text(db, cls, sizeof cls,
				                       "SELECT class FROM nonfinite WHERE step = ?1 AND "
				                       "seq = ?2 LIMIT 1", "ii", (int64_t)step, origin_seq);
			/* op and label come from the application: sanitized */
			fputs("; origin (*): ", out);
			if (strcmp(cls, "cast_overflow") == 0)
				fputs("the automatic cast in front of ", out);
			amp_text_put(out, rows.v[0].meta.op ? rows.v[0].meta.op : "?");
			fprintf(out, " at seq %lld", (long long)origin_seq);
			if (o && o->label) {
				fputs(" (", out);
				amp_text_put(out, o->label);
				fputc(')', out);
			}
			if (strcmp(cls, "cast_overflow") == 0)
				fputs(": its FP32 input overflows the half type", out);
			/* an underflow upstream is the cause: the report's verdict, said here too */
			char src[128] = "", src_label[128] = "";
			int64_t src_seq = -1;
			if (strcmp(cls, "underflow") == 0 &&
			    amp_profile_query_text(db, src, sizeof src,
			                           "SELECT src_op FROM nonfinite WHERE step = ?1 AND "
			                           "seq = ?2 AND src_op IS NOT NULL LIMIT 1",
			                           "ii", (int64_t)step, origin_seq) == AMP_PROFILE_OK &&
			    src[0]) {
				amp_profile_query_text(db, src_label, sizeof src_label,
				                       "SELECT coalesce(src_label, '') FROM nonfinite WHERE "
				                       "step = ?1 AND seq = ?2 LIMIT 1",
				                       "ii", (int64_t)step, origin_seq);
				amp_profile_query_int64(db, &src_seq,
				                        "SELECT src_seq FROM nonfinite WHERE step = ?1 AND "
				                        "seq = ?2 LIMIT 1",
				                        "ii", (int64_t)step, origin_seq);
				fputs(": its input underflowed to zero in ", out);
				amp_text_put(out, src);
				if (src_label[0]) {
					fputs(" '", out);
					amp_text_put(out, src_label);
					fputc('\'', out);
				}
				if (src_seq >= 0)
					fprintf(out, " at seq %lld", (long long)src_seq);
				fputs(", the cause", out);
			}
		}
		fputc('\n', out);
	}
	if (amp_table_print(t, fmt, out) != 0) {
		dump_error(NULL, "cannot write the output: %s", "write error");
		goto out;
	}
	code = DUMP_EXIT_OK;
	goto out;
oom:
	dump_error(NULL, "out of memory");
	code = DUMP_EXIT_FAIL;
out:
	amp_table_free(t);
	for (size_t i = 0; i < nops; i++)
		free(ops[i].label);
	free(ops);
	rows_release(&rows);
	rows_release(&dumps);
	rows_release(&stats);
	amp_profile_close(db);
	return code;
}
