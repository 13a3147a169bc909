/* compare.c — `ampdump --compare A.db B.db [--step N]`: two runs of one program (FP32 and
 * AMP, say) compared op by op on the tensors both dumped: the metrics of each pair, the
 * verdict, the first divergence and the printing.  Which tensors pair up is match.c's.
 *
 * Both sides are converted to double, and gradients divided by their run's loss scale, before
 * comparing; A is the reference of the relative error and tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp_progress.h"
#include "dump.h"
#include "match.h"

/* The loss scale to divide t's elements by: its step's scale for a gradient, 1 otherwise (and 1
 * when the run recorded no usable scale for the step). */
static double unscale_by(const cmp_tensor *t)
{
	if (!t->meta.role || strcmp(t->meta.role, "grad") != 0)
		return 1.0;
	return isfinite(t->scale) && t->scale > 0.0 ? t->scale : 1.0;
}

/* The data of tensor t of run r as doubles, a gradient divided by its step's loss scale; *n
 * elements.  NULL with *n = 0 if absent, and on error; free() the result.  Notes once per run
 * on stderr when a gradient's step has no loss scale. */
static double *load_values(cmp_run *r, const cmp_tensor *t, dump_dtype dt, size_t *n)
{
	sqlite3_stmt *st = NULL;
	double *v = NULL;
	*n = 0;
	if (dump_data_query(r->db, t->id, &st) != SQLITE_ROW ||
	    sqlite3_column_type(st, 0) == SQLITE_NULL)
		goto out;
	const unsigned char *data = sqlite3_column_blob(st, 0);
	size_t count = (size_t)sqlite3_column_bytes(st, 0) / dump_dtype_size(dt);
	v = malloc((count ? count : 1) * sizeof *v);
	if (!v)
		goto out;
	dump_to_double(data, dt, count, v);
	*n = count;

	double scale = unscale_by(t);
	if (scale != 1.0)
		for (size_t i = 0; i < count; i++)
			v[i] /= scale; /* exact for the usual power-of-two scales */
	int is_grad = t->meta.role && strcmp(t->meta.role, "grad") == 0;
	if (is_grad && !(isfinite(t->scale) && t->scale > 0.0) && !r->scale_noted) {
		fprintf(stderr,
		        "ampdump: note: step %lld of '%s' has no loss scale; its gradients are "
		        "compared as dumped\n",
		        (long long)t->meta.step, r->path);
		r->scale_noted = 1;
	}
out:
	sqlite3_finalize(st);
	return v;
}

static const amp_column cmp_cols[] = {
    {"step", AMP_COL_INT},        {"seq", AMP_COL_INT},        {"seq_b", AMP_COL_INT},
    {"op", AMP_COL_TEXT},         {"label", AMP_COL_TEXT},     {"role", AMP_COL_TEXT},
    {"name", AMP_COL_TEXT},       {"dtype_a", AMP_COL_TEXT},   {"dtype_b", AMP_COL_TEXT},
    {"shape", AMP_COL_TEXT},      {"count", AMP_COL_INT},      {"cosine", AMP_COL_REAL},
    {"norm_ratio", AMP_COL_REAL}, {"max_abs", AMP_COL_REAL},   {"max_rel", AMP_COL_REAL},
    {"rtol", AMP_COL_REAL},       {"tol_ratio", AMP_COL_REAL}, {"nonfinite", AMP_COL_INT},
    {"status", AMP_COL_TEXT},     {"why", AMP_COL_TEXT},
};
enum {
	K_STEP,
	K_SEQ,
	K_SEQ_B,
	K_OP,
	K_LABEL,
	K_ROLE,
	K_NAME,
	K_DTYPE_A,
	K_DTYPE_B,
	K_SHAPE,
	K_COUNT,
	K_COSINE,
	K_NORM_RATIO,
	K_MAX_ABS,
	K_MAX_REL,
	K_RTOL,
	K_TOL_RATIO,
	K_NONFINITE,
	K_STATUS,
	K_WHY,
	K_NCOLS
};

/* Same shape text once parsed ("(4, 8)" equals "(4,8)"). */
static int same_shape(const char *a, const char *b, uint64_t *count)
{
	int64_t da[DUMP_MAX_DIMS], db[DUMP_MAX_DIMS];
	int na = dump_parse_shape(a, da), nb = dump_parse_shape(b, db);
	if (na < 0 || na != nb)
		return 0;
	for (int i = 0; i < na; i++)
		if (da[i] != db[i])
			return 0;
	*count = dump_shape_count(da, na);
	return 1;
}

