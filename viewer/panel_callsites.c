/* panel_callsites.c — panel 6: the source locations that launched ops and copies, ranked by
 * time or by anomalies (non-finite tensors and origins), each with what it launches (two calls
 * on one line are two sites) and its file relative to the model's source root; Enter shows a
 * site's recorded frames.  Rows come from the callsites table and the per-signature
 * aggregates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"

typedef struct callsites {
	int by_anomalies;
	int *index;
	long nindex;
	int sorted_by; /* order the index holds, -1: none (also after the filter changed) */
	view_filter filter;
	view_list list;
	int detail;
	char frames[4096];
} callsites;

static const view_keyhelp callsites_help[] = {
    {"t  a", "rank by time / by anomalies"},
    {"Left Right  h l", "switch the ranking"},
    {"Enter", "the site's recorded frames"},
    {"/", "filter by location, function or op (Esc clears)"},
    {NULL, NULL},
};

static void *callsites_create(view_ctx *ctx)
{
	(void)ctx;
	callsites *p = calloc(1, sizeof *p);
	if (p)
		p->sorted_by = -1;
	return p;
}

static void callsites_destroy(void *self)
{
	callsites *p = self;
	free(p->index);
	free(p);
}

static const view_callsite *sort_sites;

static int cmp_anomalies(const void *pa, const void *pb)
{
	const view_callsite *a = &sort_sites[*(const int *)pa], *b = &sort_sites[*(const int *)pb];
	if (a->origins != b->origins)
		return a->origins < b->origins ? 1 : -1;
	if (a->anomalies != b->anomalies)
		return a->anomalies < b->anomalies ? 1 : -1;
	return *(const int *)pa - *(const int *)pb;
}

static long rows_of(callsites *p, view_ctx *ctx, const view_callsite **rows)
{
	long n = view_model_callsites(ctx->model, rows);
	if (n < 0 || p->sorted_by == p->by_anomalies)
		return n;
	free(p->index);
	p->index = malloc((size_t)(n > 0 ? n : 1) * sizeof *p->index);
	if (!p->index)
		return -1;
	long k = 0;
	for (long i = 0; i < n; i++) { /* the model's order is by time */
		const view_callsite *c = &(*rows)[i];
		char site[600];
		view_fmt_site(view_model_short_path(ctx->model, c->file), c->line, site,
		              sizeof site);
		if (view_filter_match(&p->filter, site) || view_filter_match(&p->filter, c->function) ||
		    view_filter_match(&p->filter, c->what))
			p->index[k++] = (int)i;
	}
	if (p->by_anomalies) {
		sort_sites = *rows;
		qsort(p->index, (size_t)k, sizeof *p->index, cmp_anomalies);
	}
	p->nindex = k;
	p->sorted_by = p->by_anomalies;
	return n;
}

static void draw_detail(callsites *p, view_ctx *ctx, const view_callsite *c, view_screen *s,
                        int top, int rows)
{
	char site[600], a[32], b[32], d[32];
	int y = top, end = top + rows;
	const char *root = view_model_source_root(ctx->model);
	view_fmt_site_fit(ctx->model, c->file, c->line, s->w - 6 - (int)strlen(c->function), site,
	                  sizeof site);
	int x = 1 + view_draw_tail(s, 1, y, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, site);
	view_screen_printf(s, x, y++, s->w - x - 1, VIEW_S_NORMAL, 0, " in %s", c->function);
	view_screen_printf(s, 1, y++, s->w - 2, VIEW_S_NORMAL, 0,
	                   "launches %s \xc2\xb7 ops: %s calls, %s \xc2\xb7 copies: %s, %s",
	                   c->what[0] ? c->what : "nothing recorded",
	                   view_fmt_count((double)c->op_calls, a, sizeof a),
	                   view_fmt_ns(c->op_ns, b, sizeof b),
	                   view_fmt_count((double)c->copy_calls, d, sizeof d),
	                   view_fmt_ns(c->copy_ns, site, sizeof site));
	view_screen_printf(s, 1, y++, s->w - 2,
	                   c->origins     ? VIEW_S_BAD
	                   : c->anomalies ? VIEW_S_WARN
	                                  : VIEW_S_NORMAL,
	                   0, "%lld non-finite tensors \xc2\xb7 the origin in %lld step%s",
	                   (long long)c->anomalies, (long long)c->origins,
	                   c->origins == 1 ? "" : "s");
	y++;
	view_screen_puts(s, 1, y++, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, "Recorded frames");
	/* one "function file:line" per line; files under the source root lose it, as in the
	 * list, so that deep paths keep their line numbers in view */
	char *line = p->frames;
	size_t rlen = strlen(root);
	while (line && *line && y < end) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		const char *sp = strchr(line, ' ');
		if (rlen && sp && !strncmp(sp + 1, root, rlen) && sp[1 + rlen]) {
			char shown[4096];
			snprintf(shown, sizeof shown, "%.*s %s", (int)(sp - line), line,
			         sp + 1 + rlen);
			view_screen_puts(s, 3, y, s->w - 4, VIEW_S_NORMAL, 0, shown);
		} else {
			view_screen_puts(s, 3, y, s->w - 4, VIEW_S_NORMAL, 0, line);
		}
		y++;
		if (nl)
			*nl = '\n';
		line = nl ? nl + 1 : NULL;
	}
	if (!p->frames[0] && y < end)
		view_screen_puts(s, 3, y, s->w - 4, VIEW_S_DIM, 0, "no frames recorded");
}

