/* rerun.c — `ampdump --application=CMD --step N --output=DB`: re-runs the program under
 * ampprof's collector with step N dumped in full, then lists what was dumped.
 *
 * Nothing of the collector is duplicated: this fills a prof_options and calls libampprof's
 * prof_run, the same entry point as `ampprof --dump-steps=N --steps=N`.  Training is
 * deterministic (docs/ARCHITECTURE.md §6), so the re-run reaches the same state at step N.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../profiler/prof.h"
#include "dump.h"
#include "profile_db.h"

int dump_cmd_rerun(const dump_rerun_opts *ro, FILE *out)
{
	prof_options po;
	char step_text[32];

	prof_signals_save(); /* the application inherits ampdump's ignored signals, as ampprof's */
	memset(&po, 0, sizeof po);
	snprintf(step_text, sizeof step_text, "%lld", (long long)ro->step);
	/* ampprof's documented defaults, then what this command changes */
	po.application = ro->application;
	po.output = ro->output;
	po.force = ro->force;
	po.quiet = !ro->verbose;
	po.callstack = 1;
	po.nan_check = AMP_NAN_CHECK_OP;
	po.dump = AMP_DUMP_OFF;
	po.dump_limit = (uint64_t)1 << 30;
	po.fp16_threshold = 70.0;
	po.memcpy_threshold = 15.0;
	po.ring_slots = 32768;
	po.ring_count = 64;
	po.n_dump_steps = 1;
	po.dump_steps[0].lo = po.dump_steps[0].hi = ro->step;
	po.dump_steps_text = step_text;
	/* trace only that step in detail: its ops give the labels and call sites */
	po.n_steps = 1;
	po.steps[0].lo = po.steps[0].hi = ro->step;
	po.steps_text = step_text;

	fprintf(stderr, "ampdump: running %s with step %lld dumped in full into '%s'\n",
	        ro->application, (long long)ro->step, ro->output);
	struct stat before, after;
	int existed = stat(ro->output, &before) == 0;
	/* the program's own output goes to stderr: stdout is ampdump's table (JSON, CSV) */
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	if (saved >= 0)
		dup2(STDERR_FILENO, STDOUT_FILENO);
	int status = prof_run(&po);
	fflush(stdout);
	if (saved >= 0) {
		dup2(saved, STDOUT_FILENO);
		close(saved);
	}

	/* ampprof printed why it failed; a database it did not (re)write is not this run's */
	if (stat(ro->output, &after) != 0 ||
	    (existed && after.st_ino == before.st_ino && after.st_dev == before.st_dev &&
	     after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
	     after.st_mtim.tv_nsec == before.st_mtim.tv_nsec)) {
		dump_error(NULL, "the re-run wrote no profile (ampprof status %d)", status);
		return DUMP_EXIT_FAIL;
	}
	sqlite3 *db = NULL;
	char err[1200];
	if (amp_profile_open(ro->output, 0, &db, err, sizeof err) != AMP_PROFILE_OK) {
		if (status == 0)
			dump_error(NULL, "%s", err);
		return DUMP_EXIT_FAIL;
	}
	int code = dump_check_step(db, ro->output, ro->step);
	/* an unreadable count is reported as no dump too */
	if (code == DUMP_EXIT_OK && dump_count_dumps(db, ro->step) <= 0) {
		dump_error("check that the program's libamprt supports dumps "
		           "(ampprof --dump-steps)",
		           "the re-run reached step %lld but dumped nothing there",
		           (long long)ro->step);
		code = DUMP_EXIT_FAIL;
	}
	amp_profile_close(db);
	if (code != DUMP_EXIT_OK)
		return code;
	if (status != 0)
		fprintf(stderr,
		        "ampdump: note: the run ended with status %d; step %lld was dumped "
		        "before that\n",
		        status, (long long)ro->step);
	return dump_cmd_step(ro->output, ro->step, ro->fmt, out);
}
