/* gen_profile.c — command-line front end of genprof: writes a synthetic ampkit profile for the
 * viewer's tests, goldens and bench.  `gen_profile --help` lists the knobs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp_events.h"
#include "genprof.h"
#include "profile_db.h"

static void usage(FILE *f)
{
	fputs(
	    "usage: gen_profile [<options>] --output=<file>\n"
	    "\n"
	    "    --output=<file>        profile to write\n"
	    "    --force                replace an existing file\n"
	    "    --ops=<n>              op rows (rounded to whole steps)   (2000)\n"
	    "    --steps=<n>            training steps                     (40)\n"
	    "    --fp16=<share>         half share of op time, 0..1         (0.85)\n"
	    "    --half=<dtype>         half type of the half ops: fp16|bf16 (fp16)\n"
	    "    --gemm-engine=<name>   engine of the half GEMMs            (fp32-fma)\n"
	    "    --cpu-features=<list>  meta cpu_half_features               (avx512_bf16)\n"
	    "    --cpu-vendor=<name>    meta cpu_vendor                      (AuthenticAMD)\n"
	    "    --mode=<mode>          meta precision_mode (force_fp16 with overflows,\n"
	    "                           else allow_mix_precision)\n"
	    "    --copy=<share>         copy share of step time, 0..1       (0.08)\n"
	    "    --overflows=<n>        steps with an overflow              (3)\n"
	    "    --growth=<n>           clean steps before the scale grows  (8)\n"
	    "    --origin=<op>          op type that overflows first        (Exp)\n"
	    "    --origin-site=<f:l>    its source file and line            (examples/model.c:88)\n"
	    "    --evil-label=<text>    label of blocks.0.fc1 (\\e is ESC, \\a is BEL)\n"
	    "    --command=<text>       meta command                        (./train --epochs 1)\n"
	    "    --source-dir=<dir>     write call-site files under dir (absolute paths)\n"
	    "    --crashed              the run died in its last step\n"
	    "    --unfinalized          the collector died: no summaries\n"
	    "    --empty                no steps at all\n"
	    "    --newer-schema         write a schema version this build does not know\n"
	    "    --fp16-threshold=<p>   meta threshold, percent             (70)\n"
	    "    --memcpy-threshold=<p> meta threshold, percent             (15)\n"
	    "    --seed=<n>             RNG seed                            (1)\n"
	    "    --quiet                print nothing on success\n"
	    "    --hold=<seconds>       write nothing: hold the output lock of the existing\n"
	    "                           profile (as its collector does while it records),\n"
	    "                           print 'held', and let go after <seconds> or SIGTERM\n",
	    f);
}

/* Turns the two-character escapes \e, \a, \n, \t, \\ into bytes, in place. */
static char *unescape(char *s)
{
	char *w = s;
	for (const char *r = s; *r; r++) {
		if (*r == '\\' && r[1]) {
			r++;
			*w++ = *r == 'e'   ? '\033'
			       : *r == 'a' ? '\a'
			       : *r == 'n' ? '\n'
			       : *r == 't' ? '\t'
			                   : *r;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
	return s;
}

static int num(const char *arg, const char *name, double *out)
{
	char *end;
	errno = 0;
	*out = strtod(arg, &end);
	if (errno || end == arg || *end) {
		fprintf(stderr, "gen_profile: bad value '%s' for --%s\n", arg, name);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	genprof_opts o;
	genprof_defaults(&o);
	char site_file[512];
	double hold = -1;
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		char *v = strchr(a, '=');
		double d = 0;
		if (v)
			*v++ = '\0';
#define OPT(name) (strcmp(a, "--" name) == 0)
#define NUM(name) (v && num(v, name, &d) == 0)
		if (OPT("help")) {
			usage(stdout);
			return 0;
		} else if (OPT("output") && v) {
			o.path = v;
		} else if (OPT("force")) {
			o.force = 1;
		} else if (OPT("ops") && NUM("ops") && d >= 1) {
			o.ops = (uint64_t)d;
		} else if (OPT("steps") && NUM("steps") && d >= 1) {
			o.steps = (int)d;
		} else if (OPT("fp16") && NUM("fp16")) {
			o.fp16_share = d;
		} else if (OPT("half") && v && (!strcmp(v, "fp16") || !strcmp(v, "bf16"))) {
			o.half_dtype = v;
		} else if (OPT("gemm-engine") && v && amp_engine_from_name(v) >= 0) {
			o.gemm_engine = v;
		} else if (OPT("cpu-features") && v) {
			o.cpu_features = v;
		} else if (OPT("cpu-vendor") && v) {
			o.cpu_vendor = v;
		} else if (OPT("mode") && v) {
			o.precision_mode = v;
		} else if (OPT("copy") && NUM("copy")) {
			o.copy_share = d;
		} else if (OPT("overflows") && NUM("overflows") && d >= 0) {
			o.overflow_steps = (int)d;
		} else if (OPT("growth") && NUM("growth") && d >= 1) {
			o.growth_interval = (int)d;
		} else if (OPT("origin") && v) {
			o.origin_op = v;
		} else if (OPT("origin-site") && v && strchr(v, ':')) {
			snprintf(site_file, sizeof site_file, "%s", v);
			char *colon = strrchr(site_file, ':');
			*colon = '\0';
			o.origin_file = site_file;
			o.origin_line = atoi(colon + 1);
		} else if (OPT("evil-label") && v) {
			o.evil_label = unescape(v);
		} else if (OPT("command") && v) {
			o.command = unescape(v);
		} else if (OPT("source-dir") && v && v[0] == '/') {
			o.source_dir = v;
		} else if (OPT("crashed")) {
			o.crashed = 1;
		} else if (OPT("unfinalized")) {
			o.unfinalized = 1;
		} else if (OPT("empty")) {
			o.empty = 1;
		} else if (OPT("newer-schema")) {
			o.newer_schema = 1;
		} else if (OPT("fp16-threshold") && NUM("fp16-threshold")) {
			o.fp16_threshold = d;
		} else if (OPT("memcpy-threshold") && NUM("memcpy-threshold")) {
			o.memcpy_threshold = d;
		} else if (OPT("seed") && NUM("seed")) {
			o.seed = (uint64_t)d;
		} else if (OPT("quiet")) {
			o.quiet = 1;
		} else if (OPT("hold") && NUM("hold") && d >= 0) {
			hold = d;
		} else {
			fprintf(stderr, "gen_profile: bad option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
#undef OPT
#undef NUM
	}
	if (!o.path) {
		fprintf(stderr, "gen_profile: --output is required\n");
		usage(stderr);
		return 2;
	}
	char err[512];
	if (hold >= 0) {
		sqlite3 *db;
		if (amp_profile_open(o.path, 1, &db, err, sizeof err) != AMP_PROFILE_OK) {
			fprintf(stderr, "gen_profile: %s\n", err);
			return 1;
		}
		printf("held\n");
		fflush(stdout);
		sleep((unsigned)hold);
		amp_profile_close(db);
		return 0;
	}
	uint64_t rows = 0;
	if (genprof_write(&o, &rows, err, sizeof err) != 0) {
		fprintf(stderr, "gen_profile: %s\n", err);
		return 1;
	}
	if (!o.quiet)
		fprintf(stderr, "gen_profile: wrote '%s' (%" PRIu64 " op rows, %d steps)\n", o.path,
		        rows, o.empty ? 0 : o.steps);
	return 0;
}
