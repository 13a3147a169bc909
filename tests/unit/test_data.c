/* test_data.c — the examples' shared library: IDX/Fashion-MNIST loading on tiny gzip files made
 * here with zlib, the KJV text cleaner, the vocabulary, shuffling, accuracy counting, the loss
 * window and progress lines, the JSON result line and the flag parser.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../../examples/common/batch.h"
#include "../../examples/common/cli.h"
#include "../../examples/common/data.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ampkit_test_data_XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
	static const char *const names[] = {"train-images-idx3-ubyte.gz",
	                                    "train-labels-idx1-ubyte.gz",
	                                    "t10k-images-idx3-ubyte.gz",
	                                    "t10k-labels-idx1-ubyte.gz",
	                                    "plain.idx",
	                                    "text.txt"};
	char path[256];
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
		unlink(path);
	}
	rmdir(tmpdir);
}

static void put_be32(unsigned char *b, uint32_t v)
{
	b[0] = (unsigned char)(v >> 24);
	b[1] = (unsigned char)(v >> 16);
	b[2] = (unsigned char)(v >> 8);
	b[3] = (unsigned char)v;
}

/* Writes an IDX file (gzip unless plain) with the given magic, dims and payload bytes. */
static void write_idx(const char *name, uint32_t magic, int ndim, const uint32_t *dims,
                      const unsigned char *payload, size_t n, int plain)
{
	char path[256];
	unsigned char head[16];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	put_be32(head, magic);
	for (int i = 0; i < ndim; i++)
		put_be32(head + 4 + 4 * i, dims[i]);
	if (plain) {
		FILE *f = fopen(path, "wb");
		cr_assert_not_null(f);
		fwrite(head, 1, 4 + 4 * (size_t)ndim, f);
		fwrite(payload, 1, n, f);
		fclose(f);
		return;
	}
	gzFile f = gzopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(gzwrite(f, head, 4 + 4 * (unsigned)ndim), 4 + 4 * ndim);
	if (n)
		cr_assert_eq(gzwrite(f, payload, (unsigned)n), (int)n);
	cr_assert_eq(gzclose(f), Z_OK);
}

/* Three 2x3 images with pixels 0, 10, 20, ... and labels 7, 0, 9. */
static void write_tiny_split(const char *split, uint32_t n_labels, unsigned char bad_label)
{
	char name[64];
	unsigned char px[18], lab[4] = {7, 0, 9, 1};
	for (int i = 0; i < 18; i++)
		px[i] = (unsigned char)(i * 10);
	if (bad_label)
		lab[1] = bad_label;
	uint32_t idims[3] = {3, 2, 3}, ldims[1] = {n_labels};
	snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", split);
	write_idx(name, 0x803, 3, idims, px, sizeof px, 0);
	snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", split);
	write_idx(name, 0x801, 1, ldims, lab, n_labels, 0);
}

Test(data, fashion_loads_tiny_gzip_idx, .init = make_tmpdir, .fini = remove_tmpdir)
{
	write_tiny_split("train", 3, 0);
	ex_images im;
	char err[512] = "";
	int rc = ex_fashion_load(tmpdir, "train", &im, err, sizeof err);
	cr_assert_eq(rc, 0, "load failed: %s", err);
	cr_assert_eq(im.n, 3);
	cr_assert_eq(im.rows, 2);
	cr_assert_eq(im.cols, 3);
	float maxdiff = 0;
	for (int i = 0; i < 18; i++) {
		float d = fabsf(im.pixels[i] - (float)(i * 10) / 255.0f);
		maxdiff = d > maxdiff ? d : maxdiff;
	}
	cr_log_info("pixels: max |diff| %g (tolerance 1e-7)", (double)maxdiff);
	cr_assert_leq(maxdiff, 1e-7f);
	cr_assert_eq(im.labels[0], 7);
	cr_assert_eq(im.labels[1], 0);
	cr_assert_eq(im.labels[2], 9);
	ex_images_standardize(&im, 0.5f, 0.25f);
	cr_assert_float_eq(im.pixels[0], -2.0f, 1e-6f);
	ex_images_free(&im);
	cr_assert_null(im.pixels);
	ex_images_free(NULL);
}

Test(data, idx_reads_plain_files_too, .init = make_tmpdir, .fini = remove_tmpdir)
{
	unsigned char lab[5] = {1, 2, 3, 4, 5};
	uint32_t dims[1] = {5};
	write_idx("plain.idx", 0x801, 1, dims, lab, 5, 1);
	char path[256], err[512] = "";
	snprintf(path, sizeof path, "%s/plain.idx", tmpdir);
	uint8_t *data;
	int64_t d[1];
	cr_assert_eq(ex_idx_read(path, 1, &data, d, err, sizeof err), 0, "%s", err);
	cr_assert_eq(d[0], 5);
	cr_assert_eq(memcmp(data, lab, 5), 0);
	free(data);
}