static void callsites_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	callsites *p = self;
	const view_callsite *c = NULL;
	char a[32], b[32], site[600];
	int y = top, end = top + rows;
	long n = rows_of(p, ctx, &c);
	if (n < 0) {
		view_screen_printf(s, 1, y, s->w - 2, VIEW_S_BAD, 0, "cannot read call sites: %s",
		                   view_model_error(ctx->model));
		return;
	}
	if (p->detail && p->list.cursor < p->nindex) {
		draw_detail(p, ctx, &c[p->index[p->list.cursor]], s, top, rows);
		snprintf(ctx->status, sizeof ctx->status, "Esc: back to the call sites");
		return;
	}
	int64_t total = 0;
	for (long i = 0; i < n; i++)
		total += c[i].op_ns + c[i].copy_ns;
	const char *root = view_model_source_root(ctx->model);
	int x = 1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_NORMAL, 0,
	                               "%ld call sites \xc2\xb7 ranked by %s", p->nindex,
	                               p->by_anomalies ? "anomalies (origins first)" : "time");
	x += view_filter_draw(&p->filter, ctx, s, x, y, s->w - x - 1);
	if (root[0] && x < s->w - 12) {
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_DIM, 0, " \xc2\xb7 paths in ");
		view_draw_tail(s, x, y, s->w - x - 1, VIEW_S_DIM, 0, root);
	}
	const char *warn = view_model_callsite_warning(ctx->model);
	if (warn[0]) /* why every row reads the same */
		view_screen_puts(s, 1, y + 1, s->w - 2, VIEW_S_WARN, 0, warn);
	y += 2;
	/* columns: mark 2 | location | function 16 (if wide) | ops 12 | calls 6 | time 8 |
	 * share 6 | nonfin 6 | origin 6.  The function gives way first: the location is what
	 * names the line, and the status line names the cursor row's function. */
	int fixed = 2 + 1 + 12 + 1 + 6 + 1 + 8 + 1 + 6 + 1 + 6 + 1 + 6 + 1;
	int funcw = s->w - fixed - 17 >= 28 ? 16 : 0;
	int locw = s->w - fixed - (funcw ? funcw + 1 : 0);
	/* narrower still: the share, then the calls give way, then the ops column narrows, so
	 * that the location keeps 24 columns ("examples/mlp_fashion.c:59") */
	int sharew = 6, callw = 6, opsw = 12;
	if (locw < 24)
		locw += sharew + 1, sharew = 0;
	if (locw < 24)
		locw += callw + 1, callw = 0;
	if (locw < 24)
		locw += 4, opsw = 8;
	int xf = 2 + locw + 1, xw = xf + (funcw ? funcw + 1 : 0), xc = xw + opsw + 1,
	    xt = xc + (callw ? callw + 1 : 0), xs = xt + 9, xa = xs + (sharew ? sharew + 1 : 0),
	    xg = xa + 7;
	view_screen_puts(s, 2, y, locw, VIEW_S_HEADER, VIEW_A_BOLD, "LOCATION");
	if (funcw)
		view_screen_puts(s, xf, y, funcw, VIEW_S_HEADER, VIEW_A_BOLD, "FUNCTION");
	view_screen_puts(s, xw, y, opsw, VIEW_S_HEADER, VIEW_A_BOLD, "OPS");
	if (callw)
		view_screen_puts_right(s, xc, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "CALLS");
	view_screen_puts_right(s, xt, y, 8, VIEW_S_HEADER,
	                       VIEW_A_BOLD | (p->by_anomalies ? 0 : VIEW_A_UNDERLINE), "TIME");
	if (sharew)
		view_screen_puts_right(s, xs, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "SHARE");
	view_screen_puts_right(s, xa, y, 6, VIEW_S_HEADER,
	                       VIEW_A_BOLD | (p->by_anomalies ? VIEW_A_UNDERLINE : 0), "NONFIN");
	view_screen_puts_right(s, xg, y, 6, VIEW_S_HEADER, VIEW_A_BOLD, "ORIGIN");
	y++;
	view_list_fit(&p->list, p->nindex, end - y);
	if (p->nindex == 0)
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0, "no call sites match the filter");
	for (int64_t i = p->list.top; i < p->nindex && y < end; i++, y++) {
		const view_callsite *r = &c[p->index[i]];
		int st = r->origins ? VIEW_S_BAD : r->anomalies ? VIEW_S_WARN : VIEW_S_NORMAL;
		view_fmt_site(view_model_short_path(ctx->model, r->file), r->line, site,
		              sizeof site);
		view_draw_tail(s, 2, y, locw, st, 0, site);
		if (funcw)
			view_screen_puts(s, xf, y, funcw, st, 0, r->function);
		view_screen_puts(s, xw, y, opsw, st, 0, r->what);
		if (callw)
			view_screen_puts_right(
			    s, xc, y, 6, st, 0,
			    view_fmt_count((double)(r->op_calls + r->copy_calls), a, sizeof a));
		view_screen_puts_right(s, xt, y, 8, st, 0,
		                       view_fmt_ns(r->op_ns + r->copy_ns, b, sizeof b));
		snprintf(a, sizeof a, "%.1f%%",
		         total > 0 ? 100.0 * (double)(r->op_ns + r->copy_ns) / (double)total : 0.0);
		if (sharew)
			view_screen_puts_right(s, xs, y, 6, st, 0, a);
		snprintf(a, sizeof a, "%lld", (long long)r->anomalies);
		view_screen_puts_right(s, xa, y, 6, st, 0, a);
		snprintf(a, sizeof a, "%lld", (long long)r->origins);
		view_screen_puts_right(s, xg, y, 6, st, 0, a);
		if (i == p->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	if (p->filter.editing)
		snprintf(ctx->status, sizeof ctx->status, "filter: /%s_", p->filter.text);
	else if (p->list.cursor < p->nindex)
		snprintf(ctx->status, sizeof ctx->status,
		         "in %.120s \xc2\xb7 t/a: rank by time/anomalies \xc2\xb7 Enter: frames",
		         c[p->index[p->list.cursor]].function);
	else
		snprintf(ctx->status, sizeof ctx->status,
		         "t/a: rank by time/anomalies \xc2\xb7 Enter: frames");
}

static int callsites_key(void *self, view_ctx *ctx, int key)
{
	callsites *p = self;
	if (p->detail) {
		if (key == VIEW_KEY_ESC || key == VIEW_KEY_BACKSPACE || key == VIEW_KEY_LEFT ||
		    key == 'h') {
			p->detail = 0;
			return VIEW_F_HANDLED;
		}
		return VIEW_F_UNHANDLED;
	}
	int changed = 0;
	if (view_filter_key(&p->filter, ctx, key, &changed)) {
		if (changed) {
			p->sorted_by = -1;
			p->list.cursor = p->list.top = 0;
		}
		return VIEW_F_HANDLED;
	}
	if (view_list_key(&p->list, key))
		return VIEW_F_HANDLED;
	switch (key) {
	case 't': p->by_anomalies = 0; p->sorted_by = -1; break;
	case 'a': p->by_anomalies = 1; p->sorted_by = -1; break;
	case 'h':
	case 'l':
	case VIEW_KEY_LEFT:
	case VIEW_KEY_RIGHT:
		p->by_anomalies = !p->by_anomalies;
		p->sorted_by = -1;
		break;
	case VIEW_KEY_ENTER: {
		const view_callsite *c;
		long n = rows_of(p, ctx, &c);
		if (n > 0 && p->list.cursor < p->nindex) {
			view_model_callsite_frames(ctx->model, c[p->index[p->list.cursor]].id,
			                           p->frames, sizeof p->frames);
			p->detail = 1;
		}
		return VIEW_F_HANDLED;
	}
	default: return VIEW_F_UNHANDLED;
	}
	p->list.cursor = p->list.top = 0;
	return VIEW_F_HANDLED;
}

/* From an advice: the call site it names selected (the filter dropped if it hid it). */
static void callsites_focus(void *self, view_ctx *ctx, int64_t step)
{
	callsites *p = self;
	(void)step;
	p->detail = 0;
	if (ctx->goto_callsite < 0)
		return;
	for (int pass = 0; pass < 2; pass++) {
		const view_callsite *c = NULL;
		long n = rows_of(p, ctx, &c);
		for (long k = 0; n > 0 && k < p->nindex; k++)
			if (c[p->index[k]].id == ctx->goto_callsite) {
				p->list.cursor = k;
				p->list.top = k - p->list.rows / 2;
				view_list_fit(&p->list, p->nindex, p->list.rows);
				return;
			}
		if (!p->filter.text[0])
			return;
		p->filter.text[0] = '\0'; /* not among the filtered rows: all of them */
		p->sorted_by = -1;
	}
}

const view_panel_class view_panel_callsites = {
    "callsites",    "Sites",  callsites_create, callsites_destroy,
    callsites_draw, callsites_key, callsites_focus,  callsites_help,
};
