/* test_opt.c — the option tables of schema/amp_opt.h: values in both spellings, short options,
 * unambiguous prefixes, the messages of every usage error (captured from stderr), operands in
 * and out of order, a second parse in one process, and the --help layout (one help column, one
 * defaults column). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp_opt.h"

enum { O_OUT = 'o', O_QUIET = 'q', O_STEPS = 256, O_STATS, O_DUMP, O_DUMP_LIMIT };

static const amp_opt rows[] = {
    {0, 0, NULL, NULL, "Output:", NULL},
    {O_OUT, 'o', "output", "<file>", "database to write", "profile.db"},
    {O_QUIET, 'q', "quiet", NULL, "no summary", NULL},
    {0, 0, NULL, NULL, "Tracing:", NULL},
    {O_STEPS, 0, "steps", "<range>", "steps traced in full\nsecond line", "all"},
    {O_STATS, 0, "stats-every", "<n>", "statistics every n steps", "1"},
    {O_DUMP, 0, "dump", "nonfinite|off", "dump tensors", "off"},
    {O_DUMP_LIMIT, 0, "dump-limit", "<size>", "total bytes of dumps", "256M"},
};
static const char *const usage[] = {"tool sub [<options>] <file>", "tool sub --help", NULL};
static const amp_opt_spec spec = {"tool", usage, "About the tool.", rows,
                                  sizeof rows / sizeof rows[0], "Footer.\n", 0};

/* Parses argv (NULL-terminated) into the ids and values seen; returns the last amp_opt_next
 * result and the messages printed on stderr in *err (malloc'd). */
typedef struct parsed {
	int ids[16], n, last, optind;
	const char *vals[16];
	char *err;
} parsed;

static parsed parse(const amp_opt_spec *sp, char **argv)
{
	parsed p = {.n = 0};
	int argc = 0;
	while (argv[argc])
		argc++;
	fflush(stderr);
	FILE *tmp = tmpfile();
	cr_assert_not_null(tmp);
	int saved = dup(2);
	dup2(fileno(tmp), 2);
	amp_opt_state st;
	cr_assert_eq(amp_opt_begin(&st, sp, argc, argv), 0);
	const char *v;
	int id;
	while ((id = amp_opt_next(&st, &v)) >= 0 && p.n < 16) {
		p.ids[p.n] = id;
		p.vals[p.n++] = v;
	}
	p.last = id;
	p.optind = st.optind;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	long len = ftell(tmp);
	rewind(tmp);
	p.err = calloc(1, (size_t)len + 1);
	cr_assert_eq(fread(p.err, 1, (size_t)len, tmp), (size_t)len);
	fclose(tmp);
	return p;
}

#define ARGV(...) ((char *[]){"tool", __VA_ARGS__, NULL})

Test(opt, values_in_both_spellings_short_options_and_prefixes)
{
	parsed p = parse(&spec, ARGV("--output=a.db", "-q", "--steps", "1-3", "-ob.db", "--stats=5",
	                             "file"));
	cr_assert_eq(p.last, AMP_OPT_END, "%s", p.err);
	cr_assert_eq(p.n, 5);
	cr_assert_eq(p.ids[0], O_OUT);
	cr_assert_str_eq(p.vals[0], "a.db");
	cr_assert_eq(p.ids[1], O_QUIET);
	cr_assert_null(p.vals[1]);
	cr_assert_eq(p.ids[2], O_STEPS);
	cr_assert_str_eq(p.vals[2], "1-3");
	cr_assert_str_eq(p.vals[3], "b.db");
	cr_assert_eq(p.ids[4], O_STATS, "--stats: a prefix of --stats-every only");
	cr_assert_str_eq(p.vals[4], "5");
	cr_assert_eq(p.optind, 7);
	cr_assert_str_empty(p.err);
	free(p.err);
}

Test(opt, an_exact_name_wins_over_longer_ones)
{
	parsed p = parse(&spec, ARGV("--dump=off", "--dump-l=1G"));
	cr_assert_eq(p.last, AMP_OPT_END, "%s", p.err);
	cr_assert_eq(p.ids[0], O_DUMP, "--dump is exact although --dump-limit starts with it");
	cr_assert_eq(p.ids[1], O_DUMP_LIMIT);
	free(p.err);
}

