/* diff.c — `ampprof diff A.db B.db`: two runs' timings side by side, per op type, layer and step
 * phase, time per traced step, the change and the ratio B/A, the biggest movers first (the
 * comparison is schema/profile_diff.c's, shared with ampview).  Text, CSV or JSON through the
 * shared table writer.  It pairs with `ampdump --compare`, which compares the numerics.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp_opt.h"
#include "amp_table.h"
#include "prof.h"
#include "profile_db.h"
#include "profile_diff.h"

enum { OPT_FORMAT = 256, OPT_KIND, OPT_LIMIT, OPT_HELP };

static const char *const diff_usage[] = {
    "ampprof diff [--format=text|csv|json] [--kind=op|layer|phase] [--limit=<n>] <a.db> <b.db>",
    NULL};

static const amp_opt diff_opts[] = {
    {OPT_FORMAT, 0, "format", "text|csv|json", "output format", "text"},
    {OPT_KIND, 0, "kind", "op|layer|phase", "only this grouping", "all"},
    {OPT_LIMIT, 0, "limit", "<n>", "at most n rows per grouping (the biggest movers)", "all"},
    {OPT_HELP, 'h', "help", NULL, "show this help", NULL},
};

static const amp_opt_spec diff_spec = {
    .tool = "ampprof",
    .usage = diff_usage,
    .about = "Compares the timings of two profiles, A the baseline and B the run compared with\n"
             "it (FP32 against AMP, before against after a change): per op type, per layer\n"
             "label and per step phase (forward, backward, optimizer, the copies by kind, a\n"
             "data-parallel run's gradient all-reduces ('comm', and 'comm wait' the part a\n"
             "rank blocked on them), the whole step), the time per traced step of each, the\n"
             "change B - A and the ratio B / A, the biggest movers first within each grouping.\n"
             "Time per step, so that runs of different lengths compare; a merged profile's\n"
             "per step of one rank (its ranks' steps averaged), so that it compares with one\n"
             "process or another rank count.  `ampdump --compare` compares the numerics.",
    .opts = diff_opts,
    .n_opts = sizeof diff_opts / sizeof diff_opts[0],
    .footer = "Columns: kind, name, a_dtype, b_dtype (exec dtypes; copy kinds for 'copies',\n"
              "payload dtypes for 'comm'), a_calls, b_calls (in the traced steps, of every\n"
              "rank of a merged profile), a_ms, b_ms (milliseconds per traced step), delta_ms\n"
              "(b_ms - a_ms), ratio (b_ms / a_ms; inf when only B has it).\n"
              "JSON: {\"format_version\", \"a_steps\", \"b_steps\", \"a_ranks\", \"b_ranks\",\n"
              "\"rows\": [...]} (steps of all ranks).  A profile without traced steps (a_steps\n"
              "or b_steps 0) shows its totals instead.\n"
              "\n"
              "Exit status: 0; 2 usage error; 4 the output could not be written; 6 a profile\n"
              "could not be read, or not all of it (damaged, or still being recorded).\n",
    .in_order = 0,
};

enum { C_KIND, C_NAME, C_ADT, C_BDT, C_ACALLS, C_BCALLS, C_AMS, C_BMS, C_DELTA, C_RATIO, C_N };
static const amp_column diff_cols[C_N] = {
    {"kind", AMP_COL_TEXT},    {"name", AMP_COL_TEXT},   {"a_dtype", AMP_COL_TEXT},
    {"b_dtype", AMP_COL_TEXT}, {"a_calls", AMP_COL_INT}, {"b_calls", AMP_COL_INT},
    {"a_ms", AMP_COL_REAL},    {"b_ms", AMP_COL_REAL},   {"delta_ms", AMP_COL_REAL},
    {"ratio", AMP_COL_REAL},
};

static int set_fixed(amp_table *t, int col, const char *fmt, double v)
{
	char buf[48];
	if (!isfinite(v))
		return amp_table_set_real(t, col, v);
	if (v == 0)
		v = 0; /* no "-0" */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	snprintf(buf, sizeof buf, fmt, v);
#pragma GCC diagnostic pop
	return amp_table_set_text(t, col, buf);
}

static int open_one(const char *path, sqlite3 **db)
{
	char err[1024];
	int rc = amp_profile_open(path, 0, db, err, sizeof err);
	if (rc != AMP_PROFILE_OK) {
		prof_error(rc == AMP_PROFILE_ENEWER ? "upgrade ampkit to read it" : NULL, "%s", err);
		return -1;
	}
	if (prof_refuse_live(*db, path, "compare it when the run has ended")) {
		amp_profile_close(*db);
		*db = NULL;
		return -1;
	}
	return 0;
}

/* "A path: 12 traced steps, 3.456 ms/step" (or the totals of a profile without steps); a merged
 * profile's steps counted per rank: "24 traced steps of 2 ranks, 3.456 ms/step of a rank". */
static void print_side(char name, const char *path, int64_t steps, int64_t ranks, double step_ns)
{
	if (steps > 0 && step_ns > 0 && ranks > 1)
		printf("%c %s: %lld traced steps of %lld ranks, %.3f ms/step of a rank\n", name, path,
		       (long long)steps, (long long)ranks, step_ns / 1e6);
	else if (steps > 0 && step_ns > 0)
		printf("%c %s: %lld traced steps, %.3f ms/step\n", name, path, (long long)steps,
		       step_ns / 1e6);
	else if (steps > 0 && ranks > 1) /* killed in their first step: none ended */
		printf("%c %s: %lld traced step(s) of %lld ranks, none ended (no time per step)\n",
		       name, path, (long long)steps, (long long)ranks);
	else if (steps > 0) /* a killed run in its first step: none ended */
		printf("%c %s: %lld traced step(s), none ended (no time per step)\n", name, path,
		       (long long)steps);
	else
		printf("%c %s: no traced steps, its figures are totals\n", name, path);
}

