/* panel_overview.c — panel 1: run facts, the half-share, native-half and copy gauges,
 * the loss-scale summary, the first non-finite origin and the advice list, the selected advice
 * spelled out in full below it with its evidence.  Everything here comes from what
 * view_model_open read, so this is the first frame of any profile. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "panel.h"
#include "sanitize.h"

typedef struct overview {
	view_list advice;
} overview;

static const view_keyhelp overview_help[] = {
    {"Up Down", "select an advice"},
    {"Enter", "open the step or panel the advice is about"},
    {NULL, NULL},
};

static void *overview_create(view_ctx *ctx)
{
	(void)ctx;
	return calloc(1, sizeof(overview));
}

static void overview_destroy(void *self)
{
	free(self);
}

static void ended_text(const view_run *r, char *buf, size_t len)
{
	if (!strcmp(r->end, "exited"))
		snprintf(buf, len, "exited, status %d", r->exit_status);
	else if (!strcmp(r->end, "collecting"))
		snprintf(buf, len, "unknown: the collector stopped before finalize");
	else if (!strcmp(r->end, "collector-failed"))
		snprintf(buf, len, "unknown: the collector failed");
	else if (!strcmp(r->end, "rank-failed")) /* rank 0's own signal is not the story */
		snprintf(buf, len, "a rank failed: each rank's end is in the Ranks block below");
	else if (r->end[0] && r->exit_signal[0]) /* the status is 128 + the signal's number */
		snprintf(buf, len, "%s, %s", r->end, r->exit_signal);
	else if (r->end[0])
		snprintf(buf, len, "%s (status %d)", r->end, r->exit_status);
	else
		snprintf(buf, len, "unknown");
}

/* The command in w columns; one too long loses the directories of the program first
 * (".../unstable --precision=fp16"), as the arguments say more about the run. */
static void draw_command(view_screen *s, int x, int y, int w, const char *cmd)
{
	size_t prog = strcspn(cmd, " ");
	const char *base = cmd;
	for (size_t i = 0; i < prog; i++)
		if (cmd[i] == '/')
			base = cmd + i + 1;
	if ((int)view_text_width(cmd) <= w || base == cmd) {
		view_screen_puts(s, x, y, w, VIEW_S_NORMAL, 0, cmd);
		return;
	}
	/* "...", not the ellipsis glyph: its ASCII stand-in '~' would read as a home directory */
	view_screen_puts(s, x, y, 3, VIEW_S_NORMAL, 0, "...");
	view_screen_puts(s, x + 3, y, w - 3, VIEW_S_NORMAL, 0, base - 1);
}

/* label  12.3 %  [bar with a threshold tick]  verdict.  bad picks the style. */
static void gauge(view_screen *s, int y, const char *label, double share, double threshold, int bad,
                  const char *verdict)
{
	int style = bad ? VIEW_S_BAD : VIEW_S_GOOD;
	char pct[32];
	snprintf(pct, sizeof pct, "%5.1f %%", share * 100);
	view_screen_puts(s, 1, y, 13, VIEW_S_HEADER, VIEW_A_BOLD, label);
	view_screen_puts(s, 14, y, 8, style, VIEW_A_BOLD, pct);
	int bw = s->w - 23 - 24;
	if (bw > 50)
		bw = 50;
	if (bw < 10)
		bw = 10;
	int fill = (int)lround(share * bw);
	int tick = (int)lround(threshold / 100 * bw);
	fill = fill < 0 ? 0 : fill > bw ? bw : fill;
	for (int i = 0; i < bw; i++)
		view_screen_putc(s, 23 + i, y, i < fill ? VIEW_G_FULL : VIEW_G_LIGHT,
		                 i < fill ? style : VIEW_S_DIM, 0);
	if (threshold >= 0 && tick >= 0 && tick < bw) /* a negative threshold: no tick */
		view_screen_putc(s, 23 + tick, y, VIEW_G_VLINE, VIEW_S_NORMAL, VIEW_A_BOLD);
	view_screen_puts(s, 23 + bw + 2, y, s->w - bw - 26, style, VIEW_A_BOLD, verdict);
}

