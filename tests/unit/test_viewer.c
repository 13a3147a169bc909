/* test_viewer.c — ampview's modules without a terminal: sanitizing, the in-memory screen, the
 * figures, key parsing, the model on generated profiles (including bad ones) and the panels
 * driven through the app into a screen. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "app.h"
#include "fmt.h"
#include "genprof.h"
#include "model.h"
#include "profile_db.h"
#include "panel.h"
#include "profile_db.h"
#include "sanitize.h"
#include "screen.h"

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/test_viewer.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/* Writes a small profile named name in dir with the options set by tweak. */
static const char *make_profile(const char *name, void (*tweak)(genprof_opts *))
{
	static char path[4][128];
	static int next;
	char *p = path[next++ % 4];
	char err[256];
	genprof_opts o;
	genprof_defaults(&o);
	snprintf(p, 128, "%s/%s", dir, name);
	o.path = p;
	o.ops = 600;
	o.steps = 12;
	o.quiet = 1;
	if (tweak)
		tweak(&o);
	cr_assert_eq(genprof_write(&o, NULL, err, sizeof err), 0, "%s", err);
	return p;
}

/* ---- sanitize ------------------------------------------------------------------------------- */
Test(sanitize, controls_and_escapes_become_question_marks)
{
	char out[64];
	view_sanitize("a\033[31mb\a\tc\x7f", out, sizeof out);
	cr_assert_str_eq(out, "a?[31mb?\?c?");
	view_sanitize("x\xc2\x9b"
	              "31my",
	              out, sizeof out); /* C1 CSI */
	cr_assert_str_eq(out, "x?31my");
	view_sanitize("bidi\xe2\x80\xaeok", out, sizeof out); /* U+202E right-to-left override */
	cr_assert_str_eq(out, "bidi?ok");
}

Test(sanitize, invalid_utf8_and_zero_width)
{
	char out[64];
	view_sanitize("\xff\xc3(\xe2\x82", out, sizeof out);
	cr_assert_str_eq(out, "?\?(?\?");
	view_sanitize("a\xe2\x80\x8b"
	              "b",
	              out, sizeof out); /* zero-width space dropped */
	cr_assert_str_eq(out, "ab");
	view_sanitize("\xc0\xaf", out, sizeof out); /* overlong '/' */
	cr_assert_str_eq(out, "?\?");
}

Test(sanitize, widths_and_truncation)
{
	char out[8];
	cr_assert_eq(view_text_width("h\xc3\xa9llo"), 5);
	cr_assert_eq(view_text_width("\xe6\xbc\xa2\xe5\xad\x97"), 4); /* two CJK ideographs */
	/* never cuts a sequence: 3 x 3 bytes do not fit in 8 */
	view_sanitize("\xe6\xbc\xa2\xe5\xad\x97\xe6\xbc\xa2", out, sizeof out);
	cr_assert_str_eq(out, "\xe6\xbc\xa2\xe5\xad\x97");
}

/* ---- screen --------------------------------------------------------------------------------- */
static char *render(const view_screen *s, int utf8)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert_not_null(f);
	view_screen_write(s, f, utf8);
	fclose(f);
	return buf;
}

Test(screen, puts_clips_with_an_ellipsis_and_never_stores_controls)
{
	view_screen s;
	cr_assert_eq(view_screen_init(&s, 10, 2), 0);
	cr_assert_eq(view_screen_puts(&s, 0, 0, 6, VIEW_S_NORMAL, 0, "abcdefghij"), 6);
	cr_assert_eq(view_screen_puts(&s, 0, 1, -1, VIEW_S_BAD, 0, "\033]0;x\a"), 6);
	for (int i = 0; i < s.w * s.h; i++)
		cr_assert(s.cells[i].ch >= 0x20 && s.cells[i].ch != 0x7f, "cell %d holds %u", i,
		          s.cells[i].ch);
	char *text = render(&s, 0);
	cr_assert_str_eq(text, "abcde~\n?]0;x?\n");
	free(text);
	view_screen_release(&s);
}

