/* panel_ops.c — panel 2: time by op type, or by op type and layer label, with the dtype the
 * kernels ran in.  Sorting, a / filter, FP32 rows of ops whose list allows FP16 highlighted;
 * Enter drills into a row: its call sites and its calls per step.  Rows come from op_sigs
 * (summary-sized); the per-step calls are read a page of steps at a time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"
#include "profile_db.h"

enum { SORT_TIME, SORT_CALLS, SORT_MEAN, SORT_FLOPS, SORT_COUNT };
static const char *const sort_names[SORT_COUNT] = {"time", "calls", "mean", "FLOPs"};

#define SITES_MAX     8
#define STEP_ROWS_MAX 256

typedef struct ops {
	int by_label;
	int sort;
	view_filter filter;
	int *index;    /* filtered and sorted rows of the model's groups */
	long nindex;
	int dirty; /* index must be rebuilt */
	view_list list;
	/* drill-down */
	int drill;
	view_op_group group; /* the row drilled into (a copy) */
	view_site_row sites[SITES_MAX];
	long nsites;
	amp_op_stats stats; /* the op type's durations in the group's dtype (op_summary) */
	int has_stats;
	view_list steps; /* over step numbers first_step .. last_step */
	view_group_step page[STEP_ROWS_MAX];
	long npage;
	int64_t page_lo, page_hi; /* step range the page holds, lo > hi: none */
} ops;

static const view_keyhelp ops_help[] = {
    {"t c m f", "sort by time, calls, mean, FLOPs"},
    {"Left Right  h l", "previous / next sort column"},
    {"v", "rows by op type / by op type and label"},
    {"/", "filter (Enter keeps it, Esc clears it)"},
    {"Enter", "calls per step and call sites of the row"},
    {"*, highlighted", "FP32 row of an op its list allows in FP16"},
    {NULL, NULL},
};

static void *ops_create(view_ctx *ctx)
{
	(void)ctx;
	ops *o = calloc(1, sizeof *o);
	if (o)
		o->dirty = 1;
	return o;
}

static void ops_destroy(void *self)
{
	ops *o = self;
	free(o->index);
	free(o);
}

static const view_op_group *sort_rows;
static int sort_key;

static int cmp_group(const void *pa, const void *pb)
{
	const view_op_group *a = &sort_rows[*(const int *)pa], *b = &sort_rows[*(const int *)pb];
	double x = 0, y = 0;
	switch (sort_key) {
	case SORT_TIME: x = (double)a->total_ns, y = (double)b->total_ns; break;
	case SORT_CALLS: x = (double)a->calls, y = (double)b->calls; break;
	case SORT_MEAN: x = a->mean_ns, y = b->mean_ns; break;
	default: x = (double)a->flops, y = (double)b->flops; break;
	}
	if (x != y)
		return x < y ? 1 : -1;
	/* ties by name, so that equal counts list the same way in every run (the model's order
	 * follows the measured times) */
	int c = strcmp(a->op, b->op);
	if (c == 0)
		c = strcmp(a->label, b->label);
	if (c == 0)
		c = strcmp(a->dtype, b->dtype);
	return c ? c : *(const int *)pa - *(const int *)pb;
}

static long rebuild(ops *o, view_ctx *ctx, const view_op_group **rows)
{
	long n = view_model_op_groups(ctx->model, o->by_label, rows);
	if (n < 0)
		return n;
	if (!o->dirty)
		return n;
	free(o->index);
	o->index = malloc((size_t)(n > 0 ? n : 1) * sizeof *o->index);
	o->nindex = 0;
	if (!o->index)
		return -1;
	for (long i = 0; i < n; i++) {
		const view_op_group *g = &(*rows)[i];
		if (view_filter_match(&o->filter, g->op) || view_filter_match(&o->filter, g->label) ||
		    view_filter_match(&o->filter, g->dtype))
			o->index[o->nindex++] = (int)i;
	}
	sort_rows = *rows;
	sort_key = o->sort;
	qsort(o->index, (size_t)o->nindex, sizeof *o->index, cmp_group);
	o->dirty = 0;
	return n;
}