/* What one pair of tensors gave. */
typedef enum { CMP_SHAPE, CMP_NO_DATA, CMP_DONE } cmp_state;
typedef struct cmp_result {
	cmp_state state;
	uint64_t count;      /* elements (not for CMP_SHAPE) */
	double rtol;         /* relative tolerance of the pair */
	dump_diff d;         /* CMP_DONE only */
	dump_closeness c;    /* CMP_DONE only: against the max_abs tolerance */
	dump_closeness hard; /* CMP_DONE only: against the max_abs_ceiling tolerance */
	unsigned why;        /* CMP_DONE only: DUMP_FLAG_* bits, 0 if not flagged */
} cmp_result;

/* The pair's cosine, norm ratio and tolerance ratio measure something: some position is finite
 * on both sides (or there are none at all).  Else they are left empty and not compared. */
static int measured(const cmp_result *r)
{
	return r->state == CMP_DONE && (r->d.finite > 0 || r->count == 0);
}

/* Compares tensor a of ra with its peer in rb into *res. */
static void compare_pair(cmp_run *ra, cmp_run *rb, const cmp_tensor *a, const dump_compare_opts *o,
                         cmp_result *res)
{
	const cmp_tensor *b = a->peer;
	dump_dtype da = dump_dtype_parse(a->meta.dtype), db = dump_dtype_parse(b->meta.dtype);
	memset(res, 0, sizeof *res);
	res->rtol = o->rtol >= 0.0 ? o->rtol : dump_default_rtol(da, db);
	res->state = CMP_SHAPE;
	if (!same_shape(a->meta.shape, b->meta.shape, &res->count))
		return;
	res->state = CMP_NO_DATA;
	if (!a->has_data || !b->has_data || da == DUMP_DT_UNKNOWN || db == DUMP_DT_UNKNOWN)
		return;
	size_t na = 0, nb = 0;
	double *va = load_values(ra, a, da, &na);
	double *vb = load_values(rb, b, db, &nb);
	if (va && vb && na == res->count && nb == res->count) {
		dump_diff_compute(va, vb, na, &res->d);
		dump_closeness_compute(va, vb, na, o->limits.max_abs, res->rtol, &res->c);
		dump_closeness_compute(va, vb, na, o->limits.max_abs_ceiling, res->rtol,
		                       &res->hard);
		res->why = dump_verdict(&res->d, res->c.over, res->hard.over, &o->limits);
		res->state = CMP_DONE;
	}
	free(va);
	free(vb);
}

/* "nonfinite+drift" for the DUMP_FLAG_* bits of why, "" for none, into buf.  Returns buf. */
static char *why_text(unsigned why, char *buf, size_t len)
{
	static const struct {
		unsigned bit;
		const char *word;
	} words[] = {{DUMP_FLAG_NONFINITE, "nonfinite"},
	             {DUMP_FLAG_DRIFT, "drift"},
	             {DUMP_FLAG_FLOOR, "floor"},
	             {DUMP_FLAG_CEILING, "ceiling"}};
	size_t at = 0;
	buf[0] = '\0';
	for (size_t k = 0; k < sizeof words / sizeof words[0] && at < len; k++)
		if (why & words[k].bit)
			at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "+" : "",
			                       words[k].word);
	return buf;
}

