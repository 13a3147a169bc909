/* report_memory.c — the report's memory section and step history: tensor memory by category
 * (master weights, working copies, activations, gradients, optimizer state) at the peak and
 * over the steps, and the loss beside the loss scale step by step (JSON).  A step's memory is
 * its rank's contexts' together (amp_profile_memory_steps); in a merged profile each step is
 * the rank with the largest peak's.  Long runs are sampled every `stride` steps; a step that
 * overflowed or skipped its update is always listed, so a backoff is never sampled away.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp_text.h"
#include "prof.h"
#include "profile_db.h"

#define SERIES_MAX 1000 /* steps listed before sampling */

static const char *const cats[5] = {"master_weights", "working_copies", "activations", "grads",
                                    "optimizer_state"};

/* The stride that keeps a series of n rows within SERIES_MAX. */
static int64_t stride_of(int64_t n)
{
	return n > SERIES_MAX ? (n + SERIES_MAX - 1) / SERIES_MAX : 1;
}

void prof_report_memory_text(sqlite3 *db, FILE *f)
{
	sqlite3_stmt *st = NULL;
	char b[64], sql[2048];
	if (!amp_profile_memory_steps(db, "WITH m AS (", NULL,
	                              ") SELECT *, (SELECT total FROM m ORDER BY step DESC LIMIT 1)"
	                              " FROM m ORDER BY 8 DESC, 7 DESC, 1 LIMIT 1",
	                              sql, sizeof sql) ||
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW)
		goto out;
	fprintf(f, "  memory       at the peak (step %" PRId64, (int64_t)sqlite3_column_int64(st, 0));
	int64_t ranks = 1;
	if (amp_profile_has_column(db, "memory", "rank"))
		amp_profile_query_int64(db, &ranks, "SELECT count(DISTINCT rank) FROM memory", NULL);
	if (ranks > 1) /* a merged profile: one rank's own */
		fprintf(f, ", rank %" PRId64 ", the rank with the most",
		        (int64_t)sqlite3_column_int64(st, 8));
	fputs("):", f);
	for (int c = 0; c < 5; c++) {
		prof_bytes_text(b, sizeof b, (int64_t)sqlite3_column_int64(st, 1 + c));
		fprintf(f, "%s %s %s", c ? "," : "", cats[c], b);
	}
	prof_bytes_text(b, sizeof b, (int64_t)sqlite3_column_int64(st, 9));
	fprintf(f, "; last step %s\n", b);
out:
	sqlite3_finalize(st);
}

int prof_report_memory_json(sqlite3 *db, FILE *f)
{
	sqlite3_stmt *st = NULL;
	int64_t n = 0;
	char sql[2048];
	amp_profile_query_int64(db, &n, "SELECT count(DISTINCT step) FROM memory", NULL);
	int64_t stride = stride_of(n);
	fputs(",\n \"memory\": ", f);
	if (!amp_profile_memory_steps(db, "", NULL, " ORDER BY 8 DESC, 7 DESC, 1 LIMIT 1", sql,
	                              sizeof sql) ||
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		fputs("null", f);
		return 0;
	}
	fprintf(f, "{\"peak_bytes\": %" PRId64 ", \"peak_step\": %" PRId64 ", \"peak_rank\": %" PRId64
	        ", \"at_peak\": {",
	        (int64_t)sqlite3_column_int64(st, 7), (int64_t)sqlite3_column_int64(st, 0),
	        (int64_t)sqlite3_column_int64(st, 8));
	for (int c = 0; c < 5; c++)
		fprintf(f, "%s\"%s\": %" PRId64, c ? ", " : "", cats[c],
		        (int64_t)sqlite3_column_int64(st, 1 + c));
	sqlite3_finalize(st);
	fprintf(f, "}, \"stride\": %" PRId64 ", \"steps\": [", stride);
	if (!amp_profile_memory_steps(db, "", NULL, " ORDER BY step", sql, sizeof sql) ||
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int64_t i = 0, k = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (i++ % stride != 0)
			continue;
		fprintf(f, "%s\n  {\"step\": %" PRId64, k++ ? "," : "",
		        (int64_t)sqlite3_column_int64(st, 0));
		for (int c = 0; c < 5; c++)
			fprintf(f, ", \"%s\": %" PRId64, cats[c],
			        (int64_t)sqlite3_column_int64(st, 1 + c));
		fprintf(f, ", \"total\": %" PRId64 ", \"peak\": %" PRId64 "}",
		        (int64_t)sqlite3_column_int64(st, 6), (int64_t)sqlite3_column_int64(st, 7));
	}
	sqlite3_finalize(st);
	fputs("]}", f);
	return 0;
}