Test(screen, wide_characters_take_two_cells)
{
	view_screen s;
	cr_assert_eq(view_screen_init(&s, 5, 1), 0);
	/* 漢字 then x: 2 + 2 + 1 columns */
	cr_assert_eq(view_screen_puts(&s, 0, 0, -1, 0, 0, "\xe6\xbc\xa2\xe5\xad\x97x"), 5);
	cr_assert_eq(s.cells[1].ch, 0u);
	char *text = render(&s, 1);
	cr_assert_str_eq(text, "\xe6\xbc\xa2\xe5\xad\x97x\n");
	free(text);
	/* overwriting the right half blanks the left one */
	view_screen_putc(&s, 1, 0, 'y', 0, 0);
	cr_assert_eq(s.cells[0].ch, (uint32_t)' ');
	view_screen_release(&s);
}

Test(screen, ascii_fallback_glyphs)
{
	view_screen s;
	cr_assert_eq(view_screen_init(&s, 6, 1), 0);
	uint32_t g[6] = {VIEW_G_FULL,  VIEW_G_DARK,  VIEW_G_MEDIUM,
	                 VIEW_G_LIGHT, VIEW_G_VLINE, 0x00e9};
	for (int i = 0; i < 6; i++)
		view_screen_putc(&s, i, 0, g[i], 0, 0);
	char *text = render(&s, 0);
	cr_assert_str_eq(text, "#=~.|?\n");
	free(text);
	view_screen_release(&s);
}

Test(panel, wrapped_text_breaks_at_blanks_and_newlines)
{
	view_screen s;
	cr_assert_eq(view_screen_init(&s, 12, 5), 0);
	const char *text = "add it to custom_black_list = Exp\nsecond";
	cr_assert_eq(view_draw_wrapped(NULL, 0, 0, 12, 0, 0, 0, text), 4);
	/* only the rows before end are drawn, the count stays the whole text's */
	cr_assert_eq(view_draw_wrapped(&s, 0, 1, 12, 4, 0, 0, text), 4);
	char *out = render(&s, 0);
	cr_assert_str_eq(out, "\nadd it to\ncustom_black\n_list = Exp\n\n");
	free(out);
	cr_assert_eq(view_draw_wrapped(NULL, 0, 0, 12, 0, 0, 0, ""), 1);
	view_screen_release(&s);
}

/* ---- fmt and keys --------------------------------------------------------------------------- */
Test(fmt, durations_counts_scales)
{
	char b[32];
	cr_assert_str_eq(view_fmt_ns(812, b, sizeof b), "812 ns");
	cr_assert_str_eq(view_fmt_ns(45210, b, sizeof b), "45.2 us");
	cr_assert_str_eq(view_fmt_ns(3070000, b, sizeof b), "3.07 ms");
	cr_assert_str_eq(view_fmt_ns(12400000000LL, b, sizeof b), "12.4 s");
	cr_assert_str_eq(view_fmt_ns(-1, b, sizeof b), "-");
	cr_assert_str_eq(view_fmt_count(999, b, sizeof b), "999");
	cr_assert_str_eq(view_fmt_count(10000000, b, sizeof b), "10.0M");
	cr_assert_str_eq(view_fmt_scale(65536, b, sizeof b), "65536");
	cr_assert_str_eq(view_fmt_scale(0.5, b, sizeof b), "0.5");
	cr_assert_str_eq(view_fmt_scale(NAN, b, sizeof b), "-", "an unknown scale is '-', never nan");
	cr_assert_str_eq(view_fmt_bytes(1536, b, sizeof b), "1.50 KiB");
}

