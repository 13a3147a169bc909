/* list.c — `ampdump --list`: the steps that have anomalies (overflow, skipped update,
 * non-finite tensors, an origin) or dumps, one row per step in step order.
 *
 * Aggregates are computed per table with GROUP BY and joined, so a long run with many
 * anomalous steps costs a few scans, not one per step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump.h"
#include "profile_db.h"

static const amp_column list_cols[] = {
    {"step", AMP_COL_INT},       {"overflow", AMP_COL_FLAG},  {"skipped", AMP_COL_FLAG},
    {"scale", AMP_COL_REAL},     {"loss", AMP_COL_REAL},      {"nonfinite", AMP_COL_INT},
    {"origin_seq", AMP_COL_INT}, {"origin_op", AMP_COL_TEXT}, {"origin_name", AMP_COL_TEXT},
    {"dumps", AMP_COL_INT},      {"dump_bytes", AMP_COL_INT},
};
#define LIST_NCOLS ((int)(sizeof list_cols / sizeof list_cols[0]))

/* %s: the loss_state column (schema version 3) or NULL: a NaN or Inf loss is listed as such
 * (text 'nan', 'inf', '-inf' in the loss column), never as no loss. */
#define LIST_SQL \
    "WITH st AS (SELECT step, max(overflow) AS ov, max(skipped) AS sk, min(scale) AS sc," \
    "            coalesce(min(loss), max(CASE WHEN %s IN ('nan', 'inf', '-inf') THEN %s END))" \
    "            AS loss FROM steps GROUP BY step)," \
    " ts AS (SELECT step, sum(nan > 0 OR inf > 0) AS nonfinite," \
    "            min(CASE WHEN origin THEN id END) AS origin_id FROM tensor_stats GROUP BY step)," \
    " du AS (SELECT step, count(*) AS n, sum(bytes) AS b FROM dumps GROUP BY step)," \
    " s AS (SELECT step FROM st WHERE ov OR sk OR typeof(loss) = 'text'" \
    "       UNION SELECT step FROM ts WHERE nonfinite > 0 OR origin_id IS NOT NULL" \
    "       UNION SELECT step FROM du)" \
    " SELECT s.step, st.ov, st.sk, st.sc, st.loss, ts.nonfinite, o.seq, o.op, o.name," \
    "        du.n, du.b" \
    " FROM s LEFT JOIN st ON st.step = s.step LEFT JOIN ts ON ts.step = s.step" \
    "      LEFT JOIN du ON du.step = s.step LEFT JOIN tensor_stats o ON o.id = ts.origin_id" \
    " WHERE s.step IS NOT NULL ORDER BY s.step"

int dump_cmd_list(const char *db_path, amp_format fmt, FILE *out)
{
	sqlite3_stmt *st = NULL;
	amp_table *t = NULL;
	int code = DUMP_EXIT_FAIL;
	int64_t steps = 0;

	sqlite3 *db = dump_open_profile(db_path);
	if (!db)
		return DUMP_EXIT_FAIL;
	t = amp_table_new(list_cols, LIST_NCOLS);
	if (!t) {
		dump_error(NULL, "out of memory");
		goto out;
	}
	const char *state = amp_profile_has_column(db, "steps", "loss_state") ? "loss_state" : "NULL";
	char sql[sizeof LIST_SQL + 32];
	snprintf(sql, sizeof sql, LIST_SQL, state, state);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto sql_error;
	int s;
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		int e = amp_table_add_row(t);
		for (int c = 0; c < LIST_NCOLS && !e; c++) {
			if (sqlite3_column_type(st, c) == SQLITE_NULL)
				continue;
			switch (list_cols[c].kind) {
			case AMP_COL_REAL: /* a non-finite loss comes as its name */
				e |= amp_table_set_real(t, c, sqlite3_column_type(st, c) == SQLITE_TEXT
				                                  ? strtod((const char *)sqlite3_column_text(st, c),
				                                           NULL)
				                                  : sqlite3_column_double(st, c));
				break;
			case AMP_COL_TEXT:
				e |= amp_table_set_text(t, c,
				                         (const char *)sqlite3_column_text(st, c));
				break;
			default: e |= amp_table_set_int(t, c, sqlite3_column_int64(st, c));
			}
		}
		if (e) {
			dump_error(NULL, "out of memory");
			goto out;
		}
	}
	if (s != SQLITE_DONE)
		goto sql_error;
	sqlite3_finalize(st);
	st = NULL;
	/* (a step several threads' contexts ran has a row for each) */
	if (amp_profile_query_int64(db, &steps, "SELECT count(DISTINCT step) FROM steps", NULL) !=
	    AMP_PROFILE_OK)
		goto sql_error;

	if (fmt == AMP_FMT_TEXT) {
		if (!amp_table_rows(t)) {
			if (steps == 0)
				fprintf(stderr, "ampdump: '%s' recorded no steps\n", db_path);
			else
				fprintf(stderr,
				        "ampdump: none of the %lld step(s) in '%s' has an anomaly or a "
				        "dump\n", (long long)steps, db_path);
			code = DUMP_EXIT_OK;
			goto out;
		}
		fprintf(out, "%s: %zu of %lld steps with anomalies or dumps\n", db_path,
		        amp_table_rows(t), (long long)steps);
	}
	if (amp_table_print(t, fmt, out) != 0) {
		dump_error(NULL, "cannot write the output");
		goto out;
	}
	code = DUMP_EXIT_OK;
	goto out;
sql_error:
	dump_error(NULL, "cannot read '%s': %s", db_path, sqlite3_errmsg(db));
out:
	sqlite3_finalize(st);
	amp_table_free(t);
	amp_profile_close(db);
	return code;
}
