/* pairs.h — running an example twice, side by side, for the benches that compare two runs
 * (bench_overhead: plain against ampprof; bench_amp: FP32 against a mixed-precision mode).
 *
 * The two runs of a pair are alive together and take turns on one CPU in SLICE_S slices
 * (SIGSTOP/SIGCONT to each one's process group, ampprof's collector pinned to the next CPU), so
 * both see the same machine: on a shared virtual machine a CPU's speed drifts by several
 * percent from one second to the next, which separate runs cannot tell from the effect being
 * measured.  The step figure of a run is the median of the per-step throughput lines the
 * example prints (--log-every=1) while both trained.  Header-only (static functions): each
 * bench stays one program.  The including file defines PAIRS_NAME (its name, for messages).
 */
#ifndef AMP_BENCH_PAIRS_H
#define AMP_BENCH_PAIRS_H

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 64
#define MAX_ARGS 64
#define OUT_MAX (4u << 20)
#define MAX_STEPS 100000
#define SLICE_S 0.25 /* seconds each run of a pair has the CPU at a time */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double s[MAX_STEPS];
	memcpy(s, v, (size_t)n * sizeof *s);
	qsort(s, (size_t)n, sizeof *s, cmp_double);
	return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* Value of "key": in the last line of out that starts with '{', or -1. */
static double json_number(const char *out, const char *key)
{
	const char *line = NULL;
	for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (*p == '{')
			line = p;
	if (!line)
		return -1;
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *v = strstr(line, pat);
	if (!v)
		return -1;
	char *end;
	double d = strtod(v + strlen(pat), &end);
	return end == v + strlen(pat) ? -1 : d;
}

/* Median of the per-step throughputs of the progress lines ("step N ... R samples/s") that
 * start in out[from, to), or -1 if there are fewer than 5. */
