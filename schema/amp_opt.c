/* amp_opt.c — option tables (see amp_opt.h): the getopt_long tables built from the rows, the
 * messages of a bad command line, and --help laid out from the same rows.
 *
 * getopt_long keeps its state in globals; amp_opt_begin resets them (optind = 0 makes glibc
 * start afresh), so one process may parse a command and then a subcommand.
 */
#include "amp_opt.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

int amp_opt_begin(amp_opt_state *st, const amp_opt_spec *spec, int argc, char **argv)
{
	memset(st, 0, sizeof *st);
	if (spec->n_opts > AMP_OPT_MAX)
		return -1;
	st->spec = spec;
	st->argc = argc;
	st->argv = argv;
	/* '+': stop at the first operand; ':': report a missing value as ':' */
	size_t k = 0, n = 0;
	if (spec->in_order)
		st->shortopts[k++] = '+';
	st->shortopts[k++] = ':';
	for (size_t i = 0; i < spec->n_opts; i++) {
		const amp_opt *o = &spec->opts[i];
		if (!o->name)
			continue;
		st->longopts[n++] = (struct option){o->name, o->arg ? required_argument : no_argument,
		                                    NULL, o->id};
		if (o->short_name) {
			st->shortopts[k++] = (char)o->short_name;
			if (o->arg)
				st->shortopts[k++] = ':';
		}
	}
	st->shortopts[k] = '\0';
	st->longopts[n] = (struct option){NULL, 0, NULL, 0};
	optind = 0;
	opterr = 0;
	return 0;
}

void amp_opt_usage(const amp_opt_spec *spec, FILE *f)
{
	for (size_t i = 0; spec->usage && spec->usage[i]; i++)
		fprintf(f, "%s%s\n", i ? "   or: " : "usage: ", spec->usage[i]);
}

