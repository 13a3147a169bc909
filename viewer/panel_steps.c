/* panel_steps.c — panel 3: one bar per step, its length the step's duration, split into FP16
 * compute, FP32 compute, copies and the rest.  Only the visible page of steps is read (one
 * range query per event table); : jumps to a step number. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"

#define PAGE_MAX 256

typedef struct steps {
	view_list list;
	view_step page[PAGE_MAX];
	long npage;
	int64_t page_top; /* list index of page[0], -1: nothing loaded */
	int page_rows;
	int jumping; /* the : prompt is open */
	char jump[24];
	char msg[128];
	view_filter filter;
	int64_t *match; /* with a filter: the matching steps (list index -> step), else NULL */
	long nmatch;
} steps;

static const view_keyhelp steps_help[] = {
    {": or s", "jump to a step number"},
    {"Enter", "anomalies of the step (overflow steps)"},
    {"n  N  o", "next / previous overflow step (wraps)"},
    {"/", "filter: a step number, overflow, skipped, unended"},
    {NULL, NULL},
};

static void *steps_create(view_ctx *ctx)
{
	(void)ctx;
	steps *p = calloc(1, sizeof *p);
	if (p)
		p->page_top = -1;
	return p;
}

static void steps_destroy(void *self)
{
	steps *p = self;
	free(p->match);
	free(p);
}

static void load_page(steps *p, view_ctx *ctx, int rows)
{
	if (p->page_top == p->list.top && p->page_rows == rows)
		return;
	if (p->match) {
		/* the matching steps one by one: each is one indexed range of events */
		p->npage = 0;
		for (int64_t i = p->list.top; i < p->nmatch && p->npage < rows; i++) {
			int64_t at = view_model_step_index(ctx->model, p->match[i]);
			if (view_model_steps(ctx->model, at, &p->page[p->npage], 1) == 1)
				p->npage++;
		}
	} else {
		p->npage = view_model_steps(ctx->model, p->list.top, p->page, rows);
	}
	if (p->npage < 0)
		p->npage = 0;
	p->page_top = p->list.top;
	p->page_rows = rows;
}

/* Draws the split bar of a step in w columns, scaled to max_ns. */
static void draw_bar(view_screen *s, int x, int y, int w, const view_step *st, int64_t max_ns)
{
	if (st->dur_ns <= 0 || max_ns <= 0)
		return;
	double cols = (double)w * (double)st->dur_ns / (double)max_ns;
	if (st->fp16_ns < 0) {
		/* not traced in detail: the duration only, not to be read as time outside ops */
		view_screen_fill(s, x, y, (int)lround(cols), 1, VIEW_G_HLINE, VIEW_S_DIM, 0);
		return;
	}
	int64_t parts[4] = {st->fp16_ns, st->fp32_ns, st->copy_ns, st->other_ns};
	static const uint32_t glyph[4] = {VIEW_G_FULL, VIEW_G_DARK, VIEW_G_MEDIUM, VIEW_G_LIGHT};
	static const int style[4] = {VIEW_S_FP16, VIEW_S_FP32, VIEW_S_COPY, VIEW_S_OTHER};
	int64_t sum = 0;
	int done = 0;
	for (int i = 0; i < 4; i++) {
		sum += parts[i];
		int upto = (int)lround(cols * (double)sum / (double)st->dur_ns);
		if (upto > w)
			upto = w;
		if (upto > done)
			view_screen_fill(s, x + done, y, upto - done, 1, glyph[i], style[i], 0);
		done = upto > done ? upto : done;
	}
}