Test(keys, parse_names_and_characters)
{
	int k[8];
	cr_assert_eq(view_keys_parse("4<enter><esc>q", k, 8), 4);
	cr_assert_eq(k[0], '4');
	cr_assert_eq(k[1], VIEW_KEY_ENTER);
	cr_assert_eq(k[2], VIEW_KEY_ESC);
	cr_assert_eq(k[3], 'q');
	cr_assert_eq(view_keys_parse("<nope>", k, 8), -1);
}

/* Filters take UTF-8 text (labels are UTF-8), byte by byte as getch gives it, and backspace
 * takes back a whole character; a digits-only prompt takes none of it. */
Test(keys, prompt_takes_utf8_and_backspaces_whole_characters)
{
	char buf[32] = "";
	const char *in = "a\xe5\x90\x8d\xc3\xa9"; /* a 名 é */
	for (const char *p = in; *p; p++)
		cr_assert_eq(view_prompt_key(buf, sizeof buf, (unsigned char)*p, 0), 0);
	cr_assert_str_eq(buf, in);
	view_prompt_key(buf, sizeof buf, VIEW_KEY_BACKSPACE, 0);
	cr_assert_str_eq(buf, "a\xe5\x90\x8d");
	view_prompt_key(buf, sizeof buf, VIEW_KEY_BACKSPACE, 0);
	cr_assert_str_eq(buf, "a");
	char num[8] = "";
	view_prompt_key(num, sizeof num, 0xc3, 1);
	view_prompt_key(num, sizeof num, '7', 1);
	cr_assert_str_eq(num, "7");
}

/* ---- model ---------------------------------------------------------------------------------- */
static void newer(genprof_opts *o)
{
	o->newer_schema = 1;
}
static void empty(genprof_opts *o)
{
	o->empty = 1;
}
static void unfinalized(genprof_opts *o)
{
	o->unfinalized = 1;
}
static void crashed(genprof_opts *o)
{
	o->crashed = 1;
}
static void low(genprof_opts *o)
{
	o->fp16_share = 0.5;
	o->copy_share = 0.25;
}

Test(model, refuses_bad_files_with_clear_messages, .init = setup, .fini = teardown)
{
	view_model *m = (view_model *)1;
	char err[512], path[128];
	snprintf(path, sizeof path, "%s/missing.db", dir);
	cr_assert_eq(view_model_open(path, NULL, &m, err, sizeof err), VIEW_EOPEN);
	cr_assert_null(m);
	cr_assert(strstr(err, "cannot open") && strstr(err, "no such file"), "%s", err);
	snprintf(path, sizeof path, "%s/text.db", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("hello, this is not a database at all, but it is long enough to have a header..."
	      "................................\n",
	      f);
	fclose(f);
	cr_assert_eq(view_model_open(path, NULL, &m, err, sizeof err), VIEW_EOPEN);
	cr_assert(strstr(err, "not an ampkit profile"), "%s", err);
	cr_assert_eq(view_model_open(make_profile("newer.db", newer), NULL, &m, err, sizeof err),
	             VIEW_EOPEN);
	cr_assert(strstr(err, "newer"), "%s", err);
	cr_assert_eq(view_model_open(make_profile("empty.db", empty), NULL, &m, err, sizeof err),
	             VIEW_EEMPTY);
	cr_assert(strstr(err, "no steps"), "%s", err);
}

/* Runs sql on the profile at path (a test's hostile edit). */
static void edit_profile(const char *path, const char *sql)
{
	sqlite3 *db;
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	char *msg = NULL;
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s", msg);
	sqlite3_close(db);
}

/* The first and last steps at the ends of int64, every tensor count at its top. */
#define HOSTILE_SQL                                                                            \
	"UPDATE steps SET step = -9223372036854775807 - 1 WHERE step = 0;"                        \
	"UPDATE steps SET step = 9223372036854775807 WHERE step = 11;"                            \
	"UPDATE tensor_stats SET count = 9223372036854775807, underflow = 9223372036854775807, "  \
	"near_overflow = 9223372036854775807;"

/* Step numbers and counts at the ends of int64: the chart's buckets and the headroom sums
 * must neither overflow (UBSan in `make asan` traps it) nor lose a step. */
Test(model, hostile_step_values_and_counts_do_not_overflow, .init = setup, .fini = teardown)
{
	const char *p = make_profile("hostile.db", NULL);
	edit_profile(p, HOSTILE_SQL);
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(p, NULL, &m, err, sizeof err), VIEW_OK, "%s", err);
	view_scale_bucket b[40];
	long n = view_model_scale_buckets(m, b, 40);
	cr_assert_eq(n, 40);
	int64_t counted = 0;
	for (long i = 0; i < n; i++) {
		counted += b[i].n;
		if (i > 0)
			cr_assert(b[i].first > b[i - 1].last, "bucket %ld starts inside the one before", i);
		cr_assert(b[i].last >= b[i].first, "bucket %ld is empty", i);
	}
	cr_assert_eq(b[0].first, INT64_MIN);
	cr_assert_eq(b[n - 1].last, INT64_MAX);
	cr_assert_eq(counted, 12, "every step falls in a bucket");
	const view_headroom *h;
	long nh = view_model_headroom(m, &h);
	cr_assert_gt(nh, 0);
	for (long i = 0; i < nh; i++) {
		cr_assert_geq(h[i].count, 0, "%s: the count wrapped", h[i].name);
		cr_assert_geq(h[i].underflow, 0, "%s: the underflow count wrapped", h[i].name);
		cr_assert_geq(h[i].near_overflow, 0, "%s", h[i].name);
	}
	cr_assert_eq(h[0].count, INT64_MAX, "a sum past int64 saturates");
	view_model_free(m);
}

