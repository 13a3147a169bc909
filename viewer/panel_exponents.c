/* panel_exponents.c — panel 8: the exponent histograms of the checked tensors on FP16's range
 * (schema/profile_hist.h), one row per tensor name over the run with its values per zone, and
 * under the list the cursor row's histogram: a bar per binade, the zero, subnormal (below
 * 2^-14), normal (2^-14 .. 65504) and overflow zones marked and coloured.  Read once (one scan
 * of tensor_stats) and cached; / filters by tensor name or dtype. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"

typedef struct exponents {
	amp_hist_tensor *rows;
	long n; /* -1: not read */
	int *index;
	long nindex;
	int dirty;
	view_filter filter;
	view_list list;
} exponents;

static const view_keyhelp exponents_help[] = {
    {"Up Down  k j", "the tensor whose histogram is drawn"},
    {"/", "filter by tensor name or dtype (Esc clears)"},
    {NULL, NULL},
};

static void *exponents_create(view_ctx *ctx)
{
	(void)ctx;
	exponents *p = calloc(1, sizeof *p);
	if (p) {
		p->n = -1;
		p->dirty = 1;
	}
	return p;
}

static void exponents_destroy(void *self)
{
	exponents *p = self;
	free(p->rows);
	free(p->index);
	free(p);
}

static int zone_style(amp_hist_zone z)
{
	switch (z) {
	case AMP_HIST_ZERO: return VIEW_S_DIM;
	case AMP_HIST_SUBNORMAL: return VIEW_S_WARN;
	case AMP_HIST_NORMAL: return VIEW_S_GOOD;
	case AMP_HIST_OVERFLOW: return VIEW_S_BAD;
	}
	return VIEW_S_NORMAL;
}

static void share(int64_t part, uint64_t whole, char *buf, size_t len)
{
	double v = whole ? 100.0 * (double)part / (double)whole : 0;
	if (part == 0)
		snprintf(buf, len, "0");
	else if (v < 0.01)
		snprintf(buf, len, "<0.01%%");
	else
		snprintf(buf, len, "%.*f%%", v < 10 ? 2 : 1, v);
}

/* x of a bin's column and its width: the zero, subnormal and overflow bins 3 columns wide,
 * the normal binades 2. */
static int bin_x(int x0, int bin, int *w)
{
	*w = amp_hist_zone_of(bin) == AMP_HIST_NORMAL ? 2 : 3;
	if (bin == 0)
		return x0;
	if (bin == 1)
		return x0 + 4;
	if (bin == AMP_HIST_BINS - 1)
		return x0 + 8 + 2 * (AMP_HIST_BINS - 3) + 1;
	return x0 + 8 + 2 * (bin - 2);
}

