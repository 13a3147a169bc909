/* export.c — `ampprof export`: the profile as a Chrome trace (chrome://tracing, Perfetto) or
 * as CSV of one table, on stdout or a file.
 *
 * Chrome trace: one complete event ("X") per op, copy and step, timestamps in microseconds,
 * one track per producing thread (steps on their own track), the loss scale as a counter;
 * otherData.format_version versions the layout.  CSV goes through the tools' table writer
 * (amp_table.h), strings of both through amp_text.h (valid UTF-8, no raw control characters).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amp_table.h"
#include "amp_text.h"
#include "prof.h"

/* Every string of the trace through amp_json_string: valid UTF-8, controls escaped. */
static void json_text(FILE *f, const unsigned char *s)
{
	amp_json_string(f, (const char *)s);
}

/* A real column: %.9g, null when NULL or not finite (the trace's arguments carry no
 * "<key>_nonfinite" flag: a null loss is a step whose loss was not finite or not recorded). */
static void json_real_col(FILE *f, sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		fputs("null", f);
	else
		amp_json_number(f, sqlite3_column_double(st, i));
}

static int emit_rows(sqlite3 *db, FILE *f, const char *sql, int kind, int *first)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		fputs(*first ? "\n" : ",\n", f);
		*first = 0;
		double ts = (double)sqlite3_column_int64(st, 0) / 1e3;
		double dur = (double)sqlite3_column_int64(st, 1) / 1e3;
		int64_t tid = sqlite3_column_int64(st, 2);
		switch (kind) {
		case 0: /* op: ts, dur, thread, op, dtype, label, shape, step, seq, phase */
			fputs("{\"name\":", f);
			json_text(f, sqlite3_column_text(st, 3));
			fprintf(f, ",\"cat\":\"op\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,"
			        "\"tid\":%" PRId64 ",\"args\":{\"dtype\":", ts, dur, tid);
			json_text(f, sqlite3_column_text(st, 4));
			fputs(",\"label\":", f);
			json_text(f, sqlite3_column_text(st, 5));
			fputs(",\"shape\":", f);
			json_text(f, sqlite3_column_text(st, 6));
			fprintf(f, ",\"step\":%" PRId64 ",\"seq\":%" PRId64 ",\"phase\":",
			        (int64_t)sqlite3_column_int64(st, 7), (int64_t)sqlite3_column_int64(st, 8));
			json_text(f, sqlite3_column_text(st, 9));
			fputs("}}", f);
			break;
		case 1: /* copy: ts, dur, thread, kind, src, dst, bytes, label */
			fputs("{\"name\":", f);
			json_text(f, sqlite3_column_text(st, 3));
			fprintf(f, ",\"cat\":\"copy\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,"
			        "\"tid\":%" PRId64 ",\"args\":{\"src\":", ts, dur, tid);
			json_text(f, sqlite3_column_text(st, 4));
			fputs(",\"dst\":", f);
			json_text(f, sqlite3_column_text(st, 5));
			fprintf(f, ",\"bytes\":%" PRId64 ",\"label\":", (int64_t)sqlite3_column_int64(st, 6));
			json_text(f, sqlite3_column_text(st, 7));
			fputs("}}", f);
			break;
		case 2: /* step: ts, dur, thread, step, loss, scale */
			fprintf(f, "{\"name\":\"step %" PRId64 "\",\"cat\":\"step\",\"ph\":\"X\","
			        "\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%" PRId64 ",\"args\":{\"loss\":",
			        (int64_t)sqlite3_column_int64(st, 3), ts, dur, 1000 + tid);
			json_real_col(f, st, 4);
			fputs(",\"scale\":", f);
			json_real_col(f, st, 5);
			fputs("}}", f);
			break;
		default: /* loss scale counter: ts, 0, 0, new_scale */
			fprintf(f, "{\"name\":\"loss_scale\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":1,"
			        "\"args\":{\"scale\":", ts);
			json_real_col(f, st, 3);
			fputs("}}", f);
			break;
		}
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int prof_export_chrome(sqlite3 *db, FILE *f)
{
	int first = 1;
	fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"format_version\":%d},"
	        "\"traceEvents\":[", AMP_JSON_FORMAT_VERSION);
	fputs("\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"ampkit\"}}",
	      f);
	first = 0;
	if (emit_rows(db, f,
	              "SELECT start_ns, coalesce(dur_ns, 0), thread, step, loss, scale FROM steps "
	              "ORDER BY start_ns, step", 2, &first) != 0 ||
	    emit_rows(db, f,
	              "SELECT e.start_ns, e.dur_ns, e.thread, s.op, s.exec_dtype, coalesce(s.label, ''),"
	              " s.shape, e.step, e.seq, s.phase FROM op_events e JOIN op_sigs s ON s.id = e.sig"
	              " ORDER BY e.id", 0, &first) != 0 ||
	    emit_rows(db, f,
	              "SELECT e.start_ns, e.dur_ns, e.thread, s.kind, s.src_dtype, s.dst_dtype, s.bytes,"
	              " coalesce(s.label, '') FROM copy_events e JOIN copy_sigs s ON s.id = e.sig"
	              " ORDER BY e.id", 1, &first) != 0 ||
	    emit_rows(db, f,
	              "SELECT t_ns, 0, 0, new_scale FROM loss_scale ORDER BY t_ns, step", 3, &first) != 0)
		return -1;
	fputs("\n]}\n", f);
	return ferror(f) ? -1 : 0;
}

