/* status.c — the live status line of a profile run on a terminal.
 *
 * The application usually writes to the same terminal, so the line is not drawn at the cursor
 * (its output would be appended to it): the terminal's scroll region is narrowed to all rows
 * but the last, the application's output scrolls above, and the status is drawn on the last
 * row with the cursor saved and restored around it, as apt does for its progress bar.  Each
 * update is one write() so that it does not interleave with the application's writes.
 * prof_status_end clears the row and gives the whole screen back before the summary.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "prof.h"

static void put(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		buf += w;
		n -= (size_t)w;
	}
}

static int term_size(int fd, int *rows, int *cols)
{
	struct winsize ws;
	if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 3 || ws.ws_col < 20)
		return -1;
	*rows = ws.ws_row;
	*cols = ws.ws_col;
	return 0;
}

void prof_status_init(prof_status *s, int fd)
{
	memset(s, 0, sizeof *s);
	s->fd = -1;
	const char *term = getenv("TERM");
	if (!isatty(fd) || !term || !*term || strcmp(term, "dumb") == 0)
		return;
	s->fd = fd;
}

/* Narrows the scroll region to rows 1 .. rows-1.  The newline makes room when the cursor is on
 * the last row; the cursor then goes back up to where the next output belongs. */
static void region_set(prof_status *s)
{
	char buf[64];
	int n = snprintf(buf, sizeof buf, "\n\0337\033[1;%dr\0338\033[1A", s->rows - 1);
	put(s->fd, buf, (size_t)n);
	s->region = 1;
}

/* Clears the status row and restores the full scroll region, cursor unchanged. */
static void region_reset(prof_status *s)
{
	char buf[64];
	int n = snprintf(buf, sizeof buf, "\0337\033[%d;1H\033[2K\033[r\0338", s->rows);
	put(s->fd, buf, (size_t)n);
	s->region = 0;
}

void prof_status_draw(prof_status *s, const char *text)
{
	int rows, cols;
	if (s->fd < 0 || term_size(s->fd, &rows, &cols) != 0)
		return;
	if (s->region && (rows != s->rows || cols != s->cols))
		region_reset(s);                /* resized: set the region again for the new size */
	s->rows = rows;
	s->cols = cols;
	if (!s->region)
		region_set(s);
	/* one row: never let the text wrap */
	char buf[1024];
	int len = (int)strlen(text), room = cols - 1;
	if (len > room)
		len = room;
	int n = snprintf(buf, sizeof buf, "\0337\033[%d;1H\033[2K%.*s\0338", rows, len, text);
	if (n > 0)
		put(s->fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
	s->shown = 1;
}

void prof_status_end(prof_status *s)
{
	if (s->fd >= 0 && s->region)
		region_reset(s);
	s->shown = 0;
}
