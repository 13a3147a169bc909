/* panel_anomalies.c — panel 5: the steps with non-finite values and, for one step, its checked
 * tensors with the origin first and its call site; below the list, FP16 headroom per layer
 * (share of values that underflow, share near overflow).  Step lists are paged; a step's
 * tensors come from tensor_stats by step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"

#define PAGE_MAX 128

typedef struct anomalies {
	int detail;     /* showing one step */
	int jumped;     /* the step was opened from another panel: Esc returns there */
	view_list list; /* anomaly steps */
	view_anomaly page[PAGE_MAX];
	long npage;
	int64_t page_top;
	int page_rows;
	/* detail */
	view_anomaly step;  /* the step shown */
	int64_t step_index; /* its index among anomaly steps, -1 if not one */
	view_list tlist;    /* its tensors */
	view_tstat tpage[PAGE_MAX];
	long ntpage;
	int64_t tpage_top;
	int tpage_rows;
	view_list hlist; /* headroom rows */
	char msg[160];
	view_filter filter; /* over the list's origin op, label and site */
	view_anomaly *all;  /* with a filter: every anomaly step, read once */
	int64_t nall;
	int64_t *fidx; /* anomaly indexes that match, NULL without a filter */
	int64_t nf;
} anomalies;

static const view_keyhelp anomalies_help[] = {
    {"Enter", "the step's tensors, origin first"},
    {"Left Right  h l", "in a step: previous / next anomaly step"},
    {"n  N", "next / previous anomaly step (wraps)"},
    {"/", "filter by origin op, label or source file"},
    {"Esc", "back to the list of steps"},
    {NULL, NULL},
};

static void *anomalies_create(view_ctx *ctx)
{
	(void)ctx;
	anomalies *p = calloc(1, sizeof *p);
	if (p)
		p->page_top = p->tpage_top = -1;
	return p;
}

static void anomalies_destroy(void *self)
{
	anomalies *p = self;
	free(p->all);
	free(p->fidx);
	free(p);
}

/* The rows that match the filter (all of them read once, the first time one is set). */
static void refilter(anomalies *p, view_ctx *ctx)
{
	free(p->fidx);
	p->fidx = NULL;
	p->nf = 0;
	p->list.cursor = p->list.top = 0;
	p->page_top = -1;
	if (!p->filter.text[0])
		return;
	if (!p->all) {
		int64_t n = view_model_anomaly_count(ctx->model);
		p->all = malloc((size_t)(n > 0 ? n : 1) * sizeof *p->all);
		p->nall = p->all ? view_model_anomalies(ctx->model, 0, p->all, (long)n) : 0;
		if (p->nall < 0)
			p->nall = 0;
	}
	p->fidx = malloc((size_t)(p->nall > 0 ? p->nall : 1) * sizeof *p->fidx);
	for (int64_t i = 0; p->fidx && i < p->nall; i++) {
		const view_anomaly *an = &p->all[i];
		char site[600];
		view_fmt_site(view_model_short_path(ctx->model, an->origin_file), an->origin_line,
		              site, sizeof site);
		if (an->has_origin &&
		    (view_filter_match(&p->filter, an->origin_op) ||
		     view_filter_match(&p->filter, an->origin_label) ||
		     view_filter_match(&p->filter, site)))
			p->fidx[p->nf++] = i;
	}
}

static void pct(int64_t part, int64_t whole, char *buf, size_t len)
{
	if (whole <= 0)
		snprintf(buf, len, "-");
	else if (part == 0)
		snprintf(buf, len, "0");
	else if (100.0 * (double)part / (double)whole < 0.01)
		snprintf(buf, len, "<0.01%%");
	else
		snprintf(buf, len, "%.*f%%", 100.0 * (double)part / (double)whole < 10 ? 2 : 1,
		         100.0 * (double)part / (double)whole);
}

