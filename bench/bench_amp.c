/* bench_amp.c — the training step of an example in a mixed-precision mode against the same
 * example in FP32, on one thread: the "AMP vs FP32 training step" figures of the design, held
 * against the goal of this machine's CPU class.
 *
 * For each example and mode, pairs of runs (fp32, mode) take turns on one CPU (pairs.h), and
 * the speed-up is the median over the pairs of the ratio of their median per-step throughput.
 * With --profiled both runs of a pair run under ampprof (defaults: checks, statistics, call
 * sites).  The memory figure is the example's param_act_peak_bytes (peak of FP32 masters, half
 * working copies and activations) of the mode against fp32's, from the JSON line it ends with.
 */
#define PAIRS_NAME "bench_amp"
#include "pairs.h"

#include <cpuid.h>

#include "kernels/kernels.h"

static const char usage[] =
    "usage: bench_amp [--examples=<a,b>] [--modes=<m,n>] [--pairs=<n>] [--steps=<n>]\n"
    "                 [--profiled]\n"
    "\n"
    "Training-step speed of an example in each mixed-precision mode against FP32 (one thread,\n"
    "pairs of runs taking turns on one CPU in 0.25 s slices), with the goal of the engines the\n"
    "examples run on (AMP_KERNELS, inherited by the examples, forces a path and so its goal).\n"
    "\n"
    "    --examples=<a,b>   examples in ../bin beside this program   (mlp_fashion,cnn_fashion)\n"
    "    --modes=<m,n>      their --precision values to hold against fp32   (bf16,amp)\n"
    "    --pairs=<n>        fp32/mode pairs per figure, 1..64        (3)\n"
    "    --steps=<n>        training steps per run                   (120)\n"
    "    --profiled         both runs of each pair under ampprof\n";

/* The CPU's half arithmetic (cpuid leaf 7), and the GEMM engines the runtime picks for the
 * half types on the path it will run (AMP_KERNELS, which the examples inherit, can force one
 * without the half engine): the goals follow the engines. */
typedef struct cpu_class {
	int amx_bf16, avx512_bf16, avx512_fp16;
	int intel; /* vdpbf16ps at half FP32 FMA's product rate: bf16 runs on FP32 FMA without AMX */
	amp_engine e_bf16, e_fp16;
} cpu_class;

static cpu_class detect_class(void)
{
	cpu_class c = {0, 0, 0, 0, AMP_ENGINE_NONE, AMP_ENGINE_NONE};
	amp_kernels_init();
	c.e_bf16 = amp_kernels_gemm_engine(AMP_BF16);
	c.e_fp16 = amp_kernels_gemm_engine(AMP_F16);
	unsigned a, b, cx, d, v[3];
	if (__get_cpuid(0, &a, &v[0], &v[2], &v[1]))
		c.intel = memcmp(v, "GenuineIntel", 12) == 0;
	if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid_count(7, 0, &a, &b, &cx, &d))
		return c;
	c.amx_bf16 = (d >> 22) & 1 && (d >> 24) & 1;
	c.avx512_fp16 = (d >> 23) & 1;
	if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &cx, &d))
		c.avx512_bf16 = a >> 5 & 1;
	return c;
}

/* The step speed-up goal of the figures of docs/ARCHITECTURE.md §10 for example/mode on this class, and its name. */
static double goal_of(const cpu_class *c, const char *example, const char *mode,
                      const char **why)
{
	int mlp = strcmp(example, "mlp_fashion") == 0, cnn = strcmp(example, "cnn_fashion") == 0;
	if (strcmp(mode, "bf16") == 0) {
		if (c->e_bf16 == AMP_ENGINE_AMX_BF16 && mlp)
			return *why = "amx-bf16 class", 2.5;
		if (c->e_bf16 == AMP_ENGINE_AMX_BF16 && cnn)
			return *why = "amx-bf16 class", 1.5;
		if (c->e_bf16 == AMP_ENGINE_AVX512_BF16 && (mlp || cnn))
			return *why = "avx512-bf16 class", 1.5;
		if (c->avx512_bf16 && !c->amx_bf16 && c->intel && (mlp || cnn))
			return *why = "avx512-bf16 class; out of reach on Intel cores, whose vdpbf16ps "
			              "is slower than FP32 FMA: bf16 runs on FP32 FMA",
			       1.5;
		return *why = "no bf16 arithmetic on this path: never slower", 1.0;
	}
	if (strcmp(mode, "amp") == 0 || strcmp(mode, "fp16") == 0) {
		if (c->e_fp16 == AMP_ENGINE_AVX512_FP16 && mlp)
			return *why = "avx512-fp16 class", 1.6;
		if (c->e_fp16 == AMP_ENGINE_AVX512_FP16 && cnn)
			return *why = "avx512-fp16 class", 1.4;
		return *why = "no fp16 arithmetic on this path: never slower", 1.0;
	}
	return *why = "no goal for this mode", 1.0;
}