/* "ampprof export" from the first usage line: the command's name for the help hint. */
static void command_name(const amp_opt_spec *spec, char *buf, size_t len)
{
	const char *u = spec->usage && spec->usage[0] ? spec->usage[0] : spec->tool;
	size_t n = 0;
	/* the words before the first placeholder or option */
	for (const char *p = u; *p && *p != '[' && *p != '<' && *p != '-' && n + 1 < len; p++)
		buf[n++] = *p;
	while (n && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
}

static int verror(const amp_opt_spec *spec, const char *hint, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", spec->tool);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	amp_opt_usage(spec, stderr);
	if (hint) {
		fprintf(stderr, "hint: %s\n", hint);
	} else {
		char cmd[128];
		command_name(spec, cmd, sizeof cmd);
		fprintf(stderr, "hint: '%s --help' describes every option\n", cmd);
	}
	return AMP_OPT_EXIT_USAGE;
}

int amp_opt_error(const amp_opt_spec *spec, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(spec, hint, fmt, ap);
	va_end(ap);
	return AMP_OPT_EXIT_USAGE;
}

static int fail(const amp_opt_spec *spec, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(const amp_opt_spec *spec, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(spec, NULL, fmt, ap);
	va_end(ap);
	return AMP_OPT_ERROR;
}

static const amp_opt *row_of_id(const amp_opt_spec *spec, int id)
{
	for (size_t i = 0; i < spec->n_opts; i++)
		if (spec->opts[i].name && spec->opts[i].id == id)
			return &spec->opts[i];
	return NULL;
}

/* The message for a long option getopt refused: unknown, or an ambiguous prefix. */
static int bad_long(const amp_opt_spec *spec, const char *arg)
{
	const char *name = arg + 2, *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	char list[512];
	size_t used = 0;
	int matches = 0;
	list[0] = '\0';
	for (size_t i = 0; i < spec->n_opts; i++) {
		const amp_opt *o = &spec->opts[i];
		if (!o->name || strncmp(o->name, name, len) != 0)
			continue;
		int n = snprintf(list + used, sizeof list - used, "%s--%s", matches ? ", " : "",
		                 o->name);
		if (n > 0 && (size_t)n < sizeof list - used)
			used += (size_t)n;
		matches++;
	}
	if (matches > 1)
		return fail(spec, "option '--%.*s' is ambiguous (%s)", (int)len, name, list);
	return fail(spec, "unknown option '--%.*s'", (int)len, name);
}

int amp_opt_next(amp_opt_state *st, const char **value)
{
	const amp_opt_spec *spec = st->spec;
	*value = NULL;
	int c = getopt_long(st->argc, st->argv, st->shortopts, st->longopts, NULL);
	/* the argument getopt just looked at (the last one it consumed) */
	const char *arg = optind > 0 && optind <= st->argc ? st->argv[optind - 1] : "";
	st->optind = optind;
	if (c == -1)
		return AMP_OPT_END;
	if (c == ':') {
		const amp_opt *o = row_of_id(spec, optopt);
		if (o && strncmp(arg, "--", 2) == 0)
			return fail(spec, "option '--%s' needs a value", o->name);
		return fail(spec, "option '-%c' needs a value", optopt);
	}
	if (c == '?') {
		if (strncmp(arg, "--", 2) == 0) {
			const amp_opt *o = optopt ? row_of_id(spec, optopt) : NULL;
			if (o)
				return fail(spec, "option '--%s' takes no value", o->name);
			return bad_long(spec, arg);
		}
		if (optopt > 0 && optopt < 256)
			return fail(spec, "unknown option '-%c'", optopt);
		return fail(spec, "unknown option '%s'", arg);
	}
	*value = optarg;
	return c;
}

/* ---- --help -------------------------------------------------------------------------------- */

static size_t left_text(const amp_opt *o, int any_short, char *buf, size_t len)
{
	int n;
	if (o->short_name)
		n = snprintf(buf, len, "-%c, --%s%s%s", o->short_name, o->name, o->arg ? "=" : "",
		             o->arg ? o->arg : "");
	else
		n = snprintf(buf, len, "%s--%s%s%s", any_short ? "    " : "", o->name,
		             o->arg ? "=" : "", o->arg ? o->arg : "");
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

static size_t first_line_len(const char *s)
{
	return s ? strcspn(s, "\n") : 0;
}

/* Widest left column shown before the help moves under a long option. */
#define LEFT_MAX 28
/* Widest help column before the default goes right after the text. */
#define HELP_MAX 46

int amp_opt_stdout_done(const amp_opt_spec *spec)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	int e = errno;
	fprintf(stderr, "%s: cannot write to standard output: %s\n", spec->tool,
	        e ? strerror(e) : "write error");
	return 1;
}

void amp_opt_help(const amp_opt_spec *spec, FILE *f)
{
	amp_opt_usage(spec, f);
	if (spec->about)
		fprintf(f, "\n%s\n", spec->about);
	int any_short = 0;
	size_t lw = 0, hw = 0;
	char left[160];
	for (size_t i = 0; i < spec->n_opts; i++)
		any_short |= spec->opts[i].name && spec->opts[i].short_name;
	for (size_t i = 0; i < spec->n_opts; i++) {
		const amp_opt *o = &spec->opts[i];
		if (!o->name)
			continue;
		size_t n = left_text(o, any_short, left, sizeof left);
		if (n > lw && n <= LEFT_MAX)
			lw = n;
		size_t h = first_line_len(o->help);
		if (o->dflt && h > hw && h <= HELP_MAX)
			hw = h;
	}
	fputc('\n', f);
	for (size_t i = 0; i < spec->n_opts; i++) {
		const amp_opt *o = &spec->opts[i];
		if (!o->name) {
			fprintf(f, "%s%s\n", i ? "\n" : "", o->help);
			continue;
		}
		size_t n = left_text(o, any_short, left, sizeof left);
		fprintf(f, "    %s", left);
		if (n > lw)
			fprintf(f, "\n    %*s", (int)lw, "");
		else
			fprintf(f, "%*s", (int)(lw - n), "");
		const char *h = o->help ? o->help : "";
		size_t h1 = first_line_len(h);
		fprintf(f, "  %.*s", (int)h1, h);
		if (o->dflt)
			fprintf(f, "%*s  (%s)", h1 < hw ? (int)(hw - h1) : 0, "", o->dflt);
		fputc('\n', f);
		for (h += h1; *h == '\n';) {
			h++;
			size_t k = first_line_len(h);
			fprintf(f, "    %*s  %.*s\n", (int)lw, "", (int)k, h);
			h += k;
		}
	}
	if (spec->footer)
		fprintf(f, "\n%s", spec->footer);
}
