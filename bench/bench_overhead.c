/* bench_overhead.c — step time of an example under ampprof (checks and statistics on, the
 * defaults) against the same run without it, the 1.03x goal of docs/ARCHITECTURE.md §10.
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
#define PAIRS_NAME "bench_overhead"
#include "pairs.h"

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
	char bindir[4112], ampprof[4200], prog[4200], db[64], dir[] = "/tmp/bench_overhead.XXXXXX",
	     steps_arg[32];
	if (pairs_bindir(bindir, sizeof bindir) != 0)
		return 1;
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
	pairs_signals();
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