/* Splits a comma list in place into items (at most max); returns their count. */
static int split_list(char *text, char **items, int max)
{
	int n = 0;
	for (char *p = strtok(text, ","); p && n < max; p = strtok(NULL, ","))
		items[n++] = p;
	return n;
}

typedef struct figure {
	double speedup, mem_ratio;
} figure;

/* Runs `pairs` pairs of example in fp32 and in mode; fills *f.  Returns 0, or -1. */
static int measure(const char *bindir, const char *example, const char *mode, long pairs,
                   long steps, int profiled, const char *db_a, const char *db_b, figure *f)
{
	char prog[4200], ampprof[4200], steps_arg[32], prec_a[] = "--precision=fp32",
	     prec_b[64];
	snprintf(prog, sizeof prog, "%s/%s", bindir, example);
	snprintf(ampprof, sizeof ampprof, "%s/ampprof", bindir);
	snprintf(steps_arg, sizeof steps_arg, "--steps=%ld", steps);
	snprintf(prec_b, sizeof prec_b, "--precision=%s", mode);
	if (access(prog, X_OK) != 0 || (profiled && access(ampprof, X_OK) != 0)) {
		fprintf(stderr, PAIRS_NAME ": cannot run '%s': %s\nhint: run 'make all' first\n",
		        access(prog, X_OK) != 0 ? prog : ampprof, strerror(errno));
		return -1;
	}
	/* [ampprof -q -f -o DB --] prog --precision=X --steps=N --json --log-every=1 */
	char *argv[2][16];
	char *prec[2] = {prec_a, prec_b};
	const char *db[2] = {db_a, db_b};
	for (int k = 0; k < 2; k++) {
		int n = 0;
		if (profiled) {
			argv[k][n++] = ampprof;
			argv[k][n++] = "-q";
			argv[k][n++] = "-f";
			argv[k][n++] = "-o";
			argv[k][n++] = (char *)db[k];
			argv[k][n++] = "--";
		}
		argv[k][n++] = prog;
		argv[k][n++] = prec[k];
		argv[k][n++] = steps_arg;
		argv[k][n++] = "--json";
		argv[k][n++] = "--log-every=1";
		argv[k][n] = NULL;
	}
	static char out_a[OUT_MAX], out_b[OUT_MAX];
	double ratio[MAX_PAIRS], mem[MAX_PAIRS];
	int nmem = 0;
	for (long p = 0; p < pairs; p++) {
		run runs[2] = {{.argv = argv[0], .out = out_a, .profiled = profiled},
		               {.argv = argv[1], .out = out_b, .profiled = profiled}};
		int first = (int)(p % 2); /* fp32 first in even pairs */
		if (run_sliced(&runs[first], &runs[!first]) != 0)
			return -1;
		double step[2], cpu[2];
		for (int k = 0; k < 2; k++)
			if (run_figures(&runs[k], &step[k], &cpu[k]) < 0)
				return -1;
		ratio[p] = step[1] / step[0];
		double ma = json_number(out_a, "param_act_peak_bytes"),
		       mb = json_number(out_b, "param_act_peak_bytes");
		if (ma > 0 && mb > 0)
			mem[nmem++] = mb / ma;
		printf("  %s pair %ld: fp32 %.0f, %s %.0f samples/s (median step), %.3fx\n", example,
		       p + 1, step[0], mode, step[1], ratio[p]);
		fflush(stdout);
	}
	f->speedup = median(ratio, (int)pairs);
	f->mem_ratio = nmem ? median(mem, nmem) : -1;
	return 0;
}