static int severity_style(const char *sev)
{
	if (!strcmp(sev, "error"))
		return VIEW_S_BAD;
	if (!strcmp(sev, "warning"))
		return VIEW_S_WARN;
	return VIEW_S_DIM;
}

/* The panel an advice opens on Enter, and the step it focuses there (-1: none). */
static int advice_target(const view_advice *v, int64_t *step)
{
	*step = v->step;
	if (!strcmp(v->rule, "low_fp16_share") || !strcmp(v->rule, "gemm_unaligned"))
		return VIEW_P_OPS;
	if (!strcmp(v->rule, "copy_share"))
		return VIEW_P_STEPS;
	if (!strncmp(v->rule, "loss_scale", 10))
		return VIEW_P_SCALE;
	if (v->step >= 0)
		return VIEW_P_ANOMALIES;
	return VIEW_P_CALLSITES;
}

static const char *panel_title(int id)
{
	static const view_panel_class *const panels[VIEW_P_COUNT] = {
	    [VIEW_P_OVERVIEW] = &view_panel_overview,   [VIEW_P_OPS] = &view_panel_ops,
	    [VIEW_P_STEPS] = &view_panel_steps,         [VIEW_P_SCALE] = &view_panel_scale,
	    [VIEW_P_ANOMALIES] = &view_panel_anomalies, [VIEW_P_CALLSITES] = &view_panel_callsites,
	};
	return id >= 0 && id < VIEW_P_COUNT ? panels[id]->title : "?";
}

/* Data parallel (more than one rank): the communication share and the ranks side by side,
 * each with a bar of its step split into busy time and the wait at the all-reduce.  Returns
 * the next free row (y itself for a single-rank profile, which draws nothing). */
#define RANKS_SHOWN 8   /* rows of ranks; more are summed up in one line */
#define RANKS_READ 16384 /* ranks read to find the busiest of those not shown */
static int draw_ranks(view_ctx *ctx, view_screen *s, int y, int end)
{
	static view_rank rk[RANKS_READ];
	double share, spread;
	long n = view_model_ranks(ctx->model, rk, RANKS_READ, &share, &spread);
	if (n < 2)
		return y;
	/* more ranks than rows: the first ones, then the busiest (a straggler) if it is not among
	 * them, and a line for the rest */
	long shown = n, busiest = 0;
	for (long i = 1; i < n; i++)
		if (rk[i].busy_ns > rk[busiest].busy_ns)
			busiest = i;
	int64_t busiest_rank = rk[busiest].rank;
	if (n > RANKS_SHOWN) {
		shown = RANKS_SHOWN - 1;
		if (busiest >= shown)
			rk[shown++] = rk[busiest];
		else
			shown++;
	}
	char a[32], b[32], c[32], d[32], e[32], line[160];
	if (y < end && share == share) {
		int high = share > 0.10;
		snprintf(line, sizeof line, "%s 10 %%", high ? "HIGH: above" : "ok: at most");
		gauge(s, y++, "Comm share", share, 10, high, line);
	}
	if (y < end) {
		view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Ranks");
		if (spread == spread)
			snprintf(line, sizeof line, "rank   step    busy compute    comm    wait  end"
			         "      per step \xc2\xb7 spread %.1f %%", spread * 100);
		else
			snprintf(line, sizeof line, "rank   step    busy compute    comm    wait  end"
			         "      per step");
		view_screen_puts(s, 13, y++, s->w - 14, VIEW_S_HEADER, VIEW_A_BOLD, line);
	}
	double max_ns = 0;
	for (long i = 0; i < shown; i++)
		if (rk[i].step_ns > max_ns)
			max_ns = rk[i].step_ns;
	for (long i = 0; i < shown && y < end; i++, y++) {
		const view_rank *q = &rk[i];
		int x = 13 + view_screen_printf(
		                 s, 13, y, s->w - 14, VIEW_S_NORMAL, 0, "%4lld %7s %7s %7s %7s %7s  %-8.8s",
		                 (long long)q->rank, view_fmt_ns((int64_t)q->step_ns, a, sizeof a),
		                 view_fmt_ns((int64_t)q->busy_ns, b, sizeof b),
		                 view_fmt_ns((int64_t)q->compute_ns, c, sizeof c),
		                 view_fmt_ns((int64_t)q->comm_ns, d, sizeof d),
		                 view_fmt_ns((int64_t)q->wait_ns, e, sizeof e), q->end);
		int w = s->w - x - 2;
		if (w > 4 && max_ns > 0) {
			int busy = (int)lround((double)w * q->busy_ns / max_ns);
			int wait = (int)lround((double)w * q->wait_ns / max_ns);
			view_screen_fill(s, x + 1, y, busy, 1, VIEW_G_FULL, VIEW_S_FP16, 0);
			view_screen_fill(s, x + 1 + busy, y, wait, 1, VIEW_G_LIGHT, VIEW_S_WARN, 0);
		}
	}
	if (n > shown && y < end)
		view_screen_printf(s, 13, y++, s->w - 14, VIEW_S_DIM, 0,
		                   "%s%ld more rank%s not shown (the busiest, rank %lld, is listed); "
		                   "ampprof report lists every rank",
		                   n == RANKS_READ ? "at least " : "", n - shown,
		                   n - shown == 1 ? "" : "s", (long long)busiest_rank);
	return y + 1;
}

