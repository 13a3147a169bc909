/* bench_viewer.c — ampview's first frame on a ten-million-op profile (docs/ARCHITECTURE.md §10: < 300 ms).
 *
 * Generates the profile once with genprof (kept in $TMPDIR and reused while its generator
 * version and size match), then times, in this process, opening the model and drawing the
 * overview into an 80x24 screen, and the first draw of every other panel; then the whole
 * `ampview --headless` process.  AMPVIEW_BENCH_OPS changes the size; AMPVIEW_BENCH_DB the file.
 */
#include "bench_args.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "genprof.h"
#include "model.h"
#include "screen.h"

#define GOAL_MS 300.0
#define RUNS    5

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* An existing profile of the right size from this generator? */
static int reusable(const char *path, uint64_t ops)
{
	view_model *m;
	char err[512];
	if (access(path, R_OK) != 0 || view_model_open(path, NULL, &m, err, sizeof err) != VIEW_OK)
		return 0;
	int ok = view_model_run(m)->op_count >= (int64_t)(ops - ops / 100) &&
	         view_model_run(m)->op_count <= (int64_t)(ops + ops / 100);
	view_model_free(m);
	return ok;
}

/* Opens path and draws panel into an 80x24 screen; returns the milliseconds, -1 on error. */
static double first_frame(const char *path, int panel)
{
	view_model *m = NULL;
	view_app *app = NULL;
	view_screen s = {0, 0, NULL};
	char err[512];
	double t0 = now_ms(), ms = -1;
	if (view_model_open(path, NULL, &m, err, sizeof err) != VIEW_OK) {
		fprintf(stderr, "bench_viewer: %s\n", err);
		return -1;
	}
	app = view_app_new(m, NULL);
	if (app && view_screen_init(&s, 80, 24) == 0) {
		view_app_show(app, panel);
		view_app_draw(app, &s);
		ms = now_ms() - t0;
	}
	view_screen_release(&s);
	view_app_free(app);
	view_model_free(m);
	return ms;
}

static double median_of(const char *path, int panel, double *best)
{
	double t[RUNS];
	for (int i = 0; i < RUNS; i++)
		if ((t[i] = first_frame(path, panel)) < 0)
			return -1;
	qsort(t, RUNS, sizeof t[0], cmp_double);
	*best = t[0];
	return t[RUNS / 2];
}

/* Wall time of `ampview --headless path` (stdout to /dev/null), or -1. */
static double process_ms(const char *ampview, const char *path)
{
	fflush(stdout);
	double t0 = now_ms();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(127);
		execl(ampview, ampview, "--headless", path, (char *)NULL);
		_exit(127);
	}
	int st;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return now_ms() - t0;
}

int main(int argc, char **argv)
{
	bench_no_options(argc, argv, "bench_viewer",
	                 "ampview's first frame on a ten-million-op profile (goal < 300 ms): opening it\n"
	                 "and drawing the overview into an 80x24 screen, the first draw of every other\n"
	                 "panel, and the whole `ampview --headless` process.  The profile is generated\n"
	                 "once into $TMPDIR and reused.  Environment: AMPVIEW_BENCH_OPS (ops, 10000000),\n"
	                 "AMPVIEW_BENCH_DB (the file).\n");
	const char *env_ops = getenv("AMPVIEW_BENCH_OPS");
	uint64_t ops = env_ops ? strtoull(env_ops, NULL, 10) : 10000000ULL;
	char path[512];
	const char *tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if (getenv("AMPVIEW_BENCH_DB"))
		snprintf(path, sizeof path, "%s", getenv("AMPVIEW_BENCH_DB"));
	else
		snprintf(path, sizeof path, "%s/ampview-bench-%" PRIu64 ".db", tmpdir, ops);

	if (!reusable(path, ops)) {
		genprof_opts o;
		genprof_defaults(&o);
		o.path = path;
		o.force = 1;
		o.ops = ops;
		o.steps = ops >= 2000000 ? 2000 : 200;
		o.overflow_steps = 12;
		o.growth_interval = 100;
		char err[512];
		uint64_t rows = 0;
		double t0 = now_ms();
		if (genprof_write(&o, &rows, err, sizeof err) != 0) {
			fprintf(stderr, "bench_viewer: %s\n", err);
			return 1;
		}
		double s = (now_ms() - t0) / 1e3;
		printf("generated %s: %" PRIu64 " op rows in %.1f s (%.2f M rows/s)\n", path, rows,
		       s, (double)rows / s / 1e6);
	} else {
		printf("reusing %s\n", path);
	}

	static const char *const names[] = {"overview", "ops",       "steps",
	                                    "scale",    "anomalies", "callsites"};
	double best, med = median_of(path, 0, &best);
	if (med < 0)
		return 1;
	printf("first frame (open + overview, 80x24), median of %d: %.1f ms (best %.1f ms); "
	       "goal < %.0f ms: %.3fx of the budget\n",
	       RUNS, med, best, GOAL_MS, med / GOAL_MS);
	for (int p = 1; p < 6; p++) {
		double m = median_of(path, p, &best);
		printf("  open + first draw of %-9s %8.1f ms\n", names[p], m);
	}
	/* the whole process, as a user starts it */
	char ampview[600];
	snprintf(ampview, sizeof ampview, "%s", argv[0]);
	char *slash = strrchr(ampview, '/');
	snprintf(slash ? slash + 1 : ampview,
	         sizeof ampview - (size_t)(slash ? slash + 1 - ampview : 0), "../bin/ampview");
	double t[RUNS];
	int n = 0;
	for (int i = 0; i < RUNS; i++)
		if ((t[n] = process_ms(ampview, path)) >= 0)
			n++;
	if (n) {
		qsort(t, (size_t)n, sizeof t[0], cmp_double);
		printf("ampview --headless process, median of %d: %.1f ms (%.3fx of the budget)\n",
		       n, t[n / 2], t[n / 2] / GOAL_MS);
	} else {
		printf("ampview --headless process: not measured (%s not runnable)\n", ampview);
	}
	return med < GOAL_MS ? 0 : 1;
}