/* A leaf page of op_events overwritten: the queries of the steps panel meet SQLITE_CORRUPT;
 * the model says the profile is damaged instead of showing what it read before. */
Test(model, damaged_profile_is_said_to_be, .init = setup, .fini = teardown)
{
	char path[128];
	snprintf(path, sizeof path, "%s/damaged.db", dir);
	genprof_opts o;
	genprof_defaults(&o);
	o.path = path;
	o.ops = 20000;
	o.steps = 40;
	o.quiet = 1;
	char err[512];
	cr_assert_eq(genprof_write(&o, NULL, err, sizeof err), 0, "%s", err);
	sqlite3 *db;
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	int64_t page = 0, size = 0;
	cr_assert_eq(amp_profile_query_int64(db, &page, "SELECT pageno FROM dbstat WHERE name = "
	                                     "'op_events' AND pagetype = 'leaf' ORDER BY pageno "
	                                     "LIMIT 1 OFFSET 20", NULL),
	             AMP_PROFILE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(amp_profile_query_int64(db, &size, "PRAGMA page_size", NULL), AMP_PROFILE_OK);
	sqlite3_close(db);
	FILE *f = fopen(path, "r+b");
	cr_assert_not_null(f);
	char junk[4096];
	memset(junk, 0x5a, sizeof junk);
	cr_assert_eq(fseek(f, (long)((page - 1) * size), SEEK_SET), 0);
	cr_assert_eq(fwrite(junk, 1, (size_t)size, f), (size_t)size);
	fclose(f);
	view_model *m;
	cr_assert_eq(view_model_open(path, NULL, &m, err, sizeof err), VIEW_OK, "%s", err);
	cr_assert_not(view_model_damaged(m));
	view_step rows[40];
	long n = view_model_steps(m, 0, rows, 40);
	cr_assert_lt(n, 0, "the page of steps is not shown as if whole (%ld)", n);
	cr_assert(view_model_damaged(m));
	cr_assert(strstr(view_model_error(m), "malformed"), "%s", view_model_error(m));
	view_model_free(m);
}

Test(model, summary_matches_the_generated_run, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("p.db", NULL), NULL, &m, err, sizeof err),
	             VIEW_OK, "%s", err);
	const view_run *r = view_model_run(m);
	cr_assert(r->finalized && r->complete);
	cr_assert_eq(r->steps, 12);
	cr_assert_eq(r->overflow_steps, 3);
	cr_assert(fabs(r->fp16_share - 0.85) < 0.01, "fp16 share %g", r->fp16_share);
	cr_assert(fabs(r->copy_share - 0.08) < 0.01, "copy share %g", r->copy_share);
	cr_assert_eq(r->fp16_threshold, 70.0);
	cr_assert_str_eq(r->threshold_source, "profile");
	cr_assert(r->has_origin);
	cr_assert_str_eq(r->origin_op, "Exp");
	cr_assert_str_eq(r->origin_file, "examples/model.c");
	cr_assert_eq(r->origin_line, 88);
	/* a page of steps: the split adds up to the duration */
	view_step st[4];
	cr_assert_eq(view_model_steps(m, 2, st, 4), 4);
	cr_assert_eq(st[0].step, 2);
	for (int i = 0; i < 4; i++) {
		int64_t sum = st[i].fp16_ns + st[i].fp32_ns + st[i].copy_ns + st[i].other_ns;
		cr_assert(st[i].fp16_ns > st[i].fp32_ns && st[i].copy_ns > 0);
		cr_assert_eq(sum, st[i].dur_ns);
	}
	/* anomalies: origin first */
	cr_assert_eq(view_model_anomaly_count(m), 3);
	view_anomaly an;
	cr_assert_eq(view_model_anomalies(m, 0, &an, 1), 1);
	cr_assert(an.has_origin);
	view_tstat ts[3];
	cr_assert_eq(an.rank, -1, "one rank: the detail is not a rank's");
	cr_assert_eq(view_model_step_tstats(m, an.step, an.rank, 0, ts, 3), 3);
	cr_assert(ts[0].origin && ts[0].inf > 0);
	cr_assert_eq(view_model_anomaly_index(m, an.step), 0);
	cr_assert_eq(view_model_next_overflow(m, an.step, 1) > an.step, 1);
	/* ops: groups by op type add up to all op time */
	const view_op_group *g;
	long n = view_model_op_groups(m, 0, &g);
	cr_assert(n > 5);
	int64_t total = 0;
	for (long i = 0; i < n; i++)
		total += g[i].total_ns;
	cr_assert_eq(total, r->op_ns);
	view_model_opts opts = {50, 30};
	view_model_free(m);
	cr_assert_eq(view_model_open(make_profile("q.db", NULL), &opts, &m, err, sizeof err),
	             VIEW_OK);
	cr_assert_eq(view_model_run(m)->fp16_threshold, 50.0);
	cr_assert_str_eq(view_model_run(m)->threshold_source, "option");
	view_model_free(m);
}