/* ---- table ---------------------------------------------------------------------------------- */
static void draw_table(ops *o, view_ctx *ctx, view_screen *s, int top, int rows)
{
	const view_op_group *g = NULL;
	char a[32], b[32], c[32], d[32];
	int y = top, end = top + rows;
	if (rebuild(o, ctx, &g) < 0 || !o->index) {
		view_screen_printf(s, 1, y, s->w - 2, VIEW_S_BAD, 0, "cannot read ops: %s",
		                   view_model_error(ctx->model));
		return;
	}
	int x = 1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_NORMAL, 0,
	                               "%ld rows by %s \xc2\xb7 sort: %s", o->nindex,
	                               o->by_label ? "op type and label" : "op type",
	                               sort_names[o->sort]);
	view_filter_draw(&o->filter, ctx, s, x, y, s->w - x - 1);
	y += 2;
	/* columns: mark 2 | op | label | dtype 5 | calls 7 | time 9 | mean 9 | flops 7 | share 6 */
	int fixed = 2 + 1 + 6 + 1 + 7 + 1 + 9 + 1 + 9 + 1 + 7 + 1 + 6;
	/* narrow: the FLOPs column gives way (unless it is the sort key) before the names, then
	 * the mean (unless it is the sort key); the names keep 6 columns at least */
	int flopw = 7, meanw = 9;
	if (s->w - fixed - 1 - (o->by_label ? 13 : 0) < 12 && o->sort != SORT_FLOPS)
		fixed -= 8, flopw = 0;
	if (s->w - fixed - 1 - (o->by_label ? 13 : 0) < 6 && o->sort != SORT_MEAN)
		fixed -= 10, meanw = 0;
	int opw = o->by_label ? 12 : s->w - fixed - 1;
	int labw = o->by_label ? s->w - fixed - opw - 2 : 0;
	if (opw < 6)
		opw = 6;
	if (o->by_label && labw < 6)
		labw = 6;
	int xd = 2 + opw + 1 + (o->by_label ? labw + 1 : 0);
	static const char *const heads[SORT_COUNT] = {"TIME", "CALLS", "MEAN", "FLOPS"};
	view_screen_puts(s, 2, y, opw, VIEW_S_HEADER, VIEW_A_BOLD, "OP");
	if (o->by_label)
		view_screen_puts(s, 2 + opw + 1, y, labw, VIEW_S_HEADER, VIEW_A_BOLD, "LABEL");
	view_screen_puts(s, xd, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "DTYPE");
	int cols[SORT_COUNT];
	cols[1] = xd + 6 + 1;                          /* calls */
	cols[0] = cols[1] + 7 + 1;                     /* time */
	cols[2] = cols[0] + 9 + 1;                     /* mean */
	cols[3] = cols[2] + (meanw ? meanw + 1 : 0);   /* flops */
	int widths[SORT_COUNT] = {9, 7, 9, 7};
	int xsh = flopw ? cols[3] + 8 : cols[3];
	for (int i = 0; i < SORT_COUNT; i++)
		if ((i != SORT_FLOPS || flopw) && (i != SORT_MEAN || meanw))
			view_screen_puts_right(s, cols[i], y, widths[i], VIEW_S_HEADER,
			                       VIEW_A_BOLD | (i == o->sort ? VIEW_A_UNDERLINE : 0),
			                       heads[i]);
	view_screen_puts_right(s, xsh, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "SHARE");
	y++;
	int list_rows = end - y - 1;
	view_list_fit(&o->list, o->nindex, list_rows);
	for (int64_t i = o->list.top; i < o->nindex && y < end - 1; i++, y++) {
		const view_op_group *r = &g[o->index[i]];
		int st = r->candidate ? VIEW_S_HILITE : VIEW_S_NORMAL;
		view_screen_puts(s, 2, y, opw, st, 0, r->op);
		if (o->by_label)
			view_draw_label(s, 2 + opw + 1, y, labw, st, 0,
			                r->label[0] ? r->label : "-");
		view_screen_printf(s, xd, y, 6, r->half ? VIEW_S_FP16 : st, 0, "%s%s", r->dtype,
		                   r->candidate ? "*" : "");
		view_screen_puts_right(s, cols[1], y, 7, st, 0,
		                       view_fmt_count((double)r->calls, a, sizeof a));
		view_screen_puts_right(s, cols[0], y, 9, st, 0,
		                       view_fmt_ns(r->total_ns, b, sizeof b));
		if (meanw)
			view_screen_puts_right(s, cols[2], y, 9, st, 0,
			                       view_fmt_ns((int64_t)(r->mean_ns + 0.5), c, sizeof c));
		if (flopw)
			view_screen_puts_right(s, cols[3], y, 7, st, 0,
			                       view_fmt_count((double)r->flops, d, sizeof d));
		snprintf(a, sizeof a, "%.1f%%", r->share * 100);
		view_screen_puts_right(s, xsh, y, 6, st, 0, a);
		if (i == o->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	if (o->nindex == 0)
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0, "no rows match the filter");
	view_screen_puts(s, 1, end - 1, s->w - 2, VIEW_S_DIM, 0,
	                 "* FP32 where the op's list allows FP16 \xc2\xb7 Enter: calls per step");
}