static void steps_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	steps *p = self;
	char a[32], b[32];
	int y = top, end = top + rows;
	int64_t count = p->match ? p->nmatch : view_model_step_count(ctx->model),
	        max_ns = view_model_max_step_ns(ctx->model);
	int x = 1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_NORMAL, 0,
	                               "%lld steps \xc2\xb7 longest %s \xc2\xb7 ", (long long)count,
	                               view_fmt_ns(max_ns, a, sizeof a));
	int fx = x;
	static const struct {
		uint32_t g;
		int style;
		const char *name;
	} legend[] = {{VIEW_G_FULL, VIEW_S_FP16, " FP16  "},
	              {VIEW_G_DARK, VIEW_S_FP32, " FP32  "},
	              {VIEW_G_MEDIUM, VIEW_S_COPY, " copies  "},
	              {VIEW_G_LIGHT, VIEW_S_OTHER, " other  "},
	              {VIEW_G_HLINE, VIEW_S_DIM, " not traced"}};
	/* the last entry only where some steps have their duration only */
	int nlegend = view_model_run(ctx->model)->untraced_steps > 0 ? 5 : 4;
	for (int i = 0; i < nlegend && x < s->w - 10; i++) {
		view_screen_putc(s, x++, y, legend[i].g, legend[i].style, 0);
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0, legend[i].name);
	}
	if (p->filter.text[0] || p->filter.editing) { /* the filter instead of the legend */
		view_screen_fill(s, fx - 3, y, s->w - fx + 2, 1, ' ', VIEW_S_NORMAL, 0);
		view_filter_draw(&p->filter, ctx, s, fx - 3, y, s->w - fx + 2);
	}
	y += 2;
	/* columns: mark 2 | step 7 | time 9 | loss 7 | scale 7 | flags 3 | bar */
	view_screen_puts_right(s, 2, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "STEP");
	view_screen_puts_right(s, 10, y, 9, VIEW_S_HEADER, VIEW_A_BOLD, "TIME");
	view_screen_puts_right(s, 20, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "LOSS");
	view_screen_puts_right(s, 28, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "SCALE");
	view_screen_puts(s, 36, y, 3, VIEW_S_HEADER, VIEW_A_BOLD, "OS");
	view_screen_puts(s, 40, y, s->w - 41, VIEW_S_HEADER, VIEW_A_BOLD,
	                 "FP16 / FP32 / copies / other");
	y++;
	int list_rows = end - y;
	if (list_rows > PAGE_MAX)
		list_rows = PAGE_MAX;
	view_list_fit(&p->list, count, list_rows);
	load_page(p, ctx, list_rows);
	int barw = s->w - 41;
	for (long i = 0; i < p->npage && y < end; i++, y++) {
		const view_step *st = &p->page[i];
		view_screen_printf(s, 2, y, 7, VIEW_S_NORMAL, 0, "%7lld", (long long)st->step);
		view_screen_puts_right(s, 10, y, 9, st->dur_ns < 0 ? VIEW_S_WARN : VIEW_S_NORMAL, 0,
		                       st->dur_ns < 0 ? "unended"
		                                      : view_fmt_ns(st->dur_ns, a, sizeof a));
		if (st->loss_nonfinite) /* nan, inf, -inf: computed, not missing */
			snprintf(b, sizeof b, "%s", isnan(st->loss) ? "nan" : st->loss < 0 ? "-inf" : "inf");
		else if (isnan(st->loss))
			snprintf(b, sizeof b, "-");
		else
			snprintf(b, sizeof b, "%.4g", st->loss);
		view_screen_puts_right(s, 20, y, 7, st->loss_nonfinite ? VIEW_S_WARN : VIEW_S_NORMAL, 0,
		                       b);
		view_screen_puts_right(s, 28, y, 7, VIEW_S_NORMAL, 0,
		                       view_fmt_scale(st->scale, a, sizeof a));
		if (st->overflow)
			view_screen_putc(s, 36, y, 'O', VIEW_S_MARK, VIEW_A_BOLD);
		if (st->skipped)
			view_screen_putc(s, 37, y, 'S', VIEW_S_WARN, 0);
		draw_bar(s, 40, y, barw, st, max_ns);
		if (p->list.top + i == p->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	if (count == 0 && p->match)
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0, "no step matches the filter");
	if (p->filter.editing)
		snprintf(ctx->status, sizeof ctx->status, "filter: /%s_", p->filter.text);
	else if (p->jumping)
		snprintf(ctx->status, sizeof ctx->status, "jump to step: %s_", p->jump);
	else if (p->msg[0])
		snprintf(ctx->status, sizeof ctx->status, "%s", p->msg);
	else
		snprintf(ctx->status, sizeof ctx->status,
		         ": jump to step \xc2\xb7 n/N next/prev overflow \xc2\xb7 O overflow, S "
		         "skipped");
	p->msg[0] = '\0';
}

static void jump_to(steps *p, view_ctx *ctx, int64_t step)
{
	const view_run *r = view_model_run(ctx->model);
	if (r && (step < r->first_step || step > r->last_step))
		snprintf(p->msg, sizeof p->msg, "no step %lld: the run's steps are %lld .. %lld",
		         (long long)step, (long long)r->first_step, (long long)r->last_step);
	if (p->match) { /* the first matching step at or after it */
		int64_t i = 0;
		while (i < p->nmatch - 1 && p->match[i] < step)
			i++;
		p->list.cursor = i;
	} else {
		p->list.cursor = view_model_step_index(ctx->model, step);
	}
	p->list.top = p->list.cursor - p->list.rows / 2;
	view_list_fit(&p->list, p->match ? p->nmatch : view_model_step_count(ctx->model),
	              p->list.rows);
}

