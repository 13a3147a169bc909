/* app.h — ampview's frame: the tab bar, the active panel, the status line, the help overlay,
 * global keys and the back stack.  It draws into a view_screen only, so the same code serves
 * the terminal (term.c) and the headless renderer.
 */
#ifndef VIEW_APP_H
#define VIEW_APP_H

#include "model.h"
#include "panel.h"
#include "screen.h"

typedef struct view_app view_app;

/* Creates the app over model m (not owned; it must outlive the app), with baseline (a path, or
 * NULL) the profile the diff panel compares m with.  NULL if out of memory. */
view_app *view_app_new(view_model *m, const char *baseline);
void view_app_free(view_app *a);

/* The panel id for a --panel name ("overview", "ops", "steps", "scale", "anomalies",
 * "callsites", "memory", "hist", "diff"), or -1. */
int view_app_panel_by_name(const char *name);
/* Shows a panel (no back-stack entry). */
void view_app_show(view_app *a, int panel);
/* Draws the whole frame into s. */
void view_app_draw(view_app *a, view_screen *s);
/* Handles a key; returns VIEW_F_QUIT when the user leaves, else VIEW_F_HANDLED or 0. */
int view_app_key(view_app *a, int key);

/* Parses a --keys string into key codes: plain characters, and <enter> <esc> <bs> <tab>
 * <btab> <up> <down> <left> <right> <pgup> <pgdn> <home> <end>.  Returns the count written
 * (at most max), or -1 on an unknown <name>. */
int view_keys_parse(const char *text, int *keys, int max);

#endif