static void draw_hist(const amp_hist_tensor *t, view_screen *s, int y, int end)
{
	char a[32], b[32];
	int h = end - y - 3; /* bar rows; then the axis, the exponents and the zones */
	int x0 = 8;
	if (h < 2 || s->w < x0 + 8 + 2 * (AMP_HIST_BINS - 3) + 4)
		return;
	uint64_t top = 0;
	for (int k = 0; k < AMP_HIST_BINS; k++)
		top = t->bins[k] > top ? t->bins[k] : top;
	share((int64_t)top, t->count, a, sizeof a);
	view_screen_puts_right(s, 0, y, x0 - 1, VIEW_S_DIM, 0, a);
	view_screen_puts_right(s, 0, y + h - 1, x0 - 1, VIEW_S_DIM, 0, "0");
	view_screen_fill(s, x0 - 1, y, 1, h, VIEW_G_VLINE, VIEW_S_DIM, 0);
	for (int k = 0; k < AMP_HIST_BINS; k++) {
		int w, x = bin_x(x0, k, &w);
		int st = zone_style(amp_hist_zone_of(k));
		/* a bin that holds anything shows at least one row: an overflow among millions */
		int rows = top ? (int)ceil((double)t->bins[k] / (double)top * h) : 0;
		for (int r = 0; r < rows; r++)
			view_screen_fill(s, x, y + h - 1 - r, w - 1, 1, VIEW_G_FULL, st, 0);
	}
	int ya = y + h;
	view_screen_putc(s, x0 - 1, ya, VIEW_G_BL, VIEW_S_DIM, 0);
	view_screen_fill(s, x0, ya, bin_x(x0, AMP_HIST_BINS - 1, &(int){0}) + 2 - x0, 1,
	                 VIEW_G_HLINE, VIEW_S_DIM, 0);
	/* exponents under the binades: every fifth power of two */
	for (int k = 2; k < AMP_HIST_BINS - 1; k++) {
		int e = amp_hist_bin_exp(k), w;
		if (e % 5 == 0 || k == 2) {
			snprintf(b, sizeof b, "%d", e);
			view_screen_puts(s, bin_x(x0, k, &w), ya + 1, 4, VIEW_S_DIM, 0, b);
		}
	}
	view_screen_puts_right(s, 0, ya + 1, x0 - 1, VIEW_S_DIM, 0, "2^");
	int w;
	view_screen_puts(s, bin_x(x0, 0, &w), ya + 2, 3, zone_style(AMP_HIST_ZERO), 0, "0");
	view_screen_puts(s, bin_x(x0, 1, &w), ya + 2, 3, zone_style(AMP_HIST_SUBNORMAL),
	                 VIEW_A_BOLD, "sub");
	view_screen_puts(s, bin_x(x0, 2, &w), ya + 2, 2 * (AMP_HIST_BINS - 3),
	                 zone_style(AMP_HIST_NORMAL), VIEW_A_BOLD,
	                 "normal: 2^-14 (6.1e-5) .. 65504");
	view_screen_puts(s, bin_x(x0, AMP_HIST_BINS - 1, &w), ya + 2, 3,
	                 zone_style(AMP_HIST_OVERFLOW), VIEW_A_BOLD, "ovf");
}

static void rebuild(exponents *p)
{
	free(p->index);
	p->index = malloc((size_t)(p->n > 0 ? p->n : 1) * sizeof *p->index);
	p->nindex = 0;
	for (long i = 0; p->index && i < p->n; i++)
		if (view_filter_match(&p->filter, p->rows[i].name) ||
		    view_filter_match(&p->filter, p->rows[i].dtype))
			p->index[p->nindex++] = (int)i;
	p->dirty = 0;
}

