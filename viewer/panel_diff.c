/* panel_diff.c — panel 9, ampview's diff mode (--diff=A.db): the profile shown (B) against the
 * baseline A, per op type, layer and step phase, time per traced step, the change and the
 * ratio, the biggest movers first (schema/profile_diff.c, as `ampprof diff`).  Computed once
 * when the panel is first shown; / filters by kind, name or dtype. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"
#include "profile_db.h"

typedef struct diff {
	int loaded; /* 0 not yet, 1 done, -1 failed */
	char err[600];
	amp_diff d;
	int *index;
	long nindex;
	int dirty;
	view_filter filter;
	view_list list;
} diff;

static const view_keyhelp diff_help[] = {
    {"/", "filter by kind, name or dtype (Esc clears)"},
    {"", "start with --diff=<baseline.db> <profile.db>"},
    {NULL, NULL},
};

static void *diff_create(view_ctx *ctx)
{
	(void)ctx;
	diff *p = calloc(1, sizeof *p);
	if (p)
		p->dirty = 1;
	return p;
}

static void diff_destroy(void *self)
{
	diff *p = self;
	amp_diff_release(&p->d);
	free(p->index);
	free(p);
}

static void load(diff *p, view_ctx *ctx)
{
	sqlite3 *base = NULL;
	char e[512];
	p->loaded = -1;
	if (amp_profile_open(ctx->baseline, 0, &base, p->err, sizeof p->err) != AMP_PROFILE_OK)
		return;
	if (amp_diff_compute(base, view_model_db(ctx->model), &p->d, e, sizeof e) < 0)
		snprintf(p->err, sizeof p->err, "cannot compare with '%s': %s", ctx->baseline, e);
	else
		p->loaded = 1;
	amp_profile_close(base);
}

static void rebuild(diff *p)
{
	free(p->index);
	p->index = malloc((p->d.nrows + 1) * sizeof *p->index);
	p->nindex = 0;
	for (size_t i = 0; p->index && i < p->d.nrows; i++) {
		const amp_diff_row *r = &p->d.rows[i];
		if (view_filter_match(&p->filter, amp_diff_kind_name(r->kind)) ||
		    view_filter_match(&p->filter, r->name) ||
		    view_filter_match(&p->filter, r->dtype[0]) ||
		    view_filter_match(&p->filter, r->dtype[1]))
			p->index[p->nindex++] = (int)i;
	}
	p->dirty = 0;
}

static void fmt_ratio(const amp_diff_row *r, char *buf, size_t len)
{
	if (r->calls[0] == 0 && r->calls[1] > 0)
		snprintf(buf, len, "new");
	else if (r->calls[1] == 0 && r->calls[0] > 0)
		snprintf(buf, len, "gone");
	else if (!isfinite(r->ratio))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2fx", r->ratio);
}

