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
	view_loss_bucket loss[COLS_MAX]; /* the losses of each column */
	long loss_for; /* p->n the losses were read for, -1: not read */
} scale;

static const view_keyhelp scale_help[] = {
    {"Left Right  h l", "move the cursor one column"},
    {"Up Down  k j", "previous / next overflow marker"},
    {"n  N", "next / previous overflow marker (wraps)"},
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
		p->loss_for = -1;
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
	p->loss_for = -1;
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

/* The rows of the y axis: a level per power of two, each on its own row, so that every
 * power the chart shows is labelled and a backoff (one power down) always changes row.  When
 * the range has more powers than rows, the powers no column reaches are left out (the axis
 * marks the gap with '~'); only when even the used ones outnumber the rows do levels share
 * rows. */
typedef struct axis {
	int lev[64]; /* exponents, ascending */
	int n;
	int ybot, ch; /* bottom row and rows */
	int merged;   /* levels share rows */
} axis;

static void axis_build(axis *ax, const scale *p, int ylo, int yhi, int ybot, int ch)
{
	char used[64] = {0};
	ax->ybot = ybot, ax->ch = ch, ax->n = 0, ax->merged = 0;
	if (yhi - ylo > 63)
		ylo = yhi - 63;
	if (yhi - ylo + 1 <= ch) {
		for (int e = ylo; e <= yhi; e++)
			ax->lev[ax->n++] = e;
		return;
	}
	used[0] = used[yhi - ylo] = 1;
	for (long i = 0; i < p->n; i++) {
		const view_scale_bucket *k = &p->b[i];
		if (!k->n || !(k->max_scale > 0))
			continue;
		int a = (int)floor(log2(k->min_scale > 0 ? k->min_scale : k->max_scale));
		int b = (int)ceil(log2(k->max_scale));
		for (int e = a; e <= b; e++)
			if (e >= ylo && e <= yhi)
				used[e - ylo] = 1;
	}
	for (int e = 3; e <= 10; e += 7) /* the band's edges, 8 and 1024 */
		if (e >= ylo && e <= yhi)
			used[e - ylo] = 1;
	int n = 0;
	for (int e = ylo; e <= yhi; e++)
		n += used[e - ylo];
	if (n > ch) { /* no way round merging: every power, evenly */
		ax->merged = 1;
		for (int e = ylo; e <= yhi; e++)
			used[e - ylo] = 1;
	}
	for (int e = ylo; e <= yhi; e++)
		if (used[e - ylo])
			ax->lev[ax->n++] = e;
}

/* The row of a scale v (> 0): by its level, between two levels in proportion. */
static int axis_row(const axis *ax, double v)
{
	double e = log2(v), pos;
	if (ax->n < 2)
		return ax->ybot;
	if (e <= ax->lev[0])
		pos = 0;
	else if (e >= ax->lev[ax->n - 1])
		pos = ax->n - 1;
	else {
		int i = 0;
		while (i < ax->n - 2 && e > ax->lev[i + 1])
			i++;
		pos = i + (e - ax->lev[i]) / (ax->lev[i + 1] - ax->lev[i]);
	}
	return ax->ybot - (int)lround(pos * (ax->ch - 1) / (ax->n - 1));
}

/* v in at most w columns: "%.3g", fewer digits and a bare exponent ("4.8e12") when that is
 * too wide, so that a large loss keeps its magnitude on a narrow axis. */
static void fit_number(double v, int w, char *buf, size_t len)
{
	char t[48];
	for (int prec = 3; prec >= 0; prec--) {
		/* then one digit with an exponent, which %g keeps fixed down to 1e-4 (-0.0001) */
		if (prec)
			snprintf(t, sizeof t, "%.*g", prec, v);
		else
			snprintf(t, sizeof t, "%.0e", v);
		char *e = strchr(t, 'e');
		if (e) { /* e+12 -> e12, e-05 -> e-5, in place */
			char *o = e + 1, *x = e + 1;
			if (*x == '-')
				*o++ = *x++;
			else if (*x == '+')
				x++;
			while (*x == '0' && x[1])
				x++;
			memmove(o, x, strlen(x) + 1);
		}
		if ((int)strlen(t) <= w)
			break;
	}
	size_t n = strlen(t) < len ? strlen(t) : len - 1;
	memcpy(buf, t, n);
	buf[n] = '\0';
}

/* A scale as an axis label in w columns: "1024", "65536", else "2^20". */
static void axis_label(int e, char *buf, size_t len)
{
	if (e >= 0 && e <= 16)
		snprintf(buf, len, "%.0f", exp2(e));
	else
		snprintf(buf, len, "2^%d", e);
}

static void scale_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	scale *p = self;
	const view_run *r = ctx->run;
	char a[32], b[32], line[1024];
	int end = top + rows;
	int lw = 7, cx = lw + 1, cw = s->w - cx - 1;
	load(p, ctx, cw);
	if (p->loss_for != p->n) {
		p->loss_for = p->n;
		if (view_model_loss_buckets(ctx->model, p->b, p->n, p->loss) < 0)
			for (long i = 0; i < p->n; i++)
				p->loss[i] = (view_loss_bucket){.lo = NAN, .hi = NAN};
	}

	int x = 1 + view_screen_printf(s, 1, top, s->w - 2, VIEW_S_NORMAL, 0,
	                               "Loss scale, log2 axis, %lld steps \xc2\xb7 ",
	                               (long long)r->step_span);
	x += view_screen_puts(s, x, top, s->w - x, VIEW_S_BAND, 0, "band [8, 1024]");
	x += view_screen_puts(s, x, top, s->w - x, VIEW_S_NORMAL, 0, " \xc2\xb7 ");
	view_screen_putc(s, x++, top, VIEW_G_UP, VIEW_S_MARK, VIEW_A_BOLD);
	x += view_screen_puts(s, x, top, s->w - x, VIEW_S_NORMAL, 0, " overflow \xc2\xb7 ");
	view_screen_putc(s, x++, top, 'x', VIEW_S_WARN, VIEW_A_BOLD);
	view_screen_puts(s, x, top, s->w - x, VIEW_S_NORMAL, 0, " skipped");

	/* the history finalize classified, on a line of its own below the chart */
	int history = r->scale_history[0] != '\0';
	/* the loss, beside the scale, in its own strip under the chart when there is room */
	int has_loss = 0;
	double lmin = INFINITY, lmax = -INFINITY;
	for (long i = 0; i < p->n; i++)
		if (!isnan(p->loss[i].lo)) {
			has_loss = 1;
			lmin = p->loss[i].lo < lmin ? p->loss[i].lo : lmin;
			lmax = p->loss[i].hi > lmax ? p->loss[i].hi : lmax;
		}
	int lrows = has_loss && rows >= 18 ? 3 : 0;
	int ymark = top + 1, yskip = top + 2, ytop = top + 3, ybot = end - 5 - lrows - history;
	int ch = ybot - ytop + 1;
	if (ch < 3) {
		view_screen_printf(s, 1, top + 1, s->w - 2, VIEW_S_WARN, 0,
		                   "too few rows for the chart: a terminal of %d rows shows it",
		                   s->h + 3 - ch);
		return;
	}
	double lo = VIEW_SCALE_LO, hi = VIEW_SCALE_HI;
	for (long i = 0; i < p->n; i++)
		if (p->b[i].n) {
			lo = p->b[i].min_scale < lo ? p->b[i].min_scale : lo;
			hi = p->b[i].max_scale > hi ? p->b[i].max_scale : hi;
		}
	int ylo = (int)floor(log2(lo > 0x1p-24 ? lo : 0x1p-24)), yhi = (int)ceil(log2(hi));
	if (yhi <= ylo)
		yhi = ylo + 1;
	axis ax;
	axis_build(&ax, p, ylo, yhi, ybot, ch);

	view_screen_puts_right(s, 0, ymark, lw - 1, VIEW_S_DIM, 0, "ovf");
	view_screen_puts_right(s, 0, yskip, lw - 1, VIEW_S_DIM, 0, "skip");
	/* axis, a label on every level's row, the band lines */
	view_screen_fill(s, lw, ytop, 1, ch, VIEW_G_VLINE, VIEW_S_DIM, 0);
	for (int i = 0; i < ax.n; i++) {
		int y = axis_row(&ax, exp2(ax.lev[i]));
		int band = ax.lev[i] == 3 || ax.lev[i] == 10;
		if (band)
			view_screen_fill(s, cx, y, (int)p->n, 1, VIEW_G_DOTTED, VIEW_S_BAND, 0);
		/* levels that share a row (merged): the row is labelled once, by its lowest
		 * level, with a '+' for the powers above it that it also holds */
		if (i > 0 && axis_row(&ax, exp2(ax.lev[i - 1])) == y)
			continue;
		int shared = 0;
		for (int j = i + 1; j < ax.n && axis_row(&ax, exp2(ax.lev[j])) == y; j++)
			shared = 1, band |= ax.lev[j] == 3 || ax.lev[j] == 10;
		axis_label(ax.lev[i], a, sizeof a);
		if (shared)
			snprintf(a + strlen(a), sizeof a - strlen(a), "+");
		view_screen_puts_right(s, 0, y, lw - 1, band ? VIEW_S_BAND : VIEW_S_DIM, 0, a);
		if (i > 0 && ax.lev[i] - ax.lev[i - 1] > 1 && !ax.merged) {
			int yp = axis_row(&ax, exp2(ax.lev[i - 1]));
			if (yp - y > 1) /* powers left out between these two rows */
				view_screen_putc(s, lw, (y + yp) / 2, '~', VIEW_S_DIM, 0);
		}
	}
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
		int rmax = axis_row(&ax, k->max_scale),
		    rmin = axis_row(&ax, k->min_scale > 0 ? k->min_scale : k->max_scale);
		int out = k->min_scale < VIEW_SCALE_LO || k->max_scale > VIEW_SCALE_HI;
		for (int y = rmax + 1; y <= rmin; y++)
			view_screen_putc(s, col, y, VIEW_G_VLINE, out ? VIEW_S_WARN : VIEW_S_GOOD,
			                 0);
		view_screen_putc(s, col, rmax, VIEW_G_BULLET, out ? VIEW_S_WARN : VIEW_S_GOOD, 0);
	}
	/* the loss strip: each column's range of finite losses, linear between the run's */
	if (lrows) {
		int yl = ybot + 1;
		fit_number(lmax, lw - 1, a, sizeof a);
		view_screen_puts_right(s, 0, yl, lw - 1, VIEW_S_DIM, 0, a);
		fit_number(lmin, lw - 1, a, sizeof a);
		view_screen_puts_right(s, 0, yl + lrows - 1, lw - 1, VIEW_S_DIM, 0, a);
		if (lrows > 2)
			view_screen_puts_right(s, 0, yl + 1, lw - 1, VIEW_S_NORMAL, VIEW_A_BOLD, "loss");
		view_screen_fill(s, lw, yl, 1, lrows, VIEW_G_VLINE, VIEW_S_DIM, 0);
		double span = lmax > lmin ? lmax - lmin : 1;
		for (long i = 0; i < p->n; i++) {
			if (isnan(p->loss[i].lo))
				continue;
			int rh = yl + (int)lround((lmax - p->loss[i].hi) / span * (lrows - 1));
			int rl = yl + (int)lround((lmax - p->loss[i].lo) / span * (lrows - 1));
			for (int y = rh + 1; y <= rl; y++)
				view_screen_putc(s, cx + (int)i, y, VIEW_G_VLINE, VIEW_S_NORMAL, 0);
			view_screen_putc(s, cx + (int)i, rh, VIEW_G_BULLET, VIEW_S_NORMAL, 0);
		}
		ybot += lrows;
	}
	view_screen_putc(s, lw, ybot + 1, VIEW_G_BL, VIEW_S_DIM, 0);
	view_screen_fill(s, cx, ybot + 1, (int)p->n, 1, VIEW_G_HLINE, VIEW_S_DIM, 0);
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
			/* shorter forms where the full one would be cut (a narrow terminal): the
			 * counts matter more than the words */
			long long o = (long long)k->overflows, f = (long long)k->first_overflow,
			          sk = (long long)k->skipped;
			int room = s->w - x - 1;
			if (snprintf(line, sizeof line, " \xc2\xb7 %lld overflow%s (first %lld), %lld skipped",
			             o, o > 1 ? "s" : "", f, sk) - 1 > room &&
			    snprintf(line, sizeof line, " \xc2\xb7 %lld ovf (1st %lld), %lld skipped", o, f,
			             sk) - 1 > room)
				snprintf(line, sizeof line, " \xc2\xb7 %lld ovf, %lld skip", o, sk);
			view_screen_puts(s, x, ybot + 3, room, VIEW_S_MARK, 0, line);
		} else {
			view_screen_puts(s, x, ybot + 3, s->w - x - 1, VIEW_S_NORMAL, 0,
			                 " \xc2\xb7 no overflow");
		}
		/* the next line: the column's losses, a loss that was not finite first; then the
		 * keys of a column with overflows where they fit (? lists them anyway) */
		const view_loss_bucket *lb = &p->loss[p->cursor];
		x = 1;
		if (lb->nonfinite == 1 && k->first == k->last)
			snprintf(line, sizeof line, "loss %s", lb->first_state);
		else if (lb->nonfinite)
			snprintf(line, sizeof line,
			         "loss not finite on %ld step%s (first %s at %lld)", lb->nonfinite,
			         lb->nonfinite > 1 ? "s" : "", lb->first_state,
			         (long long)lb->first_nonfinite);
		if (lb->nonfinite)
			x += view_screen_puts(s, x, ybot + 4, s->w - x - 1, VIEW_S_WARN,
			                      VIEW_A_BOLD, line);
		if (!isnan(lb->lo)) {
			const char *sep = lb->nonfinite ? ", finite " : "loss ";
			if (lb->lo == lb->hi)
				snprintf(line, sizeof line, "%s%.4g", sep, lb->lo);
			else
				snprintf(line, sizeof line, "%s%.4g..%.4g", sep, lb->lo, lb->hi);
			x += view_screen_puts(s, x, ybot + 4, s->w - x - 1, VIEW_S_NORMAL, 0, line);
		}
		const char *keys = "Enter: the step's anomalies \xc2\xb7 n/N: markers";
		int kw = 0; /* columns: UTF-8 lead bytes (one column each here) */
		for (const char *c = keys; *c; c++)
			kw += ((unsigned char)*c & 0xc0) != 0x80;
		if (k->overflows && x + (x > 1 ? 3 : 0) + kw <= s->w - 1)
			view_screen_puts_right(s, 1, ybot + 4, s->w - 2, VIEW_S_DIM, 0, keys);
	}
	if (history) {
		const char *h = r->scale_history;
		const char *what = strcmp(h, "probing") == 0      ? "probing (normal)"
		                   : strcmp(h, "isolated_spikes") == 0 ? "isolated spikes"
		                   : strcmp(h, "collapsing") == 0      ? "COLLAPSING"
		                                                       : h;
		char skipped[64] = "";
		if (r->skipped_steps > 0 && r->steps > 0)
			snprintf(skipped, sizeof skipped, " \xc2\xb7 %lld skipped (%.1f %%)",
			         (long long)r->skipped_steps,
			         100.0 * (double)r->skipped_steps / (double)r->steps);
		snprintf(line, sizeof line, "history: %s%s%s%s", what,
		         r->scale_history_steps[0] ? " at steps " : "", r->scale_history_steps, skipped);
		view_screen_puts(s, 1, end - 1, s->w - 2,
		                 strcmp(h, "collapsing") == 0 ? VIEW_S_WARN : VIEW_S_NORMAL, 0, line);
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
	case 'n':
	case 'N': {
		int dir = key == 'n' ? 1 : -1;
		long i = c;
		for (long k = 0; k < p->n; k++) {
			i = (i + dir + p->n) % p->n;
			if (p->b[i].overflows)
				break;
		}
		if (p->n == 0 || !p->b[i].overflows) {
			snprintf(p->msg, sizeof p->msg, "no overflow in this run");
			break;
		}
		if ((dir > 0) != (i > c) || i == c)
			snprintf(p->msg, sizeof p->msg, "wrapped to the %s overflow marker",
			         dir > 0 ? "first" : "last");
		c = i;
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
    "scale",    "Scale", scale_create, scale_destroy,
    scale_draw, scale_key,    scale_focus,  scale_help,
};
