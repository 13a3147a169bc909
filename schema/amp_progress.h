/* amp_progress.h — the progress line of the tools' long operations (finalize, merge, compare,
 * export): "ampprof: finalize: advice 5/11 (45 %) (2.1 s)" on stderr, redrawn in place (at
 * once for a new phase, else at most ten times a second) and erased when the operation ends,
 * so that it never stays in the output.
 *
 * Shown only when stderr is a terminal (and TERM is not "dumb"), and only once the operation
 * has run for AMP_PROGRESS_DELAY_MS milliseconds (default 500; an operation that ends sooner
 * draws nothing).  A long SQLite statement keeps the elapsed time moving through the
 * connection's progress handler (amp_progress_watch).  One progress line at a time per
 * process; not thread-safe.
 */
#ifndef AMP_PROGRESS_H
#define AMP_PROGRESS_H

#include <stdint.h>
#include <sqlite3.h>

typedef struct amp_progress {
	int on;                 /* stderr is a terminal: the calls draw; else they do nothing */
	int shown;              /* a line is on the screen */
	const char *tool;       /* "ampprof": the first word of the line */
	const char *what;       /* the operation: "finalize", "export", "compare" */
	const char *phase;      /* what it is doing now, or NULL (static strings) */
	uint64_t done, total;   /* units done of total; total 0: no count is shown */
	uint64_t start_ns, last_ns, delay_ns;
	sqlite3 *db;            /* the connection watched, or NULL */
} amp_progress;

/* Starts an operation of total units (0 if not counted).  tool and what must outlive it. */
void amp_progress_begin(amp_progress *p, const char *tool, const char *what, uint64_t total);
/* Names the current phase (a static string, or NULL for none) and the units done so far;
 * redraws when due. */
void amp_progress_set(amp_progress *p, const char *phase, uint64_t done);
/* Redraws when due (the elapsed time moves). */
void amp_progress_tick(amp_progress *p);
/* Keeps the line moving during db's long statements (SQLite's progress handler), until
 * amp_progress_end.  db must outlive the operation. */
void amp_progress_watch(amp_progress *p, sqlite3 *db);
/* Ends the operation: erases the line if one was drawn, releases the connection's handler. */
void amp_progress_end(amp_progress *p);

#endif