static void draw_headroom(anomalies *p, view_ctx *ctx, view_screen *s, int y, int end)
{
	const view_headroom *h;
	char a[32], b[32], c[32];
	if (y >= end - 2)
		return;
	long n = view_model_headroom(ctx->model, &h);
	view_screen_puts(s, 1, y++, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD,
	                 "FP16 headroom per layer, all checked tensors (worst first)");
	int namew = s->w - 2 - 10 - 11 - 11 - 10 - 1;
	view_screen_puts(s, 2, y, namew, VIEW_S_HEADER, VIEW_A_BOLD, "LAYER");
	view_screen_puts_right(s, 2 + namew, y, 10, VIEW_S_HEADER, VIEW_A_BOLD, "VALUES");
	view_screen_puts_right(s, 2 + namew + 10, y, 11, VIEW_S_HEADER, VIEW_A_BOLD, "UNDERFLOW");
	view_screen_puts_right(s, 2 + namew + 21, y, 11, VIEW_S_HEADER, VIEW_A_BOLD, "NEAR-OVF");
	view_screen_puts_right(s, 2 + namew + 32, y, 10, VIEW_S_HEADER, VIEW_A_BOLD, "NONFINITE");
	y++;
	if (n <= 0) {
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0,
		                 n < 0 ? view_model_error(ctx->model)
		                       : "no tensor statistics recorded");
		return;
	}
	view_list_fit(&p->hlist, n, end - y);
	for (int64_t i = p->hlist.top; i < n && y < end; i++, y++) {
		const view_headroom *r = &h[i];
		int risky = r->near_overflow > 0, lost = r->underflow > r->count / 10;
		view_screen_puts(s, 2, y, namew - 1, VIEW_S_NORMAL, 0, r->name);
		view_screen_puts_right(s, 2 + namew, y, 10, VIEW_S_NORMAL, 0,
		                       view_fmt_count((double)r->count, a, sizeof a));
		pct(r->underflow, r->count, b, sizeof b);
		view_screen_puts_right(s, 2 + namew + 10, y, 11, lost ? VIEW_S_WARN : VIEW_S_NORMAL,
		                       0, b);
		pct(r->near_overflow, r->count, c, sizeof c);
		view_screen_puts_right(s, 2 + namew + 21, y, 11, risky ? VIEW_S_BAD : VIEW_S_NORMAL,
		                       0, c);
		snprintf(a, sizeof a, "%lld", (long long)r->nonfinite);
		view_screen_puts_right(s, 2 + namew + 32, y, 10,
		                       r->nonfinite ? VIEW_S_BAD : VIEW_S_NORMAL, 0, a);
	}
}

