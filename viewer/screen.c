/* screen.c — the in-memory cell grid (see screen.h). */
#include "screen.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sanitize.h"

int view_screen_init(view_screen *s, int w, int h)
{
	s->w = s->h = 0;
	s->cells = NULL;
	if (w < 1 || h < 1)
		return -1;
	s->cells = malloc((size_t)w * (size_t)h * sizeof *s->cells);
	if (!s->cells)
		return -1;
	s->w = w;
	s->h = h;
	view_screen_clear(s);
	return 0;
}

void view_screen_release(view_screen *s)
{
	free(s->cells);
	s->cells = NULL;
	s->w = s->h = 0;
}

int view_screen_resize(view_screen *s, int w, int h)
{
	view_screen n;
	if (view_screen_init(&n, w, h) != 0)
		return -1;
	view_screen_release(s);
	*s = n;
	return 0;
}

void view_screen_clear(view_screen *s)
{
	for (int i = 0; i < s->w * s->h; i++)
		s->cells[i] = (view_cell){' ', VIEW_S_NORMAL, 0};
}

view_cell *view_screen_at(view_screen *s, int x, int y)
{
	if (x < 0 || y < 0 || x >= s->w || y >= s->h)
		return NULL;
	return &s->cells[y * s->w + x];
}

/* Clears the other half of a wide character that (x, y) is about to overwrite. */
static void unsplit(view_screen *s, int x, int y)
{
	view_cell *c = view_screen_at(s, x, y);
	if (!c)
		return;
	if (c->ch == 0 && x > 0)
		s->cells[y * s->w + x - 1].ch = ' ';
	view_cell *r = view_screen_at(s, x + 1, y);
	if (r && r->ch == 0)
		r->ch = ' ';
}

void view_screen_putc(view_screen *s, int x, int y, uint32_t ch, int style, int attr)
{
	view_cell *c = view_screen_at(s, x, y);
	if (!c)
		return;
	unsplit(s, x, y);
	*c = (view_cell){ch, (uint8_t)style, (uint8_t)attr};
}

int view_screen_puts(view_screen *s, int x, int y, int maxw, int style, int attr, const char *text)
{
	if (!text || y < 0 || y >= s->h)
		return 0;
	if (maxw < 0 || x + maxw > s->w)
		maxw = s->w - x;
	if (maxw <= 0)
		return 0;
	size_t n = strlen(text);
	int need = (int)view_text_width(text), col = 0;
	int room = need > maxw ? maxw - 1 : maxw; /* keep one column for the ellipsis */
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += view_utf8_next(text + i, n - i, &cp);
		if (!cp)
			continue;
		int cw = view_cp_width(cp);
		if (col + cw > room)
			break;
		view_screen_putc(s, x + col, y, cp, style, attr);
		if (cw == 2)
			view_screen_putc(s, x + col + 1, y, 0, style, attr);
		col += cw;
	}
	if (need > maxw) {
		view_screen_putc(s, x + col, y, VIEW_G_ELLIPSIS, style, attr);
		col++;
	}
	return col;
}

int view_screen_printf(view_screen *s, int x, int y, int maxw, int style, int attr, const char *fmt,
                       ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return view_screen_puts(s, x, y, maxw, style, attr, buf);
}

int view_screen_puts_right(view_screen *s, int x, int y, int w, int style, int attr,
                           const char *text)
{
	int tw = (int)view_text_width(text);
	if (tw > w)
		return view_screen_puts(s, x, y, w, style, attr, text);
	return view_screen_puts(s, x + w - tw, y, tw, style, attr, text);
}

void view_screen_fill(view_screen *s, int x, int y, int w, int h, uint32_t ch, int style, int attr)
{
	for (int r = y; r < y + h; r++)
		for (int c = x; c < x + w; c++)
			view_screen_putc(s, c, r, ch, style, attr);
}

void view_screen_attr(view_screen *s, int x, int y, int w, int attr)
{
	for (int c = x; c < x + w; c++) {
		view_cell *cell = view_screen_at(s, c, y);
		if (cell)
			cell->attr = (uint8_t)(cell->attr | attr);
	}
}

void view_screen_box(view_screen *s, int x, int y, int w, int h, int style)
{
	if (w < 2 || h < 2)
		return;
	view_screen_fill(s, x + 1, y, w - 2, 1, VIEW_G_HLINE, style, 0);
	view_screen_fill(s, x + 1, y + h - 1, w - 2, 1, VIEW_G_HLINE, style, 0);
	view_screen_fill(s, x, y + 1, 1, h - 2, VIEW_G_VLINE, style, 0);
	view_screen_fill(s, x + w - 1, y + 1, 1, h - 2, VIEW_G_VLINE, style, 0);
	view_screen_putc(s, x, y, VIEW_G_TL, style, 0);
	view_screen_putc(s, x + w - 1, y, VIEW_G_TR, style, 0);
	view_screen_putc(s, x, y + h - 1, VIEW_G_BL, style, 0);
	view_screen_putc(s, x + w - 1, y + h - 1, VIEW_G_BR, style, 0);
}

char view_glyph_ascii(uint32_t ch)
{
	if (ch < 0x80)
		return (char)ch;
	switch (ch) {
	case VIEW_G_FULL: return '#';
	case VIEW_G_DARK: return '=';
	case VIEW_G_MEDIUM: return '~';
	case VIEW_G_LIGHT: return '.';
	case VIEW_G_HLINE: return '-';
	case VIEW_G_DOTTED: return '-';
	case VIEW_G_VLINE: return '|';
	case VIEW_G_CROSS:
	case VIEW_G_TL:
	case VIEW_G_TR:
	case VIEW_G_BL:
	case VIEW_G_BR: return '+';
	case VIEW_G_DOT: return '.';
	case VIEW_G_UP: return '^';
	case VIEW_G_BULLET: return '*';
	case VIEW_G_ELLIPSIS: return '~';
	case VIEW_G_ARROW: return '>';
	case VIEW_G_POINTER: return '|';
	case VIEW_G_LOWER: return 'o';
	default: return '?';
	}
}

void view_screen_write(const view_screen *s, FILE *f, int utf8)
{
	char *line = malloc((size_t)s->w * 4 + 2);
	if (!line)
		return;
	for (int y = 0; y < s->h; y++) {
		size_t used = 0, keep = 0;
		for (int x = 0; x < s->w; x++) {
			uint32_t ch = s->cells[y * s->w + x].ch;
			if (ch == 0) {
				if (!utf8)
					line[used++] = '?'; /* the wide character's right half */
				continue;
			}
			if (utf8)
				used += view_utf8_put(ch, line + used);
			else
				line[used++] = view_glyph_ascii(ch);
			if (ch != ' ')
				keep = used;
		}
		line[keep] = '\n';
		fwrite(line, 1, keep + 1, f);
	}
	free(line);
}
