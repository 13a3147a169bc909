/* bench_overhead.c — step time of an example under ampprof (checks and statistics on, the
 * defaults) against the same run without it, the 1.03x goal of DESIGN §7.
 *
 * Runs the example (../bin/<example> beside this binary's ../bench/) alternately plain and under
 * ../bin/ampprof, the order swapped every pair so drift on a shared machine hits both sides.
 * The step-time figure comes from the example's own output, so ampprof's start-up and finalize
 * are not counted in it: the median of its per-step throughput lines (--log-every=1), which
 * shrugs off the bursts of other load a shared machine has, and the throughput of the whole
 * training loop (samples_per_sec of its --json line).  The end-to-end wall and CPU ratios, which
 * count start-up, data loading, evaluation and finalize, are printed beside them.  All are
 * medians of the per-pair ratios.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, dirname helpers */
#endif
#include <errno.h>
#include <fcntl.h>
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

static const char usage[] =
    "usage: bench_overhead [--example=<name>] [--pairs=<n>] [--steps=<n>] [-- <example args>...]\n"
    "\n"
    "Median step-time ratio of an example under ampprof (defaults: checks and statistics on)\n"
    "against the same run without it, measured in pairs run alternately.\n"
    "\n"
    "    --example=<name>   example in ../bin beside this program   (mlp_fashion)\n"
    "    --pairs=<n>        plain/profiled pairs, 1..64              (5)\n"
    "    --steps=<n>        training steps per run                   (200)\n"
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

/* Median of the per-step throughputs of the progress lines ("step N ... R samples/s") in out,
 * or -1 if there are fewer than 5. */
static double step_median(const char *out)
{
	static double v[MAX_STEPS];
	int n = 0;
	for (const char *p = out; p && *p && n < MAX_STEPS; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
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

/* Runs argv with stdout captured (stderr to /dev/null) and returns the example's
 * samples_per_sec, or -1 on failure (message printed); *step is the median per-step
 * throughput, *wall the end-to-end time and *cpu the user + system time of the process and the
 * children it waited for. */
static double run_once(char *const argv[], double *step, double *wall, double *cpu)
{
	int fds[2];
	static char out[OUT_MAX];
	if (pipe2(fds, O_CLOEXEC) != 0) {
		fprintf(stderr, "bench_overhead: pipe: %s\n", strerror(errno));
		return -1;
	}
	double t0 = now_s();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "bench_overhead: fork: %s\n", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(fds[1], 1);
		if (null >= 0)
			dup2(null, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	size_t used = 0;
	for (;;) {
		ssize_t n = read(fds[0], out + used, used < OUT_MAX - 1 ? OUT_MAX - 1 - used : 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0 && used >= OUT_MAX - 1) {
				char sink[4096];
				while (read(fds[0], sink, sizeof sink) > 0)
					;
			}
			break;
		}
		used += (size_t)n;
	}
	out[used] = '\0';
	close(fds[0]);
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
		;
	*wall = now_s() - t0;
	*cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "bench_overhead: '%s' failed (status %d)\n", argv[0],
		        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		return -1;
	}
	double sps = json_number(out, "samples_per_sec");
	*step = step_median(out);
	if (!(sps > 0) || !(*step > 0)) {
		fprintf(stderr, "bench_overhead: no samples_per_sec (JSON line and progress lines) in "
		        "the output of '%s'\n", argv[0]);
		return -1;
	}
	return sps;
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
	int extra = argc, i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			extra = i + 1;
			break;
		} else if (strncmp(a, "--example=", 10) == 0 && a[10] && !strchr(a + 10, '/')) {
			example = a + 10;
		} else if (strncmp(a, "--pairs=", 8) == 0 && parse_count(a + 8, 1, MAX_PAIRS, &pairs) == 0) {
		} else if (strncmp(a, "--steps=", 8) == 0 && parse_count(a + 8, 1, 1000000, &steps) == 0) {
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

	/* plain: prog [extra | --precision=amp] --steps=N --json --log-every=0
	 * profiled: ampprof -q -f -o DB -- <plain> */
	char *plain[MAX_ARGS + 8], *profiled[MAX_ARGS + 16];
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
	profiled[nq++] = "--";
	for (i = 0; i <= np; i++)
		profiled[nq++] = plain[i];

	printf("overhead: %s", example);
	for (i = 1; i < np; i++)
		printf(" %s", plain[i]);
	printf(", %ld pairs, plain and under ampprof (defaults: --nan-check=op, call sites)\n", pairs);
	fflush(stdout);

	double step_ratio[MAX_PAIRS], loop_ratio[MAX_PAIRS], wall_ratio[MAX_PAIRS], cpu_ratio[MAX_PAIRS];
	int rc = 1;
	for (long p = 0; p < pairs; p++) {
		double sps[2], step[2], wall[2], cpu[2];
		for (int k = 0; k < 2; k++) {
			int prof = (int)((k + p) % 2); /* plain first in even pairs, profiled first in odd */
			sps[prof] = run_once(prof ? profiled : plain, &step[prof], &wall[prof], &cpu[prof]);
			if (sps[prof] < 0)
				goto out;
		}
		step_ratio[p] = step[0] / step[1];
		loop_ratio[p] = sps[0] / sps[1];
		wall_ratio[p] = wall[1] / wall[0];
		cpu_ratio[p] = cpu[1] / cpu[0];
		printf("  pair %ld: step %.0f vs %.0f samples/s (median), ratio %.3f; loop %.0f vs %.0f, "
		       "ratio %.3f; wall %.2f vs %.2f s, ratio %.3f; cpu %.2f vs %.2f s, ratio %.3f\n",
		       p + 1, step[0], step[1], step_ratio[p], sps[0], sps[1], loop_ratio[p], wall[0],
		       wall[1], wall_ratio[p], cpu[0], cpu[1], cpu_ratio[p]);
		fflush(stdout);
	}
	double med = median(step_ratio, (int)pairs);
	printf("overhead: step time under ampprof %.3fx the time without it (median step of each "
	       "run, median of %ld pairs), goal 1.03x: ratio %.2f (<= 1 meets it)\n", med, pairs,
	       med / 1.03);
	printf("overhead: whole training loop %.3fx (the example's samples_per_sec; counts every "
	       "burst of other load)\n", median(loop_ratio, (int)pairs));
	printf("overhead: end-to-end wall %.3fx, cpu time of all processes %.3fx (medians; they "
	       "count data loading, evaluation, ampprof's start-up, symbolization and finalize)\n",
	       median(wall_ratio, (int)pairs), median(cpu_ratio, (int)pairs));
	rc = 0;
out:
	for (i = 0; i < 4; i++) {
		static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
		char f[80];
		snprintf(f, sizeof f, "%s%s", db, suffix[i]);
		unlink(f);
	}
	rmdir(dir);
	return rc;
}
