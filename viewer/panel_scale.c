/* panel_scale.c — panel 4: the loss scale step by step on a log2 axis, with the usual band
 * [8, 1024], overflow markers and skipped steps.  Each column is a range of steps (min and max
 * scale in it); the cursor walks the columns and Enter on a marker opens that step's
 * anomalies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"

#define COLS_MAX 512

typedef struct scale {
	view_scale_bucket b[COLS_MAX];
	long n;          /* columns loaded, -1: not yet */
	int width;       /* chart width they were loaded for */
	long cursor;     /* column, -1: pick the first overflow */
	int64_t pending; /* step to focus once loaded, -1 none */
	char msg[128];
} scale;

static const view_keyhelp scale_help[] = {
    {"Left Right  h l", "move the cursor one column"},
    {"Up Down  k j", "previous / next overflow marker"},
    {"PgUp PgDn", "move ten columns"},
    {"Enter", "anomalies of the overflow under the cursor"},
    {NULL, NULL},
};

static void *scale_create(view_ctx *ctx)
{
	(void)ctx;
	scale *p = calloc(1, sizeof *p);
	if (p) {
		p->n = -1;
		p->cursor = -1;
		p->pending = -1;
	}
	return p;
}

static void scale_destroy(void *self)
{
	free(self);
}

static long column_of(const scale *p, int64_t step)
{
	for (long i = 0; i < p->n; i++)
		if (step >= p->b[i].first && step <= p->b[i].last)
			return i;
	return -1;
}

static void load(scale *p, view_ctx *ctx, int width)
{
	if (p->n >= 0 && p->width == width)
		return;
	int64_t keep = p->cursor >= 0 && p->cursor < p->n ? p->b[p->cursor].first : -1;
	p->n = view_model_scale_buckets(ctx->model, p->b, width < COLS_MAX ? width : COLS_MAX);
	if (p->n < 0)
		p->n = 0;
	p->width = width;
	if (p->pending >= 0)
		keep = p->pending, p->pending = -1;
	p->cursor = keep >= 0 ? column_of(p, keep) : -1;
	if (p->cursor < 0) {
		for (long i = 0; i < p->n && p->cursor < 0; i++)
			if (p->b[i].overflows)
				p->cursor = i;
		if (p->cursor < 0)
			p->cursor = 0;
	}
}

static void scale_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	scale *p = self;
	const view_run *r = ctx->run;
	char a[32], b[32], line[256];
	int end = top + rows;
	int lw = 7, cx = lw + 1, cw = s->w - cx - 1;
	load(p, ctx, cw);

	int x = 1 + view_screen_printf(s, 1, top, s->w - 2, VIEW_S_NORMAL, 0,
	                               "Loss scale, log2 axis, %lld steps \xc2\xb7 ",
	                               (long long)r->step_span);
	x += view_screen_puts(s, x, top, s->w - x, VIEW_S_BAND, 0, "band [8, 1024]");
	x += view_screen_puts(s, x, top, s->w - x, VIEW_S_NORMAL, 0, " \xc2\xb7 ");
	view_screen_putc(s, x++, top, VIEW_G_UP, VIEW_S_MARK, VIEW_A_BOLD);
	x += view_screen_puts(s, x, top, s->w - x, VIEW_S_NORMAL, 0, " overflow \xc2\xb7 ");
	view_screen_putc(s, x++, top, 'x', VIEW_S_WARN, VIEW_A_BOLD);
	view_screen_puts(s, x, top, s->w - x, VIEW_S_NORMAL, 0, " skipped");

	int ymark = top + 1, yskip = top + 2, ytop = top + 3, ybot = end - 5;
	int ch = ybot - ytop + 1;
	if (ch < 3)
		return;
	double lo = VIEW_SCALE_LO, hi = VIEW_SCALE_HI;
	for (long i = 0; i < p->n; i++)
		if (p->b[i].n) {
			lo = p->b[i].min_scale < lo ? p->b[i].min_scale : lo;
			hi = p->b[i].max_scale > hi ? p->b[i].max_scale : hi;
		}
	double ylo = floor(log2(lo > 0x1p-24 ? lo : 0x1p-24)), yhi = ceil(log2(hi));
	if (yhi <= ylo)
		yhi = ylo + 1;
