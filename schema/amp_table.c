/* amp_table.c — the table writer (see amp_table.h): cells as strings, three formats, every
 * string through amp_text.h's writers. */
#include "amp_table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp_text.h"

struct amp_table {
	const amp_column *cols;
	int ncols;
	size_t nrows, cap;
	char **cells; /* kept rows * ncols, row-major; NULL = null */
	/* streaming: only the last row is kept */
	FILE *stream;
	amp_format stream_fmt;
	size_t written; /* rows already written */
	int failed;
	/* members of the JSON document (amp_table_set_member_int) */
	int nmembers;
	char *member_key[AMP_TABLE_MEMBERS];
	int64_t member_value[AMP_TABLE_MEMBERS];
	int member_null[AMP_TABLE_MEMBERS];
};

amp_table *amp_table_new(const amp_column *cols, int ncols)
{
	amp_table *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->cols = cols;
	t->ncols = ncols;
	return t;
}

/* Rows held in cells: all of them, or the last one in a stream. */
static size_t kept(const amp_table *t)
{
	return t->stream ? (t->nrows > t->written ? 1 : 0) : t->nrows;
}

static void clear_cells(amp_table *t)
{
	for (size_t i = 0; i < kept(t) * (size_t)t->ncols; i++) {
		free(t->cells[i]);
		t->cells[i] = NULL;
	}
}

void amp_table_free(amp_table *t)
{
	if (!t)
		return;
	clear_cells(t);
	free(t->cells);
	for (int i = 0; i < t->nmembers; i++)
		free(t->member_key[i]);
	free(t);
}

int amp_table_set_member_int(amp_table *t, const char *key, int64_t v, int is_null)
{
	if (t->nmembers == AMP_TABLE_MEMBERS || !(t->member_key[t->nmembers] = strdup(key)))
		return -1;
	t->member_value[t->nmembers] = v;
	t->member_null[t->nmembers] = is_null;
	t->nmembers++;
	return 0;
}

int amp_table_stream(amp_table *t, amp_format fmt, FILE *f)
{
	if (fmt == AMP_FMT_TEXT || t->nrows)
		return -1;
	t->stream = f;
	t->stream_fmt = fmt;
	return 0;
}

static const char *cell(const amp_table *t, size_t row, int col)
{
	return t->cells[row * (size_t)t->ncols + (size_t)col];
}

static int flag_set(const char *v)
{
	return v && strcmp(v, "0") != 0;
}

/* ---- CSV and JSON rows --------------------------------------------------------------------- */

static void csv_header(const amp_table *t, FILE *f)
{
	for (int c = 0; c < t->ncols; c++) {
		if (c)
			fputc(',', f);
		amp_csv_field(f, t->cols[c].name);
	}
	fputc('\n', f);
}

static void csv_row(const amp_table *t, size_t r, FILE *f)
{
	for (int c = 0; c < t->ncols; c++) {
		const char *v = cell(t, r, c);
		if (c)
			fputc(',', f);
		if (t->cols[c].kind == AMP_COL_FLAG)
			fputs(flag_set(v) ? "1" : "0", f);
		else if (v)
			amp_csv_field(f, v);
	}
	fputc('\n', f);
}

static void json_begin(const amp_table *t, FILE *f)
{
	fprintf(f, "{\"format_version\": %d, ", AMP_JSON_FORMAT_VERSION);
	for (int i = 0; i < t->nmembers; i++) {
		amp_json_string(f, t->member_key[i]);
		if (t->member_null[i])
			fputs(": null, ", f);
		else
			fprintf(f, ": %lld, ", (long long)t->member_value[i]);
	}
	fputs("\"rows\": [", f);
}

/* A real cell's value: its text is amp_format_real's. */
static double real_of(const char *v)
{
	if (strcmp(v, "nan") == 0)
		return (double)NAN;
	if (strcmp(v, "inf") == 0)
		return (double)INFINITY;
	if (strcmp(v, "-inf") == 0)
		return -(double)INFINITY;
	return strtod(v, NULL);
}

static int is_number_text(const char *v)
{
	char *end;
	if (!*v)
		return 0;
	strtod(v, &end);
	return *end == '\0';
}

static void json_row(const amp_table *t, size_t r, size_t index, FILE *f)
{
	fputs(index ? ",\n  {" : "\n  {", f);
	for (int c = 0; c < t->ncols; c++) {
		const char *v = cell(t, r, c), *sep = c ? ", " : "";
		switch (t->cols[c].kind) {
		case AMP_COL_FLAG:
			fputs(sep, f);
			amp_json_string(f, t->cols[c].name);
			fputs(flag_set(v) ? ": true" : ": false", f);
			break;
		case AMP_COL_INT:
		case AMP_COL_REAL:
			if (v && (!strcmp(v, "nan") || !strcmp(v, "inf") || !strcmp(v, "-inf"))) {
				amp_json_member_real(f, sep, t->cols[c].name, real_of(v));
				break;
			}
			fputs(sep, f);
			amp_json_string(f, t->cols[c].name);
			fputs(": ", f);
			if (!v)
				fputs("null", f);
			else if (is_number_text(v))
				fputs(v, f);
			else
				amp_json_string(f, v); /* not a number: kept as text, never invalid JSON */
			break;
		case AMP_COL_TEXT:
			fputs(sep, f);
			amp_json_string(f, t->cols[c].name);
			fputs(": ", f);
			if (v)
				amp_json_string(f, v);
			else
				fputs("null", f);
			break;
		}
	}
	fputc('}', f);
}

