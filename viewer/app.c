/* app.c — the frame around the panels (see app.h). */
#include "app.h"

#include <stdlib.h>
#include <string.h>

#include "fmt.h"

static const view_panel_class *const classes[VIEW_P_COUNT] = {
    &view_panel_overview, &view_panel_ops,       &view_panel_steps,
    &view_panel_scale,    &view_panel_anomalies, &view_panel_callsites,
    &view_panel_memory,   &view_panel_exponents, &view_panel_diff,
};

#define STACK_MAX 32

struct view_app {
	view_ctx ctx;
	void *state[VIEW_P_COUNT];
	int cur;
	int stack[STACK_MAX];
	int depth;
	int help;     /* help overlay shown */
	int help_top; /* its first line shown, when it is taller than the screen */
	int help_max; /* the largest help_top of the last frame drawn (0: it fits) */
};

static const view_keyhelp global_help[] = {
    {"Tab  S-Tab", "next / previous panel"},
    {"1 .. 9", "panels: Overview Ops Steps Scale Anomalies Sites"},
    {"", "Memory Hist Diff"},
    {"Up Down  k j", "move"},
    {"PgUp PgDn", "move by a page"},
    {"Home End  g G", "first / last"},
    {"Enter", "open"},
    {"Esc  Backspace", "back"},
    {"?  F1", "this help"},
    {"q", "quit"},
    {NULL, NULL},
};

view_app *view_app_new(view_model *m, const char *baseline)
{
	view_app *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	a->ctx.model = m;
	a->ctx.run = view_model_run(m);
	a->ctx.goto_step = -1;
	a->ctx.goto_callsite = -1;
	a->ctx.baseline = baseline;
	for (int i = 0; i < VIEW_P_COUNT; i++) {
		a->state[i] = classes[i]->create(&a->ctx);
		if (!a->state[i]) {
			view_app_free(a);
			return NULL;
		}
	}
	return a;
}

void view_app_free(view_app *a)
{
	if (!a)
		return;
	for (int i = 0; i < VIEW_P_COUNT; i++)
		if (a->state[i])
			classes[i]->destroy(a->state[i]);
	free(a);
}

int view_app_panel_by_name(const char *name)
{
	for (int i = 0; i < VIEW_P_COUNT; i++)
		if (!strcmp(classes[i]->name, name))
			return i;
	return -1;
}

void view_app_show(view_app *a, int panel)
{
	if (panel >= 0 && panel < VIEW_P_COUNT) {
		a->cur = panel;
		a->ctx.input = 0;
	}
}

static void draw_tabs(view_app *a, view_screen *s)
{
	view_screen_fill(s, 0, 0, s->w, 1, ' ', VIEW_S_BAR, 0);
	/* every title when they fit, else the active one's and the others' numbers */
	int full = 1;
	for (int i = 0; i < VIEW_P_COUNT; i++)
		full += (int)strlen(classes[i]->title) + 3;
	int x = 1;
	for (int i = 0; i < VIEW_P_COUNT && x < s->w; i++) {
		char t[64];
		if (full <= s->w || i == a->cur)
			snprintf(t, sizeof t, " %d %s", i + 1, classes[i]->title);
		else
			snprintf(t, sizeof t, " %d", i + 1);
		int active = i == a->cur;
		x += view_screen_puts(s, x, 0, s->w - x, active ? VIEW_S_TAB : VIEW_S_BAR,
		                      active ? VIEW_A_BOLD : 0, t);
	}
	if (s->w - x >= 9)
		view_screen_puts_right(s, x, 0, s->w - x - 1, VIEW_S_BAR, VIEW_A_BOLD, "ampview");
}