Test(model, unfinalized_profile_gets_the_same_figures, .init = setup, .fini = teardown)
{
	view_model *a, *b;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("fin.db", NULL), NULL, &a, err, sizeof err),
	             VIEW_OK);
	cr_assert_eq(
	    view_model_open(make_profile("raw.db", unfinalized), NULL, &b, err, sizeof err),
	    VIEW_OK, "%s", err);
	const view_run *x = view_model_run(a), *y = view_model_run(b);
	cr_assert(!y->finalized && !y->complete);
	cr_assert(fabs(x->fp16_share - y->fp16_share) < 1e-9, "%g vs %g", x->fp16_share,
	          y->fp16_share);
	cr_assert(fabs(x->copy_share - y->copy_share) < 1e-9);
	cr_assert_eq(x->op_count, y->op_count);
	view_model_free(a);
	view_model_free(b);
}

static void under_home(genprof_opts *o)
{
	o->source_dir = "/home/ada/ampkit";
}

Test(model, call_sites_are_described_and_shown_under_their_source_root, .init = setup,
     .fini = teardown)
{
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("abs.db", under_home), NULL, &m, err, sizeof err),
	             VIEW_OK, "%s", err);
	/* every file is in /home/ada/ampkit/examples/: the root keeps "examples/" in view */
	cr_assert_str_eq(view_model_source_root(m), "/home/ada/ampkit/");
	cr_assert_str_eq(view_model_short_path(m, "/home/ada/ampkit/examples/model.c"),
	                 "examples/model.c");
	cr_assert_str_eq(view_model_short_path(m, "/usr/src/libc.c"), "/usr/src/libc.c");
	cr_assert_str_eq(view_model_short_path(m, "/home/ada/ampkit/"), "/home/ada/ampkit/");
	const view_callsite *c;
	long n = view_model_callsites(m, &c);
	cr_assert(n > 5);
	int backward = 0, copies = 0, exp = 0;
	for (long i = 0; i < n; i++) {
		backward += c[i].line == 142 && !strcmp(c[i].what, "backward");
		copies += !strncmp(c[i].what, "copy ", 5) && c[i].op_calls == 0;
		exp += c[i].line == 88 && !strcmp(c[i].what, "Exp") && c[i].origins > 0;
	}
	cr_assert(backward == 1 && copies >= 3 && exp == 1, "backward %d copies %d exp %d",
	          backward, copies, exp);
	view_model_free(m);
	/* relative file names are shown as they are */
	cr_assert_eq(view_model_open(make_profile("rel.db", NULL), NULL, &m, err, sizeof err),
	             VIEW_OK);
	cr_assert_str_eq(view_model_source_root(m), "");
	cr_assert_str_eq(view_model_short_path(m, "examples/model.c"), "examples/model.c");
	/* advice: errors, then warnings, then the rest */
	const view_advice *adv;
	size_t na = view_model_advice(m, &adv);
	cr_assert(na > 1);
	for (size_t i = 1; i < na; i++)
		cr_assert(strcmp(adv[i - 1].severity, "error") == 0 ||
		              strcmp(adv[i].severity, "error") != 0,
		          "%s before %s", adv[i - 1].severity, adv[i].severity);
	view_model_free(m);
}