static void overview_draw(void *self, view_ctx *ctx, view_screen *s, int top, int rows)
{
	overview *o = self;
	const view_run *r = ctx->run;
	char a[64], b[64], c[64], d[64], line[1024];
	int y = top, end = top + rows;

	view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Run");
	draw_command(s, 13, y++, s->w - 14, r->command[0] ? r->command : "?");
	int live = !r->complete && view_model_being_written(ctx->model);
	int since = !live && view_model_ended_since_open(ctx->model, r);
	ended_text(r, line, sizeof line);
	if (live)
		snprintf(line, sizeof line, "not yet: being recorded");
	else if (since)
		snprintf(line, sizeof line, "after this view opened: reopen for the final figures");
	view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Ended");
	int x = 13 + view_screen_puts(s, 13, y, s->w - 14,
	                              r->complete ? VIEW_S_NORMAL : VIEW_S_WARN, 0, line);
	if (live)
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_WARN, VIEW_A_BOLD,
		                      " \xc2\xb7 BEING WRITTEN: panels as first shown");
	else if (since)
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_WARN, VIEW_A_BOLD,
		                      " \xc2\xb7 SNAPSHOT: panels as first shown");
	else if (r->complete)
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_GOOD, 0, " \xc2\xb7 complete");
	else if (r->incomplete[0] || strcmp(r->end, "exited") != 0)
		x += view_screen_puts(s, x, y, s->w - x - 1, VIEW_S_WARN, VIEW_A_BOLD,
		                      " \xc2\xb7 INCOMPLETE: partial data");
	/* else a run that exited with a status other than 0: every record is there, and the
	 * end says how it ended */
	view_screen_printf(s, x, y++, s->w - x - 1, VIEW_S_NORMAL, 0, " \xc2\xb7 wall %s",
	                   view_fmt_ns(r->wall_ns, a, sizeof a));
	/* where it crashed (the report prints the whole backtrace): a narrow screen keeps the
	 * line number and shortens the path (view_fmt_site_fit) */
	if (r->crashes > 0 && y < end) {
		const char *more = " \xc2\xb7 backtrace: ampprof report";
		int w = s->w - 14;
		if (r->crash_line > 0) {
			char site[600];
			int room =
			    w - (int)strlen(r->crash_signal) - 5 - (int)strlen(r->crash_function);
			view_fmt_site_fit(ctx->model, r->crash_file, r->crash_line, room, site,
			                  sizeof site);
			if ((int)strlen(site) > room) { /* still too wide: the file's own name */
				const char *base = strrchr(r->crash_file, '/');
				view_fmt_site(base ? base + 1 : r->crash_file, r->crash_line, site,
				              sizeof site);
			}
			snprintf(line, sizeof line, "%s in %s %s", r->crash_signal,
			         r->crash_function, site);
		} else if (r->crash_frame[0]) {
			snprintf(line, sizeof line, "%s in %s", r->crash_signal, r->crash_frame);
		} else {
			snprintf(line, sizeof line, "%s, no backtrace recorded", r->crash_signal);
			more = "";
		}
		if (strlen(line) + strlen(more) <=
		    (size_t)w) /* the pointer to the backtrace, if it fits */
			snprintf(line + strlen(line), sizeof line - strlen(line), "%s", more);
		view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Crashed");
		view_screen_puts(s, 13, y++, w, VIEW_S_BAD, VIEW_A_BOLD, line);
	}
	view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Steps");
	/* steps that ended without a loss and without an overflow (evaluation batches, say)
	 * explain a count above the training steps asked for */
	if (r->lossless_steps > 0 && r->lossless_steps < r->steps)
		snprintf(b, sizeof b, " (%lld without a loss)", (long long)r->lossless_steps);
	else
		b[0] = '\0';
	view_screen_printf(s, 13, y++, s->w - 14, VIEW_S_NORMAL, 0,
	                   "%lld%s \xc2\xb7 %lld overflow \xc2\xb7 %lld skipped \xc2\xb7 %s in "
	                   "steps",
	                   (long long)r->steps, b, (long long)r->overflow_steps,
	                   (long long)r->skipped_steps, view_fmt_ns(r->step_ns, c, sizeof c));
	view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Events");
	view_screen_printf(
	    s, 13, y++, s->w - 14, VIEW_S_NORMAL, 0,
	    "%s ops (%s) \xc2\xb7 %s copies (%s) \xc2\xb7 peak %s",
	    view_fmt_count((double)r->op_count, a, sizeof a), view_fmt_ns(r->op_ns, b, sizeof b),
	    view_fmt_count((double)r->copy_count, c, sizeof c),
	    view_fmt_ns(r->copy_ns, d, sizeof d), view_fmt_bytes(r->peak_bytes, line, sizeof line));
	if (!r->finalized && y < end)
		view_screen_puts(s, 13, y++, s->w - 14, VIEW_S_WARN, 0,
		                 "summaries computed by ampview: the profile was not finalized");
	const char *warn = view_model_callsite_warning(ctx->model);
	if (warn[0] && y < end)
		y += view_draw_wrapped(s, 13, y, s->w - 14, end, VIEW_S_WARN, 0, warn);
	if (r->incomplete[0] && y < end)
		view_screen_printf(s, 13, y++, s->w - 14, VIEW_S_WARN, VIEW_A_BOLD, "not recorded: %s",
		                   r->incomplete);
	else if (r->dropped_events > 0 && y < end)
		view_screen_printf(s, 13, y++, s->w - 14, VIEW_S_WARN, 0,
		                   "%lld events were dropped (ring full in drop mode)",
		                   (long long)r->dropped_events);
	y++;

	/* the two gauges */
	int low = r->fp16_share * 100 < r->fp16_threshold;
	snprintf(line, sizeof line, "%s %.9g %%", low ? "LOW: below" : "ok: at least",
	         r->fp16_threshold);
	/* the half share, labelled by the half types that ran; both types: "Half share" here and
	 * the types on the line below (the gauge's label is 13 columns) */
	int both = strchr(r->half_types, '+') != NULL;
	if (y < end)
		gauge(s, y++, both ? "Half share" : r->half_label, r->fp16_share, r->fp16_threshold, low,
		      line);
	if (y < end)
		view_screen_printf(s, 14, y++, s->w - 15, VIEW_S_DIM, 0,
		                   "%5.1f %% by FLOPs%s%s \xc2\xb7 threshold from %s",
		                   r->fp16_flop_share * 100, both ? " \xc2\xb7 " : "",
		                   both ? r->half_types : "", r->threshold_source);
	/* the native half share: how much of it ran on half arithmetic */
	if (y < end && r->native_half_share == r->native_half_share) {
		int emulated = r->fp16_share - r->native_half_share > 0.25;
		snprintf(line, sizeof line, "%s",
		         r->fp16_share <= 0 ? "no half ops"
		         : emulated         ? "EMULATED: FP32 math"
		                            : "on half engines");
		gauge(s, y++, "Native half", r->native_half_share, -1, emulated, line);
	} else if (y < end) {
		view_screen_puts(s, 1, y, 13, VIEW_S_HEADER, VIEW_A_BOLD, "Native half");
		view_screen_puts(s, 14, y++, s->w - 15, VIEW_S_DIM, 0,
		                 "unknown: the profile predates engines");
	}
	int high = r->copy_share * 100 > r->memcpy_threshold;
	snprintf(line, sizeof line, "%s %.9g %%", high ? "HIGH: above" : "ok: at most",
	         r->memcpy_threshold);
	if (y < end)
		gauge(s, y++, "Copy share", r->copy_share, r->memcpy_threshold, high, line);
	y++;
	y = draw_ranks(ctx, s, y, end);

	/* loss scale */
	if (y < end) {
		/* as the report's rule: a scale that never moves (static, or a dynamic scaler
		 * that made no decision: FP32) in a mode with FP32's range (bf16, fp32) is no
		 * warning, 1 least of all */
		int is_static = strcmp(r->scaling, "dynamic") != 0 || r->min_scale == r->max_scale;
		int wide = strstr(r->precision_mode, "bf16") || strstr(r->precision_mode, "fp32");
		int unusual = (r->min_scale < VIEW_SCALE_LO || r->max_scale > VIEW_SCALE_HI) &&
		              !(is_static && wide);
		view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Loss scale");
		x = 13 + view_screen_printf(s, 13, y, s->w - 14, VIEW_S_NORMAL, 0,
		                            "%s .. %s, last %s \xc2\xb7 %lld overflows \xc2\xb7 ",
		                            view_fmt_scale(r->min_scale, a, sizeof a),
		                            view_fmt_scale(r->max_scale, b, sizeof b),
		                            view_fmt_scale(r->last_scale, c, sizeof c),
		                            (long long)r->overflow_steps);
		view_screen_puts(s, x, y++, s->w - x - 1, unusual ? VIEW_S_WARN : VIEW_S_GOOD, 0,
		                 unusual                 ? "outside [8, 1024]"
		                 : is_static && wide     ? "static (none needed)"
		                                         : "within [8, 1024]");
	}
	if (y < end) {
		view_screen_puts(s, 1, y, 12, VIEW_S_HEADER, VIEW_A_BOLD, "Non-finite");
		if (r->has_origin) {
			snprintf(line, sizeof line, "first at step %lld: %s %s (%s)",
			         (long long)r->origin_step, r->origin_op, r->origin_role,
			         r->origin_label);
			view_screen_puts(s, 13, y++, s->w - 14, VIEW_S_BAD, VIEW_A_BOLD, line);
			char site[600];
			view_fmt_site_fit(ctx->model, r->origin_file, r->origin_line,
			                  s->w - 21 - (int)strlen(r->origin_function), site,
			                  sizeof site);
			snprintf(line, sizeof line, "at %s in %s", site, r->origin_function);
			if (y < end)
				view_screen_puts(s, 13, y++, s->w - 14, VIEW_S_NORMAL, 0, line);
		} else if (r->origin_unread) {
			view_screen_puts(s, 13, y++, s->w - 14, VIEW_S_WARN, VIEW_A_BOLD,
			                 "unknown: the tensor statistics are damaged");
		} else {
			view_screen_puts(s, 13, y++, s->w - 14,
			                 r->overflow_steps ? VIEW_S_WARN : VIEW_S_GOOD, 0,
			                 r->overflow_steps ? "overflows, but no origin was recorded"
			                                   : "none recorded");
		}
	}
	y++;

	/* advice: one row each, then the selected one in full with its evidence */
	const view_advice *adv;
	size_t n = view_model_advice(ctx->model, &adv);
	if (y < end) {
		view_screen_printf(s, 1, y++, s->w - 2, VIEW_S_HEADER, VIEW_A_BOLD, "Advice (%zu)",
		                   n);
	}
	if (n == 0 && y < end)
		view_screen_puts(s, 3, y++, s->w - 4, VIEW_S_DIM, 0, "no findings");
	if (n == 0)
		return;
	int64_t cur = o->advice.cursor < (int64_t)n ? o->advice.cursor : (int64_t)n - 1;
	const view_advice *sel = &adv[cur < 0 ? 0 : cur];
	int full = (int)view_text_width(sel->message) > s->w - 12;
	int detail = full || sel->evidence[0] ? 1 : 0; /* a blank row above it */
	if (full)
		detail += view_draw_wrapped(NULL, 3, 0, s->w - 4, 0, 0, 0, sel->message);
	if (sel->evidence[0])
		detail += view_draw_wrapped(NULL, 13, 0, s->w - 14, 0, 0, 0, sel->evidence);
	int list_rows = (int)n;
	if (list_rows + detail > end - y) {
		list_rows = end - y - detail;
		if (list_rows < (n < 3 ? (int)n : 3))
			list_rows = n < 3 ? (int)n : 3;
	}
	view_list_fit(&o->advice, (int64_t)n, list_rows);
	for (int64_t i = o->advice.top; i < (int64_t)n && y < end && i < o->advice.top + list_rows;
	     i++, y++) {
		const view_advice *v = &adv[i];
		view_screen_puts(s, 2, y, 8, severity_style(v->severity), VIEW_A_BOLD, v->severity);
		view_screen_puts(s, 11, y, s->w - 12, VIEW_S_NORMAL, 0, v->message);
		if (i == o->advice.cursor)
			view_draw_cursor(s, 0, y, s->w);
	}
	sel = &adv[o->advice.cursor];
	y++;
	if (full)
		y += view_draw_wrapped(s, 3, y, s->w - 4, end, VIEW_S_NORMAL, 0, sel->message);
	if (sel->evidence[0] && y < end) {
		view_screen_puts(s, 3, y, 10, VIEW_S_DIM, 0, "evidence:");
		view_draw_wrapped(s, 13, y, s->w - 14, end, VIEW_S_DIM, 0, sel->evidence);
	}
	int64_t step;
	int target = advice_target(sel, &step);
	if (step >= 0 && target != VIEW_P_OPS)
		snprintf(ctx->status, sizeof ctx->status, "Enter: open step %lld in %s",
		         (long long)step, panel_title(target));
	else
		snprintf(ctx->status, sizeof ctx->status, "Enter: open %s", panel_title(target));
}

static int overview_key(void *self, view_ctx *ctx, int key)
{
	overview *o = self;
	if (view_list_key(&o->advice, key))
		return VIEW_F_HANDLED;
	if (key == VIEW_KEY_ENTER && o->advice.count > 0) {
		const view_advice *adv;
		size_t n = view_model_advice(ctx->model, &adv);
		if (o->advice.cursor >= (int64_t)n)
			return VIEW_F_HANDLED;
		ctx->goto_panel = advice_target(&adv[o->advice.cursor], &ctx->goto_step);
		ctx->goto_callsite = adv[o->advice.cursor].callsite;
		return VIEW_F_GOTO;
	}
	return VIEW_F_UNHANDLED;
}

static void overview_focus(void *self, view_ctx *ctx, int64_t step)
{
	(void)self, (void)ctx, (void)step;
}

const view_panel_class view_panel_overview = {
    "overview",    "Overview",   overview_create, overview_destroy,
    overview_draw, overview_key, overview_focus,  overview_help,
};
