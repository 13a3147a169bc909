/* main.c — ampview: the interactive viewer of an ampkit profile, or with --headless one panel
 * rendered as plain text for scripts and golden tests.  Options are a table (amp_opt.h) that
 * also prints --help; usage errors exit 2, a file that cannot be shown exits 1, as does one
 * found damaged while it was shown.
 */
#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <langinfo.h>

#include "amp_opt.h"
#include "app.h"
#include "model.h"
#include "profile_db.h"
#include "screen.h"
#include "term.h"

#ifndef AMP_VERSION
#define AMP_VERSION "0.0.0"
#endif

#define KEYS_MAX 256

typedef struct options {
	const char *path;
	int headless, ascii, panel;
	int width, height;
	int width_set, height_set; /* given on the command line */
	const char *keys;
	const char *baseline; /* --diff */
	int panel_given;
	view_model_opts model;
} options;

enum {
	OPT_HEADLESS = 256,
	OPT_PANEL,
	OPT_WIDTH,
	OPT_HEIGHT,
	OPT_KEYS,
	OPT_ASCII,
	OPT_FP16,
	OPT_COPY,
	OPT_HELP,
	OPT_VERSION,
	OPT_DIFF
};

static const amp_opt option_table[] = {
    {OPT_HEADLESS, 0, "headless", NULL, "render one panel to stdout as text and exit", NULL},
    {OPT_PANEL, 0, "panel", "<name>", "overview ops steps scale anomalies callsites\n"
     "memory hist diff", "overview"},
    {OPT_DIFF, 0, "diff", "<a.db>", "diff mode: the profile's timings against baseline\n"
     "a.db (the diff panel, shown first)", NULL},
    {OPT_WIDTH, 0, "width", "<n>", "headless width in columns", "80"},
    {OPT_HEIGHT, 0, "height", "<n>", "headless height in rows", "24"},
    {OPT_KEYS, 0, "keys", "<keys>", "headless: keys pressed first: text, <enter> <esc> <down> ...",
     NULL},
    {OPT_ASCII, 0, "ascii", NULL, "draw with ASCII only (default: UTF-8 if the locale is)", NULL},
    {OPT_FP16, 0, "fp16-threshold", "<pct>", "flag an FP16 share below pct", "profile's, else 70"},
    {OPT_COPY, 0, "memcpy-threshold", "<pct>", "flag a copy share above pct",
     "profile's, else 15"},
    {OPT_HELP, 0, "help", NULL, "show this help", NULL},
    {OPT_VERSION, 0, "version", NULL, "show the version", NULL},
};

static const char *const usage_lines[] = {"ampview [<options>] [<profile.db>]",
                                          "ampview [<options>] --diff=<a.db> <b.db>", NULL};

static const amp_opt_spec spec = {
    .tool = "ampview",
    .usage = usage_lines,
    .about = "Shows an ampkit profile: overview, ops, steps, loss scale, anomalies, call sites,\n"
             "memory, exponent histograms, and with --diff its timings against another run.",
    .opts = option_table,
    .n_opts = sizeof option_table / sizeof option_table[0],
    .footer = "The profile defaults to profile.db.  Keys: ? in the viewer lists them.\n"
              "Long options may be abbreviated to any unambiguous prefix.\n"
              "Exit status: 0; 1 the profile cannot be shown, or was found damaged while it\n"
              "was (what was shown is incomplete); 2 usage error.\n",
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return amp_opt_error(&spec, NULL, "%s", msg);
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

static int parse_pct(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0 && v <= 100))
		return -1;
	*out = v;
	return 0;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, options *o)
{
	amp_opt_state st;
	const char *val;
	int id;
	amp_opt_begin(&st, &spec, argc, argv);
	while ((id = amp_opt_next(&st, &val)) != AMP_OPT_END) {
		switch (id) {
		case AMP_OPT_ERROR: return AMP_OPT_EXIT_USAGE;
		case OPT_HEADLESS: o->headless = 1; break;
		case OPT_ASCII: o->ascii = 1; break;
		case OPT_PANEL:
			o->panel = view_app_panel_by_name(val);
			o->panel_given = 1;
			if (o->panel < 0)
				return usage_error(
				    "unknown panel '%s' (overview, ops, steps, scale, anomalies, "
				    "callsites, memory, hist, diff)",
				    val);
			break;
		case OPT_DIFF: o->baseline = val; break;
		case OPT_WIDTH:
			if (parse_int(val, 40, 1000, &o->width))
				return usage_error("bad --width '%s' (40..1000)", val);
			o->width_set = 1;
			break;
		case OPT_HEIGHT:
			if (parse_int(val, 10, 1000, &o->height))
				return usage_error("bad --height '%s' (10..1000)", val);
			o->height_set = 1;
			break;
		case OPT_KEYS: o->keys = val; break;
		case OPT_FP16:
			if (parse_pct(val, &o->model.fp16_threshold))
				return usage_error(
				    "bad --fp16-threshold '%s' (a percentage, 0..100)", val);
			break;
		case OPT_COPY:
			if (parse_pct(val, &o->model.memcpy_threshold))
				return usage_error(
				    "bad --memcpy-threshold '%s' (a percentage, 0..100)", val);
			break;
		case OPT_HELP: amp_opt_help(&spec, stdout); return amp_opt_stdout_done(&spec);
		case OPT_VERSION:
			printf("ampview %s\n", AMP_VERSION);
			return amp_opt_stdout_done(&spec);
		default: return usage_error("unhandled option");
		}
	}
	for (int i = st.optind; i < argc; i++) {
		if (o->path)
			return usage_error("too many profiles: '%s'", argv[i]);
		o->path = argv[i];
	}
	/* the headless render's own options would be silently lost on the terminal */
	if (!o->headless && (o->keys || o->width_set || o->height_set))
		return usage_error("--%s is for --headless (the terminal's size is the screen's, "
		                   "and its keys are typed)",
		                   o->keys ? "keys" : o->width_set ? "width" : "height");
	return -1;
}