/* Appends the row of tensor a (and its peer).  Returns 0, or -1 when out of memory. */
static int add_row(amp_table *t, const cmp_tensor *a, const cmp_result *r, const char *status)
{
	const cmp_tensor *b = a->peer;
	int e = amp_table_add_row(t);
	e |= amp_table_set_int(t, K_STEP, a->meta.step);
	e |= amp_table_set_int(t, K_SEQ, a->meta.seq);
	e |= amp_table_set_int(t, K_SEQ_B, b->meta.seq);
	e |= amp_table_set_text(t, K_OP, a->meta.op);
	e |= amp_table_set_text(t, K_LABEL, a->label ? a->label : b->label);
	e |= amp_table_set_text(t, K_ROLE, a->meta.role);
	e |= amp_table_set_text(t, K_NAME, a->meta.name);
	e |= amp_table_set_text(t, K_DTYPE_A, a->meta.dtype);
	e |= amp_table_set_text(t, K_DTYPE_B, b->meta.dtype);
	e |= amp_table_set_text(t, K_SHAPE, a->meta.shape);
	if (r->state != CMP_SHAPE)
		e |= amp_table_set_int(t, K_COUNT, (int64_t)r->count);
	if (r->state == CMP_DONE) {
		if (measured(r)) { /* else empty (null in JSON), not 1 */
			e |= amp_table_set_real(t, K_COSINE, r->d.cosine);
			e |= amp_table_set_real(t, K_NORM_RATIO, r->d.norm_ratio);
		}
		e |= amp_table_set_real(t, K_MAX_ABS, r->d.max_abs);
		e |= amp_table_set_real(t, K_MAX_REL, r->d.max_rel);
		e |= amp_table_set_real(t, K_RTOL, r->rtol);
		if (measured(r))
			e |= amp_table_set_real(t, K_TOL_RATIO, r->c.worst);
		e |= amp_table_set_int(t, K_NONFINITE, (int64_t)r->d.mismatch);
	}
	e |= amp_table_set_text(t, K_STATUS, status);
	if (r->state == CMP_DONE && r->why) {
		char why[64];
		e |= amp_table_set_text(t, K_WHY, why_text(r->why, why, sizeof why));
	} else if (r->state == CMP_SHAPE) {
		char why[300];
		snprintf(why, sizeof why, "b %s", b->meta.shape ? b->meta.shape : "?");
		e |= amp_table_set_text(t, K_WHY, why);
	}
	return e ? -1 : 0;
}

/* "0.001 + 0.0009765625*|a|" ("0.001 + rtol*|a|" with rtol < 0, "0.001" with rtol 0) into
 * buf.  Returns buf. */
static char *tolerance_expr(double atol, double rtol, char *buf, size_t len)
{
	char ta[40], tr[40];
	amp_format_real(atol, ta, sizeof ta);
	if (rtol == 0.0)
		snprintf(buf, len, "%s", ta);
	else if (rtol < 0.0)
		snprintf(buf, len, "%s + rtol*|a|", ta);
	else
		snprintf(buf, len, "%s + %s*|a|", ta, amp_format_real(rtol, tr, sizeof tr));
	return buf;
}

/* The rtol of the pairs compared, into buf: the single value they share ("0.0009765625"), or
 * the values by dtype ("0.0078125 with a bf16 side, 0.0009765625 with an fp16 side, 0
 * otherwise").  Returns buf. */
static char *rtol_text(const dump_compare_opts *o, const cmp_result *res, size_t n, char *buf,
                       size_t len)
{
	static const struct {
		double rtol;
		const char *when;
	} by_dtype[] = {
	    {0x1p-7, "with a bf16 side"}, {0x1p-10, "with an fp16 side"}, {0.0, "otherwise"}};
	int used[3] = {0, 0, 0}, nused = 0;
	double single = o->rtol >= 0.0 ? o->rtol : 0x1p-10;
	if (o->rtol < 0.0)
		for (size_t i = 0; i < n; i++)
			for (int k = 0; k < 3; k++)
				if (res[i].state == CMP_DONE && res[i].rtol == by_dtype[k].rtol &&
				    !used[k]) {
					used[k] = 1;
					nused++;
					single = by_dtype[k].rtol;
				}
	if (o->rtol >= 0.0 || nused == 1)
		return amp_format_real(single, buf, len);
	char tr[40];
	size_t at = 0;
	for (int k = 0; k < 3 && at < len; k++) {
		if (nused && !used[k])
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s %s", at ? ", " : "",
		                       amp_format_real(by_dtype[k].rtol, tr, sizeof tr),
		                       by_dtype[k].when);
	}
	return buf;
}

/* "step 2 seq 4 LayerNorm (ln1) output 'ln1.out'" into buf, sanitized for the terminal (the
 * names come from the application).  Returns buf. */
static char *describe(const cmp_tensor *t, char *buf, size_t len)
{
	char raw[1024];
	snprintf(raw, sizeof raw, "step %lld seq %lld %s%s%s%s %s%s%s%s", (long long)t->meta.step,
	         (long long)t->meta.seq, t->meta.op ? t->meta.op : "?", t->label ? " (" : "",
	         t->label ? t->label : "", t->label ? ")" : "", t->meta.role ? t->meta.role : "?",
	         t->meta.name ? " '" : "", t->meta.name ? t->meta.name : "",
	         t->meta.name ? "'" : "");
	amp_sanitize(raw, buf, len);
	return buf;
}