/* ---- drill-down ----------------------------------------------------------------------------- */
static void open_drill(ops *o, view_ctx *ctx, const view_op_group *g)
{
	o->group = *g;
	o->drill = 1;
	o->nsites = view_model_group_sites(ctx->model, g, o->by_label, o->sites, SITES_MAX);
	if (o->nsites < 0)
		o->nsites = 0;
	o->steps = (view_list){0, 0, 0, 1};
	o->page_lo = 1, o->page_hi = 0;
	/* the distribution of the op type's durations (a summary-sized table, read whole) */
	amp_op_stats all[256];
	size_t n = 0;
	o->has_stats = 0;
	if (amp_profile_op_stats(view_model_db(ctx->model), all, 256, &n) == AMP_PROFILE_OK)
		for (size_t i = 0; i < n && !o->has_stats; i++)
			if (!strcmp(all[i].op, g->op) && !strcmp(all[i].exec_dtype, g->dtype)) {
				o->stats = all[i];
				o->has_stats = !isnan(all[i].median_ns);
			}
}

static void draw_drill(ops *o, view_ctx *ctx, view_screen *s, int top, int rows)
{
	const view_op_group *g = &o->group;
	const view_run *r = ctx->run;
	char a[32], b[32], c[32], d[32], site[600];
	int y = top, end = top + rows;
	int x = 1 + view_screen_puts(s, 1, y, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, g->op);
	x += view_screen_printf(s, x, y, s->w - x - 1, g->half ? VIEW_S_FP16 : VIEW_S_NORMAL,
	                        VIEW_A_BOLD, " %s", g->dtype);
	if (o->by_label) {
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0, " label ");
		view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_NORMAL, VIEW_A_BOLD,
		                 g->label[0] ? g->label : "-");
	}
	y++;
	view_screen_printf(
	    s, 1, y++, s->w - 2, VIEW_S_NORMAL, 0,
	    "%s calls \xc2\xb7 %s \xc2\xb7 mean %s \xc2\xb7 %s FLOP \xc2\xb7 list %s",
	    view_fmt_count((double)g->calls, a, sizeof a), view_fmt_ns(g->total_ns, b, sizeof b),
	    view_fmt_ns((int64_t)(g->mean_ns + 0.5), c, sizeof c),
	    view_fmt_count((double)g->flops, d, sizeof d), g->list);
	if (o->has_stats && y < end) {
		const amp_op_stats *t = &o->stats;
		char e[32], f[32], h[32];
		view_screen_printf(s, 1, y++, s->w - 2, VIEW_S_NORMAL, 0,
		                   "%s%s %s: median %s \xc2\xb7 min %s \xc2\xb7 max %s \xc2\xb7 stddev %s",
		                   o->by_label ? "all " : "", t->op, t->exec_dtype,
		                   view_fmt_ns((int64_t)(t->median_ns + 0.5), a, sizeof a),
		                   view_fmt_ns(t->min_ns, e, sizeof e), view_fmt_ns(t->max_ns, f, sizeof f),
		                   view_fmt_ns((int64_t)(t->stddev_ns + 0.5), h, sizeof h));
	}
	if (g->candidate && y < end)
		view_screen_puts(
		    s, 1, y++, s->w - 2, VIEW_S_HILITE, 0,
		    "ran in FP32 though its list allows FP16: check the precision mode "
		    "and custom lists");
	y++;
	view_screen_puts(s, 1, y++, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, "Call sites");
	int site_rows = (int)(o->nsites < 4 ? o->nsites : 4);
	for (int i = 0; i < site_rows && y < end; i++, y++) {
		const view_site_row *sr = &o->sites[i];
		view_fmt_site(view_model_short_path(ctx->model, sr->file), sr->line, site,
		              sizeof site);
		int w = s->w - 44;
		view_draw_tail(s, 3, y, w, VIEW_S_NORMAL, VIEW_A_BOLD, site);
		view_screen_puts(s, 3 + w + 1, y, 16, VIEW_S_NORMAL, 0, sr->function);
		view_screen_puts(s, 3 + w + 18, y, 9, VIEW_S_DIM, 0, sr->phase);
		view_screen_puts_right(s, s->w - 16, y, 6, VIEW_S_NORMAL, 0,
		                       view_fmt_count((double)sr->calls, a, sizeof a));
		view_screen_puts_right(s, s->w - 10, y, 9, VIEW_S_NORMAL, 0,
		                       view_fmt_ns(sr->total_ns, b, sizeof b));
	}
	if (o->nsites > site_rows && y < end)
		view_screen_printf(s, 3, y++, s->w - 4, VIEW_S_DIM, 0, "and %ld more",
		                   o->nsites - site_rows);
	y++;
	if (y >= end - 2)
		return;
	view_screen_puts(s, 1, y++, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, "Calls per step");
	view_screen_puts_right(s, 2, y, 8, VIEW_S_HEADER, VIEW_A_BOLD, "STEP");
	view_screen_puts_right(s, 11, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "CALLS");
	view_screen_puts_right(s, 19, y, 10, VIEW_S_HEADER, VIEW_A_BOLD, "TIME");
	view_screen_puts_right(s, 30, y, 10, VIEW_S_HEADER, VIEW_A_BOLD, "MEAN");
	y++;
	int list_rows = end - y;
	if (list_rows > STEP_ROWS_MAX)
		list_rows = STEP_ROWS_MAX;
	view_list_fit(&o->steps, r->step_span, list_rows);
	/* top < step_span, so lo <= last_step; hi saturates (step numbers are any int64) */
	int64_t lo = r->first_step + o->steps.top;
	int64_t hi = lo > INT64_MAX - (list_rows - 1) ? INT64_MAX : lo + (list_rows - 1);
	if (lo != o->page_lo || hi != o->page_hi) {
		o->npage = view_model_group_steps(ctx->model, g, o->by_label, lo, hi, o->page,
		                                  STEP_ROWS_MAX);
		if (o->npage < 0)
			o->npage = 0;
		o->page_lo = lo, o->page_hi = hi;
	}
	long k = 0;
	for (int64_t step = lo; y < end; step++, y++) {
		while (k < o->npage && o->page[k].step < step)
			k++;
		const view_group_step *gs =
		    k < o->npage && o->page[k].step == step ? &o->page[k] : NULL;
		view_screen_printf(s, 2, y, 8, VIEW_S_NORMAL, 0, "%8lld", (long long)step);
		view_screen_puts_right(s, 11, y, 7, gs ? VIEW_S_NORMAL : VIEW_S_DIM, 0,
		                       gs ? view_fmt_count((double)gs->calls, a, sizeof a) : "0");
		view_screen_puts_right(s, 19, y, 10, VIEW_S_NORMAL, 0,
		                       gs ? view_fmt_ns(gs->total_ns, b, sizeof b) : "-");
		view_screen_puts_right(
		    s, 30, y, 10, VIEW_S_NORMAL, 0,
		    gs && gs->calls ? view_fmt_ns(gs->total_ns / gs->calls, c, sizeof c) : "-");
		if ((uint64_t)step - (uint64_t)r->first_step == (uint64_t)o->steps.cursor)
			view_draw_cursor(s, 0, y, s->w);
		if (step >= hi || step >= r->last_step) /* never step++ past INT64_MAX */
			break;
	}
	snprintf(ctx->status, sizeof ctx->status,
	         "Esc: back to the table \xc2\xb7 steps %lld..%lld", (long long)r->first_step,
	         (long long)r->last_step);
}

