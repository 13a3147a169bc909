/* amp_opt.h — the option table every ampkit tool parses its command line with and prints its
 * --help from: one row per option (names, value, help, default), getopt_long underneath.
 *
 * One grammar for all tools: `--name=<value>` or `--name <value>`, short aliases where a row
 * has one, and unambiguous prefixes of long names accepted everywhere (getopt_long's rule); an
 * ambiguous prefix is a usage error that names the candidates.  Depends on libc only, so that
 * ampprof, ampdump, ampview and the examples all link it.  Not thread-safe (getopt's globals).
 */
#ifndef AMP_OPT_H
#define AMP_OPT_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

/* The most rows one table may hold. */
#define AMP_OPT_MAX 64

/* Returned by amp_opt_next. */
enum {
	AMP_OPT_END = -1,   /* no more options; state->optind is the first operand */
	AMP_OPT_ERROR = -2, /* usage error, already printed on stderr (exit with AMP_OPT_EXIT_USAGE) */
};

/* Exit status of a usage error in every tool. */
#define AMP_OPT_EXIT_USAGE 2

/* One option.  A row with a NULL name is a section heading in --help (its help is the title)
 * and is not an option. */
typedef struct amp_opt {
	int id;           /* what amp_opt_next returns: the short letter, or a value >= 256 */
	int short_name;   /* 'o' for -o, or 0 */
	const char *name; /* long name without "--" */
	const char *arg;  /* value placeholder ("<file>"): the option takes a value; NULL: a flag */
	const char *help; /* one line, or lines separated by '\n' */
	const char *dflt; /* default shown in the defaults column, or NULL */
} amp_opt;

/* A command: its usage lines, its options, and the text of its --help. */
typedef struct amp_opt_spec {
	const char *tool;         /* "ampprof": prefix of every message */
	const char *const *usage; /* usage lines without "usage: ", NULL-terminated */
	const char *about;        /* paragraph after the usage lines in --help, or NULL */
	const amp_opt *opts;
	size_t n_opts;            /* at most AMP_OPT_MAX */
	const char *footer;       /* text after the option list in --help, or NULL */
	int in_order;             /* 1: options end at the first operand (`ampprof -- prog -x`);
	                             0: options and operands may be mixed */
} amp_opt_spec;

/* Parser state; lives on the caller's stack between amp_opt_begin and the last amp_opt_next. */
typedef struct amp_opt_state {
	const amp_opt_spec *spec;
	int argc;
	char **argv;
	int optind; /* after AMP_OPT_END: index in argv of the first operand */
	struct option longopts[AMP_OPT_MAX + 1];
	char shortopts[3 * AMP_OPT_MAX + 4];
} amp_opt_state;

/* Prepares to parse argv[1..argc) (argv[0] is the command's name) against spec, which must
 * outlive the parse.  Returns 0, or -1 if the table has more than AMP_OPT_MAX rows. */
int amp_opt_begin(amp_opt_state *st, const amp_opt_spec *spec, int argc, char **argv);

/* The next option: returns its row's id and sets *value to its value (NULL for a flag); or
 * AMP_OPT_END; or AMP_OPT_ERROR after printing "tool: unknown option '--x'" (or "needs a
 * value", "takes no value", "is ambiguous (--a, --b)"), the usage lines and a hint. */
int amp_opt_next(amp_opt_state *st, const char **value);

/* Prints the --help text of spec: usage lines, about, the options with their help aligned in
 * one column and their defaults in another, the footer. */
void amp_opt_help(const amp_opt_spec *spec, FILE *f);
/* Flushes standard output after --help or --version: 0, or 1 (a full disk, a closed pipe) with
 * "<tool>: cannot write to standard output: <reason>" on stderr. */
int amp_opt_stdout_done(const amp_opt_spec *spec);

/* Prints the usage lines of spec ("usage: ..." then "   or: ...") on f. */
void amp_opt_usage(const amp_opt_spec *spec, FILE *f);

/* Prints "tool: <message>", the usage lines, and "hint: <hint>" (or, with hint NULL, where the
 * help is) on stderr.  Returns AMP_OPT_EXIT_USAGE. */
int amp_opt_error(const amp_opt_spec *spec, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
