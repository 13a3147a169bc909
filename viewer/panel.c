/* panel.c — helpers shared by the panels: list movement, cursor rows, prompts, small
 * formatters (see panel.h). */
#include "panel.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sanitize.h"

int view_list_key(view_list *l, int key)
{
	int64_t page = l->rows > 1 ? l->rows - 1 : 1;
	switch (key) {
	case VIEW_KEY_UP:
	case 'k': l->cursor--; break;
	case VIEW_KEY_DOWN:
	case 'j': l->cursor++; break;
	case VIEW_KEY_PGUP:
		l->cursor -= page;
		l->top -= page;
		break;
	case VIEW_KEY_PGDN:
		l->cursor += page;
		l->top += page;
		break;
	case VIEW_KEY_HOME:
	case 'g': l->cursor = 0; break;
	case VIEW_KEY_END:
	case 'G': l->cursor = l->count - 1; break;
	default: return 0;
	}
	view_list_fit(l, l->count, l->rows);
	return 1;
}

void view_list_fit(view_list *l, int64_t count, int rows)
{
	l->count = count;
	l->rows = rows > 0 ? rows : 1;
	if (l->cursor >= count)
		l->cursor = count - 1;
	if (l->cursor < 0)
		l->cursor = 0;
	if (l->top > count - l->rows)
		l->top = count - l->rows;
	if (l->top < 0)
		l->top = 0;
	if (l->cursor < l->top)
		l->top = l->cursor;
	if (l->cursor >= l->top + l->rows)
		l->top = l->cursor - l->rows + 1;
}

void view_draw_cursor(view_screen *scr, int x, int y, int w)
{
	view_screen_putc(scr, x, y, VIEW_G_ARROW, VIEW_S_NORMAL, VIEW_A_BOLD);
	view_screen_attr(scr, x, y, w, VIEW_A_REVERSE);
}

int view_draw_tail(view_screen *scr, int x, int y, int w, int style, int attr, const char *text)
{
	int tw = (int)view_text_width(text);
	if (tw <= w)
		return view_screen_puts(scr, x, y, w, style, attr, text);
	if (w <= 1)
		return view_screen_puts(scr, x, y, w, style, attr, "");
	/* skip leading code points until the rest fits in w - 1 columns */
	size_t n = strlen(text), i = 0;
	while (i < n && tw > w - 1) {
		uint32_t cp;
		i += view_utf8_next(text + i, n - i, &cp);
		if (cp)
			tw -= view_cp_width(cp);
	}
	view_screen_putc(scr, x, y, VIEW_G_ELLIPSIS, style, attr);
	return 1 + view_screen_puts(scr, x + 1, y, w - 1, style, attr, text + i);
}

int view_draw_label(view_screen *scr, int x, int y, int w, int style, int attr, const char *text)
{
	if ((int)view_text_width(text) <= w)
		return view_screen_puts(scr, x, y, w, style, attr, text);
	/* "transformer.blocks.0.attn.softmax" -> "t.b.0.a.softmax": the components before the
	 * last, from the left, cut to their first character (numbers kept whole) until it fits,
	 * so that labels differing in an index stay apart; then its end, as view_draw_tail */
	char buf[1024]; /* a profile keeps 1008 bytes of a label */
	snprintf(buf, sizeof buf, "%s", text);
	size_t n = strlen(buf), last = n;
	while (last > 0 && buf[last - 1] != '.' && buf[last - 1] != '/')
		last--;
	for (size_t i = 0; i < last && (int)view_text_width(buf) > w;) {
		size_t e = i;
		while (e < last && buf[e] != '.' && buf[e] != '/')
			e++;
		size_t digits = strspn(buf + i, "0123456789");
		uint32_t cp;
		size_t first = i < e ? view_utf8_next(buf + i, e - i, &cp) : 0;
		if (digits < e - i && i + first < e) { /* cut it to its first character */
			memmove(buf + i + first, buf + e, n - e + 1);
			n -= e - i - first;
			last -= e - i - first;
			e = i + first;
		}
		i = e + 1;
	}
	return view_draw_tail(scr, x, y, w, style, attr, buf);
}