static void exponents_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	exponents *p = self;
	char a[32], b[32], c[32], d[32];
	int y = top, end = top + rows;
	if (p->n < 0) {
		p->n = view_model_hist(ctx->model, -1, &p->rows);
		p->dirty = 1;
	}
	if (p->n < 0) {
		view_screen_printf(s, 1, y, s->w - 2, VIEW_S_BAD, 0,
		                   "cannot read the histograms: %s", view_model_error(ctx->model));
		return;
	}
	if (p->dirty)
		rebuild(p);
	int x = 1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_NORMAL, 0,
	                               "FP16 exponent histograms, %ld tensors, all checked steps",
	                               p->nindex);
	view_filter_draw(&p->filter, ctx, s, x, y, s->w - x - 1);
	y += 2;
	if (p->n == 0) {
		view_screen_puts(s, 1, y, s->w - 2, VIEW_S_DIM, 0,
		                 "no exponent histogram recorded (statistics were off)");
		return;
	}
	/* columns: mark 2 | tensor | dtype 6 | values 8 | zero 8 | sub 8 | normal 8 | ovf 8;
	 * narrow: the zero, normal and subnormal shares give way, in that order, before the
	 * tensor's name goes under 8 columns (the values and the overflow share stay) */
	int show[5] = {1, 1, 1, 1, 1}, xc[5];
	static const int drop_order[3] = {1, 3, 2};
	int namew = s->w - 2 - 7 - 9 * 5 - 1;
	for (int k = 0; k < 3 && namew < 8; k++) {
		show[drop_order[k]] = 0;
		namew += 9;
	}
	if (namew < 8)
		namew = 8;
	int xd = 2 + namew + 1, xv = xd + 7;
	for (int i = 0, xi = xv; i < 5; i++)
		if (show[i]) {
			xc[i] = xi;
			xi += 9;
		}
	view_screen_puts(s, 2, y, namew, VIEW_S_HEADER, VIEW_A_BOLD, "TENSOR");
	view_screen_puts(s, xd, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "DTYPE");
	static const char *const heads[5] = {"VALUES", "ZERO", "SUBNORM", "NORMAL", "OVERFLOW"};
	for (int i = 0; i < 5; i++)
		if (show[i])
			view_screen_puts_right(s, xc[i], y, 8, VIEW_S_HEADER, VIEW_A_BOLD, heads[i]);
	y++;
	int chart = end - y > 16 ? 9 : 7; /* rows kept for the histogram */
	int list_rows = end - y - chart - 1;
	if (list_rows < 2)
		list_rows = 2;
	view_list_fit(&p->list, p->nindex, list_rows);
	int ylist = y;
	for (int64_t i = p->list.top; i < p->nindex && y < ylist + list_rows; i++, y++) {
		const amp_hist_tensor *t = &p->rows[p->index[i]];
		int st = t->zone[AMP_HIST_OVERFLOW] ? VIEW_S_BAD : VIEW_S_NORMAL;
		view_draw_tail(s, 2, y, namew, st, 0, t->name);
		view_screen_puts(s, xd, y, 6, st, 0, t->dtype);
		view_screen_puts_right(s, xc[0], y, 8, st, 0,
		                       view_fmt_count((double)t->count, a, sizeof a));
		if (show[1]) {
			share(t->zone[AMP_HIST_ZERO], t->count, b, sizeof b);
			view_screen_puts_right(s, xc[1], y, 8, st, 0, b);
		}
		if (show[2]) {
			share(t->zone[AMP_HIST_SUBNORMAL], t->count, c, sizeof c);
			view_screen_puts_right(s, xc[2], y, 8,
			                       t->zone[AMP_HIST_SUBNORMAL] * 10 > (int64_t)t->count
			                           ? VIEW_S_WARN
			                           : st,
			                       0, c);
		}
		if (show[3]) {
			share(t->zone[AMP_HIST_NORMAL], t->count, d, sizeof d);
			view_screen_puts_right(s, xc[3], y, 8, st, 0, d);
		}
		share(t->zone[AMP_HIST_OVERFLOW], t->count, a, sizeof a);
		view_screen_puts_right(s, xc[4], y, 8, st, 0, a);
		if (i == p->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	if (p->nindex == 0) {
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0, "no tensor matches the filter");
		return;
	}
	y = ylist + list_rows + 1;
	const amp_hist_tensor *t = &p->rows[p->index[p->list.cursor]];
	x = 1 + view_screen_puts(s, 1, y, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, t->name);
	view_screen_printf(s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0,
	                   " %s \xc2\xb7 %s values in %lld checked tensors", t->dtype,
	                   view_fmt_count((double)t->count, a, sizeof a), (long long)t->rows);
	draw_hist(t, s, y + 1, end);
	if (!p->filter.editing)
		snprintf(ctx->status, sizeof ctx->status,
		         "bars: values per binade of the cursor row \xc2\xb7 / filter");
}

static int exponents_key(void *self, view_ctx *ctx, int key)
{
	exponents *p = self;
	int changed = 0;
	if (view_filter_key(&p->filter, ctx, key, &changed)) {
		if (changed) {
			p->dirty = 1;
			p->list.cursor = p->list.top = 0;
		}
		return VIEW_F_HANDLED;
	}
	return view_list_key(&p->list, key) ? VIEW_F_HANDLED : VIEW_F_UNHANDLED;
}

static void exponents_focus(void *self, view_ctx *ctx, int64_t step)
{
	(void)self, (void)ctx, (void)step;
}

const view_panel_class view_panel_exponents = {
    "hist",         "Hist",        exponents_create, exponents_destroy,
    exponents_draw, exponents_key, exponents_focus,  exponents_help,
};