/* ---- app and panels ------------------------------------------------------------------------- */
static char *draw_after(view_app *app, const char *keys)
{
	int k[64];
	int n = view_keys_parse(keys, k, 64);
	view_screen s;
	cr_assert(n >= 0);
	cr_assert_eq(view_screen_init(&s, 80, 24), 0);
	view_app_draw(app, &s);
	for (int i = 0; i < n; i++) {
		view_app_key(app, k[i]);
		view_app_draw(app, &s);
	}
	char *text = render(&s, 0);
	view_screen_release(&s);
	return text;
}

Test(app, every_panel_draws_80x24, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	static const char *const expect[] = {"FP16 share",          "rows by op type",
	                                     "steps",               "Loss scale, log2",
	                                     "non-finite values",   "call sites",
	                                     "Memory by category",  "FP16 exponent histograms",
	                                     "No baseline"};
	cr_assert_eq(view_model_open(make_profile("p.db", NULL), NULL, &m, err, sizeof err),
	             VIEW_OK);
	view_app *app = view_app_new(m, NULL);
	cr_assert_not_null(app);
	for (int p = 0; p < 9; p++) {
		char key[2] = {(char)('1' + p), 0};
		char *text = draw_after(app, key);
		cr_assert(strstr(text, expect[p]), "panel %d:\n%s", p + 1, text);
		int lines = 0;
		for (char *c = text; *c; c++)
			lines += *c == '\n';
		cr_assert_eq(lines, 24);
		free(text);
	}
	view_app_free(app);
	view_model_free(m);
}