static void draw_status(view_app *a, view_screen *s)
{
	int y = s->h - 1;
	const view_run *r = a->ctx.run;
	view_screen_fill(s, 0, y, s->w, 1, ' ', VIEW_S_STATUS, 0);
	char right[640];
	const char *base = strrchr(r->path, '/');
	base = base ? base + 1 : r->path;
	/* a run still being recorded is not an incomplete one: it says so */
	const char *tag = r->complete                                  ? ""
	                  : view_model_being_written(a->ctx.model)     ? "[BEING WRITTEN]"
	                  : view_model_ended_since_open(a->ctx.model, r) ? "[SNAPSHOT]"
	                                                               : "[INCOMPLETE]";
	snprintf(right, sizeof right, "%s%s%s ", base, *tag ? " " : "", tag);
	int rw = s->w / 2;
	int used = view_screen_puts_right(s, s->w - rw, y, rw, VIEW_S_STATUS, 0, right);
	if (*tag) {
		/* the marker in the warning style, inside the status bar */
		int tx = s->w - 1 - (int)strlen(tag);
		if (tx >= s->w - used)
			view_screen_puts(s, tx, y, (int)strlen(tag), VIEW_S_WARN, VIEW_A_BOLD, tag);
	}
	if (view_model_damaged(a->ctx.model)) {
		/* a damaged file is said on every frame, never shown as if whole */
		view_screen_puts(s, 1, y, s->w - used - 2, VIEW_S_WARN, VIEW_A_BOLD,
		                 "DAMAGED PROFILE: figures incomplete");
		return;
	}
	const char *msg = a->ctx.status[0] ? a->ctx.status : "?:help  Tab:panel  q:quit";
	view_screen_puts(s, 1, y, s->w - used - 2, VIEW_S_STATUS, 0, msg);
}

/* The help overlay: the global keys, then the panel's; on a screen too short for them all, a
 * window over them that Up/Down (k/j) move (help_top), any other key closing it. */
static void draw_help(view_app *a, view_screen *s)
{
	const view_keyhelp *ph = classes[a->cur]->help;
	int n = 0, np = 0;
	while (global_help[n].keys)
		n++;
	while (ph && ph[np].keys)
		np++;
	int lines = n + (np ? np + 2 : 0); /* the panel's after a blank line and its heading */
	int w = s->w - 4 < 70 ? s->w - 4 : 70;
	int h = lines + 3;
	if (h > s->h - 2)
		h = s->h - 2;
	int x = (s->w - w) / 2, y = (s->h - h) / 2;
	a->help_max = 0;
	if (w < 20 || h < 4)
		return;
	int shown = h - 2; /* lines inside the box */
	a->help_max = lines > shown ? lines - shown : 0;
	if (a->help_top > a->help_max)
		a->help_top = a->help_max;
	view_screen_fill(s, x, y, w, h, ' ', VIEW_S_NORMAL, 0);
	view_screen_box(s, x, y, w, h, VIEW_S_HEADER);
	view_screen_puts(s, x + 2, y, w - 4, VIEW_S_HEADER, VIEW_A_BOLD,
	                 a->help_max ? " Keys (Up/Down scroll, any other key closes) "
	                             : " Keys (any key closes) ");
	for (int k = 0; k < shown && a->help_top + k < lines; k++) {
		int i = a->help_top + k, row = y + 1 + k;
		const view_keyhelp *e = i < n ? &global_help[i] : i >= n + 2 ? &ph[i - n - 2] : NULL;
		if (e) {
			view_screen_puts(s, x + 2, row, 16, VIEW_S_HEADER, VIEW_A_BOLD, e->keys);
			view_screen_puts(s, x + 19, row, w - 21, VIEW_S_NORMAL, 0, e->what);
		} else if (i == n + 1) {
			char t[64];
			snprintf(t, sizeof t, "%s panel", classes[a->cur]->title);
			view_screen_puts(s, x + 2, row, w - 4, VIEW_S_HEADER, VIEW_A_UNDERLINE, t);
		}
	}
	if (a->help_max) /* where the window is */
		view_screen_printf(s, x + w - 12, y + h - 1, 10, VIEW_S_HEADER, 0, " %d/%d ",
		                   a->help_top + shown < lines ? a->help_top + shown : lines, lines);
}

void view_app_draw(view_app *a, view_screen *s)
{
	view_screen_clear(s);
	if (s->w < 40 || s->h < 10) {
		/* it draws from 40x10 on; 80x24 shows every panel whole.  The words wrapped, so
		 * that the size shows on the smallest terminal */
		static const char msg[] =
		    "ampview needs at least 40x10 (80x24 shows every panel whole)";
		char line[sizeof msg];
		int row = 0, used = 0;
		for (const char *p = msg; *p && row < s->h;) {
			int n = (int)strcspn(p, " ");
			if (used > 0 && used + 1 + n > s->w) {
				view_screen_puts(s, 0, row++, s->w, VIEW_S_WARN, VIEW_A_BOLD, line);
				used = 0;
			}
			used += snprintf(line + used, sizeof line - (size_t)used, "%s%.*s",
			                 used ? " " : "", n, p);
			p += n + (p[n] == ' ');
		}
		if (used > 0 && row < s->h)
			view_screen_puts(s, 0, row, s->w, VIEW_S_WARN, VIEW_A_BOLD, line);
		return;
	}
	a->ctx.status[0] = '\0';
	draw_tabs(a, s);
	classes[a->cur]->draw(a->state[a->cur], &a->ctx, s, 1, s->h - 2);
	draw_status(a, s);
	if (a->help)
		draw_help(a, s);
}

