/* table.c — the result tables of ampdump, printed as aligned text, CSV or JSON.
 *
 * Cells are kept as formatted strings (NULL for a null cell) so that the three formats show
 * exactly the same values; the column kind only decides alignment and JSON quoting.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dump.h"

struct dump_table {
	const dump_column *cols;
	int ncols;
	size_t nrows, cap;
	char **cells; /* nrows * ncols, row-major; NULL = null */
};

char *dump_format_real(double v, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "nan");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "inf" : "-inf");
	else
		snprintf(buf, len, "%.9g", v);
	return buf;
}

dump_table *dump_table_new(const dump_column *cols, int ncols)
{
	dump_table *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->cols = cols;
	t->ncols = ncols;
	return t;
}

void dump_table_free(dump_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

int dump_table_add_row(dump_table *t)
{
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

size_t dump_table_rows(const dump_table *t)
{
	return t->nrows;
}

int dump_table_set_text(dump_table *t, int col, const char *text)
{
	if (!t->nrows || col < 0 || col >= t->ncols)
		return -1;
	char **cell = &t->cells[(t->nrows - 1) * (size_t)t->ncols + (size_t)col];
	free(*cell);
	*cell = NULL;
	if (!text)
		return 0;
	*cell = strdup(text);
	return *cell ? 0 : -1;
}

int dump_table_set_int(dump_table *t, int col, int64_t v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", (long long)v);
	return dump_table_set_text(t, col, buf);
}

int dump_table_set_real(dump_table *t, int col, double v)
{
	char buf[40];
	return dump_table_set_text(t, col, dump_format_real(v, buf, sizeof buf));
}

static const char *cell(const dump_table *t, size_t row, int col)
{
	return t->cells[row * (size_t)t->ncols + (size_t)col];
}

static int flag_set(const char *v)
{
	return v && strcmp(v, "0") != 0;
}

/* What the text format shows for a cell. */
static const char *text_of(const dump_table *t, size_t row, int col)
{
	const char *v = cell(t, row, col);
	if (t->cols[col].kind == DUMP_COL_FLAG)
		return flag_set(v) ? "*" : "";
	return v ? v : "-";
}

static void print_text(const dump_table *t, FILE *f)
{
	size_t *width = calloc((size_t)t->ncols, sizeof *width);
	if (!width)
		return;
	for (int c = 0; c < t->ncols; c++) {
		width[c] = strlen(t->cols[c].name);
		for (size_t r = 0; r < t->nrows; r++) {
			size_t w = strlen(text_of(t, r, c));
			if (w > width[c])
				width[c] = w;
		}
	}
	for (size_t r = 0; r <= t->nrows; r++) {
		/* row 0 is the header */
		for (int c = 0; c < t->ncols; c++) {
			const char *v = r ? text_of(t, r - 1, c) : t->cols[c].name;
			int right =
			    t->cols[c].kind == DUMP_COL_INT || t->cols[c].kind == DUMP_COL_REAL;
			int last = c == t->ncols - 1;
			if (c)
				fputs("  ", f);
			if (right)
				fprintf(f, "%*s", (int)width[c], v);
			else if (last)
				fputs(v, f);
			else
				fprintf(f, "%-*s", (int)width[c], v);
		}
		fputc('\n', f);
	}
	free(width);
}

static void csv_field(const char *v, FILE *f)
{
	if (!strpbrk(v, ",\"\r\n")) {
		fputs(v, f);
		return;
	}
	fputc('"', f);
	for (const char *p = v; *p; p++) {
		if (*p == '"')
			fputc('"', f);
		fputc(*p, f);
	}
	fputc('"', f);
}

static void print_csv(const dump_table *t, FILE *f)
{
	for (int c = 0; c < t->ncols; c++) {
		if (c)
			fputc(',', f);
		csv_field(t->cols[c].name, f);
	}
	fputc('\n', f);
	for (size_t r = 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			const char *v = cell(t, r, c);
			if (c)
				fputc(',', f);
			if (t->cols[c].kind == DUMP_COL_FLAG)
				fputs(flag_set(v) ? "1" : "0", f);
			else if (v)
				csv_field(v, f);
		}
		fputc('\n', f);
	}
}

static void json_string(const char *v, FILE *f)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p == '\t')
			fputs("\\t", f);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static int is_json_number(const char *v)
{
	return strcmp(v, "nan") != 0 && strcmp(v, "inf") != 0 && strcmp(v, "-inf") != 0;
}

static void print_json(const dump_table *t, FILE *f)
{
	if (!t->nrows) {
		fputs("[]\n", f);
		return;
	}
	fputs("[\n", f);
	for (size_t r = 0; r < t->nrows; r++) {
		fputs("  {", f);
		for (int c = 0; c < t->ncols; c++) {
			const char *v = cell(t, r, c);
			if (c)
				fputs(", ", f);
			json_string(t->cols[c].name, f);
			fputs(": ", f);
			switch (t->cols[c].kind) {
			case DUMP_COL_FLAG: fputs(flag_set(v) ? "true" : "false", f); break;
			case DUMP_COL_INT:
			case DUMP_COL_REAL:
				if (!v)
					fputs("null", f);
				else if (is_json_number(v))
					fputs(v, f);
				else
					json_string(v,
					            f); /* "nan", "inf", "-inf": not JSON numbers */
				break;
			default:
				if (v)
					json_string(v, f);
				else
					fputs("null", f);
			}
		}
		fputs(r + 1 < t->nrows ? "},\n" : "}\n", f);
	}
	fputs("]\n", f);
}

int dump_table_print(const dump_table *t, dump_format fmt, FILE *f)
{
	switch (fmt) {
	case DUMP_FMT_CSV: print_csv(t, f); break;
	case DUMP_FMT_JSON: print_json(t, f); break;
	default: print_text(t, f); break;
	}
	return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