/* The loss scale a gradient t is divided by, as text ("none" if its run recorded none).
 * Returns buf. */
static char *scale_text(const cmp_tensor *t, char *buf, size_t len)
{
	if (!(isfinite(t->scale) && t->scale > 0.0)) {
		snprintf(buf, len, "none");
		return buf;
	}
	return amp_format_real(t->scale, buf, len);
}

/* The header lines of the text output: the flag criterion and, if gradients were compared, the
 * loss scales they were divided by. */
static void print_criterion(FILE *out, const dump_compare_opts *o, cmp_tensor *const *pairs,
                            const cmp_result *res, size_t n)
{
	const dump_limits *l = &o->limits;
	char tc[40], tn[40], tf[40], tol[100], ceil[100], rt[200], sa[40], sb[40];
	fprintf(out,
	        "flag: nonfinite = Inf/NaN that differ; drift = cosine < %s or norm ratio off 1 by "
	        "> %s, with some |a-b| > %s; floor = cosine < %s; ceiling = some |a-b| > %s\n",
	        amp_format_real(l->min_cosine, tc, sizeof tc),
	        amp_format_real(l->max_norm_diff, tn, sizeof tn),
	        tolerance_expr(l->max_abs, -1.0, tol, sizeof tol),
	        amp_format_real(l->cosine_floor, tf, sizeof tf),
	        tolerance_expr(l->max_abs_ceiling, -1.0, ceil, sizeof ceil));
	fprintf(out, "rtol: %s; a: the reference\n", rtol_text(o, res, n, rt, sizeof rt));
	const cmp_tensor *g = NULL; /* the first gradient compared */
	int mixed = 0;
	for (size_t i = 0; i < n; i++) {
		const cmp_tensor *a = pairs[i];
		if (res[i].state != CMP_DONE || !a->meta.role || strcmp(a->meta.role, "grad") != 0)
			continue;
		if (!g)
			g = a;
		else if (unscale_by(a) != unscale_by(g) ||
		         unscale_by(a->peer) != unscale_by(g->peer))
			mixed = 1;
	}
	if (g && mixed)
		fprintf(out, "grads: divided by their run's loss scale at their step\n");
	else if (g)
		fprintf(out, "grads: divided by their run's loss scale (a: %s, b: %s)\n",
		        scale_text(g, sa, sizeof sa), scale_text(g->peer, sb, sizeof sb));
}

/* "12 of 4096 elements with |a-b| > 0.001 + 0.0009765625*|a| (worst 2.5 times that)" */
static void print_over(FILE *out, const dump_closeness *c, uint64_t count, double atol, double rtol)
{
	char tol[100], worst[40];
	fprintf(out, "%llu of %llu elements with |a-b| > %s", (unsigned long long)c->over,
	        (unsigned long long)count, tolerance_expr(atol, rtol, tol, sizeof tol));
	if (atol == 0.0 && rtol == 0.0)
		return; /* the ratio to a zero tolerance is infinite */
	fprintf(out, " (worst %s times that)", amp_format_real(c->worst, worst, sizeof worst));
}

