/* bench_overhead.c — step time of an example under ampprof (checks and statistics on, the
 * defaults) against the same run without it, the 1.03x goal of DESIGN §7.
 *
 * Runs the example (../bin/<example> beside this binary's ../bench/) in pairs: plain and under
 * ../bin/ampprof.  By default the two runs of a pair are alive together and take turns on the
 * CPU in slices (SIGSTOP/SIGCONT to each one's process group, ampprof's collector included),
 * so both see the same machine: on a shared machine the speed drifts by several percent from
 * one second to the next, which separate runs cannot tell from overhead.  The step-time
 * figure comes from the example's own output, so ampprof's start-up and finalize are not
 * counted in it: the median of its per-step throughput lines (--log-every=1), which discards
 * the steps cut by a slice.  --sequential runs the two one after the other instead (the order
 * swapped every pair) and also compares the throughput of the whole training loop and the
 * end-to-end wall time.  Every figure is a median of the per-pair ratios.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, dirname helpers */
#endif
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

static const char usage[] =
    "usage: bench_overhead [--example=<name>] [--pairs=<n>] [--steps=<n>] [--sequential]\n"
    "                      [-- <example args>...]\n"
    "\n"
    "Median step-time ratio of an example under ampprof (defaults: checks and statistics on)\n"
    "against the same run without it, measured in pairs whose two runs take turns on the CPU\n"
    "in 0.25 s slices.\n"
    "\n"
    "    --example=<name>   example in ../bin beside this program   (mlp_fashion)\n"
    "    --pairs=<n>        plain/profiled pairs, 1..64              (5)\n"
    "    --steps=<n>        training steps per run                   (200)\n"
    "    --ampprof=<opt>    an option for ampprof, e.g. --ampprof=--stats-every=10 (repeatable)\n"
    "    --sequential       run the two of a pair one after the other, and compare the whole\n"
    "                       training loop and the wall time too\n"
    "    -- <args>          more arguments for the example (default: --precision=amp)\n";

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
		fprintf(stderr, "bench_overhead: pipe: %s\n", strerror(errno));
		return -1;
	}
	r->t0 = now_s();
	r->used = r->from = 0;
	r->to = OUT_MAX;
	r->started = r->done = 0;
	r->pid = fork();
	if (r->pid < 0) {
		fprintf(stderr, "bench_overhead: fork: %s\n", strerror(errno));
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
		fprintf(stderr, "bench_overhead: '%s' failed (status %d)\n", r->argv[0],
		        WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status));
		return -1;
	}
	double sps = json_number(r->out, "samples_per_sec");
	*step = step_median(r->out, r->from, r->to);
	if (!(sps > 0) || !(*step > 0)) {
		fprintf(stderr, "bench_overhead: no samples_per_sec (JSON line and progress lines) in "
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
static int run_alone(run *r)
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
		fprintf(stderr, "bench_overhead: the two runs never trained at the same time; their "
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

int main(int argc, char **argv)
{
	const char *example = "mlp_fashion";
	long pairs = 5, steps = 200;
	int extra = argc, i, sequential = 0, nopts = 0;
	char *prof_opts[MAX_ARGS];
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			extra = i + 1;
			break;
		} else if (strncmp(a, "--example=", 10) == 0 && a[10] && !strchr(a + 10, '/')) {
			example = a + 10;
		} else if (strncmp(a, "--pairs=", 8) == 0 && parse_count(a + 8, 1, MAX_PAIRS, &pairs) == 0) {
		} else if (strncmp(a, "--steps=", 8) == 0 && parse_count(a + 8, 1, 1000000, &steps) == 0) {
		} else if (strncmp(a, "--ampprof=", 10) == 0 && a[10] && nopts < MAX_ARGS) {
			prof_opts[nopts++] = argv[i] + 10;
		} else if (strcmp(a, "--sequential") == 0) {
			sequential = 1;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage, stdout);
			return 0;
		} else {
			fprintf(stderr, "bench_overhead: invalid argument '%s'\n", a);
			fputs(usage, stderr);
			return 2;
		}
	}

	/* tools beside this program: <build>/bench/bench_overhead -> <build>/bin/ */
	char self[4096], bindir[4112], ampprof[4200], prog[4200], db[64], dir[] =
	    "/tmp/bench_overhead.XXXXXX", steps_arg[32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		fprintf(stderr, "bench_overhead: cannot read /proc/self/exe: %s\n", strerror(errno));
		return 1;
	}
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	*slash = '\0';
	snprintf(bindir, sizeof bindir, "%s/../bin", self);
	snprintf(ampprof, sizeof ampprof, "%s/ampprof", bindir);
	snprintf(prog, sizeof prog, "%s/%s", bindir, example);
	if (access(ampprof, X_OK) != 0 || access(prog, X_OK) != 0) {
		fprintf(stderr, "bench_overhead: cannot run '%s': %s\nhint: run 'make all' first\n",
		        access(ampprof, X_OK) != 0 ? ampprof : prog, strerror(errno));
		return 1;
	}
	if (!mkdtemp(dir)) {
		fprintf(stderr, "bench_overhead: cannot create a directory in /tmp: %s\n",
		        strerror(errno));
		return 1;
	}
	snprintf(db, sizeof db, "%s/overhead.db", dir);
	snprintf(steps_arg, sizeof steps_arg, "--steps=%ld", steps);

	/* plain: prog [extra | --precision=amp] --steps=N --json --log-every=1
	 * profiled: ampprof -q -f -o DB -- <plain> */
	char *plain[MAX_ARGS + 8], *profiled[2 * MAX_ARGS + 16];
	int np = 0;
	plain[np++] = prog;
	if (extra >= argc)
		plain[np++] = "--precision=amp";
	for (i = extra; i < argc && np < MAX_ARGS; i++)
		plain[np++] = argv[i];
	plain[np++] = steps_arg;
	plain[np++] = "--json";
	plain[np++] = "--log-every=1";
	plain[np] = NULL;
	int nq = 0;
	profiled[nq++] = ampprof;
	profiled[nq++] = "-q";
	profiled[nq++] = "-f";
	profiled[nq++] = "-o";
	profiled[nq++] = db;
	for (i = 0; i < nopts; i++)
		profiled[nq++] = prof_opts[i];
	profiled[nq++] = "--";
	for (i = 0; i <= np; i++)
		profiled[nq++] = plain[i];

	pick_cpus();
	struct sigaction sa = {.sa_handler = on_interrupt};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	printf("overhead: %s", example);
	for (i = 1; i < np; i++)
		printf(" %s", plain[i]);
	printf(", %ld pairs, plain and under ampprof (", pairs);
	for (i = 0; i < nopts; i++)
		printf("%s ", prof_opts[i]);
	printf("%s), %s\n", nopts ? "and the other defaults" : "defaults: --nan-check=op, call sites",
	       sequential ? "one after the other" : "taking turns in 0.25 s slices");
	fflush(stdout);

	static char out_plain[OUT_MAX], out_prof[OUT_MAX];
	double step_ratio[MAX_PAIRS], loop_ratio[MAX_PAIRS], wall_ratio[MAX_PAIRS], cpu_ratio[MAX_PAIRS];
	int rc = 1;
	for (long p = 0; p < pairs; p++) {
		run runs[2] = {{.argv = plain, .out = out_plain},
		               {.argv = profiled, .out = out_prof, .profiled = 1}};
		int first = (int)(p % 2); /* plain first in even pairs, profiled first in odd */
		if (sequential) {
			if (run_alone(&runs[first]) != 0 || run_alone(&runs[!first]) != 0)
				goto out;
		} else if (run_sliced(&runs[first], &runs[!first]) != 0) {
			goto out;
		}
		double sps[2], step[2], cpu[2];
		for (int k = 0; k < 2; k++)
			if ((sps[k] = run_figures(&runs[k], &step[k], &cpu[k])) < 0)
				goto out;
		step_ratio[p] = step[0] / step[1];
		cpu_ratio[p] = cpu[1] / cpu[0];
		printf("  pair %ld: step %.0f vs %.0f samples/s (median), ratio %.3f; ", p + 1, step[0],
		       step[1], step_ratio[p]);
		if (sequential) {
			loop_ratio[p] = sps[0] / sps[1];
			wall_ratio[p] = runs[1].wall / runs[0].wall;
			printf("loop %.0f vs %.0f, ratio %.3f; wall %.2f vs %.2f s, ratio %.3f; ", sps[0],
			       sps[1], loop_ratio[p], runs[0].wall, runs[1].wall, wall_ratio[p]);
		}
		printf("cpu %.2f vs %.2f s, ratio %.3f\n", cpu[0], cpu[1], cpu_ratio[p]);
		fflush(stdout);
	}
	double med = median(step_ratio, (int)pairs);
	printf("overhead: step time under ampprof %.3fx the time without it (median step of each "
	       "run, median of %ld pairs), goal 1.03x: ratio %.2f (<= 1 meets it)\n", med, pairs,
	       med / 1.03);
	if (sequential) {
		printf("overhead: whole training loop %.3fx (the example's samples_per_sec; counts "
		       "every burst of other load)\n", median(loop_ratio, (int)pairs));
		printf("overhead: end-to-end wall %.3fx (median; counts data loading, evaluation, "
		       "ampprof's start-up, symbolization and finalize)\n",
		       median(wall_ratio, (int)pairs));
	}
	printf("overhead: cpu time of all processes %.3fx (median; counts data loading, "
	       "evaluation, ampprof's start-up, collection, symbolization and finalize)\n",
	       median(cpu_ratio, (int)pairs));
	rc = 0;
out:
	for (i = 0; i < 4; i++) {
		static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
		char f[80];
		snprintf(f, sizeof f, "%s%s", db, suffix[i]);
		unlink(f);
	}
	rmdir(dir);
	if (g_interrupted) {
		fprintf(stderr, "bench_overhead: interrupted\n");
		return 128 + g_interrupted;
	}
	return rc;
}