int main(int argc, char **argv)
{
	char examples_text[256] = "mlp_fashion,cnn_fashion", modes_text[256] = "bf16,amp";
	long pairs = 3, steps = 120;
	int profiled = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--examples=", 11) == 0 && a[11] && !strchr(a, '/')) {
			snprintf(examples_text, sizeof examples_text, "%s", a + 11);
		} else if (strncmp(a, "--modes=", 8) == 0 && a[8]) {
			snprintf(modes_text, sizeof modes_text, "%s", a + 8);
		} else if (strncmp(a, "--pairs=", 8) == 0 && parse_count(a + 8, 1, MAX_PAIRS, &pairs) == 0) {
		} else if (strncmp(a, "--steps=", 8) == 0 && parse_count(a + 8, 20, 1000000, &steps) == 0) {
		} else if (strcmp(a, "--profiled") == 0) {
			profiled = 1;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(usage, stdout);
			return 0;
		} else {
			fprintf(stderr, PAIRS_NAME ": invalid argument '%s'\n", a);
			fputs(usage, stderr);
			return 2;
		}
	}
	char *examples[8], *modes[8];
	int nex = split_list(examples_text, examples, 8), nmodes = split_list(modes_text, modes, 8);
	char bindir[4112], dir[] = "/tmp/bench_amp.XXXXXX", db_a[64], db_b[64];
	if (pairs_bindir(bindir, sizeof bindir) != 0)
		return 1;
	if (!mkdtemp(dir)) {
		fprintf(stderr, PAIRS_NAME ": cannot create a directory in /tmp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(db_a, sizeof db_a, "%s/a.db", dir);
	snprintf(db_b, sizeof db_b, "%s/b.db", dir);
	pick_cpus();
	pairs_signals();
	cpu_class c = detect_class();
	printf("amp: CPU half arithmetic: amx-bf16 %s, avx512-bf16 %s, avx512-fp16 %s; GEMM engines "
	       "bf16 %s, fp16 %s%s; one thread; %ld pairs of %ld steps%s\n",
	       c.amx_bf16 ? "yes" : "no", c.avx512_bf16 ? "yes" : "no", c.avx512_fp16 ? "yes" : "no",
	       amp_engine_name(c.e_bf16), amp_engine_name(c.e_fp16),
	       getenv("AMP_KERNELS") ? " (AMP_KERNELS forces the path)" : "", pairs, steps,
	       profiled ? ", both runs under ampprof" : "");
	fflush(stdout);
	int rc = 0;
	for (int e = 0; e < nex && rc == 0; e++)
		for (int m = 0; m < nmodes && rc == 0; m++) {
			figure f;
			if (measure(bindir, examples[e], modes[m], pairs, steps, profiled, db_a, db_b,
			            &f) != 0) {
				rc = 1;
				break;
			}
			const char *why;
			double goal = goal_of(&c, examples[e], modes[m], &why);
			printf("amp: %s %s step %.3fx the speed of fp32%s; goal >= %.2fx (%s): %s\n",
			       examples[e], modes[m], f.speedup, profiled ? " (both profiled)" : "", goal,
			       why, f.speedup >= goal ? "met" : "NOT met");
			/* the memory goal is the activation-heavy example's: in the MLP the FP32
			 * masters, which AMP keeps, outweigh the activations */
			int heavy = strcmp(examples[e], "cnn_fashion") == 0;
			if (f.mem_ratio > 0 && heavy)
				printf("amp: %s %s parameter + activation peak %.3fx fp32's; goal <= 0.65x "
				       "(activation-heavy example): %s\n", examples[e], modes[m], f.mem_ratio,
				       f.mem_ratio <= 0.65 ? "met" : "NOT met");
			else if (f.mem_ratio > 0)
				printf("amp: %s %s parameter + activation peak %.3fx fp32's (no goal: the "
				       "FP32 masters dominate)\n", examples[e], modes[m], f.mem_ratio);
			fflush(stdout);
		}
	for (int i = 0; i < 2; i++) {
		static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
		for (int k = 0; k < 4; k++) {
			char f[96];
			snprintf(f, sizeof f, "%s%s", i ? db_b : db_a, suffix[k]);
			unlink(f);
		}
	}
	rmdir(dir);
	if (g_interrupted) {
		fprintf(stderr, PAIRS_NAME ": interrupted\n");
		return 128 + g_interrupted;
	}
	return rc;
}