/* The summary line: the first divergence and why, or that there is none. */
static void print_summary(FILE *out, const dump_compare_opts *o, const char *a_path,
                          const char *b_path, cmp_tensor *const *pairs, const cmp_result *res,
                          size_t n, size_t first, size_t n_flagged, size_t n_one_sided)
{
	const dump_limits *l = &o->limits;
	char tc[40], nr[40], where[600], cos[40], mabs[40];
	if (first >= n) {
		size_t done = 0, low = n;
		for (size_t i = 0; i < n; i++)
			if (res[i].state == CMP_DONE) {
				done++;
				if (measured(&res[i]) &&
				    (low == n || res[i].d.cosine < res[low].d.cosine))
					low = i;
			}
		fprintf(out, "no divergence: %zu of %zu tensors compared, none flagged", done, n);
		if (low < n)
			fprintf(out, "; lowest cosine %s (%s)",
			        amp_format_real(res[low].d.cosine, cos, sizeof cos),
			        describe(pairs[low], where, sizeof where));
		fputc('\n', out);
		return;
	}
	const cmp_result *r = &res[first];
	if (!measured(r))
		fprintf(out, "first divergence: %s: no element finite on both sides; ",
		        describe(pairs[first], where, sizeof where));
	else
		fprintf(out, "first divergence: %s: cosine %s, max abs error %s; ",
		        describe(pairs[first], where, sizeof where),
		        amp_format_real(r->d.cosine, cos, sizeof cos),
		        amp_format_real(r->d.max_abs, mabs, sizeof mabs));
	unsigned long long count = (unsigned long long)r->count;
	const char *sep = "";
	if (r->c.only_a && r->c.only_b) {
		fprintf(out,
		        "Inf/NaN in '%s' only at %llu and in '%s' only at %llu of %llu elements",
		        a_path, (unsigned long long)r->c.only_a, b_path,
		        (unsigned long long)r->c.only_b, count);
		sep = ", ";
	} else if (r->c.only_a || r->c.only_b) {
		fprintf(out, "Inf/NaN in '%s' only at %llu of %llu elements",
		        r->c.only_a ? a_path : b_path,
		        (unsigned long long)(r->c.only_a ? r->c.only_a : r->c.only_b), count);
		sep = ", ";
	} else if (r->why & DUMP_FLAG_NONFINITE) {
		fprintf(out, "non-finite values differ at %llu of %llu elements",
		        (unsigned long long)r->d.mismatch, count);
		sep = ", ";
	}
	if (r->why & DUMP_FLAG_FLOOR) {
		fprintf(out, "%scosine below %s", sep,
		        amp_format_real(l->cosine_floor, tc, sizeof tc));
		sep = ", ";
	} else if (r->why & DUMP_FLAG_DRIFT) {
		if (!(r->d.cosine >= l->min_cosine))
			fprintf(out, "%scosine below %s and ", sep,
			        amp_format_real(l->min_cosine, tc, sizeof tc));
		else
			fprintf(out, "%snorm ratio %s, off 1 by more than %s, and ", sep,
			        amp_format_real(r->d.norm_ratio, nr, sizeof nr),
			        amp_format_real(l->max_norm_diff, tc, sizeof tc));
		print_over(out, &r->c, count, l->max_abs, r->rtol);
		sep = ", ";
	}
	if (r->why & DUMP_FLAG_CEILING) {
		fputs(sep, out);
		print_over(out, &r->hard, count, l->max_abs_ceiling, r->rtol);
	}
	fprintf(out, "; %zu of %zu tensors flagged", n_flagged, n);
	if (n_one_sided)
		fprintf(out, ", %zu with Inf/NaN in one run only", n_one_sided);
	fputc('\n', out);
}