/* Drops the filter's matches, or finds them again. */
static void refilter(steps *p, view_ctx *ctx)
{
	free(p->match);
	p->match = NULL;
	p->nmatch = 0;
	if (p->filter.text[0]) {
		long n = view_model_steps_matching(ctx->model, p->filter.text, &p->match);
		if (n < 0) {
			snprintf(p->msg, sizeof p->msg, "cannot filter: %s", view_model_error(ctx->model));
			p->match = NULL;
		} else if (!p->match) {
			p->match = malloc(sizeof *p->match); /* no match: an empty list, not all */
		}
		p->nmatch = n > 0 ? n : 0;
	}
	p->list.cursor = p->list.top = 0;
	p->page_top = -1;
}

/* The next overflow step after step (dir > 0) or before it, wrapping around the run; -1 if
 * the run has none.  *wrapped says it came round. */
int64_t view_next_overflow_wrap(view_model *m, int64_t step, int dir, int *wrapped)
{
	int64_t next = view_model_next_overflow(m, step, dir);
	*wrapped = 0;
	if (next < 0) {
		next = view_model_next_overflow(m, dir > 0 ? INT64_MIN : INT64_MAX, dir);
		*wrapped = next >= 0;
	}
	return next;
}

static int steps_key(void *self, view_ctx *ctx, int key)
{
	steps *p = self;
	int changed = 0;
	if (!p->jumping && view_filter_key(&p->filter, ctx, key, &changed)) {
		if (changed)
			refilter(p, ctx);
		return VIEW_F_HANDLED;
	}
	if (p->jumping) {
		int r = view_prompt_key(p->jump, sizeof p->jump, key, 1);
		if (r != 0)
			p->jumping = ctx->input = 0;
		if (r > 0 && p->jump[0])
			jump_to(p, ctx, strtoll(p->jump, NULL, 10));
		else if (r > 0)
			snprintf(p->msg, sizeof p->msg, "no jump: type the step's number, then Enter");
		return VIEW_F_HANDLED;
	}
	if (view_list_key(&p->list, key))
		return VIEW_F_HANDLED;
	long i = (long)(p->list.cursor - p->page_top);
	const view_step *cur = i >= 0 && i < p->npage ? &p->page[i] : NULL;
	switch (key) {
	case ':':
	case 's':
		p->jumping = ctx->input = 1;
		p->jump[0] = '\0';
		return VIEW_F_HANDLED;
	case 'o':
	case 'n':
	case 'N': {
		int wrapped, dir = key == 'N' ? -1 : 1;
		int64_t next = view_next_overflow_wrap(ctx->model, cur ? cur->step : -1, dir,
		                                       &wrapped);
		if (next < 0) {
			snprintf(p->msg, sizeof p->msg, "no overflow in this run");
			return VIEW_F_HANDLED;
		}
		if (p->match && p->filter.text[0]) { /* an overflow step is one to show */
			p->filter.text[0] = '\0';
			refilter(p, ctx);
		}
		jump_to(p, ctx, next);
		snprintf(p->msg, sizeof p->msg, "overflow at step %lld%s", (long long)next,
		         wrapped ? (dir > 0 ? " (wrapped to the first)" : " (wrapped to the last)")
		                 : "");
		return VIEW_F_HANDLED;
	}
	case VIEW_KEY_ENTER:
		if (cur && cur->overflow) {
			ctx->goto_panel = VIEW_P_ANOMALIES;
			ctx->goto_step = cur->step;
			return VIEW_F_GOTO;
		}
		if (cur)
			snprintf(p->msg, sizeof p->msg, "step %lld had no overflow",
			         (long long)cur->step);
		return VIEW_F_HANDLED;
	default: return VIEW_F_UNHANDLED;
	}
}

static void steps_focus(void *self, view_ctx *ctx, int64_t step)
{
	steps *p = self;
	if (step >= 0) {
		if (p->list.rows <= 1)
			p->list.rows = 16;
		jump_to(p, ctx, step);
	}
}

const view_panel_class view_panel_steps = {
    "steps", "Steps", steps_create, steps_destroy, steps_draw, steps_key, steps_focus, steps_help,
};