int view_draw_wrapped(view_screen *scr, int x, int y, int w, int end, int style, int attr,
                      const char *text)
{
	size_t n = strlen(text), i = 0;
	int rows = 0;
	if (w < 1)
		return 0;
	while (i < n || rows == 0) {
		/* one row: the code points from i that fit in w columns */
		size_t j = i, brk = 0;
		int cols = 0;
		while (j < n && text[j] != '\n') {
			uint32_t cp;
			size_t k = view_utf8_next(text + j, n - j, &cp);
			int cw = cp ? view_cp_width(cp) : 0;
			if (cols + cw > w && j > i)
				break;
			if (text[j] == ' ')
				brk = j;
			cols += cw;
			j += k;
		}
		size_t stop = j, next = j;
		if (j < n && text[j] == '\n')
			next = j + 1;
		else if (j < n && brk > i)
			stop = brk, next = brk + 1; /* break at the last blank, which is dropped */
		if (scr && y + rows < end) {
			char seg[1024];
			size_t len = stop - i < sizeof seg ? stop - i : sizeof seg - 1;
			memcpy(seg, text + i, len);
			seg[len] = '\0';
			view_screen_puts(scr, x, y + rows, w, style, attr, seg);
		}
		rows++;
		i = next;
	}
	return rows;
}

void view_fmt_site(const char *file, int line, char *buf, size_t len)
{
	if (line > 0)
		snprintf(buf, len, "%s:%d", file && *file ? file : "??", line);
	else
		snprintf(buf, len, "%s", file && *file ? file : "??");
}

void view_fmt_site_fit(view_model *m, const char *file, int line, int w, char *buf, size_t len)
{
	view_fmt_site(file, line, buf, len);
	if ((int)view_text_width(buf) > w)
		view_fmt_site(view_model_short_path(m, file), line, buf, len);
}

int view_prompt_key(char *buf, size_t len, int key, int digits_only)
{
	size_t n = strlen(buf);
	if (key == VIEW_KEY_ENTER)
		return 1;
	if (key == VIEW_KEY_ESC)
		return -1;
	if (key == VIEW_KEY_BACKSPACE) {
		/* a whole UTF-8 character: its continuation bytes and its lead byte */
		while (n > 0 && ((unsigned char)buf[n - 1] & 0xC0) == 0x80)
			buf[--n] = '\0';
		if (n > 0)
			buf[n - 1] = '\0';
		return 0;
	}
	int text = (key >= 0x20 && key < 0x7F) || (key >= 0x80 && key <= 0xFF && !digits_only);
	if (!text || (digits_only && !(key >= '0' && key <= '9')))
		return 0;
	/* a UTF-8 character goes in whole or not at all: a lead byte only if its sequence fits,
	 * a continuation byte only after a sequence it continues */
	if (key >= 0xC0) {
		size_t need = key >= 0xF0 ? 4 : key >= 0xE0 ? 3 : 2;
		if (n + need >= len)
			return 0;
	} else if (key >= 0x80) {
		size_t i = n, cont = 0;
		while (i > 0 && ((unsigned char)buf[i - 1] & 0xC0) == 0x80)
			i--, cont++;
		unsigned lead = i > 0 ? (unsigned char)buf[i - 1] : 0;
		size_t want = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
		if (cont >= want)
			return 0; /* nothing to continue: dropped, as its lead was */
	}
	if (n + 1 < len) {
		buf[n] = (char)key;
		buf[n + 1] = '\0';
	}
	return 0;
}

int view_contains_ci(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	if (n == 0)
		return 1;
	for (; hay && *hay; hay++) {
		size_t i = 0;
		while (i < n && hay[i] &&
		       tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
			i++;
		if (i == n)
			return 1;
	}
	return 0;
}

int view_filter_match(const view_filter *f, const char *text)
{
	return view_contains_ci(text ? text : "", f->text);
}

int view_filter_key(view_filter *f, view_ctx *ctx, int key, int *changed)
{
	*changed = 0;
	if (f->editing) {
		int r = view_prompt_key(f->text, sizeof f->text, key, 0);
		if (r < 0)
			f->text[0] = '\0';
		if (r != 0)
			f->editing = ctx->input = 0;
		*changed = 1;
		return 1;
	}
	if (key == '/') {
		f->editing = ctx->input = 1;
		f->text[0] = '\0';
		*changed = 1;
		return 1;
	}
	if (key == VIEW_KEY_ESC && f->text[0]) {
		f->text[0] = '\0';
		*changed = 1;
		return 1;
	}
	return 0;
}

int view_filter_draw(const view_filter *f, view_ctx *ctx, view_screen *scr, int x, int y, int w)
{
	if (f->editing)
		snprintf(ctx->status, sizeof ctx->status, "filter: /%s_", f->text);
	if (!f->text[0] && !f->editing)
		return 0;
	return view_screen_printf(scr, x, y, w, VIEW_S_WARN, 0, " \xc2\xb7 filter: %s", f->text);
}