/* Every panel on the hostile profile (UBSan in `make asan` checks the arithmetic). */
Test(app, every_panel_draws_a_hostile_profile, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	const char *p = make_profile("hostile.db", NULL);
	edit_profile(p, HOSTILE_SQL);
	cr_assert_eq(view_model_open(p, NULL, &m, err, sizeof err), VIEW_OK, "%s", err);
	view_app *app = view_app_new(m, NULL);
	cr_assert_not_null(app);
	for (int k = 0; k < 6; k++) {
		char key[2] = {(char)('1' + k), 0};
		free(draw_after(app, key));
	}
	/* a group's steps (every int64 step number in the list), its end, a page past it */
	free(draw_after(app, "2<enter>G<pgdn><pgdn><esc>"));
	char *text = draw_after(app, "5");
	cr_assert(strstr(text, "non-finite values"), "%s", text);
	free(text);
	cr_assert_not(view_model_damaged(m));
	view_app_free(app);
	view_model_free(m);
}

Test(app, scale_marker_opens_the_origin_and_esc_comes_back, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("p.db", NULL), NULL, &m, err, sizeof err),
	             VIEW_OK);
	view_app *app = view_app_new(m, NULL);
	char *text = draw_after(app, "4<enter>");
	cr_assert(strstr(text, "Origin  Exp (seq"), "%s", text);
	cr_assert(strstr(text, "at examples/model.c:88 in attention_forward"), "%s", text);
	free(text);
	text = draw_after(app, "<esc>");
	cr_assert(strstr(text, "Loss scale, log2"), "%s", text);
	free(text);
	cr_assert_eq(view_app_key(app, 'q'), VIEW_F_QUIT);
	view_app_free(app);
	view_model_free(m);
}

Test(app, filter_input_keeps_q_and_digits, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("p.db", low), NULL, &m, err, sizeof err),
	             VIEW_OK);
	view_app *app = view_app_new(m, NULL);
	char *text = draw_after(app, "2v/q1");
	cr_assert(strstr(text, "filter: /q1_"), "%s", text);
	cr_assert(strstr(text, "rows by op type and label"), "%s", text);
	free(text);
	text = draw_after(app, "<esc>/fc2<enter>");
	cr_assert(strstr(text, "fp32*"), "%s", text); /* FP32 white-list rows are marked */
	cr_assert(!strstr(text, "fc1"), "%s", text);
	free(text);
	view_app_free(app);
	view_model_free(m);
}

Test(app, crashed_run_is_marked_incomplete, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("c.db", crashed), NULL, &m, err, sizeof err),
	             VIEW_OK);
	view_app *app = view_app_new(m, NULL);
	char *text = draw_after(app, "");
	cr_assert(strstr(text, "INCOMPLETE"), "%s", text);
	free(text);
	text = draw_after(app, "3<end>");
	cr_assert(strstr(text, "unended"), "%s", text);
	free(text);
	view_app_free(app);
	view_model_free(m);
}