Test(data, bad_magic_is_a_clear_error, .init = make_tmpdir, .fini = remove_tmpdir)
{
	unsigned char px[4] = {0};
	uint32_t dims[3] = {1, 2, 2};
	write_idx("train-images-idx3-ubyte.gz", 0x0D03, 3, dims, px, 4, 0);
	char path[256], err[512] = "";
	snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", tmpdir);
	uint8_t *data = (uint8_t *)1;
	int64_t d[3];
	cr_assert_eq(ex_idx_read(path, 3, &data, d, err, sizeof err), -1);
	cr_assert_null(data);
	cr_log_info("error: %s", err);
	cr_assert_not_null(strstr(err, "bad magic"), "message: %s", err);
	cr_assert_not_null(strstr(err, path), "message does not name the file: %s", err);

	/* Labels file read as images: the rank in the magic does not match. */
	write_tiny_split("t10k", 3, 0);
	snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", tmpdir);
	cr_assert_eq(ex_idx_read(path, 3, &data, d, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "bad magic"), "message: %s", err);
}

Test(data, missing_file_names_it_and_hints_install, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ex_images im;
	char err[512] = "";
	cr_assert_eq(ex_fashion_load(tmpdir, "train", &im, err, sizeof err), -1);
	cr_log_info("error: %s", err);
	cr_assert_not_null(strstr(err, "train-images-idx3-ubyte.gz"), "message: %s", err);
	cr_assert_not_null(strstr(err, "No such file"), "message: %s", err);
	cr_assert_not_null(strstr(err, "make deps"), "no install hint: %s", err);
	cr_assert_null(im.pixels);
}

Test(data, truncated_and_trailing_data_are_errors, .init = make_tmpdir, .fini = remove_tmpdir)
{
	unsigned char px[8] = {0};
	uint32_t dims[3] = {2, 2, 2};
	char path[256], err[512] = "";
	uint8_t *data;
	int64_t d[3];
	snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", tmpdir);
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, dims, px, 7, 0);
	cr_assert_eq(ex_idx_read(path, 3, &data, d, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "truncated"), "message: %s", err);
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, dims, px, 8, 0);
	cr_assert_eq(ex_idx_read(path, 3, &data, d, err, sizeof err), 0, "%s", err);
	free(data);
	dims[0] = 1;
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, dims, px, 8, 0);
	cr_assert_eq(ex_idx_read(path, 3, &data, d, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "trailing"), "message: %s", err);
	dims[0] = 0;
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, dims, px, 0, 0);
	cr_assert_eq(ex_idx_read(path, 3, &data, d, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "out of range"), "message: %s", err);
}

Test(data, count_mismatch_and_bad_labels, .init = make_tmpdir, .fini = remove_tmpdir)
{
	ex_images im;
	char err[512] = "";
	write_tiny_split("train", 4, 0);
	cr_assert_eq(ex_fashion_load(tmpdir, "train", &im, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "3 images"), "message: %s", err);
	write_tiny_split("train", 3, 12);
	cr_assert_eq(ex_fashion_load(tmpdir, "train", &im, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "label 12"), "message: %s", err);
}

Test(data, kjv_clean_strips_headings_and_verse_numbers)
{
	static const char raw[] = "\nGenesis 1\n\n  1 In the beginning God created the heaven and "
	                          "the earth.\n  2 And the earth was without form, and void; and "
	                          "darkness was upon the face of\nthe deep.\n\n1 Kings 1\n\n  1 "
	                          "Now king David was old\n  176 I have gone astray.\n";
	static const char want[] =
	    "In the beginning God created the heaven and the earth.\n"
	    "And the earth was without form, and void; and darkness was upon "
	    "the face of the deep.\nNow king David was old\nI have gone "
	    "astray.\n";
	char out[sizeof raw + 1];
	size_t n = ex_kjv_clean(raw, sizeof raw - 1, out);
	cr_assert_str_eq(out, want);
	cr_assert_eq(n, strlen(want));
	cr_assert_eq(ex_kjv_clean("", 0, out), 0);
	cr_assert_str_eq(out, "");
}

