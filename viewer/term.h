/* term.h — the terminal: the only module of ampview that calls curses.
 *
 * It copies a view_screen to the terminal (colours where the terminal has them, bold, reverse
 * and underline where it does not; UTF-8 glyphs or ASCII stand-ins), reads keys as view keys,
 * and owns the terminal's state: on exit, on SIGINT/SIGTERM/SIGHUP/SIGQUIT and on a crash the
 * terminal is restored first (signal-safe writes), then the signal takes its course.
 * One terminal per process; not thread-safe.
 */
#ifndef VIEW_TERM_H
#define VIEW_TERM_H

#include <stddef.h>

#include "screen.h"

/* Starts curses on the terminal.  ascii forces ASCII glyphs (else UTF-8 when the locale's
 * codeset is UTF-8).  Returns 0, or -1 with a message in err. */
int view_term_init(int ascii, char *err, size_t errlen);
/* Restores the terminal.  Safe to call twice and before init. */
void view_term_end(void);
/* Terminal size in columns and rows. */
void view_term_size(int *w, int *h);
/* Shows s (the same size as the terminal). */
void view_term_draw(const view_screen *s);
/* Waits for a key: a view key (panel.h), 0 for nothing (interrupted), -1 when input is gone. */
int view_term_key(void);

#endif