/* ---- the shared readers: diff and exponent histograms (schema/) ---------------------------- */
Test(diff, a_profile_against_itself_moves_nothing, .init = setup, .fini = teardown)
{
	sqlite3 *a, *b;
	char err[512];
	const char *path = make_profile("p.db", NULL);
	cr_assert_eq(amp_profile_open(path, 0, &a, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	cr_assert_eq(amp_profile_open(path, 0, &b, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	amp_diff d;
	cr_assert_eq(amp_diff_compute(a, b, &d, err, sizeof err), 0, "%s", err);
	cr_assert_gt(d.nrows, 3);
	int kinds[AMP_DIFF_KINDS] = {0};
	for (size_t i = 0; i < d.nrows; i++) {
		const amp_diff_row *r = &d.rows[i];
		kinds[r->kind]++;
		cr_assert_eq(r->calls[0], r->calls[1], "%s", r->name);
		cr_assert_eq(r->delta_ns, 0, "%s", r->name);
		cr_assert_eq(r->ratio, 1, "%s: %g", r->name, r->ratio);
		cr_assert_str_eq(r->dtype[0], r->dtype[1]);
		if (i)
			cr_assert_geq(r->kind, d.rows[i - 1].kind); /* kind by kind */
	}
	for (int k = 0; k < AMP_DIFF_KINDS; k++)
		cr_assert_gt(kinds[k], 0, "kind %s", amp_diff_kind_name((amp_diff_kind)k));
	cr_assert_eq(d.steps[0], d.steps[1]);
	amp_diff_release(&d);
	amp_profile_close(a);
	amp_profile_close(b);
}

Test(hist, bins_sum_per_name_and_zones_follow_fp16, .init = setup, .fini = teardown)
{
	sqlite3 *db;
	char err[512];
	const char *path = make_profile("p.db", NULL);
	cr_assert_eq(amp_profile_open(path, 1, &db, err, sizeof err), AMP_PROFILE_OK, "%s", err);
	/* two rows of one tensor: bin k holds k + 1 values in each */
	unsigned char blob[160] = {0};
	for (int k = 0; k < AMP_HIST_BINS; k++)
		blob[4 * k] = (unsigned char)(k + 1);
	sqlite3_stmt *st;
	cr_assert_eq(sqlite3_prepare_v2(db,
	                                "INSERT INTO tensor_stats(step, name, dtype, exp_hist) "
	                                "VALUES (?, 'zz', 'fp16', ?)",
	                                -1, &st, NULL),
	             SQLITE_OK);
	for (int step = 0; step < 2; step++) {
		sqlite3_bind_int(st, 1, step);
		sqlite3_bind_blob(st, 2, blob, sizeof blob, SQLITE_STATIC);
		cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	amp_hist_tensor *h;
	cr_assert_eq(amp_hist_read(db, -1, "zz", &h, err, sizeof err), 1, "%s", err);
	cr_assert_eq(h[0].rows, 2);
	for (int k = 0; k < AMP_HIST_BINS; k++)
		cr_assert_eq(h[0].bins[k], 2u * (unsigned)(k + 1));
	cr_assert_eq(h[0].zone[AMP_HIST_ZERO], 2);
	cr_assert_eq(h[0].zone[AMP_HIST_SUBNORMAL], 4);
	cr_assert_eq(h[0].zone[AMP_HIST_OVERFLOW], 2 * AMP_HIST_BINS);
	cr_assert_eq(h[0].count, (uint64_t)(AMP_HIST_BINS * (AMP_HIST_BINS + 1)));
	free(h);
	cr_assert_eq(amp_hist_read(db, 1, "zz", &h, err, sizeof err), 1);
	cr_assert_eq(h[0].rows, 1);
	free(h);
	/* the zones of FP16: 2^-14 is the first normal binade, 2^15 the last */
	char r[32];
	amp_hist_bin_range(2, r, sizeof r);
	cr_assert_str_eq(r, "[2^-14, 2^-13)");
	amp_hist_bin_range(31, r, sizeof r);
	cr_assert_str_eq(r, "[2^15, 2^16)");
	cr_assert_eq(amp_hist_zone_of(31), AMP_HIST_NORMAL);
	cr_assert_eq(amp_hist_zone_of(32), AMP_HIST_OVERFLOW);
	amp_profile_close(db);
}

Test(app, steps_filter_and_n_wrap, .init = setup, .fini = teardown)
{
	view_model *m;
	char err[512];
	cr_assert_eq(view_model_open(make_profile("p.db", NULL), NULL, &m, err, sizeof err),
	             VIEW_OK);
	view_app *app = view_app_new(m, NULL);
	char *text = draw_after(app, "3/overflow<enter>");
	cr_assert(strstr(text, "filter: overflow"), "%s", text);
	cr_assert(!strstr(text, "       0 "), "%s", text); /* step 0 did not overflow */
	free(text);
	text = draw_after(app, "<esc>N");
	cr_assert(strstr(text, "wrapped to the last"), "%s", text);
	free(text);
	view_app_free(app);
	view_model_free(m);
}
