/* panel_memory.c — panel 7: tensor memory by category at the end of each step (master weights,
 * working copies, activations, gradients, optimizer state), one stacked bar per step scaled to
 * the run's peak, and the peak with its split above the list.  Rows are read a page at a time
 * from the memory table; / filters the steps by number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"

#define PAGE_MAX 256

typedef struct memory {
	view_list list;
	view_filter filter;
	view_mem_row page[PAGE_MAX];
	long npage;
	int64_t page_top; /* list index of page[0], -1: reload */
	int page_rows;
	int64_t count; /* rows matching the filter, -1: count again */
	view_mem_row peak;
	int has_peak; /* 1 read, 0 none, -1 not read yet */
} memory;

static const uint32_t glyph[VIEW_MEM_CATS] = {VIEW_G_DARK, VIEW_G_FULL, VIEW_G_MEDIUM, VIEW_G_LIGHT,
                                              VIEW_G_LOWER};
static const int style[VIEW_MEM_CATS] = {VIEW_S_FP32, VIEW_S_FP16, VIEW_S_COPY, VIEW_S_OTHER,
                                         VIEW_S_WARN};

static const view_keyhelp memory_help[] = {
    {"/", "filter the steps by number (Esc clears)"},
    {"Enter", "the step in the Steps panel"},
    {NULL, NULL},
};

static void *memory_create(view_ctx *ctx)
{
	(void)ctx;
	memory *p = calloc(1, sizeof *p);
	if (p) {
		p->page_top = -1;
		p->count = -1;
		p->has_peak = -1;
	}
	return p;
}

static void memory_destroy(void *self)
{
	free(self);
}

static void draw_bar(view_screen *s, int x, int y, int w, const view_mem_row *r, int64_t max)
{
	if (max <= 0 || w <= 0)
		return;
	int64_t sum = 0;
	int done = 0;
	for (int c = 0; c < VIEW_MEM_CATS; c++) {
		sum += r->cat[c];
		int upto = (int)((double)w * (double)sum / (double)max + 0.5);
		if (upto > w)
			upto = w;
		if (upto > done)
			view_screen_fill(s, x + done, y, upto - done, 1, glyph[c], style[c], 0);
		done = upto > done ? upto : done;
	}
}

static void memory_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	memory *p = self;
	char a[32], b[32];
	int y = top, end = top + rows;
	if (p->has_peak < 0)
		p->has_peak = view_model_memory_peak(ctx->model, &p->peak) == 0;
	if (p->count < 0) {
		p->count = view_model_memory_count(ctx->model, p->filter.text);
		if (p->count < 0)
			p->count = 0;
		p->page_top = -1;
	}
	if (!p->has_peak) {
		view_screen_puts(s, 1, y, s->w - 2, VIEW_S_DIM, 0,
		                 "no memory recorded (the memory table is empty)");
		return;
	}
	int x =
	    1 + view_screen_printf(s, 1, y, s->w - 2, VIEW_S_NORMAL, 0,
	                           "Memory by category, %lld steps \xc2\xb7 peak %s at step %lld",
	                           (long long)p->count, view_fmt_bytes(p->peak.peak, a, sizeof a),
	                           (long long)p->peak.step);
	view_filter_draw(&p->filter, ctx, s, x, y, s->w - x - 1);
	y++;
	view_screen_puts(s, 1, y++, s->w - 2, VIEW_S_DIM, 0, "at the peak step:");
	/* the split at the peak step, each with its glyph: the legend of the bars */
	x = 1;
	for (int c = 0; c < VIEW_MEM_CATS; c++) {
		char item[64];
		snprintf(item, sizeof item, " %s %s", view_mem_cat_name(c),
		         view_fmt_bytes(p->peak.cat[c], a, sizeof a));
		int w = 1 + (int)strlen(item) + 2;
		if (x > 1 && x + w > s->w - 1)
			x = 1, y++; /* the legend wraps rather than cut a figure */
		view_screen_putc(s, x++, y, glyph[c], style[c], 0);
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_NORMAL, 0, item) + 2;
	}
	y += 2;
	/* columns: mark 2 | step 7 | total 10 | peak 10 | bar */
	view_screen_puts_right(s, 2, y, 7, VIEW_S_HEADER, VIEW_A_BOLD, "STEP");
	view_screen_puts_right(s, 10, y, 10, VIEW_S_HEADER, VIEW_A_BOLD, "TOTAL");
	view_screen_puts_right(s, 21, y, 10, VIEW_S_HEADER, VIEW_A_BOLD, "PEAK");
	view_screen_puts(s, 33, y, s->w - 34, VIEW_S_HEADER, VIEW_A_BOLD,
	                 "bytes by category, as the legend");
	y++;
	int list_rows = end - y;
	if (list_rows > PAGE_MAX)
		list_rows = PAGE_MAX;
	view_list_fit(&p->list, p->count, list_rows);
	if (p->page_top != p->list.top || p->page_rows != list_rows) {
		p->npage =
		    view_model_memory(ctx->model, p->filter.text, p->list.top, p->page, list_rows);
		if (p->npage < 0)
			p->npage = 0;
		p->page_top = p->list.top;
		p->page_rows = list_rows;
	}
	if (p->count == 0)
		view_screen_puts(s, 2, y, s->w - 3, VIEW_S_DIM, 0, "no step matches the filter");
	int64_t max = p->peak.peak > p->peak.total ? p->peak.peak : p->peak.total;
	for (long i = 0; i < p->npage && y < end; i++, y++) {
		const view_mem_row *r = &p->page[i];
		view_screen_printf(s, 2, y, 7, VIEW_S_NORMAL, 0, "%7lld", (long long)r->step);
		view_screen_puts_right(s, 10, y, 10, VIEW_S_NORMAL, 0,
		                       view_fmt_bytes(r->total, a, sizeof a));
		view_screen_puts_right(s, 21, y, 10,
		                       r->peak == p->peak.peak ? VIEW_S_WARN : VIEW_S_NORMAL, 0,
		                       view_fmt_bytes(r->peak, b, sizeof b));
		draw_bar(s, 33, y, s->w - 34, r, max);
		if (p->list.top + i == p->list.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	if (!p->filter.editing)
		snprintf(ctx->status, sizeof ctx->status,
		         "bars: bytes at the step's end, scaled to the peak \xc2\xb7 / filter");
}

static int memory_key(void *self, view_ctx *ctx, int key)
{
	memory *p = self;
	int changed = 0;
	if (view_filter_key(&p->filter, ctx, key, &changed)) {
		if (changed) {
			p->count = -1;
			p->list.cursor = p->list.top = 0;
		}
		return VIEW_F_HANDLED;
	}
	if (view_list_key(&p->list, key))
		return VIEW_F_HANDLED;
	long i = (long)(p->list.cursor - p->page_top);
	if (key == VIEW_KEY_ENTER && i >= 0 && i < p->npage) {
		ctx->goto_panel = VIEW_P_STEPS;
		ctx->goto_step = p->page[i].step;
		return VIEW_F_GOTO;
	}
	return VIEW_F_UNHANDLED;
}

static void memory_focus(void *self, view_ctx *ctx, int64_t step)
{
	(void)self, (void)ctx, (void)step;
}

const view_panel_class view_panel_memory = {
    "memory",    "Memory",   memory_create, memory_destroy,
    memory_draw, memory_key, memory_focus,  memory_help,
};
