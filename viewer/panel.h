/* panel.h — the panels of ampview as small vtables, and the helpers they share.
 *
 * A panel draws the model into a region of the in-memory screen and handles keys; its key
 * handler returns VIEW_F_* flags and never touches the terminal.  Cross-panel moves (the loss
 * scale's marker -> that step's anomalies) are requests in view_ctx that the app carries out.
 */
#ifndef VIEW_PANEL_H
#define VIEW_PANEL_H

#include <stdint.h>

#include "model.h"
#include "screen.h"

/* Keys: printable ASCII as itself, the rest from here (term.c and --keys produce them). */
enum view_key {
	VIEW_KEY_UP = 0x110000,
	VIEW_KEY_DOWN,
	VIEW_KEY_LEFT,
	VIEW_KEY_RIGHT,
	VIEW_KEY_PGUP,
	VIEW_KEY_PGDN,
	VIEW_KEY_HOME,
	VIEW_KEY_END,
	VIEW_KEY_ENTER,
	VIEW_KEY_ESC,
	VIEW_KEY_BACKSPACE,
	VIEW_KEY_TAB,
	VIEW_KEY_BTAB,
	VIEW_KEY_RESIZE,
	VIEW_KEY_F1,
};

/* What a key handler did. */
enum {
	VIEW_F_UNHANDLED = 0, /* not a key of this panel: the app tries its global keys */
	VIEW_F_HANDLED = 1,   /* consumed; redraw */
	VIEW_F_GOTO = 2,      /* show ctx->goto_panel, focused on ctx->goto_step */
	VIEW_F_QUIT = 4,      /* leave ampview */
};

typedef enum view_panel_id {
	VIEW_P_OVERVIEW,
	VIEW_P_OPS,
	VIEW_P_STEPS,
	VIEW_P_SCALE,
	VIEW_P_ANOMALIES,
	VIEW_P_CALLSITES,
	VIEW_P_MEMORY,
	VIEW_P_EXPONENTS,
	VIEW_P_DIFF,
	VIEW_P_COUNT
} view_panel_id;

typedef struct view_ctx {
	view_model *model;
	const view_run *run;
	int goto_panel;    /* with VIEW_F_GOTO: the panel to show */
	int64_t goto_step; /* and the step it should focus, -1 for none */
	int64_t goto_callsite; /* and the call site (callsites.id) it should select, -1 for none */
	int input;         /* set by a panel while it reads text (filter, step number) */
	char status[256];  /* the status line: prompt or message, set by the panel */
	const char *baseline; /* --diff: the baseline profile's path (the diff panel's A), or NULL */
} view_ctx;

typedef struct view_keyhelp {
	const char *keys, *what;
} view_keyhelp;

typedef struct view_panel_class {
	const char *name;  /* --panel=NAME */
	const char *title; /* tab title */
	/* Returns the panel's state (NULL: out of memory). */
	void *(*create)(view_ctx *ctx);
	void (*destroy)(void *self);
	/* Draws into rows [top, top + rows) of scr, full width. */
	void (*draw)(void *self, view_ctx *ctx, view_screen *scr, int top, int rows);
	/* Handles a key; returns VIEW_F_* flags. */
	int (*key)(void *self, view_ctx *ctx, int key);
	/* Another panel sent the user here about step (-1: none). */
	void (*focus)(void *self, view_ctx *ctx, int64_t step);
	const view_keyhelp *help; /* the panel's keys, ended by {NULL, NULL} */
} view_panel_class;

extern const view_panel_class view_panel_overview, view_panel_ops, view_panel_steps,
    view_panel_scale, view_panel_anomalies, view_panel_callsites, view_panel_memory,
    view_panel_exponents, view_panel_diff;

/* ---- shared helpers (panel.c) --------------------------------------------------------------- */

/* A scrolling list: cursor and first visible row over count rows, rows visible. */
typedef struct view_list {
	int64_t cursor, top, count;
	int rows;
} view_list;

/* Handles the movement keys (arrows, j/k, PgUp/PgDn, Home/End, g/G); returns 1 if consumed. */
int view_list_key(view_list *l, int key);
/* Sets count and rows, keeps cursor and top in range with the cursor visible. */
void view_list_fit(view_list *l, int64_t count, int rows);
/* Marks row y as the cursor row: a marker glyph at x and reverse video over w columns. */
void view_draw_cursor(view_screen *scr, int x, int y, int w);
/* Draws text in w columns keeping its end ("...odel.c:88"), left-aligned. */
int view_draw_tail(view_screen *scr, int x, int y, int w, int style, int attr, const char *text);
/* Draws a layer label in w columns: whole if it fits, else its dotted (or slashed) components
 * before the last cut to their first character from the left, numbers kept ("t.b.0.a.softmax"),
 * then its end as view_draw_tail. */
int view_draw_label(view_screen *scr, int x, int y, int w, int style, int attr, const char *text);
/* Draws text word-wrapped in columns [x, x + w) from row y on, drawing no row at or past end; a
 * '\n' starts a new row, a word longer than w is cut.  scr may be NULL to only count.
 * Returns the rows the whole text needs (which may be more than end - y). */
int view_draw_wrapped(view_screen *scr, int x, int y, int w, int end, int style, int attr,
                      const char *text);
/* "file:line" ("file" alone when line is 0, "??" for an unknown file) into buf. */
void view_fmt_site(const char *file, int line, char *buf, size_t len);
/* view_fmt_site, the file relative to the model's source root (view_model_short_path) when
 * the whole "file:line" is wider than w columns: a detail line keeps the line number and
 * what follows it in view on a deep checkout. */
void view_fmt_site_fit(view_model *m, const char *file, int line, int w, char *buf, size_t len);
/* Handles a key of a one-line text prompt (printable appends, Backspace deletes).  Returns 1 on
 * Enter, -1 on Esc, 0 otherwise. */
int view_prompt_key(char *buf, size_t len, int key, int digits_only);

/* The / filter of a list panel: '/' opens a prompt (the text is kept as typed, rows narrow at
 * each key), Enter keeps the filter, Esc while typing or with a filter set clears it. */
typedef struct view_filter {
	char text[64];
	int editing; /* the prompt is open */
} view_filter;
/* Handles key for f.  Returns 1 if it consumed the key (then *changed is set when the rows
 * must be filtered again), 0 if the panel should handle it. */
int view_filter_key(view_filter *f, view_ctx *ctx, int key, int *changed);
/* Nonzero if text (NULL: "") contains the filter, ignoring ASCII case; an empty filter matches. */
int view_filter_match(const view_filter *f, const char *text);
/* While typing: the prompt in ctx->status.  Draws " · filter: TEXT" at (x, y) when a filter is
 * set or being typed; returns the columns drawn. */
int view_filter_draw(const view_filter *f, view_ctx *ctx, view_screen *scr, int x, int y, int w);
/* The next overflow step after step (dir > 0) or before it (dir < 0), wrapping round the run
 * (*wrapped set then); -1 if the run has none (panel_steps.c). */
int64_t view_next_overflow_wrap(view_model *m, int64_t step, int dir, int *wrapped);
/* Case-insensitive substring test (ASCII), needle "" matches. */
int view_contains_ci(const char *hay, const char *needle);

#endif