static double step_median(const char *out, size_t from, size_t to)
{
	static double v[MAX_STEPS];
	int n = 0;
	for (const char *p = out; p && *p && n < MAX_STEPS; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if ((size_t)(p - out) < from || (size_t)(p - out) >= to)
			continue;
		if (strncmp(p, "step ", 5) != 0)
			continue;
		const char *end = strchr(p, '\n'), *unit = strstr(p, " samples/s");
		if (!unit || (end && unit > end))
			continue;
		const char *num = unit;
		while (num > p && num[-1] != ' ')
			num--;
		double r = strtod(num, NULL);
		if (r > 0)
			v[n++] = r;
	}
	if (n < 5)
		return -1;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One run: a process group (the example, or ampprof and the example it starts) whose stdout
 * is collected. */
typedef struct run {
	char *const *argv;
	pid_t pid;   /* also the process group */
	int fd;      /* its stdout; -1 at end of file */
	char *out;   /* OUT_MAX bytes */
	size_t used;
	int started; /* printed a step line */
	int profiled; /* ampprof: its child is the example */
	size_t from, to; /* the output the step figure is taken from (sliced: while both train) */
	int done;    /* exited, status collected */
	int status;
	struct rusage ru;
	double t0, wall;
} run;

/* The process groups of the runs alive: they are not in the terminal's foreground group and
 * may be stopped, so an interrupted bench kills them itself, then ends its loops (their pipes
 * close) and removes its files as on any failure. */
static volatile sig_atomic_t g_groups[2], g_interrupted;

static void on_interrupt(int sig)
{
	g_interrupted = sig;
	for (int k = 0; k < 2; k++)
		if (g_groups[k] > 0)
			kill(-(pid_t)g_groups[k], SIGKILL);
}

static void track_group(pid_t pgid, int on)
{
	for (int k = 0; k < 2; k++)
		if (on ? g_groups[k] == 0 : g_groups[k] == pgid) {
			g_groups[k] = on ? pgid : 0;
			return;
		}
}

/* Starts r->argv in a process group of its own, stdout to a pipe, stderr to /dev/null.
 * Returns 0, or -1 (message printed). */
static int run_start(run *r)
{
	int fds[2];
	if (g_interrupted)
		return -1;
	if (pipe2(fds, O_CLOEXEC) != 0) {
		fprintf(stderr, PAIRS_NAME ": pipe: %s\n", strerror(errno));
		return -1;
	}
	r->t0 = now_s();
	r->used = r->from = 0;
	r->to = OUT_MAX;
	r->started = r->done = 0;
	r->pid = fork();
	if (r->pid < 0) {
		fprintf(stderr, PAIRS_NAME ": fork: %s\n", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (r->pid == 0) {
		setpgid(0, 0);
		int null = open("/dev/null", O_WRONLY);
		dup2(fds[1], 1);
		if (null >= 0)
			dup2(null, 2);
		execv(r->argv[0], r->argv);
		_exit(127);
	}
	setpgid(r->pid, r->pid); /* either side may win the race */
	track_group(r->pid, 1);
	close(fds[1]);
	r->fd = fds[0];
	return 0;
}

/* Reads what r's pipe holds (blocking if block); notes the first step line.  Closes the pipe
 * at end of file. */
static void run_read(run *r, int block)
{
	if (r->fd < 0)
		return;
	char sink[4096];
	char *buf = r->used < OUT_MAX - 1 ? r->out + r->used : sink;
	size_t room = r->used < OUT_MAX - 1 ? OUT_MAX - 1 - r->used : sizeof sink;
	if (!block) {
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		if (poll(&p, 1, 0) <= 0)
			return;
	}
	ssize_t n = read(r->fd, buf, room);
	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) {
		close(r->fd);
		r->fd = -1;
		return;
	}
	if (buf != sink)
		r->used += (size_t)n;
	r->out[r->used] = '\0';
	if (!r->started)
		r->started = strncmp(r->out, "step ", 5) == 0 || strstr(r->out, "\nstep ") != NULL;
}

/* Collects r's exit status once its pipe is closed (blocking if block). */
static void run_reap(run *r, int block)
{
	if (r->done || r->fd >= 0)
		return;
	pid_t w;
	while ((w = wait4(r->pid, &r->status, block ? 0 : WNOHANG, &r->ru)) < 0 && errno == EINTR)
		;
	if (w == r->pid) {
		track_group(r->pid, 0);
		r->done = 1;
		r->wall = now_s() - r->t0;
	}
}

/* The figures of a finished run: returns its samples_per_sec, or -1 (message printed); *step
 * is the median per-step throughput, *cpu the user + system time of the run (ampprof counts
 * the example it waited for). */
static double run_figures(const run *r, double *step, double *cpu)
{
	*cpu = (double)(r->ru.ru_utime.tv_sec + r->ru.ru_stime.tv_sec) +
	       (double)(r->ru.ru_utime.tv_usec + r->ru.ru_stime.tv_usec) * 1e-6;
	if (g_interrupted)
		return -1;
	if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) {
		fprintf(stderr, PAIRS_NAME ": '%s' failed (status %d)\n", r->argv[0],
		        WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status));
		return -1;
	}
	double sps = json_number(r->out, "samples_per_sec");
	*step = step_median(r->out, r->from, r->to);
	if (!(sps > 0) || !(*step > 0)) {
		fprintf(stderr, PAIRS_NAME ": no samples_per_sec (JSON line and progress lines) in "
		        "the output of '%s'\n", r->argv[0]);
		return -1;
	}
	return sps;
}

/* The CPUs the examples and ampprof run on: the first two this program may use (the same one
 * twice on a single CPU). */
static int g_cpu_app = -1, g_cpu_other = -1;

static void pick_cpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set)) {
			if (g_cpu_app < 0)
				g_cpu_app = c;
			else if (g_cpu_other < 0)
				g_cpu_other = c;
		}
	if (g_cpu_other < 0)
		g_cpu_other = g_cpu_app;
}

/* Every thread of process pid onto cpu. */
static void pin_process(pid_t pid, int cpu)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			sched_setaffinity((pid_t)atoi(e->d_name), sizeof set, &set);
	closedir(d);
}

/* Once r trains: its example onto g_cpu_app and, if it is ampprof, ampprof (the collector)
 * onto g_cpu_other.  A virtual machine's CPUs run at speeds that differ by several percent
 * and change by the minute, so the two examples compared must share one. */
static void pin_run(const run *r)
{
	if (g_cpu_app < 0)
		return;
	if (!r->profiled) {
		pin_process(r->pid, g_cpu_app);
		return;
	}
	pin_process(r->pid, g_cpu_other);
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)r->pid, (int)r->pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (char *p = buf, *end; *p; p = end) {
		long child = strtol(p, &end, 10);
		if (end == p)
			break;
		pin_process((pid_t)child, g_cpu_app);
	}
}