static void go(view_app *a, int panel, int push)
{
	if (panel == a->cur)
		return;
	if (push && a->depth < STACK_MAX)
		a->stack[a->depth++] = a->cur;
	view_app_show(a, panel);
}

int view_app_key(view_app *a, int key)
{
	if (a->help) {
		if (a->help_max && (key == VIEW_KEY_DOWN || key == 'j'))
			a->help_top += a->help_top < a->help_max;
		else if (a->help_max && (key == VIEW_KEY_UP || key == 'k'))
			a->help_top -= a->help_top > 0;
		else if (key != VIEW_KEY_RESIZE)
			a->help = 0;
		return VIEW_F_HANDLED;
	}
	if (key == VIEW_KEY_RESIZE)
		return VIEW_F_HANDLED;
	int f = classes[a->cur]->key(a->state[a->cur], &a->ctx, key);
	if (f & VIEW_F_QUIT)
		return VIEW_F_QUIT;
	if (f & VIEW_F_GOTO) {
		int target = a->ctx.goto_panel;
		int64_t step = a->ctx.goto_step;
		a->ctx.goto_step = -1;
		if (target >= 0 && target < VIEW_P_COUNT) {
			go(a, target, 1);
			classes[target]->focus(a->state[target], &a->ctx, step);
		}
		a->ctx.goto_callsite = -1;
		return VIEW_F_HANDLED;
	}
	if (f)
		return f;
	if (a->ctx.input)
		return VIEW_F_HANDLED;
	switch (key) {
	case 'q': return VIEW_F_QUIT;
	case '?':
	case VIEW_KEY_F1:
		a->help = 1;
		a->help_top = 0;
		return VIEW_F_HANDLED;
	case VIEW_KEY_TAB: go(a, (a->cur + 1) % VIEW_P_COUNT, 0); return VIEW_F_HANDLED;
	case VIEW_KEY_BTAB:
		go(a, (a->cur + VIEW_P_COUNT - 1) % VIEW_P_COUNT, 0);
		return VIEW_F_HANDLED;
	case VIEW_KEY_ESC:
	case VIEW_KEY_BACKSPACE:
		if (a->depth > 0)
			view_app_show(a, a->stack[--a->depth]);
		return VIEW_F_HANDLED;
	default:
		if (key >= '1' && key < '1' + VIEW_P_COUNT) {
			go(a, key - '1', 0);
			return VIEW_F_HANDLED;
		}
		return 0;
	}
}

int view_keys_parse(const char *text, int *keys, int max)
{
	static const struct {
		const char *name;
		int key;
	} names[] = {
	    {"enter", VIEW_KEY_ENTER},  {"esc", VIEW_KEY_ESC},
	    {"bs", VIEW_KEY_BACKSPACE}, {"tab", VIEW_KEY_TAB},
	    {"btab", VIEW_KEY_BTAB},    {"up", VIEW_KEY_UP},
	    {"down", VIEW_KEY_DOWN},    {"left", VIEW_KEY_LEFT},
	    {"right", VIEW_KEY_RIGHT},  {"pgup", VIEW_KEY_PGUP},
	    {"pgdn", VIEW_KEY_PGDN},    {"home", VIEW_KEY_HOME},
	    {"end", VIEW_KEY_END},      {"lt", '<'},
	};
	int n = 0;
	for (const char *p = text; *p && n < max;) {
		if (*p == '<') {
			const char *e = strchr(p, '>');
			size_t len = e ? (size_t)(e - p - 1) : 0;
			int found = -1;
			for (size_t i = 0; e && i < sizeof names / sizeof names[0]; i++)
				if (strlen(names[i].name) == len &&
				    !strncmp(p + 1, names[i].name, len))
					found = names[i].key;
			if (found < 0)
				return -1;
			keys[n++] = found;
			p = e + 1;
		} else {
			keys[n++] = (unsigned char)*p++;
		}
	}
	return n;
}