static int run_headless(view_app *app, const options *o)
{
	view_screen scr;
	int keys[KEYS_MAX], nkeys = 0;
	if (o->keys && (nkeys = view_keys_parse(o->keys, keys, KEYS_MAX)) < 0) {
		fprintf(stderr, "ampview: bad --keys '%s': unknown <name>\n", o->keys);
		return 2;
	}
	if (view_screen_init(&scr, o->width, o->height) != 0) {
		fprintf(stderr, "ampview: out of memory\n");
		return 1;
	}
	/* each key acts on the frame drawn before it, as in the terminal */
	view_app_draw(app, &scr);
	for (int i = 0; i < nkeys; i++) {
		if (view_app_key(app, keys[i]) & VIEW_F_QUIT)
			break;
		view_app_draw(app, &scr);
	}
	int utf8 = !o->ascii && !strcmp(nl_langinfo(CODESET), "UTF-8");
	view_screen_write(&scr, stdout, utf8);
	view_screen_release(&scr);
	return fflush(stdout) == 0 ? 0 : 1;
}

static int run_terminal(view_app *app, const options *o)
{
	char err[256];
	view_screen scr = {0, 0, NULL};
	if (view_term_init(o->ascii, err, sizeof err) != 0) {
		fprintf(stderr, "ampview: %s\nhint: use --headless to print a panel as text\n",
		        err);
		return 1;
	}
	int rc = 0;
	for (;;) {
		int w, h;
		view_term_size(&w, &h);
		if ((w != scr.w || h != scr.h) && view_screen_resize(&scr, w, h) != 0) {
			rc = 1;
			break;
		}
		view_app_draw(app, &scr);
		view_term_draw(&scr);
		int k = view_term_key();
		if (k < 0)
			break;
		if (k > 0 && (view_app_key(app, k) & VIEW_F_QUIT))
			break;
	}
	view_term_end();
	view_screen_release(&scr);
	if (rc)
		fprintf(stderr, "ampview: out of memory\n");
	return rc;
}

int main(int argc, char **argv)
{
	options o = {.width = 80, .height = 24, .model = {-1, -1}};
	setlocale(LC_ALL, "");
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (!o.path)
		o.path = "profile.db";

	view_model *m = NULL;
	char err[1024];
	int mrc = view_model_open(o.path, &o.model, &m, err, sizeof err);
	if (mrc != VIEW_OK) {
		fprintf(stderr, "ampview: %s\n", err);
		if (strstr(err, "no such file"))
			fprintf(stderr, "hint: record one with: ampprof --output=%s -- ./train\n",
			        o.path);
		else if (strstr(err, "newer"))
			fprintf(stderr,
			        "hint: this ampview is %s; open the profile with a newer ampkit\n",
			        AMP_VERSION);
		else if (mrc == VIEW_EEMPTY)
			fprintf(stderr, "hint: 'ampprof report %s' shows how the run ended\n",
			        o.path);
		return 1;
	}
	if (o.baseline) { /* a baseline that cannot be read is said before the screen opens */
		sqlite3 *base = NULL;
		if (amp_profile_open(o.baseline, 0, &base, err, sizeof err) != AMP_PROFILE_OK) {
			fprintf(stderr, "ampview: --diff: %s\n", err);
			view_model_free(m);
			return 1;
		}
		amp_profile_close(base);
	}
	view_app *app = view_app_new(m, o.baseline);
	if (!app) {
		view_model_free(m);
		fprintf(stderr, "ampview: out of memory\n");
		return 1;
	}
	view_app_show(app, o.baseline && !o.panel_given ? view_app_panel_by_name("diff") : o.panel);
	rc = o.headless ? run_headless(app, &o) : run_terminal(app, &o);
	if (view_model_damaged(m)) {
		/* after the terminal is restored, so that the message stays on the screen */
		fprintf(stderr, "ampview: '%s' is damaged (%s): what was shown is incomplete\n"
		        "hint: the file was cut short or damaged; record the run again\n",
		        o.path, view_model_error(m));
		rc = 1;
	}
	view_app_free(app);
	view_model_free(m);
	return rc;
}
