/* amp_progress.c — the progress line of the tools' long operations (see amp_progress.h): drawn
 * with a carriage return and erase-to-end-of-line, cut to the terminal's width so that it
 * never wraps, written with one write() per redraw; a new phase is drawn at once, counts
 * and the clock at most every 100 ms. */
#include "amp_progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put(const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(2, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		buf += w;
		n -= (size_t)w;
	}
}

void amp_progress_begin(amp_progress *p, const char *tool, const char *what, uint64_t total)
{
	memset(p, 0, sizeof *p);
	p->tool = tool;
	p->what = what;
	p->total = total;
	const char *term = getenv("TERM");
	p->on = isatty(2) && term && *term && strcmp(term, "dumb") != 0;
	if (!p->on)
		return;
	const char *delay = getenv("AMP_PROGRESS_DELAY_MS");
	p->delay_ns = (delay && *delay ? strtoull(delay, NULL, 10) : 500) * 1000000u;
	p->start_ns = now_ns();
}

static void draw(amp_progress *p, uint64_t now)
{
	char line[512];
	double secs = (double)(now - p->start_ns) / 1e9;
	int n = snprintf(line, sizeof line, "%s: %s", p->tool, p->what);
	if (p->phase && n >= 0 && (size_t)n < sizeof line)
		n += snprintf(line + n, sizeof line - (size_t)n, ": %s", p->phase);
	if (p->total && n >= 0 && (size_t)n < sizeof line)
		n += snprintf(line + n, sizeof line - (size_t)n, " %llu/%llu (%.0f %%)",
		              (unsigned long long)p->done, (unsigned long long)p->total,
		              100.0 * (double)p->done / (double)p->total);
	if (n >= 0 && (size_t)n < sizeof line)
		n += snprintf(line + n, sizeof line - (size_t)n, " (%.1f s)", secs);
	if (n < 0)
		return;
	size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
	struct winsize ws;
	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && len > (size_t)ws.ws_col - 1)
		len = (size_t)ws.ws_col - 1;
	char buf[sizeof line + 8];
	buf[0] = '\r';
	memcpy(buf + 1, line, len);
	memcpy(buf + 1 + len, "\033[K", 3);
	put(buf, len + 4);
	p->shown = 1;
	p->last_ns = now;
}

/* Draws when the delay has passed and, unless the phase changed, 100 ms after the last. */
static void redraw(amp_progress *p, int new_phase)
{
	if (!p->on)
		return;
	uint64_t now = now_ns();
	if (now - p->start_ns < p->delay_ns ||
	    (p->shown && !new_phase && now - p->last_ns < 100000000u))
		return;
	draw(p, now);
}

void amp_progress_tick(amp_progress *p)
{
	redraw(p, 0);
}

void amp_progress_set(amp_progress *p, const char *phase, uint64_t done)
{
	int new_phase = phase != p->phase;
	p->phase = phase;
	p->done = done;
	redraw(p, new_phase);
}

static int on_sqlite_progress(void *arg)
{
	amp_progress_tick(arg);
	return 0; /* never interrupts the statement */
}

void amp_progress_watch(amp_progress *p, sqlite3 *db)
{
	if (!p->on || !db)
		return;
	p->db = db;
	sqlite3_progress_handler(db, 100000, on_sqlite_progress, p);
}

void amp_progress_end(amp_progress *p)
{
	if (p->db)
		sqlite3_progress_handler(p->db, 0, NULL, NULL);
	p->db = NULL;
	if (p->shown)
		put("\r\033[K", 4);
	p->shown = 0;
	p->on = 0;
}