#define ROW_OF(v) (ybot - (int)lround((log2(v) - ylo) / (yhi - ylo) * (ch - 1)))

	view_screen_puts_right(s, 0, ymark, lw - 1, VIEW_S_DIM, 0, "ovf");
	view_screen_puts_right(s, 0, yskip, lw - 1, VIEW_S_DIM, 0, "skip");
	/* axis, band lines and their labels */
	view_screen_fill(s, lw, ytop, 1, ch, VIEW_G_VLINE, VIEW_S_DIM, 0);
	const double marks[4] = {exp2(yhi), VIEW_SCALE_HI, VIEW_SCALE_LO, exp2(ylo)};
	for (int i = 0; i < 4; i++) {
		int y = ROW_OF(marks[i]);
		view_screen_puts_right(s, 0, y, lw - 1, i == 1 || i == 2 ? VIEW_S_BAND : VIEW_S_DIM,
		                       0, view_fmt_scale(marks[i], a, sizeof a));
		if (i == 1 || i == 2)
			view_screen_fill(s, cx, y, (int)p->n, 1, VIEW_G_DOTTED, VIEW_S_BAND, 0);
	}
	view_screen_putc(s, lw, ybot + 1, VIEW_G_BL, VIEW_S_DIM, 0);
	view_screen_fill(s, cx, ybot + 1, (int)p->n, 1, VIEW_G_HLINE, VIEW_S_DIM, 0);
	/* the points */
	for (long i = 0; i < p->n; i++) {
		const view_scale_bucket *k = &p->b[i];
		int col = cx + (int)i;
		if (k->overflows)
			view_screen_putc(s, col, ymark, VIEW_G_UP, VIEW_S_MARK, VIEW_A_BOLD);
		if (k->skipped)
			view_screen_putc(s, col, yskip, 'x', VIEW_S_WARN, VIEW_A_BOLD);
		if (!k->n || !(k->max_scale > 0))
			continue;
		int rmax = ROW_OF(k->max_scale),
		    rmin = ROW_OF(k->min_scale > 0 ? k->min_scale : k->max_scale);
		int out = k->min_scale < VIEW_SCALE_LO || k->max_scale > VIEW_SCALE_HI;
		for (int y = rmax + 1; y <= rmin; y++)
			view_screen_putc(s, col, y, VIEW_G_VLINE, out ? VIEW_S_WARN : VIEW_S_GOOD,
			                 0);
		view_screen_putc(s, col, rmax, VIEW_G_BULLET, out ? VIEW_S_WARN : VIEW_S_GOOD, 0);
	}
