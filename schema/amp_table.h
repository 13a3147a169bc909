/* amp_table.h — the one table writer of the tools: rows of typed cells printed as aligned text,
 * CSV or JSON with the rules of amp_text.h (sanitized text, valid UTF-8, %.9g, nan/inf in text
 * and CSV, null plus "<key>_nonfinite" in JSON).  ampdump prints its results with it, ampprof
 * its CSV export; both have the same quoting, escaping and non-finite rule.
 *
 * Cells are kept as formatted strings (NULL for a null cell) so that the three formats show
 * exactly the same values; the column kind only decides alignment and JSON typing.  A table
 * is either kept whole (text needs every width before the first line) or streamed (CSV and
 * JSON: each row is written as soon as the next one starts).  Not thread-safe per table.
 */
#ifndef AMP_TABLE_H
#define AMP_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { AMP_FMT_TEXT = 0, AMP_FMT_CSV = 1, AMP_FMT_JSON = 2 } amp_format;

/* Column kinds: text is left-aligned and a JSON string; int and real are right-aligned numbers
 * (reals %.9g, non-finite as nan/inf/-inf in text and CSV, null plus "<name>_nonfinite" in
 * JSON); a flag prints "*" or nothing in text, 1/0 in CSV, true/false in JSON. */
typedef enum { AMP_COL_TEXT, AMP_COL_INT, AMP_COL_REAL, AMP_COL_FLAG } amp_col_kind;

typedef struct amp_column {
	const char *name; /* column name: text header, CSV header, JSON key (stable) */
	amp_col_kind kind;
} amp_column;

typedef struct amp_table amp_table;

/* A table of ncols columns (cols must outlive it).  NULL when out of memory. */
amp_table *amp_table_new(const amp_column *cols, int ncols);
/* Frees t (NULL: nothing) without printing what a stream still holds. */
void amp_table_free(amp_table *t);

/* Makes t a stream of format fmt (CSV or JSON; text cannot stream) to f: rows are written as
 * they complete instead of kept, and amp_table_print(t, fmt, f) then ends the output.  Call
 * before the first row.  Returns 0, or -1 for AMP_FMT_TEXT or a table that has rows. */
int amp_table_stream(amp_table *t, amp_format fmt, FILE *f);

/* Appends a row whose cells are all null (text "-", CSV empty, JSON null).  In a stream, the
 * previous row is written first.  0, or -1 when out of memory or on a write error. */
int amp_table_add_row(amp_table *t);
/* Sets a cell of the last row.  Text is copied; a NULL text leaves the cell null.  0 or -1. */
int amp_table_set_text(amp_table *t, int col, const char *text);
int amp_table_set_int(amp_table *t, int col, int64_t v);
int amp_table_set_real(amp_table *t, int col, double v);
/* Rows added so far. */
size_t amp_table_rows(const amp_table *t);

/* A member of the JSON document beside "format_version" and "rows": key (copied, at most
 * AMP_TABLE_MEMBERS per table, set before the table is printed or streamed) holding the integer
 * v, or null when is_null.  Text and CSV do not show it.  0, or -1 when full or out of memory. */
#define AMP_TABLE_MEMBERS 4
int amp_table_set_member_int(amp_table *t, const char *key, int64_t v, int is_null);

/* Prints the table: text (aligned columns with a header line), CSV (RFC 4180, header line) or
 * JSON ({"format_version": 1, <members>, "rows": [objects]}).  A stream writes its last row and the end
 * (fmt and f must be the stream's).  Returns 0, or -1 on a write error. */
int amp_table_print(amp_table *t, amp_format fmt, FILE *f);

#endif
