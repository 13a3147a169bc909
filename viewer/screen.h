/* screen.h — the in-memory screen every panel draws into: a grid of cells, each one code point
 * with a semantic style and attributes.  The headless renderer prints it as text; term.c (the
 * only curses user) copies it to the terminal.  Golden tests compare what is drawn here.
 *
 * Styles are semantic (good, bad, FP16 ...); the output layer decides how each looks: a colour
 * where the terminal has colours, bold/reverse/underline where it does not.  Text is decoded
 * with view_utf8_next, so no control character can enter a cell.  Not thread-safe.
 */
#ifndef VIEW_SCREEN_H
#define VIEW_SCREEN_H

#include <stdint.h>
#include <stdio.h>

typedef enum view_style {
	VIEW_S_NORMAL = 0,
	VIEW_S_BAR,    /* tab bar background */
	VIEW_S_TAB,    /* the active tab */
	VIEW_S_HEADER, /* column headers and section titles */
	VIEW_S_BAD,    /* a figure past its threshold (red) */
	VIEW_S_GOOD,   /* a figure within its threshold (green) */
	VIEW_S_WARN,   /* warnings, incomplete runs (yellow) */
	VIEW_S_DIM,    /* secondary text */
	VIEW_S_FP16,   /* FP16 compute */
	VIEW_S_FP32,   /* FP32 compute */
	VIEW_S_COPY,   /* memory copies */
	VIEW_S_OTHER,  /* neither op nor copy */
	VIEW_S_MARK,   /* overflow markers */
	VIEW_S_BAND,   /* the usual loss-scale band */
	VIEW_S_HILITE, /* FP32 rows of ops that could run in FP16 */
	VIEW_S_STATUS, /* status line */
	VIEW_S_COUNT
} view_style;

enum {
	VIEW_A_BOLD = 1,
	VIEW_A_REVERSE = 2, /* also the cursor row */
	VIEW_A_UNDERLINE = 4,
};

/* Glyphs with an ASCII fallback (view_glyph_ascii). */
#define VIEW_G_FULL     0x2588u /* full block: FP16, gauge fill */
#define VIEW_G_DARK     0x2593u /* dark shade: FP32 */
#define VIEW_G_MEDIUM   0x2592u /* medium shade: copies */
#define VIEW_G_LIGHT    0x2591u /* light shade: other, gauge background */
#define VIEW_G_HLINE    0x2500u
#define VIEW_G_VLINE    0x2502u
#define VIEW_G_CROSS    0x253Cu
#define VIEW_G_TL       0x250Cu
#define VIEW_G_TR       0x2510u
#define VIEW_G_BL       0x2514u
#define VIEW_G_BR       0x2518u
#define VIEW_G_DOT      0x00B7u /* middle dot */
#define VIEW_G_UP       0x25B2u /* overflow marker */
#define VIEW_G_BULLET   0x25CFu /* loss-scale point */
#define VIEW_G_ELLIPSIS 0x2026u
#define VIEW_G_ARROW    0x25B6u /* cursor */
#define VIEW_G_DOTTED   0x2504u /* band edge */
#define VIEW_G_POINTER  0x2191u /* upwards arrow: the loss-scale chart's cursor column */
#define VIEW_G_LOWER    0x2584u /* lower half block: optimizer state in the memory bars */

typedef struct view_cell {
	uint32_t ch;   /* code point; 0 = right half of a wide character */
	uint8_t style; /* view_style */
	uint8_t attr;  /* VIEW_A_* */
} view_cell;

typedef struct view_screen {
	int w, h;         /* columns, rows */
	view_cell *cells; /* w * h, row-major */
} view_screen;

/* Allocates a w x h screen of blanks (w, h >= 1).  Returns 0 or -1 (out of memory). */
int view_screen_init(view_screen *s, int w, int h);
/* Frees the cells; the struct may be initialized again.  NULL cells are fine. */
void view_screen_release(view_screen *s);
/* Resizes (contents are cleared).  Returns 0 or -1, the old screen kept on failure. */
int view_screen_resize(view_screen *s, int w, int h);
/* Blanks every cell. */
void view_screen_clear(view_screen *s);
/* The cell at (x, y), or NULL outside the screen. */
view_cell *view_screen_at(view_screen *s, int x, int y);

/* Writes one glyph at (x, y) (clipped). */
void view_screen_putc(view_screen *s, int x, int y, uint32_t ch, int style, int attr);
/* Writes text (UTF-8, sanitized on the way) at (x, y) in at most maxw columns (maxw < 0: to
 * the right edge); a string cut short ends with an ellipsis.  Returns the columns used. */
int view_screen_puts(view_screen *s, int x, int y, int maxw, int style, int attr, const char *text);
/* printf-style view_screen_puts. */
int view_screen_printf(view_screen *s, int x, int y, int maxw, int style, int attr, const char *fmt,
                       ...) __attribute__((format(printf, 7, 8)));
/* Like view_screen_puts, but right-aligned so the text ends at column x + w - 1. */
int view_screen_puts_right(view_screen *s, int x, int y, int w, int style, int attr,
                           const char *text);
/* Fills a rectangle with a glyph. */
void view_screen_fill(view_screen *s, int x, int y, int w, int h, uint32_t ch, int style, int attr);
/* ORs attributes into the cells of a row span (the cursor row: VIEW_A_REVERSE). */
void view_screen_attr(view_screen *s, int x, int y, int w, int attr);
/* Draws a box outline. */
void view_screen_box(view_screen *s, int x, int y, int w, int h, int style);

/* The ASCII stand-in of a glyph ('#', '=', '-', '+' ...); '?' for other non-ASCII. */
char view_glyph_ascii(uint32_t ch);

/* Prints the screen as plain text, one line per row, trailing blanks trimmed; UTF-8 or ASCII
 * glyphs.  Attributes are not shown (the cursor row carries a marker glyph of its own). */
void view_screen_write(const view_screen *s, FILE *f, int utf8);

#endif