static void json_end(size_t rows, FILE *f)
{
	fputs(rows ? "\n]}\n" : "]}\n", f);
}

/* Writes the row a stream holds (if any) and drops it. */
static void stream_flush_row(amp_table *t)
{
	if (t->nrows == t->written)
		return;
	if (t->stream_fmt == AMP_FMT_CSV) {
		if (t->written == 0)
			csv_header(t, t->stream);
		csv_row(t, 0, t->stream);
	} else {
		if (t->written == 0)
			json_begin(t, t->stream);
		json_row(t, 0, t->written, t->stream);
	}
	clear_cells(t);
	t->written = t->nrows;
	if (ferror(t->stream))
		t->failed = 1;
}

int amp_table_add_row(amp_table *t)
{
	if (t->stream) {
		stream_flush_row(t);
		if (t->failed)
			return -1;
		if (!t->cells && !(t->cells = calloc((size_t)t->ncols, sizeof *t->cells)))
			return -1;
		t->nrows++;
		return 0;
	}
	if (t->nrows == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		char **cells = realloc(t->cells, cap * (size_t)t->ncols * sizeof *cells);
		if (!cells)
			return -1;
		t->cells = cells;
		t->cap = cap;
	}
	memset(t->cells + t->nrows * (size_t)t->ncols, 0, (size_t)t->ncols * sizeof *t->cells);
	t->nrows++;
	return 0;
}

size_t amp_table_rows(const amp_table *t)
{
	return t->nrows;
}

int amp_table_set_text(amp_table *t, int col, const char *text)
{
	if (!t->nrows || t->nrows == t->written || col < 0 || col >= t->ncols)
		return -1;
	char **c = &t->cells[(kept(t) - 1) * (size_t)t->ncols + (size_t)col];
	free(*c);
	*c = NULL;
	if (!text)
		return 0;
	*c = strdup(text);
	return *c ? 0 : -1;
}

int amp_table_set_int(amp_table *t, int col, int64_t v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", (long long)v);
	return amp_table_set_text(t, col, buf);
}

int amp_table_set_real(amp_table *t, int col, double v)
{
	char buf[40];
	return amp_table_set_text(t, col, amp_format_real(v, buf, sizeof buf));
}

/* ---- text ---------------------------------------------------------------------------------- */

/* What the text format shows for a cell (before sanitizing). */
static const char *text_of(const amp_table *t, size_t row, int col)
{
	const char *v = cell(t, row, col);
	if (t->cols[col].kind == AMP_COL_FLAG)
		return flag_set(v) ? "*" : "";
	return v ? v : "-";
}

static void print_text(const amp_table *t, FILE *f)
{
	size_t *width = calloc((size_t)t->ncols, sizeof *width);
	if (!width)
		return;
	for (int c = 0; c < t->ncols; c++) {
		width[c] = amp_text_width(t->cols[c].name);
		for (size_t r = 0; r < t->nrows; r++) {
			size_t w = amp_text_width(text_of(t, r, c));
			if (w > width[c])
				width[c] = w;
		}
	}
	for (size_t r = 0; r <= t->nrows; r++) {
		/* row 0 is the header */
		for (int c = 0; c < t->ncols; c++) {
			const char *v = r ? text_of(t, r - 1, c) : t->cols[c].name;
			int right = t->cols[c].kind == AMP_COL_INT || t->cols[c].kind == AMP_COL_REAL;
			int last = c == t->ncols - 1;
			size_t w = amp_text_width(v), pad = width[c] > w ? width[c] - w : 0;
			if (c)
				fputs("  ", f);
			if (right)
				fprintf(f, "%*s", (int)pad, "");
			amp_text_put(f, v);
			if (!right && !last)
				fprintf(f, "%*s", (int)pad, "");
		}
		fputc('\n', f);
	}
	free(width);
}

int amp_table_print(amp_table *t, amp_format fmt, FILE *f)
{
	if (t->stream) {
		stream_flush_row(t);
		if (t->written == 0 && t->stream_fmt == AMP_FMT_CSV)
			csv_header(t, t->stream);
		if (t->stream_fmt == AMP_FMT_JSON) {
			if (t->written == 0)
				json_begin(t, t->stream);
			json_end(t->written, t->stream);
		}
		return fflush(t->stream) == 0 && !ferror(t->stream) && !t->failed ? 0 : -1;
	}
	switch (fmt) {
	case AMP_FMT_CSV:
		csv_header(t, f);
		for (size_t r = 0; r < t->nrows; r++)
			csv_row(t, r, f);
		break;
	case AMP_FMT_JSON:
		json_begin(t, f);
		for (size_t r = 0; r < t->nrows; r++)
			json_row(t, r, r, f);
		json_end(t->nrows, f);
		break;
	case AMP_FMT_TEXT: print_text(t, f); break;
	}
	return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