int prof_report_history_json(sqlite3 *db, FILE *f)
{
	sqlite3_stmt *st = NULL;
	int64_t n = 0;
	amp_profile_query_int64(db, &n, "SELECT count(DISTINCT step) FROM steps", NULL);
	int64_t stride = stride_of(n);
	fprintf(f, ",\n \"history\": {\"stride\": %" PRId64 ", \"steps\": [", stride);
	/* the loss beside the scale used in the step, and the scaler's decision at its end, of one
	 * context: at each step the row of the lowest thread and, within it, of the first context
	 * (contexts of their own per thread, or one after another in a thread, each have a loss
	 * and a scaler; a forked process goes on with its parent's context on another thread) and
	 * of the lowest rank (a merged profile: the ranks' losses are of their own shares); SQLite
	 * gives the bare columns of a group the values of the row min() chose */
	char sql[1024];
	int v3 = amp_profile_has_column(db, "steps", "loss_state") &&
	         amp_profile_has_column(db, "loss_scale", "thread");
	int ctx = amp_profile_has_column(db, "steps", "context") &&
	          amp_profile_has_column(db, "loss_scale", "context");
	int ranked = amp_profile_has_column(db, "steps", "rank");
	snprintf(sql, sizeof sql,
	         "SELECT s.step, s.loss, s.scale, s.overflow, s.skipped, (SELECT new_scale FROM "
	         "loss_scale l WHERE l.step = s.step%s%s%s ORDER BY t_ns DESC LIMIT 1), %s, "
	         "min(coalesce(s.thread, -1) * 4294967296 + %s) FROM steps s%s GROUP BY s.step "
	         "ORDER BY s.step",
	         ranked ? " AND l.rank IS s.rank" : "",
	         v3 ? " AND (l.thread IS s.thread OR l.thread IS NULL)" : "",
	         ctx ? " AND l.context IS s.context" : "", v3 ? "s.loss_state" : "NULL",
	         ctx ? "coalesce(s.context, 0)" : "0",
	         ranked ? " WHERE s.rank = (SELECT min(rank) FROM steps)" : "");
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int64_t i = 0, k = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		int ovf = sqlite3_column_int(st, 3) != 0, skip = sqlite3_column_int(st, 4) != 0;
		if (i++ % stride != 0 && !ovf && !skip)
			continue;
		fprintf(f, "%s\n  {\"step\": %" PRId64, k++ ? "," : "",
		        (int64_t)sqlite3_column_int64(st, 0));
		/* a NULL loss is unknown (null) or not finite (loss_state): null with
		 * "loss_nonfinite", as every non-finite number of the JSON */
		const char *ls = (const char *)sqlite3_column_text(st, 6);
		if (sqlite3_column_type(st, 1) != SQLITE_NULL)
			amp_json_member_real(f, ", ", "loss", sqlite3_column_double(st, 1));
		else if (ls && strcmp(ls, "nan") == 0)
			amp_json_member_real(f, ", ", "loss", (double)NAN);
		else if (ls && strcmp(ls, "inf") == 0)
			amp_json_member_real(f, ", ", "loss", (double)INFINITY);
		else if (ls && strcmp(ls, "-inf") == 0)
			amp_json_member_real(f, ", ", "loss", -(double)INFINITY);
		else
			fputs(", \"loss\": null", f);
		if (sqlite3_column_type(st, 2) == SQLITE_NULL)
			fputs(", \"scale\": null", f);
		else
			amp_json_member_real(f, ", ", "scale", sqlite3_column_double(st, 2));
		if (sqlite3_column_type(st, 5) == SQLITE_NULL)
			fputs(", \"new_scale\": null", f);
		else
			amp_json_member_real(f, ", ", "new_scale", sqlite3_column_double(st, 5));
		fprintf(f, ", \"overflow\": %s, \"skipped\": %s}", ovf ? "true" : "false",
		        skip ? "true" : "false");
	}
	sqlite3_finalize(st);
	fputs("]}", f);
	return 0;
}