#undef ROW_OF
	/* x labels: first and last step, the cursor's step under its column */
	if (p->n > 0) {
		view_screen_printf(s, cx, ybot + 2, cw, VIEW_S_DIM, 0, "%lld",
		                   (long long)p->b[0].first);
		snprintf(line, sizeof line, "%lld", (long long)p->b[p->n - 1].last);
		view_screen_puts_right(s, cx, ybot + 2, (int)p->n, VIEW_S_DIM, 0, line);
	}
	if (p->cursor >= 0 && p->cursor < p->n) {
		const view_scale_bucket *k = &p->b[p->cursor];
		int col = cx + (int)p->cursor;
		for (int y = ymark; y <= ybot; y++)
			view_screen_attr(s, col, y, 1, VIEW_A_REVERSE);
		/* not the overflow glyph: on a run without overflows it would read as one */
		view_screen_putc(s, col, ybot + 1, VIEW_G_POINTER, VIEW_S_NORMAL, VIEW_A_BOLD);
		if (k->first == k->last)
			x = 1 + view_screen_printf(s, 1, ybot + 3, s->w - 2, VIEW_S_NORMAL,
			                           VIEW_A_BOLD, "step %lld", (long long)k->first);
		else
			x = 1 + view_screen_printf(s, 1, ybot + 3, s->w - 2, VIEW_S_NORMAL,
			                           VIEW_A_BOLD, "steps %lld..%lld",
			                           (long long)k->first, (long long)k->last);
		if (k->min_scale == k->max_scale)
			snprintf(line, sizeof line, ": scale %s",
			         view_fmt_scale(k->max_scale, a, sizeof a));
		else
			snprintf(line, sizeof line, ": scale %s..%s",
			         view_fmt_scale(k->min_scale, a, sizeof a),
			         view_fmt_scale(k->max_scale, b, sizeof b));
		x += view_screen_puts(s, x, ybot + 3, s->w - x - 1, VIEW_S_NORMAL, 0, line);
		if (k->overflows) {
			snprintf(line, sizeof line,
			         " \xc2\xb7 %lld overflow%s (first %lld), %lld skipped",
			         (long long)k->overflows, k->overflows > 1 ? "s" : "",
			         (long long)k->first_overflow, (long long)k->skipped);
			view_screen_puts(s, x, ybot + 3, s->w - x - 1, VIEW_S_MARK, 0, line);
			view_screen_puts(s, 1, ybot + 4, s->w - 2, VIEW_S_DIM, 0,
			                 "Enter: the step's anomalies, origin first");
		} else {
			view_screen_puts(s, x, ybot + 3, s->w - x - 1, VIEW_S_NORMAL, 0,
			                 " \xc2\xb7 no overflow");
		}
	}
	if (p->msg[0])
		snprintf(ctx->status, sizeof ctx->status, "%s", p->msg);
	p->msg[0] = '\0';
}

static int scale_key(void *self, view_ctx *ctx, int key)
{
	scale *p = self;
	long c = p->cursor;
	switch (key) {
	case VIEW_KEY_LEFT:
	case 'h': c--; break;
	case VIEW_KEY_RIGHT:
	case 'l': c++; break;
	case VIEW_KEY_PGUP: c -= 10; break;
	case VIEW_KEY_PGDN: c += 10; break;
	case VIEW_KEY_HOME:
	case 'g': c = 0; break;
	case VIEW_KEY_END:
	case 'G': c = p->n - 1; break;
	case VIEW_KEY_UP:
	case 'k':
	case VIEW_KEY_DOWN:
	case 'j': {
		int dir = key == VIEW_KEY_DOWN || key == 'j' ? 1 : -1;
		long i = c + dir;
		while (i >= 0 && i < p->n && !p->b[i].overflows)
			i += dir;
		if (i >= 0 && i < p->n)
			c = i;
		else
			snprintf(p->msg, sizeof p->msg, "no overflow marker %s",
			         dir > 0 ? "after" : "before");
		break;
	}
	case VIEW_KEY_ENTER:
		if (c >= 0 && c < p->n && p->b[c].first_overflow >= 0) {
			ctx->goto_panel = VIEW_P_ANOMALIES;
			ctx->goto_step = p->b[c].first_overflow;
			return VIEW_F_GOTO;
		}
		snprintf(p->msg, sizeof p->msg, "no overflow under the cursor (Up/Down: markers)");
		return VIEW_F_HANDLED;
	default: return VIEW_F_UNHANDLED;
	}
	if (c >= p->n)
		c = p->n - 1;
	if (c < 0)
		c = 0;
	p->cursor = c;
	return VIEW_F_HANDLED;
}

static void scale_focus(void *self, view_ctx *ctx, int64_t step)
{
	scale *p = self;
	(void)ctx;
	if (step < 0)
		return;
	if (p->n >= 0 && column_of(p, step) >= 0)
		p->cursor = column_of(p, step);
	else
		p->pending = step;
}

const view_panel_class view_panel_scale = {
    "scale",    "Loss scale", scale_create, scale_destroy,
    scale_draw, scale_key,    scale_focus,  scale_help,
};