int dump_cmd_compare(const char *a_path, const char *b_path, const dump_compare_opts *o, FILE *out)
{
	cmp_run a = {.path = a_path}, b = {.path = b_path};
	amp_table *t = NULL;
	cmp_tensor **pairs = NULL;
	cmp_result *res = NULL;
	int code = DUMP_EXIT_CMP_TROUBLE;
	char hint[1400];

	if (!(a.db = dump_open_profile_arg(a_path)))
		goto out;
	dump_use_rank_second(); /* --rank A,B */
	if (!(b.db = dump_open_profile_arg(b_path)))
		goto out;
	if (o->step >= 0) {
		cmp_run *runs[2] = {&a, &b};
		for (int k = 0; k < 2; k++) {
			if (dump_check_step(runs[k]->db, runs[k]->path, o->step) != DUMP_EXIT_OK)
				goto out;
			int64_t n = dump_count_dumps(runs[k]->db, o->step);
			if (n < 0) {
				dump_sql_error(runs[k]->db, runs[k]->path);
				goto out;
			}
			if (n == 0) {
				dump_error(dump_rerun_hint(runs[k]->db, o->step, hint, sizeof hint),
				           "nothing was dumped at step %lld in '%s'",
				           (long long)o->step, runs[k]->path);
				goto out;
			}
		}
	} else {
		int64_t n = dump_common_steps(&a, &b);
		if (n < 0) {
			dump_error(NULL, "cannot read '%s' and '%s': %s", a_path, b_path,
			           sqlite3_errmsg(a.db));
			goto out;
		}
		if (n == 0) {
			dump_error(
			    "dump the same step in both runs, e.g. `ampprof --dump-steps=N` or "
			    "`ampdump --application=CMD --step N --output=FILE`",
			    "'%s' and '%s' have no dumped step in common", a_path, b_path);
			goto out;
		}
	}
	size_t npairs = 0;
	int mrc = dump_match_runs(&a, &b, o->step, &pairs, &npairs);
	if (mrc == DUMP_MATCH_ENOMEM)
		goto oom;
	if (mrc == DUMP_MATCH_ESQL_A)
		goto sql_error_a;
	if (mrc == DUMP_MATCH_ESQL_B) {
		dump_sql_error(b.db, b_path);
		goto out;
	}
	if (npairs == 0) {
		dump_error("are both profiles runs of the same program?",
		           "no dumped tensor of '%s' lines up with one of '%s'", a_path, b_path);
		goto out;
	}

	res = malloc(npairs * sizeof *res);
	if (!res)
		goto oom;
	amp_progress pr;
	amp_progress_begin(&pr, "ampdump", "compare", npairs);
	for (size_t i = 0; i < npairs; i++) {
		amp_progress_set(&pr, "tensors", i);
		compare_pair(&a, &b, pairs[i], o, &res[i]);
	}
	amp_progress_end(&pr);

	/* The first divergence is the first Inf/NaN facing a finite value, in execution order:
	 * over many steps rounding-level drift is flagged everywhere before an overflow, and the
	 * overflow is what one hunts.  Failing that, the first tensor flagged. */
	size_t first = npairs, n_flagged = 0, n_one_sided = 0, n_done = 0, n_shape = 0;
	for (size_t i = 0; i < npairs; i++) {
		n_done += res[i].state == CMP_DONE;
		n_shape += res[i].state == CMP_SHAPE;
		if (res[i].state != CMP_DONE || !res[i].why)
			continue;
		n_flagged++;
		if (res[i].c.only_a || res[i].c.only_b) {
			if (n_one_sided++ == 0)
				first = i;
		}
	}
	for (size_t i = 0; i < npairs && first == npairs; i++)
		if (res[i].state == CMP_DONE && res[i].why)
			first = i;

	t = amp_table_new(cmp_cols, K_NCOLS);
	if (!t)
		goto oom;
	for (size_t i = 0; i < npairs; i++) {
		const char *status = res[i].state == CMP_SHAPE     ? "shape"
		                     : res[i].state == CMP_NO_DATA ? "no-data"
		                     : i == first                  ? "FIRST"
		                     : res[i].why                  ? "over"
		                                                   : "ok";
		if (add_row(t, pairs[i], &res[i], status) != 0)
			goto oom;
	}
	/* the JSON document names the first divergence: its index in rows */
	if (amp_table_set_member_int(t, "first_divergence", (int64_t)first, first == npairs) != 0)
		goto oom;
	dump_note_unmatched(&a, b_path);
	dump_note_unmatched(&b, a_path);

	if (o->fmt == AMP_FMT_TEXT)
		print_criterion(out, o, pairs, res, npairs);
	if (amp_table_print(t, o->fmt, out) != 0) {
		dump_error(NULL, "cannot write the output");
		goto out;
	}
	if (o->fmt == AMP_FMT_TEXT && n_done > 0)
		print_summary(out, o, a_path, b_path, pairs, res, npairs, first, n_flagged,
		              n_one_sided);
	if (o->fmt == AMP_FMT_TEXT && n_shape > 0)
		fprintf(out, "%zu of %zu tensors differ in shape and were not compared (runs of "
		        "another batch or model?)\n", n_shape, npairs);
	if (fflush(out) != 0 || ferror(out)) {
		dump_error(NULL, "cannot write the output");
		goto out;
	}
	if (n_done == 0) { /* a table of "shape" and "no-data" rows compares nothing */
		dump_error("compare runs of the same program, batch and model, with their tensors "
		           "dumped (ampprof --dump-steps)",
		           "nothing was compared: of %zu tensors lined up, %zu differ in shape and %zu "
		           "have no data", npairs, n_shape, npairs - n_shape);
		goto out;
	}
	/* a tensor of another shape is a difference too, if not a numerical one */
	code = n_flagged || n_shape ? DUMP_EXIT_CMP_DIFFER : DUMP_EXIT_CMP_SAME;
	goto out;
sql_error_a:
	dump_sql_error(a.db, a_path);
	goto out;
oom:
	dump_error(NULL, "out of memory");
out:
	free(res);
	free(pairs);
	amp_table_free(t);
	dump_run_release(&b);
	dump_run_release(&a);
	return code;
}