int prof_cmd_diff(int argc, char **argv)
{
	const char *format = "text", *v;
	int kind = -1;
	long limit = -1;
	amp_opt_state st;
	if (amp_opt_begin(&st, &diff_spec, argc, argv) != 0)
		return PROF_EXIT_FAILED;
	for (int id; (id = amp_opt_next(&st, &v)) != AMP_OPT_END;) {
		switch (id) {
		case OPT_FORMAT: format = v; break;
		case OPT_KIND:
			kind = -2;
			for (int k = 0; k < AMP_DIFF_KINDS; k++)
				if (strcmp(v, amp_diff_kind_name((amp_diff_kind)k)) == 0)
					kind = k;
			if (kind == -2)
				return amp_opt_error(&diff_spec, NULL,
				                     "unknown kind '%s' (op, layer, phase)", v);
			break;
		case OPT_LIMIT: {
			char *end;
			limit = strtol(v, &end, 10);
			if (end == v || *end || limit < 1)
				return amp_opt_error(&diff_spec, NULL,
				                     "bad --limit '%s' (a count >= 1)", v);
			break;
		}
		case OPT_HELP:
			amp_opt_help(&diff_spec, stdout);
			return fflush(stdout) == 0 && !ferror(stdout) ? 0 : PROF_EXIT_DB;
		default: return PROF_EXIT_USAGE;
		}
	}
	amp_format fmt = AMP_FMT_TEXT;
	if (strcmp(format, "csv") == 0)
		fmt = AMP_FMT_CSV;
	else if (strcmp(format, "json") == 0)
		fmt = AMP_FMT_JSON;
	else if (strcmp(format, "text") != 0)
		return amp_opt_error(&diff_spec, NULL, "unknown format '%s' (text, csv, json)",
		                     format);
	if (argc - st.optind != 2)
		return amp_opt_error(&diff_spec,
		                     "give the baseline first: ampprof diff fp32.db amp.db",
		                     "diff needs two profiles, got %d", argc - st.optind);
	const char *path[2] = {argv[st.optind], argv[st.optind + 1]};
	sqlite3 *db[2] = {NULL, NULL};
	amp_diff d = {0};
	amp_table *t = NULL;
	int code = PROF_EXIT_PROFILE;
	char err[512];
	if (open_one(path[0], &db[0]) < 0 || open_one(path[1], &db[1]) < 0)
		goto out;
	if (amp_diff_compute(db[0], db[1], &d, err, sizeof err) < 0) {
		prof_error(NULL, "cannot compare '%s' with '%s': %s", path[0], path[1], err);
		goto out;
	}
	code = PROF_EXIT_FAILED;
	if (!(t = amp_table_new(diff_cols, C_N)) ||
	    amp_table_set_member_int(t, "a_steps", d.steps[0], 0) < 0 ||
	    amp_table_set_member_int(t, "b_steps", d.steps[1], 0) < 0 ||
	    amp_table_set_member_int(t, "a_ranks", d.ranks[0], 0) < 0 ||
	    amp_table_set_member_int(t, "b_ranks", d.ranks[1], 0) < 0)
		goto out;
	long in_kind = 0;
	for (size_t i = 0; i < d.nrows; i++) {
		const amp_diff_row *r = &d.rows[i];
		if (i == 0 || r->kind != d.rows[i - 1].kind)
			in_kind = 0;
		if ((kind >= 0 && (int)r->kind != kind) || (limit > 0 && in_kind >= limit))
			continue;
		in_kind++;
		int e = amp_table_add_row(t);
		e |= amp_table_set_text(t, C_KIND, amp_diff_kind_name(r->kind));
		e |= amp_table_set_text(t, C_NAME, r->name);
		e |= amp_table_set_text(t, C_ADT,
		                        r->calls[0] && r->dtype[0][0] ? r->dtype[0] : NULL);
		e |= amp_table_set_text(t, C_BDT,
		                        r->calls[1] && r->dtype[1][0] ? r->dtype[1] : NULL);
		e |= amp_table_set_int(t, C_ACALLS, r->calls[0]);
		e |= amp_table_set_int(t, C_BCALLS, r->calls[1]);
		e |= set_fixed(t, C_AMS, "%.4f", r->ns_per_step[0] / 1e6);
		e |= set_fixed(t, C_BMS, "%.4f", r->ns_per_step[1] / 1e6);
		e |= set_fixed(t, C_DELTA, "%.4f", r->delta_ns / 1e6);
		e |= set_fixed(t, C_RATIO, "%.3f", r->ratio);
		if (e)
			goto out;
	}
	char why[256];
	if (amp_profile_damaged(why, sizeof why)) {
		prof_error(NULL, "cannot read all of '%s' and '%s': %s", path[0], path[1], why);
		code = PROF_EXIT_PROFILE;
		goto out;
	}
	if (fmt == AMP_FMT_TEXT) {
		print_side('A', path[0], d.steps[0], d.ranks[0], d.step_ns[0]);
		print_side('B', path[1], d.steps[1], d.ranks[1], d.step_ns[1]);
		printf("per traced step, biggest movers first; ratio = B / A\n\n");
	}
	errno = 0;
	if (amp_table_print(t, fmt, stdout) < 0 || fflush(stdout) != 0 || ferror(stdout)) {
		prof_error(NULL, "cannot write the output: %s", strerror(errno ? errno : EIO));
		code = PROF_EXIT_DB;
		goto out;
	}
	code = 0;
out:
	amp_table_free(t);
	amp_diff_release(&d);
	amp_profile_close(db[0]);
	amp_profile_close(db[1]);
	return code;
}