/* Runs r alone to its end.  Returns 0, or -1 (message printed). */
__attribute__((unused)) static int run_alone(run *r)
{
	if (run_start(r) != 0)
		return -1;
	while (r->fd >= 0 && !r->started)
		run_read(r, 1);
	pin_run(r);
	while (r->fd >= 0)
		run_read(r, 1);
	run_reap(r, 1);
	return 0;
}

/* Where the next whole line of r's output starts. */
static size_t end_of_line(const run *r)
{
	const char *nl = r->used ? memrchr(r->out, '\n', r->used) : NULL;
	return nl ? (size_t)(nl - r->out) + 1 : 0;
}

/* Runs a and b together: both load their data at once, then, from the moment both train, they
 * take turns in SLICE_S slices, a first; the one left alone runs on.  The step figures are
 * taken from the lines printed while they took turns.  Returns 0, or -1. */
static int run_sliced(run *a, run *b)
{
	if (run_start(a) != 0)
		return -1;
	if (run_start(b) != 0) {
		kill(-a->pid, SIGKILL);
		while (a->fd >= 0)
			run_read(a, 1);
		run_reap(a, 1);
		return -1;
	}
	run *on = NULL, *off = NULL; /* while slicing: the one running, the one stopped */
	a->to = b->to = 0;           /* set when slicing ends */
	double slice_end = 0;
	while (!a->done || !b->done) {
		struct pollfd p[2];
		int np = 0;
		run *who[2];
		run *both[2] = {a, b};
		for (int k = 0; k < 2; k++)
			if (both[k]->fd >= 0) {
				p[np] = (struct pollfd){.fd = both[k]->fd, .events = POLLIN};
				who[np++] = both[k];
			}
		int wait_ms = 20;
		if (on && off) {
			double left = slice_end - now_s();
			wait_ms = left <= 0 ? 0 : left < 0.02 ? (int)(left * 1e3) + 1 : 20;
		}
		if (np && poll(p, (nfds_t)np, wait_ms) > 0) {
			for (int k = 0; k < np; k++)
				if (p[k].revents)
					run_read(who[k], 1);
		} else if (!np) {
			struct timespec ts = {0, 5000000};
			nanosleep(&ts, NULL);
		}
		run_reap(a, 0);
		run_reap(b, 0);
		if (!on && a->started && b->started && !a->done && !b->done && !a->to) {
			on = a, off = b; /* start slicing */
			kill(-off->pid, SIGSTOP);
			pin_run(a);
			pin_run(b);
			a->from = end_of_line(a), b->from = end_of_line(b);
			slice_end = now_s() + SLICE_S;
		} else if (on && off) {
			if (on->fd < 0 || off->fd < 0) { /* one is over: the other runs on */
				a->to = a->used, b->to = b->used;
				kill(-off->pid, SIGCONT);
				kill(-on->pid, SIGCONT);
				on = off = NULL;
			} else if (now_s() >= slice_end) {
				kill(-on->pid, SIGSTOP);
				kill(-off->pid, SIGCONT);
				run *t = on;
				on = off, off = t;
				slice_end = now_s() + SLICE_S;
			}
		}
	}
	if (!a->to && !b->to) {
		fprintf(stderr, PAIRS_NAME ": the two runs never trained at the same time; their "
		        "steps are compared as they ran\n");
		a->to = b->to = OUT_MAX;
	}
	return 0;
}

static int parse_count(const char *text, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}


/* The directory of this program's sibling tools: <build>/bench/<bench> -> <build>/bin, into
 * dir (len bytes).  Returns 0, or -1 (message printed). */
static int pairs_bindir(char *dir, size_t len)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		fprintf(stderr, PAIRS_NAME ": cannot read /proc/self/exe: %s\n", strerror(errno));
		return -1;
	}
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(dir, len, "%s/../bin", self);
	return 0;
}

/* Installs the handler that kills the runs alive on SIGINT, SIGTERM and SIGHUP. */
static void pairs_signals(void)
{
	struct sigaction sa = {.sa_handler = on_interrupt};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

#endif