static void ops_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	ops *o = self;
	if (o->drill)
		draw_drill(o, ctx, s, top, rows);
	else
		draw_table(o, ctx, s, top, rows);
}

static int ops_key(void *self, view_ctx *ctx, int key)
{
	ops *o = self;
	int changed = 0;
	if (!o->drill && view_filter_key(&o->filter, ctx, key, &changed)) {
		if (changed) {
			o->dirty = 1;
			o->list.cursor = o->list.top = 0;
		}
		return VIEW_F_HANDLED;
	}
	if (o->drill) {
		if (key == VIEW_KEY_ESC || key == VIEW_KEY_BACKSPACE || key == VIEW_KEY_LEFT ||
		    key == 'h') {
			o->drill = 0;
			return VIEW_F_HANDLED;
		}
		if (key == VIEW_KEY_ENTER) {
			ctx->goto_panel = VIEW_P_STEPS;
			ctx->goto_step = ctx->run->first_step + o->steps.cursor;
			return VIEW_F_GOTO;
		}
		return view_list_key(&o->steps, key) ? VIEW_F_HANDLED : VIEW_F_UNHANDLED;
	}
	if (view_list_key(&o->list, key))
		return VIEW_F_HANDLED;
	int sort = -1;
	switch (key) {
	case 't': sort = SORT_TIME; break;
	case 'c': sort = SORT_CALLS; break;
	case 'm': sort = SORT_MEAN; break;
	case 'f': sort = SORT_FLOPS; break;
	case 'l':
	case VIEW_KEY_RIGHT: sort = (o->sort + 1) % SORT_COUNT; break;
	case 'h':
	case VIEW_KEY_LEFT: sort = (o->sort + SORT_COUNT - 1) % SORT_COUNT; break;
	case 'v':
		o->by_label = !o->by_label;
		o->dirty = 1;
		o->list.cursor = o->list.top = 0;
		return VIEW_F_HANDLED;
	case VIEW_KEY_ENTER: {
		const view_op_group *g = NULL;
		if (rebuild(o, ctx, &g) >= 0 && o->list.cursor < o->nindex && o->nindex > 0)
			open_drill(o, ctx, &g[o->index[o->list.cursor]]);
		return VIEW_F_HANDLED;
	}
	default: return VIEW_F_UNHANDLED;
	}
	o->sort = sort;
	o->dirty = 1;
	return VIEW_F_HANDLED;
}

static void ops_focus(void *self, view_ctx *ctx, int64_t step)
{
	ops *o = self;
	(void)ctx, (void)step;
	o->drill = 0;
}

const view_panel_class view_panel_ops = {
    "ops", "Ops", ops_create, ops_destroy, ops_draw, ops_key, ops_focus, ops_help,
};