static void diff_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	diff *p = self;
	char a[32], b[32], c[40], d[32];
	int y = top, end = top + rows;
	if (!ctx->baseline) {
		view_screen_puts(s, 1, y, s->w - 2, VIEW_S_NORMAL, VIEW_A_BOLD,
		                 "No baseline to compare with.");
		view_draw_wrapped(s, 1, y + 2, s->w - 2, end, VIEW_S_DIM, 0,
		                  "Start ampview with --diff=A.db B.db to see B's timings against "
		                  "A's per op type, layer and step phase (the same comparison as "
		                  "`ampprof diff A.db B.db`).");
		return;
	}
	if (!p->loaded)
		load(p, ctx);
	if (p->loaded < 0) {
		view_draw_wrapped(s, 1, y, s->w - 2, end, VIEW_S_BAD, 0, p->err);
		return;
	}
	if (p->dirty)
		rebuild(p);
	const char *ba = strrchr(ctx->baseline, '/'), *bb = strrchr(ctx->run->path, '/');
	ba = ba ? ba + 1 : ctx->baseline;
	bb = bb ? bb + 1 : ctx->run->path;
	int x = 1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, "%s -> %s",
	                               ba, bb);
	/* a merged profile's steps are those of all its ranks, its figures per step of a rank */
	x += view_screen_printf(
	    s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0,
	    " \xc2\xb7 per traced step%s (%lld, %lld) \xc2\xb7 biggest movers first",
	    p->d.ranks[0] > 1 || p->d.ranks[1] > 1 ? " of a rank" : "", (long long)p->d.steps[0],
	    (long long)p->d.steps[1]);
	view_filter_draw(&p->filter, ctx, s, x, y, s->w - x - 1);
	y++;
	double ratio = p->d.step_ns[0] > 0 && p->d.step_ns[1] > 0 ? p->d.step_ns[1] / p->d.step_ns[0]
	                                                          : (double)NAN;
	/* no ratio without a baseline; "same" within the 0.5 % the figure shows */
	if (!(ratio == ratio))
		view_screen_printf(s, 1, y, s->w - 2, VIEW_S_DIM, 0,
		                   "step: %s -> %s (no ratio: %s has no traced step)",
		                   view_fmt_ns((int64_t)p->d.step_ns[0], a, sizeof a),
		                   view_fmt_ns((int64_t)p->d.step_ns[1], b, sizeof b),
		                   p->d.step_ns[0] > 0 ? "B" : "A"); /* A's first if neither has */
	else
		view_screen_printf(s, 1, y, s->w - 2,
		                   ratio > 1.005 ? VIEW_S_WARN : ratio < 0.995 ? VIEW_S_GOOD
		                                                               : VIEW_S_NORMAL,
		                   0, "step: %s -> %s, %.2fx (%s)",
		                   view_fmt_ns((int64_t)p->d.step_ns[0], a, sizeof a),
		                   view_fmt_ns((int64_t)p->d.step_ns[1], b, sizeof b), ratio,
		                   ratio > 1.005   ? "B is slower"
		                   : ratio < 0.995 ? "B is faster"
		                                   : "the same");
	y += 2;
	/* columns: mark 2 | kind 6 | name | dtype A 9 | dtype B 9 | A 8 | B 8 | delta 9 | ratio 6;
	 * the dtypes give way before the name shrinks below 8 */
	int fixed = 2 + 6 + 1 + 10 + 10 + 9 + 9 + 10 + 7;
	int dtw = 9, namew = s->w - fixed;
	if (namew < 8) { /* narrow: the dtypes go before the name shrinks below 8 */
		namew += 20;
		dtw = 0;
	}
	int xn = 9, xa = xn + namew + 1, xb = xa + (dtw ? dtw + 1 : 0),
	    xt = xb + (dtw ? dtw + 1 : 0), xu = xt + 9, xdl = xu + 9, xr = xdl + 10;
	view_screen_puts(s, 2, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "KIND");
	view_screen_puts(s, xn, y, namew, VIEW_S_HEADER, VIEW_A_BOLD, "NAME");
	if (dtw) {
		view_screen_puts(s, xa, y, dtw, VIEW_S_HEADER, VIEW_A_BOLD, "A DTYPE");
		view_screen_puts(s, xb, y, dtw, VIEW_S_HEADER, VIEW_A_BOLD, "B DTYPE");
	}
	view_screen_puts_right(s, xt, y, 8, VIEW_S_HEADER, VIEW_A_BOLD, "A/STEP");
	view_screen_puts_right(s, xu, y, 8, VIEW_S_HEADER, VIEW_A_BOLD, "B/STEP");
	view_screen_puts_right(s, xdl, y, 9, VIEW_S_HEADER, VIEW_A_BOLD, "DELTA");
	view_screen_puts_right(s, xr, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "RATIO");
	y++;
	view_list_fit(&p->list, p->nindex, end - y);
	if (p->nindex == 0)
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0, "no rows match the filter");
	for (int64_t i = p->list.top; i < p->nindex && y < end; i++, y++) {
		const amp_diff_row *r = &p->d.rows[p->index[i]];
		int st = r->delta_ns > 0 ? VIEW_S_WARN : VIEW_S_GOOD;
		view_screen_puts(s, 2, y, 6, VIEW_S_NORMAL, 0, amp_diff_kind_name(r->kind));
		view_draw_tail(s, xn, y, namew, VIEW_S_NORMAL, 0, r->name);
		if (dtw) {
			view_screen_puts(s, xa, y, dtw, VIEW_S_NORMAL, 0,
			                 r->calls[0] && r->dtype[0][0] ? r->dtype[0] : "-");
			view_screen_puts(s, xb, y, dtw, VIEW_S_NORMAL, 0,
			                 r->calls[1] && r->dtype[1][0] ? r->dtype[1] : "-");
		}
		view_screen_puts_right(
		    s, xt, y, 8, VIEW_S_NORMAL, 0,
		    view_fmt_ns((int64_t)(r->ns_per_step[0] + 0.5), a, sizeof a));
		view_screen_puts_right(
		    s, xu, y, 8, VIEW_S_NORMAL, 0,
		    view_fmt_ns((int64_t)(r->ns_per_step[1] + 0.5), b, sizeof b));
		view_fmt_ns((int64_t)(fabs(r->delta_ns) + 0.5), d, sizeof d);
		snprintf(c, sizeof c, "%s%s", r->delta_ns < 0 ? "-" : "+", d);
		view_screen_puts_right(s, xdl, y, 9, st, 0, c);
		fmt_ratio(r, a, sizeof a);
		view_screen_puts_right(s, xr, y, 6, st, 0, a);
		if (i == p->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	if (!p->filter.editing)
		snprintf(ctx->status, sizeof ctx->status,
		         "A = %s (baseline) \xc2\xb7 ratio = B / A \xc2\xb7 / filter", ba);
}

static int diff_key(void *self, view_ctx *ctx, int key)
{
	diff *p = self;
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

static void diff_focus(void *self, view_ctx *ctx, int64_t step)
{
	(void)self, (void)ctx, (void)step;
}

const view_panel_class view_panel_diff = {
    "diff", "Diff", diff_create, diff_destroy, diff_draw, diff_key, diff_focus, diff_help,
};