int prof_export_csv(sqlite3 *db, FILE *f, const char *table)
{
	static const struct {
		const char *name, *order;
	} tables[] = {
	    {"ops", "id"}, {"copies", "id"}, {"steps", "step, start_ns"},
	    {"loss_scale", "step, t_ns"}, {"memory", "step, t_ns"}, {"op_summary", "total_ns DESC, op"},
	    {"callsites", "id"}, {"advice", "id"}, {"tensor_stats", "id"}, {"meta", "key"},
	    {"crashes", "id"}, {"threads", "id"}, {"comm", "id"}, {"rank_summary", "rank"},
	};
	const char *order = NULL;
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
		if (strcmp(tables[i].name, table) == 0)
			order = tables[i].order;
	if (!order) {
		prof_error("tables: ops, copies, steps, loss_scale, memory, op_summary, callsites, "
		           "advice, tensor_stats, meta, crashes, threads, comm, rank_summary",
		           "cannot export table '%s': unknown table", table);
		return -2;
	}
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT * FROM %s ORDER BY %s", table, order);
	sqlite3_stmt *st = NULL;
	amp_column *cols = NULL;
	amp_table *t = NULL;
	int rc = SQLITE_ERROR, ok = 0;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	int ncol = sqlite3_column_count(st);
	/* column names stay valid while st lives; every column is text to the CSV writer */
	cols = calloc((size_t)(ncol > 0 ? ncol : 1), sizeof *cols);
	if (!cols)
		goto out;
	for (int i = 0; i < ncol; i++)
		cols[i] = (amp_column){sqlite3_column_name(st, i), AMP_COL_TEXT};
	if (!(t = amp_table_new(cols, ncol)) || amp_table_stream(t, AMP_FMT_CSV, f) != 0)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (amp_table_add_row(t) != 0)
			goto out;
		for (int i = 0; i < ncol; i++) {
			char blob[32];
			int set = 0;
			switch (sqlite3_column_type(st, i)) {
			case SQLITE_NULL: break;
			case SQLITE_INTEGER: set = amp_table_set_int(t, i, sqlite3_column_int64(st, i)); break;
			case SQLITE_FLOAT: set = amp_table_set_real(t, i, sqlite3_column_double(st, i)); break;
			case SQLITE_BLOB:
				snprintf(blob, sizeof blob, "<%d bytes>", sqlite3_column_bytes(st, i));
				set = amp_table_set_text(t, i, blob);
				break;
			default:
				set = amp_table_set_text(t, i, (const char *)sqlite3_column_text(st, i));
				break;
			}
			if (set != 0)
				goto out;
		}
	}
	ok = rc == SQLITE_DONE && amp_table_print(t, AMP_FMT_CSV, f) == 0;
out:
	amp_table_free(t);
	free(cols);
	sqlite3_finalize(st);
	return ok ? 0 : -1;
}