Test(data, text_file_and_vocab, .init = make_tmpdir, .fini = remove_tmpdir)
{
	char path[256], err[512] = "";
	snprintf(path, sizeof path, "%s/text.txt", tmpdir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("abcab\n", f);
	fclose(f);
	ex_text t;
	cr_assert_eq(ex_text_load_file(path, &t, err, sizeof err), 0, "%s", err);
	cr_assert_eq(t.len, 6);
	ex_vocab v;
	ex_vocab_build(&v, t.data, t.len);
	cr_assert_eq(v.size, 4);
	cr_assert_eq(v.chars[0], '\n');
	cr_assert_eq(v.ids['a'], 1);
	cr_assert_eq(v.ids['c'], 3);
	cr_assert_eq(v.ids['z'], -1);
	ex_text_free(&t);
	cr_assert_eq(ex_text_load_file("/nonexistent/x.txt", &t, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "/nonexistent/x.txt"));
}

Test(batch, shuffle_is_a_seeded_permutation)
{
	int32_t a[100], b[100];
	ex_rng r1, r2;
	ex_rng_seed(&r1, 42);
	ex_rng_seed(&r2, 42);
	ex_iota(a, 100);
	ex_iota(b, 100);
	ex_shuffle(a, 100, &r1);
	ex_shuffle(b, 100, &r2);
	cr_assert_eq(memcmp(a, b, sizeof a), 0, "same seed, different order");
	int seen[100] = {0}, moved = 0;
	for (int i = 0; i < 100; i++) {
		cr_assert(a[i] >= 0 && a[i] < 100);
		seen[a[i]]++;
		moved += a[i] != i;
	}
	for (int i = 0; i < 100; i++)
		cr_assert_eq(seen[i], 1);
	cr_assert_gt(moved, 50);
	for (int i = 0; i < 1000; i++)
		cr_assert_lt(ex_rng_below(&r1, 7), 7);
}

Test(batch, gather_and_count_correct)
{
	float pixels[3 * 4] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
	int32_t labels[3] = {4, 5, 6}, idx[3] = {2, 0, 1}, y[2];
	ex_images im = {.n = 3, .rows = 2, .cols = 2, .pixels = pixels, .labels = labels};
	float x[8];
	ex_gather(&im, idx, 1, 2, x, y);
	cr_assert_float_eq(x[0], 0.0f, 0);
	cr_assert_float_eq(x[4], 10.0f, 0);
	cr_assert_eq(y[0], 4);
	cr_assert_eq(y[1], 5);
	const float logits[3 * 3] = {0.1f, 0.9f, 0.0f, 2, 1, 0, 0, 0, 0};
	const int32_t truth[3] = {1, 2, 0};
	cr_assert_eq(ex_count_correct(logits, truth, 3, 3), 2); /* ties: the first max wins */
}

Test(batch, loss_window_is_the_mean_of_the_last_50)
{
	ex_loss_window w = {0};
	cr_assert(isnan(ex_loss_window_mean(&w)), "no loss yet: NAN");
	ex_loss_window_add(&w, 1);
	ex_loss_window_add(&w, 2);
	cr_assert_float_eq(ex_loss_window_mean(&w), 1.5, 0);
	/* Losses 1..60: the window keeps 11..60, mean 35.5 (exact in binary). */
	w = (ex_loss_window){0};
	for (int i = 1; i <= 60; i++)
		ex_loss_window_add(&w, i);
	cr_assert_float_eq(ex_loss_window_mean(&w), 35.5, 0);
	cr_assert_eq(w.n, 60);
}

/* Reads what the test printed on stdout so far into buf (cr_redirect_stdout). */
static void read_stdout(char *buf, size_t len)
{
	fflush(stdout);
	FILE *f = cr_get_redirected_stdout();
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
}

Test(batch, meter_prints_every_n_steps, .init = cr_redirect_stdout)
{
	ex_meter m;
	ex_meter_start(&m, 2, "tokens/s");
	for (int64_t step = 1; step <= 5; step++)
		ex_meter_step(&m, step, 1, 0.25 * (double)step, 128, 10);
	cr_assert_eq(m.count, 10, "the step after the last line is still counted");
	ex_meter_start(&m, 0, "samples/s");
	ex_meter_step(&m, 2, 1, 1, 1, 10); /* every 0: never prints */
	char out[512], *line2;
	read_stdout(out, sizeof out);
	cr_assert_not_null(line2 = strchr(out, '\n'), "two lines: %s", out);
	cr_assert_eq(strncmp(out, "step      2  epoch 1  loss 0.500000  scale 128  ", 48), 0, "%s",
	             out);
	cr_assert_eq(strncmp(line2 + 1, "step      4  epoch 1  loss 1.000000  scale 128  ", 48), 0,
	             "%s", out);
	cr_assert_not_null(strstr(out, " tokens/s\n"));
	int lines = 0;
	for (const char *p = out; *p; p++)
		lines += *p == '\n';
	cr_assert_eq(lines, 2, "steps 2 and 4 only: %s", out);
	cr_assert_null(strstr(out, "samples/s"), "every 0 printed: %s", out);
}

Test(cli, json_run_line, .init = cr_redirect_stdout)
{
	const ex_program prog = {"t", "test", NULL, 0, 0};
	ex_common c = {.precision = "fp32", .epochs = 1, .batch = 1, .lr = 1, .seed = 3};
	amp_ctx *ctx;
	cr_assert_eq(ex_ctx_open(&prog, &c, &ctx), 0);
	ex_json j;
	ex_json_run_begin(&j, "ex", ctx, 5);
	ex_json_throughput(&j, 2, 100);
	ex_json_throughput(&j, 0, 100); /* no time measured: rate 0, not inf */
	ex_json_run_print(&j, ctx);
	amp_ctx_free(ctx);
	char out[1024];
	read_stdout(out, sizeof out);
	const char *head = "{\"example\":\"ex\",\"precision\":\"fp32\",\"steps\":5,"
	                   "\"train_seconds\":2,\"samples_per_sec\":50,"
	                   "\"train_seconds\":0,\"samples_per_sec\":0,\"peak_bytes\":";
	cr_assert_eq(strncmp(out, head, strlen(head)), 0, "%s", out);
	const char *tail = ",\"overflow_steps\":0,\"skipped_steps\":0,\"final_scale\":1}\n";
	cr_assert(strlen(out) > strlen(tail) && strcmp(out + strlen(out) - strlen(tail), tail) == 0,
	          "%s", out);
}

Test(cli, json_line)
{
	ex_json j;
	ex_json_begin(&j);
	ex_json_str(&j, "precision", "amp\"x");
	ex_json_int(&j, "steps", 938);
	ex_json_num(&j, "test_accuracy", 0.8839);
	ex_json_num(&j, "final_loss", (double)NAN);
	cr_assert_str_eq(ex_json_end(&j), "{\"precision\":\"amp\\\"x\",\"steps\":938,"
	                                  "\"test_accuracy\":0.8839,\"final_loss\":null}");
	ex_json_begin(&j);
	cr_assert_str_eq(ex_json_end(&j), "{}");
}

Test(cli, flags, .init = cr_redirect_stderr)
{
	int64_t extra_n = 5;
	const ex_option extra[] = {{"minutes", EX_OPT_INT, &extra_n, "N", "minutes"}};
	const ex_program prog = {"t", "test", extra, 1, 0};
	ex_common c = {.epochs = 2, .batch = 64, .lr = 0.1, .seed = -1};
	char *ok[] = {"t",      "--precision=fp16", "--epochs", "3",       "--lr=0.5",
	              "--json", "--minutes",        "7",        "--seed=9"};
	cr_assert_eq(ex_parse_args(&prog, &c, 9, ok), 0);
	cr_assert_str_eq(c.precision, "fp16");
	cr_assert_eq(c.epochs, 3);
	cr_assert_float_eq(c.lr, 0.5, 0);
	cr_assert_eq(c.json, 1);
	cr_assert_eq(c.seed, 9);
	cr_assert_eq(extra_n, 7);

	/* Usage errors go to stderr with status 2. */
	char *unknown[] = {"t", "--bogus"};
	cr_assert_eq(ex_parse_args(&prog, &c, 2, unknown), 2);
	char *bad_mode[] = {"t", "--precision=fp8"};
	cr_assert_eq(ex_parse_args(&prog, &c, 2, bad_mode), 2);
	char *bf16[] = {"t", "--precision=bf16"};
	cr_assert_eq(ex_parse_args(&prog, &c, 2, bf16), 0);
	cr_assert_str_eq(c.precision, "bf16");
	char *bad_num[] = {"t", "--epochs", "2x"};
	cr_assert_eq(ex_parse_args(&prog, &c, 3, bad_num), 2);
	char *missing[] = {"t", "--batch"};
	cr_assert_eq(ex_parse_args(&prog, &c, 2, missing), 2);
	char *flag_value[] = {"t", "--json=1"};
	cr_assert_eq(ex_parse_args(&prog, &c, 2, flag_value), 2);
}

Test(cli, ctx_open_applies_precision_and_seed, .init = cr_redirect_stderr)
{
	const ex_program prog = {"t", "test", NULL, 0, 0};
	ex_common c = {.precision = "fp32", .epochs = 1, .batch = 1, .lr = 1, .seed = 77};
	amp_ctx *ctx;
	cr_assert_eq(ex_ctx_open(&prog, &c, &ctx), 0);
	cr_assert_str_eq(ex_precision_name(ctx), "fp32");
	cr_assert_eq(ex_ctx_seed(ctx), 77);
	amp_ctx_free(ctx);
	c.precision = NULL;
	c.seed = -1;
	cr_assert_eq(ex_ctx_open(&prog, &c, &ctx), 0);
	cr_assert_str_eq(ex_precision_name(ctx), "amp");
	amp_ctx_free(ctx);
	c.config = "/nonexistent/amp.cfg";
	cr_assert_eq(ex_ctx_open(&prog, &c, &ctx), -1);
	cr_assert_null(ctx);
}