static void draw_list(anomalies *p, view_ctx *ctx, view_screen *s, int top, int rows)
{
	char a[32], site[600];
	int y = top, end = top + rows;
	int64_t count = p->fidx ? p->nf : view_model_anomaly_count(ctx->model);
	int hx = 1 + view_screen_printf(s, 1, y, s->w - 2, count ? VIEW_S_BAD : VIEW_S_GOOD,
	                               VIEW_A_BOLD, "%lld step%s with non-finite values, of %lld",
	                               (long long)count, count == 1 ? "" : "s",
	                               (long long)ctx->run->steps);
	view_filter_draw(&p->filter, ctx, s, hx, y, s->w - hx - 1);
	y += 2;
	/* columns: mark 2 | step 7 | scale 8 | skip 5 | nonfin 7 | origin */
	view_screen_puts_right(s, 2, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "STEP");
	view_screen_puts_right(s, 10, y, 8, VIEW_S_HEADER, VIEW_A_BOLD, "SCALE");
	view_screen_puts(s, 20, y, 5, VIEW_S_HEADER, VIEW_A_BOLD, "SKIP");
	view_screen_puts_right(s, 25, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "NONFIN");
	view_screen_puts(s, 34, y, s->w - 35, VIEW_S_HEADER, VIEW_A_BOLD, "ORIGIN");
	y++;
	int list_rows = (int)(count < 1 ? 1 : count);
	int room = (end - y) / 2;
	if (list_rows > room)
		list_rows = room > 3 ? room : 3;
	if (list_rows > PAGE_MAX)
		list_rows = PAGE_MAX;
	view_list_fit(&p->list, count, list_rows);
	if (p->fidx) {
		p->npage = 0;
		for (int64_t i = p->list.top; i < p->nf && p->npage < list_rows; i++)
			p->page[p->npage++] = p->all[p->fidx[i]];
		p->page_top = p->list.top;
		p->page_rows = list_rows;
	} else if (p->page_top != p->list.top || p->page_rows != list_rows) {
		p->npage = view_model_anomalies(ctx->model, p->list.top, p->page, list_rows);
		if (p->npage < 0)
			p->npage = 0;
		p->page_top = p->list.top;
		p->page_rows = list_rows;
	}
	if (count == 0)
		view_screen_puts(s, 2, y, s->w - 3, p->fidx ? VIEW_S_DIM : VIEW_S_GOOD, 0,
		                 p->fidx ? "no anomaly step matches the filter"
		                         : "no overflow in this run");
	for (long i = 0; i < p->npage && y < end; i++, y++) {
		const view_anomaly *an = &p->page[i];
		view_screen_printf(s, 2, y, 7, VIEW_S_NORMAL, 0, "%7lld", (long long)an->step);
		view_screen_puts_right(s, 10, y, 8, VIEW_S_NORMAL, 0,
		                       view_fmt_scale(an->scale, a, sizeof a));
		view_screen_puts(s, 20, y, 5, an->skipped ? VIEW_S_WARN : VIEW_S_NORMAL, 0,
		                 an->skipped ? "yes" : "no");
		snprintf(a, sizeof a, "%lld", (long long)an->nonfinite);
		view_screen_puts_right(s, 25, y, 7, VIEW_S_BAD, 0, a);
		if (an->has_origin) {
			int x = 34 + view_screen_printf(s, 34, y, s->w - 35, VIEW_S_BAD,
			                                VIEW_A_BOLD, "%s%s ",
			                                an->origin_cast ? "cast before " : "",
			                                an->origin_op);
			view_fmt_site(view_model_short_path(ctx->model, an->origin_file),
			              an->origin_line, site, sizeof site);
			int sw = s->w - x - 1;
			int lw = sw - (int)strlen(site) - 1;
			if (lw > 4) {
				x += view_screen_puts(s, x, y, lw, VIEW_S_NORMAL, 0,
				                      an->origin_label);
				x++;
			}
			view_draw_tail(s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0, site);
		} else {
			view_screen_puts(s, 34, y, s->w - 35, VIEW_S_DIM, 0, "no origin recorded");
		}
		if (p->list.top + i == p->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	y = top + 3 + list_rows + 1;
	draw_headroom(p, ctx, s, y, end);
	if (p->filter.editing)
		snprintf(ctx->status, sizeof ctx->status, "filter: /%s_", p->filter.text);
	else if (p->msg[0])
		snprintf(ctx->status, sizeof ctx->status, "%s", p->msg);
	else if (count)
		snprintf(ctx->status, sizeof ctx->status,
		         "Enter: the step's tensors, origin first \xc2\xb7 n/N: next/previous");
}

static void open_step(anomalies *p, view_ctx *ctx, int64_t index)
{
	view_anomaly an;
	if (view_model_anomalies(ctx->model, index, &an, 1) != 1)
		return;
	p->detail = 1;
	p->step = an;
	p->step_index = index;
	p->list.cursor = index;
	for (int64_t i = 0; p->fidx && i < p->nf; i++)
		if (p->fidx[i] == index)
			p->list.cursor = i;
	p->tlist = (view_list){0, 0, 0, 1};
	p->tpage_top = -1;
}

/* n in at most 5 characters: exact below 100000, else view_fmt_count's "131k", "1.03M". */
static void count5(int64_t n, char *buf, size_t len)
{
	if (n < 100000)
		snprintf(buf, len, "%lld", (long long)n);
	else
		view_fmt_count((double)n, buf, len);
}

static void draw_detail(anomalies *p, view_ctx *ctx, view_screen *s, int top, int rows)
{
	const view_anomaly *an = &p->step;
	char a[32], b[32], c[32], site[600];
	int y = top, end = top + rows;
	int64_t total = view_model_anomaly_count(ctx->model);
	int x = 1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_BAD, VIEW_A_BOLD, "Step %lld",
	                               (long long)an->step);
	char on[40] = ""; /* several ranks: whose tensors the table shows */
	if (an->rank >= 0)
		snprintf(on, sizeof on, " \xc2\xb7 rank %lld", (long long)an->rank);
	view_screen_printf(s, x, y++, s->w - x - 1, VIEW_S_NORMAL, 0,
	                   "%s \xc2\xb7 scale %s \xc2\xb7 %s \xc2\xb7 %lld non-finite tensors "
	                   "\xc2\xb7 anomaly %lld/%lld",
	                   on, view_fmt_scale(an->scale, a, sizeof a),
	                   an->skipped ? "update skipped" : "update applied",
	                   (long long)an->nonfinite, (long long)p->step_index + 1,
	                   (long long)total);
	int64_t count = view_model_step_tstat_count(ctx->model, an->step, an->rank);
	/* the table: mark 2 | seq 6 | op 11 | role 6 | name | dtype 5 | nan 6 | inf 6 | uf 7 | nof
	 * 8 */
	int namew = s->w - 2 - 6 - 1 - 11 - 1 - 6 - 1 - 1 - 5 - 6 - 6 - 7 - 1 - 8 - 1;
	/* narrow: the headroom columns go first, so that the tensor keeps its name */
	int headroom = namew >= 10;
	if (!headroom)
		namew += 16;
	if (namew < 6)
		namew = 6;
	int xs = 2, xo = 9, xr = 21, xn = 28, xd = xn + namew + 1, xnan = xd + 5, xinf = xnan + 6,
	    xuf = xinf + 6, xnof = xuf + 8;
	y++;
	int list_rows = end - y - 4;
	if (list_rows > PAGE_MAX)
		list_rows = PAGE_MAX;
	if (list_rows < 1)
		return;
	view_list_fit(&p->tlist, count, list_rows);
	if (p->tpage_top != p->tlist.top || p->tpage_rows != list_rows) {
		p->ntpage =
		    view_model_step_tstats(ctx->model, an->step, an->rank, p->tlist.top, p->tpage,
		                           list_rows);
		if (p->ntpage < 0)
			p->ntpage = 0;
		p->tpage_top = p->tlist.top;
		p->tpage_rows = list_rows;
	}
	/* the origin, spelled out above the table */
	const view_tstat *org =
	    p->tlist.top == 0 && p->ntpage > 0 && p->tpage[0].origin ? &p->tpage[0] : NULL;
	view_screen_puts(s, 1, y, 8, VIEW_S_HEADER, VIEW_A_BOLD, "Origin");
	if (org || an->has_origin) {
		const char *cast = an->origin_cast ? "the automatic cast before " : "";
		if (org)
			x = 9 + view_screen_printf(s, 9, y, s->w - 10, VIEW_S_BAD, VIEW_A_BOLD,
			                           "%s%s (seq %lld) %s %s: %lld Inf, %lld NaN", cast,
			                           org->op, (long long)org->seq, org->role,
			                           org->name, (long long)org->inf,
			                           (long long)org->nan);
		else
			view_screen_printf(s, 9, y, s->w - 10, VIEW_S_BAD, VIEW_A_BOLD, "%s%s %s", cast,
			                   an->origin_op, an->origin_label);
		y++;
		/* room for "at ", the site and " in function" */
		int room = s->w - 13 - (org ? 4 + (int)strlen(org->function) : 0);
		view_fmt_site_fit(ctx->model, org ? org->file : an->origin_file,
		                  org ? org->line : an->origin_line, room, site, sizeof site);
		x = 9 + view_screen_puts(s, 9, y, s->w - 10, VIEW_S_NORMAL, 0, "at ");
		x += view_draw_tail(s, x, y, s->w - x - 1, VIEW_S_NORMAL, VIEW_A_BOLD, site);
		if (org)
			view_screen_printf(s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0, " in %s",
			                   org->function);
		y++;
	} else {
		view_screen_puts(s, 9, y++, s->w - 10, VIEW_S_DIM, 0,
		                 "none recorded for this step");
		y++;
	}
	view_screen_puts_right(s, xs, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "SEQ");
	view_screen_puts(s, xo, y, 11, VIEW_S_HEADER, VIEW_A_BOLD, "OP");
	view_screen_puts(s, xr, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "ROLE");
	view_screen_puts(s, xn, y, namew, VIEW_S_HEADER, VIEW_A_BOLD, "TENSOR");
	view_screen_puts(s, xd, y, 5, VIEW_S_HEADER, VIEW_A_BOLD, "TYPE");
	view_screen_puts_right(s, xnan + 1, y, 5, VIEW_S_HEADER, VIEW_A_BOLD, "NAN");
	view_screen_puts_right(s, xinf + 1, y, 5, VIEW_S_HEADER, VIEW_A_BOLD, "INF");
	if (headroom) {
		view_screen_puts_right(s, xuf, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "UNDERF");
		view_screen_puts_right(s, xnof, y, 8, VIEW_S_HEADER, VIEW_A_BOLD, "NEAR-OVF");
	}
	y++;
	for (long i = 0; i < p->ntpage && y < end - 1; i++, y++) {
		const view_tstat *t = &p->tpage[i];
		int st = t->origin ? VIEW_S_BAD : t->nan || t->inf ? VIEW_S_WARN : VIEW_S_NORMAL;
		snprintf(a, sizeof a, "%lld", (long long)t->seq);
		view_screen_puts_right(s, xs, y, 6, st, 0, a);
		view_screen_puts(s, xo, y, 11, st, t->origin ? VIEW_A_BOLD : 0, t->op);
		view_screen_puts(s, xr, y, 6, st, 0, t->role);
		view_screen_puts(s, xn, y, namew, st, 0, t->name);
		view_screen_puts(s, xd, y, 5, st, 0, t->dtype);
		/* counts in at most 5 characters (exact below 100000, then "131k", "1.03M"),
		 * right-aligned in 6 columns: a column apart, never cut */
		count5(t->nan, a, sizeof a);
		view_screen_puts_right(s, xnan + 1, y, 5, st, 0, a);
		count5(t->inf, a, sizeof a);
		view_screen_puts_right(s, xinf + 1, y, 5, st, 0, a);
		if (headroom) {
			pct(t->underflow, t->count, b, sizeof b);
			view_screen_puts_right(s, xuf, y, 7, st, 0, b);
			pct(t->near_overflow, t->count, c, sizeof c);
			view_screen_puts_right(s, xnof, y, 8, st, 0, c);
		}
		if (p->tlist.top + i == p->tlist.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	/* the cursor row's call site on the last line */
	long ci = (long)(p->tlist.cursor - p->tlist.top);
	if (ci >= 0 && ci < p->ntpage) {
		const view_tstat *t = &p->tpage[ci];
		view_fmt_site(view_model_short_path(ctx->model, t->file), t->line, site,
		              sizeof site);
		/* the call site first: it names the line, the range comes after (absmax is
		 * max(|min|, |max|), left out) */
		view_screen_printf(s, 1, end - 1, s->w - 2, VIEW_S_DIM, 0,
		                   "%s %s at %s in %s \xc2\xb7 min %.4g max %.4g", t->op, t->role,
		                   site, t->function, t->min, t->max);
	}
	if (p->msg[0])
		snprintf(ctx->status, sizeof ctx->status, "%s", p->msg);
	else
		snprintf(ctx->status, sizeof ctx->status,
		         "Esc: all anomaly steps \xc2\xb7 Left/Right, n/N: previous/next anomaly step");
}

static void anomalies_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	anomalies *p = self;
	if (p->detail)
		draw_detail(p, ctx, s, top, rows);
	else
		draw_list(p, ctx, s, top, rows);
	p->msg[0] = '\0';
}

static int anomalies_key(void *self, view_ctx *ctx, int key)
{
	anomalies *p = self;
	if (p->detail) {
		switch (key) {
		case VIEW_KEY_ESC:
		case VIEW_KEY_BACKSPACE:
			p->detail = 0;
			if (p->jumped) {
				p->jumped = 0;
				return VIEW_F_UNHANDLED; /* the app goes back to the panel we came
				                            from */
			}
			return VIEW_F_HANDLED;
		case VIEW_KEY_LEFT:
		case 'h':
			if (p->step_index > 0)
				open_step(p, ctx, p->step_index - 1);
			return VIEW_F_HANDLED;
		case VIEW_KEY_RIGHT:
		case 'l':
			if (p->step_index + 1 < view_model_anomaly_count(ctx->model))
				open_step(p, ctx, p->step_index + 1);
			return VIEW_F_HANDLED;
		case 'n':
		case 'N': {
			int64_t n = view_model_anomaly_count(ctx->model);
			if (n > 0) {
				int64_t i = (p->step_index + (key == 'n' ? 1 : n - 1)) % n;
				if ((key == 'n') != (i > p->step_index))
					snprintf(p->msg, sizeof p->msg, "wrapped to the %s anomaly step",
					         key == 'n' ? "first" : "last");
				open_step(p, ctx, i);
			}
			return VIEW_F_HANDLED;
		}
		case VIEW_KEY_ENTER:
			ctx->goto_panel = VIEW_P_STEPS;
			ctx->goto_step = p->step.step;
			return VIEW_F_GOTO;
		default: return view_list_key(&p->tlist, key) ? VIEW_F_HANDLED : VIEW_F_UNHANDLED;
		}
	}
	int changed = 0;
	if (view_filter_key(&p->filter, ctx, key, &changed)) {
		if (changed)
			refilter(p, ctx);
		return VIEW_F_HANDLED;
	}
	if (view_list_key(&p->list, key))
		return VIEW_F_HANDLED;
	if ((key == 'n' || key == 'N') && p->list.count > 0) {
		int64_t n = p->list.count, c = p->list.cursor;
		p->list.cursor = (c + (key == 'n' ? 1 : n - 1)) % n;
		if ((key == 'n') != (p->list.cursor > c) && n > 1)
			snprintf(p->msg, sizeof p->msg, "wrapped to the %s anomaly step",
			         key == 'n' ? "first" : "last");
		view_list_fit(&p->list, n, p->list.rows);
		return VIEW_F_HANDLED;
	}
	if (key == VIEW_KEY_ENTER && p->list.count > 0) {
		p->jumped = 0;
		open_step(p, ctx, p->fidx ? p->fidx[p->list.cursor] : p->list.cursor);
		return VIEW_F_HANDLED;
	}
	return VIEW_F_UNHANDLED;
}

static void anomalies_focus(void *self, view_ctx *ctx, int64_t step)
{
	anomalies *p = self;
	if (step < 0) {
		p->detail = 0;
		return;
	}
	int64_t index = view_model_anomaly_index(ctx->model, step);
	if (index < 0) {
		p->detail = 0;
		snprintf(p->msg, sizeof p->msg, "step %lld has no non-finite values",
		         (long long)step);
		return;
	}
	open_step(p, ctx, index);
	p->jumped = 1;
}

const view_panel_class view_panel_anomalies = {
    "anomalies",    "Anomalies",   anomalies_create, anomalies_destroy,
    anomalies_draw, anomalies_key, anomalies_focus,  anomalies_help,
};