static void expect_error(char **argv, const char *message)
{
	parsed p = parse(&spec, argv);
	cr_assert_eq(p.last, AMP_OPT_ERROR);
	cr_assert(strstr(p.err, message), "want '%s' in:\n%s", message, p.err);
	cr_assert(strstr(p.err, "\nusage: tool sub [<options>] <file>\n   or: tool sub --help\n"),
	          "usage lines follow:\n%s", p.err);
	cr_assert(strstr(p.err, "hint: 'tool sub --help' describes every option\n"), "%s", p.err);
	free(p.err);
}

Test(opt, usage_errors_name_the_option)
{
	expect_error(ARGV("--du=1"), "tool: option '--du' is ambiguous (--dump, --dump-limit)\n");
	expect_error(ARGV("--bogus"), "tool: unknown option '--bogus'\n");
	expect_error(ARGV("--bogus=1"), "tool: unknown option '--bogus'\n");
	expect_error(ARGV("-x"), "tool: unknown option '-x'\n");
	expect_error(ARGV("--steps"), "tool: option '--steps' needs a value\n");
	expect_error(ARGV("-o"), "tool: option '-o' needs a value\n");
	expect_error(ARGV("--quiet=yes"), "tool: option '--quiet' takes no value\n");
	expect_error(ARGV("--qu=yes"), "tool: option '--quiet' takes no value\n");
}

Test(opt, operands_mixed_or_in_order)
{
	parsed p = parse(&spec, ARGV("a.db", "-q", "b.db"));
	cr_assert_eq(p.last, AMP_OPT_END);
	cr_assert_eq(p.n, 1, "options anywhere when in_order is 0");
	cr_assert_eq(p.optind, 2, "operands moved to the end");
	free(p.err);
	amp_opt_spec ordered = spec;
	ordered.in_order = 1;
	p = parse(&ordered, ARGV("-q", "--", "prog", "-q"));
	cr_assert_eq(p.n, 1, "nothing after -- is an option");
	cr_assert_eq(p.optind, 3);
	free(p.err);
	p = parse(&ordered, ARGV("-q", "prog", "-q"));
	cr_assert_eq(p.n, 1, "in order: options end at the first operand");
	cr_assert_eq(p.optind, 2);
	free(p.err);
}

Test(opt, a_second_parse_starts_afresh)
{
	parsed p = parse(&spec, ARGV("-q", "--output=x"));
	cr_assert_eq(p.n, 2);
	free(p.err);
	p = parse(&spec, ARGV("--steps=4"));
	cr_assert_eq(p.last, AMP_OPT_END);
	cr_assert_eq(p.n, 1);
	cr_assert_eq(p.ids[0], O_STEPS);
	free(p.err);
}

Test(opt, help_layout)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	amp_opt_help(&spec, f);
	fclose(f);
	cr_assert_str_eq(buf, "usage: tool sub [<options>] <file>\n"
	                      "   or: tool sub --help\n"
	                      "\n"
	                      "About the tool.\n"
	                      "\n"
	                      "Output:\n"
	                      "    -o, --output=<file>       database to write         (profile.db)\n"
	                      "    -q, --quiet               no summary\n"
	                      "\n"
	                      "Tracing:\n"
	                      "        --steps=<range>       steps traced in full      (all)\n"
	                      "                              second line\n"
	                      "        --stats-every=<n>     statistics every n steps  (1)\n"
	                      "        --dump=nonfinite|off  dump tensors              (off)\n"
	                      "        --dump-limit=<size>   total bytes of dumps      (256M)\n"
	                      "\n"
	                      "Footer.\n");
	free(buf);
}

Test(opt, too_many_rows_refused)
{
	static amp_opt many[AMP_OPT_MAX + 1];
	amp_opt_spec big = spec;
	big.opts = many;
	big.n_opts = AMP_OPT_MAX + 1;
	amp_opt_state st;
	char *argv[] = {"tool", NULL};
	cr_assert_eq(amp_opt_begin(&st, &big, 1, argv), -1);
}
