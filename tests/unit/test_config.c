/* test_config.c — configuration: defaults, amp.cfg parsing, errors naming file:line, AMP_*
 * environment overrides, amp_config_set/get, and the context lifecycle around them.
 *
 * Each test runs in its own process (Criterion), so setenv() in one test does not leak into
 * another; the fixture clears every AMP_* variable the runtime reads before each test.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static const char *const env_names[] = {
    "AMP_CONFIG",
    "AMP_PRECISION_MODE",
    "AMP_CUSTOM_WHITE_LIST",
    "AMP_CUSTOM_BLACK_LIST",
    "AMP_LOSS_SCALE",
    "AMP_LOSS_SCALE_INIT",
    "AMP_LOSS_SCALE_GROWTH_INTERVAL",
    "AMP_LOSS_SCALE_GROWTH_FACTOR",
    "AMP_LOSS_SCALE_BACKOFF_FACTOR",
    "AMP_LOSS_SCALE_MIN",
    "AMP_LOSS_SCALE_MAX",
    "AMP_SEED",
    "AMP_NUM_THREADS",
    "AMP_KERNELS",
    "AMP_ALLREDUCE_DTYPE",
    "AMP_ALLREDUCE_BUCKET_KB",
};

static char tmpdir[64];
static char cfgpath[128];

static void setup(void)
{
	for (size_t i = 0; i < sizeof env_names / sizeof env_names[0]; i++)
		unsetenv(env_names[i]);
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ampcfgXXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	snprintf(cfgpath, sizeof cfgpath, "%s/amp.cfg", tmpdir);
}

static void teardown(void)
{
	unlink(cfgpath);
	rmdir(tmpdir);
}

TestSuite(config, .init = setup, .fini = teardown);

static void write_cfg(const char *text)
{
	FILE *f = fopen(cfgpath, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* Creates a context from cfgpath expecting failure `code`; returns the message in errbuf. */
static void expect_fail(int code, char *errbuf, size_t errlen)
{
	amp_ctx *ctx = (amp_ctx *)0x1;
	int rc = amp_ctx_new(cfgpath, &ctx, errbuf, errlen);
	cr_log_info("rc=%d msg=\"%s\"", rc, errbuf);
	cr_assert_eq(rc, code, "rc %d, expected %d (%s)", rc, code, errbuf);
	cr_assert_null(ctx, "*out must be NULL on failure");
}

static void expect_msg(const char *errbuf, const char *needle)
{
	cr_assert_not_null(strstr(errbuf, needle), "message \"%s\" lacks \"%s\"", errbuf, needle);
}

/* ---- defaults ---------------------------------------------------------------------------- */

Test(config, defaults)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "precision_mode"), "allow_mix_precision");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale"), "dynamic");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale_init"), "128");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale_growth_interval"), "2000");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale_growth_factor"), "2");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale_backoff_factor"), "0.5");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale_min"), "1");
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale_max"), "16777216");
	cr_assert_str_eq(amp_config_get(ctx, "seed"), "1");
	cr_assert_str_eq(amp_config_get(ctx, "num_threads"), "1");
	cr_assert_str_eq(amp_config_get(ctx, "kernels"), "auto");
	cr_assert_str_eq(amp_config_get(ctx, "custom_white_list"), "");
	cr_assert_str_eq(amp_config_get(ctx, "custom_black_list"), "");
	cr_assert_null(amp_config_get(ctx, "foo"));
	cr_assert_null(amp_config_get(ctx, NULL));
	cr_assert_eq(amp_loss_scale(ctx), 128.0);
	cr_assert_eq(ctx->scaler.dynamic, 1);
	cr_assert_eq(ctx->scaler.growth_interval, 2000);
	cr_assert_eq(ctx->scaler.min_scale, 1.0);
	cr_assert_eq(ctx->scaler.max_scale, 16777216.0);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_MIX);
	cr_assert_eq(amp_step_index(ctx), -1);
	cr_assert_str_eq(amp_ctx_error(ctx), "");
	amp_ctx_free(ctx);
}

Test(config, lifecycle_edges)
{
	amp_ctx_free(NULL); /* no-op */
	cr_assert_eq(amp_ctx_new(NULL, NULL, NULL, 0), AMP_EINVAL);
	cr_assert_str_eq(amp_ctx_error(NULL), "no context");
	cr_assert_eq(amp_config_set(NULL, "seed", "1"), AMP_EINVAL);
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, NULL, "1"), AMP_EINVAL);
	cr_assert_eq(amp_config_set(ctx, "seed", NULL), AMP_EINVAL);
	cr_assert_eq(amp_config_load(ctx, NULL), AMP_EINVAL);
	amp_ctx_free(ctx);
}

Test(config, strerror)
{
	const int codes[] = {AMP_OK,     AMP_EINVAL,  AMP_ENOMEM, AMP_ESHAPE,
	                     AMP_EDTYPE, AMP_ECONFIG, AMP_EIO,    AMP_ESTATE};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		const char *s = amp_strerror(codes[i]);
		cr_assert(s && *s && strcmp(s, "unknown error") != 0, "code %d", codes[i]);
	}
	cr_assert_str_eq(amp_strerror(-1000), "unknown error");
	cr_assert_str_eq(amp_strerror(AMP_ECONFIG), "configuration error");
}

/* ---- the file ---------------------------------------------------------------------------- */

Test(config, file_every_key)
{
	write_cfg("# ampkit configuration\n"
	          "\n"
	          "precision_mode = force_fp16   # the unsafe one\n"
	          "   custom_white_list=Softmax, Exp\n"
	          "custom_black_list = Add,Mul\n"
	          "loss_scale = dynamic\n"
	          "loss_scale_init = 1024\n"
	          "loss_scale_growth_interval = 16\n"
	          "loss_scale_growth_factor = 4\n"
	          "loss_scale_backoff_factor = 0.25\n"
	          "loss_scale_min = 2\n"
	          "loss_scale_max = 65536\n"
	          "seed = 42\n"
	          "num_threads = 2\n"
	          "kernels = scalar\n");
	amp_ctx *ctx;
	char err[256] = "";
	cr_assert_eq(amp_ctx_new(cfgpath, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP16);
	cr_assert_str_eq(amp_config_get(ctx, "precision_mode"), "force_fp16");
	cr_assert_str_eq(amp_config_get(ctx, "custom_white_list"), "Softmax, Exp");
	cr_assert_str_eq(amp_config_get(ctx, "custom_black_list"), "Add,Mul");
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_SOFTMAX), AMP_LIST_WHITE);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_EXP), AMP_LIST_WHITE);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_ADD), AMP_LIST_BLACK);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_MUL), AMP_LIST_BLACK);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_LOG), AMP_LIST_BLACK); /* untouched default */
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_MATMUL), AMP_LIST_WHITE);
	cr_assert_eq(ctx->scaler.dynamic, 1);
	cr_assert_eq(ctx->scaler.scale, 1024.0);
	cr_assert_eq(ctx->scaler.growth_interval, 16);
	cr_assert_eq(ctx->scaler.growth_factor, 4.0);
	cr_assert_eq(ctx->scaler.backoff_factor, 0.25);
	cr_assert_eq(ctx->scaler.min_scale, 2.0);
	cr_assert_eq(ctx->scaler.max_scale, 65536.0);
	cr_assert_eq(ctx->cfg.seed, 42u);
	cr_assert_str_eq(amp_config_get(ctx, "num_threads"), "2");
	cr_assert_str_eq(amp_config_get(ctx, "kernels"), "scalar");
	cr_assert_eq(amp_loss_scale(ctx), 1024.0);
	amp_ctx_free(ctx);
}

Test(config, file_static_scale)
{
	write_cfg("loss_scale = 512\n");
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(cfgpath, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(ctx->scaler.dynamic, 0);
	cr_assert_eq(amp_loss_scale(ctx), 512.0);
	cr_assert_str_eq(amp_config_get(ctx, "loss_scale"), "512");
	amp_ctx_free(ctx);
}

Test(config, unknown_key_names_file_and_line)
{
	write_cfg("precision_mode = force_fp32\n"
	          "# comment\n"
	          "foo = 1\n");
	char err[256] = "";
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "amp.cfg:3: unknown key 'foo'");
	expect_msg(err, cfgpath);
}

Test(config, bad_values_name_file_and_line)
{
	static const struct {
		const char *line, *needle;
	} cases[] = {
	    {"precision_mode = fp8", "precision_mode: unknown mode 'fp8'"},
	    {"precision_mode =", "precision_mode"},
	    {"loss_scale = fast", "loss_scale"},
	    {"loss_scale = -4", "loss_scale"},
	    {"loss_scale = 0", "loss_scale"},
	    {"loss_scale = inf", "loss_scale"},
	    {"loss_scale_init = 0", "loss_scale_init"},
	    {"loss_scale_init = nan", "loss_scale_init"},
	    {"loss_scale_init = 12abc", "loss_scale_init"},
	    {"loss_scale_growth_interval = 0", "loss_scale_growth_interval"},
	    {"loss_scale_growth_interval = 2.5", "loss_scale_growth_interval"},
	    {"loss_scale_growth_interval = 1e300", "loss_scale_growth_interval"},
	    {"loss_scale_growth_factor = 1", "loss_scale_growth_factor"},
	    {"loss_scale_backoff_factor = 1", "loss_scale_backoff_factor"},
	    {"loss_scale_backoff_factor = 0", "loss_scale_backoff_factor"},
	    {"loss_scale_min = 0", "loss_scale_min"},
	    {"loss_scale_max = -1", "loss_scale_max"},
	    {"loss_scale_maximum = 3", "unknown key 'loss_scale_maximum'"},
	    {"seed = -1", "seed"},
	    {"seed = 1.5", "seed"},
	    {"seed = 1e300", "seed"},
	    {"num_threads = 0", "num_threads"},
	    {"num_threads = 1000", "num_threads"},
	    {"kernels = sse2", "kernels"},
	    {"just some words", "expected 'key = value'"},
	    {"= 3", "unknown key ''"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char text[256], err[512] = "";
		snprintf(text, sizeof text, "seed = 3\n\n%s\nseed = 4\n", cases[i].line);
		write_cfg(text);
		expect_fail(AMP_ECONFIG, err, sizeof err);
		expect_msg(err, "amp.cfg:3: ");
		expect_msg(err, cases[i].needle);
	}
}

Test(config, unknown_op_in_lists)
{
	char err[256] = "";
	write_cfg("custom_white_list = MatMul, Softmaxx\n");
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "amp.cfg:1: custom_white_list: unknown op name 'Softmaxx'");

	write_cfg("precision_mode = allow_mix_precision\ncustom_black_list = Add matmul\n");
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "amp.cfg:2: custom_black_list: unknown op name 'matmul'");
}

/* An op in both lists takes the later setting (the environment's over the file's) and leaves
 * the other list: before, both lists still named it, in amp_config_get and in the profile,
 * and its advice asked for a setting that was already there. */
Test(config, op_moved_between_lists_leaves_the_other)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "custom_black_list", "Exp, Log"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "custom_white_list", "MatMul, Exp"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "custom_black_list"), "Log");
	cr_assert_str_eq(amp_config_get(ctx, "custom_white_list"), "MatMul, Exp");
	cr_assert_eq(ctx->cfg.custom[AMP_OP_EXP], AMP_LIST_WHITE);
	cr_assert_eq(amp_config_set(ctx, "custom_black_list", "Exp, MatMul, Sum"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "custom_white_list"), "");
	cr_assert_eq(ctx->cfg.custom[AMP_OP_MATMUL], AMP_LIST_BLACK);
	amp_ctx_free(ctx);
}

/* Scales below 2^-126 made 1/scale Inf and every step overflow: refused with the range. */
Test(config, scales_below_flt_min_refused)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	const char *keys[] = {"loss_scale", "loss_scale_init", "loss_scale_min", "loss_scale_max"};
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(amp_config_set(ctx, keys[i], "1e-40"), AMP_ECONFIG, "%s", keys[i]);
		cr_assert(strstr(amp_ctx_error(ctx), "1.17549e-38"), "%s", amp_ctx_error(ctx));
		cr_assert_eq(amp_config_set(ctx, keys[i], "1.1754943508222875e-38"), AMP_OK, "%s: %s",
		             keys[i], amp_ctx_error(ctx));
	}
	/* an open end is shown open */
	cr_assert_eq(amp_config_set(ctx, "loss_scale_backoff_factor", "0"), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(ctx), "out of range (0, 1)"), "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_config_set(ctx, "loss_scale_growth_factor", "1"), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(ctx), "out of range (1, 1.79769e+308]"), "%s",
	          amp_ctx_error(ctx));
	amp_ctx_free(ctx);
}

/* An FP32 mode scales nothing: from it any mode may follow mid-run (its unused scaler starts
 * of the new kind), and it may follow any mode. */
Test(config, fp32_mode_switches_either_way)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision_bf16"), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_fp32"), AMP_OK, "%s",
	             amp_ctx_error(ctx));
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_bf16"), AMP_OK, "%s",
	             amp_ctx_error(ctx));
	cr_assert_eq(ctx->scaler.dynamic, 0);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_fp32"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision"), AMP_OK, "%s",
	             amp_ctx_error(ctx));
	cr_assert_eq(ctx->scaler.dynamic, 1, "fp16 after fp32: dynamic scaling starts");
	cr_assert_gt(amp_loss_scale(ctx), 1.0);
	/* between the scaling modes the rule stands */
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_bf16"), AMP_ESTATE);
	amp_ctx_free(ctx);
}

/* A scaler that decided a step is not replaced through an FP32 mode: fp16 (dynamic), one
 * update, fp32, then a bf16 mode (static) is refused as it is straight from fp16; fp16 again is
 * fine and finds the scaler as it was. */
Test(config, fp32_mode_keeps_a_used_scaler)
{
	amp_ctx *ctx;
	amp_tensor *w, *loss;
	amp_optim *opt;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision"), AMP_OK);
	cr_assert_eq(amp_param_new(ctx, "w", amp_shape1(4), AMP_INIT_ONES, 0, &w), AMP_OK);
	cr_assert_eq(amp_optim_sgd_new(ctx, &(amp_sgd_options){.lr = 0.1f}, &opt), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_sum(ctx, "loss", w, &loss), AMP_OK);
	cr_assert_eq(amp_backward(ctx, loss), AMP_OK);
	cr_assert_eq(amp_optim_step(opt, NULL), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	amp_scaler used = ctx->scaler;
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_fp32"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision_bf16"), AMP_ESTATE,
	             "a used dynamic scaler is not dropped by way of fp32");
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision"), AMP_OK);
	cr_assert_eq(ctx->scaler.dynamic, 1);
	cr_assert_eq(ctx->scaler.clean_steps, used.clean_steps, "the scaler as it was");
	cr_assert_eq(ctx->scaler.scale, used.scale);
	amp_ctx_free(ctx);
}

Test(config, missing_file)
{
	char path[200], err[512] = "";
	snprintf(path, sizeof path, "%s/nope.cfg", tmpdir);
	amp_ctx *ctx = (amp_ctx *)0x1;
	cr_assert_eq(amp_ctx_new(path, &ctx, err, sizeof err), AMP_EIO);
	cr_assert_null(ctx);
	expect_msg(err, path);
}

Test(config, errbuf_truncated_safely)
{
	write_cfg("foo = 1\n");
	char err[8];
	memset(err, 'x', sizeof err);
	expect_fail(AMP_ECONFIG, err, sizeof err);
	cr_assert_eq(strlen(err), sizeof err - 1);
	expect_fail(AMP_ECONFIG, NULL, 0); /* no buffer: still fails cleanly */
}

/* A misspelt AMP_* variable is not silently ignored: one warning naming it and the setting it
 * was probably meant to be; real settings and AMP_ names far from any say nothing. */
/* The suite's setup has run already (a test's .init comes after it): only the redirection. */
static void setup_stderr(void)
{
	cr_redirect_stderr();
}

/* What the test wrote to the redirected stderr so far, into buf. */
static const char *stderr_text(char *buf, size_t len)
{
	fflush(stderr);
	size_t n = fread(buf, 1, len - 1, cr_get_redirected_stderr());
	buf[n] = 0;
	return buf;
}

Test(config, env_unknown_variable_warns, .init = setup_stderr)
{
	setenv("AMP_PRECISON_MODE", "force_fp16", 1);
	setenv("AMP_LOSS_SCALE", "dynamic", 1);
	setenv("AMP_TEST_QUICK", "1", 1);
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_MIX, "the misspelt variable set nothing");
	amp_ctx_free(ctx);
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK); /* said once per process */
	amp_ctx_free(ctx);
	char buf[1024];
	cr_assert_str_eq(stderr_text(buf, sizeof buf),
	                 "libamprt: warning: environment AMP_PRECISON_MODE is not one of its "
	                 "settings and is ignored (did you mean AMP_PRECISION_MODE?)\n");
}

/* The program's amp_config_set wins over the environment, and says so when it changes what
 * the user set there (the variable would otherwise seem to do nothing); the same value, or a
 * key the environment did not set, says nothing. */
Test(config, env_overridden_by_the_program_warns, .init = setup_stderr)
{
	setenv("AMP_PRECISION_MODE", "allow_mix_precision_bf16", 1);
	setenv("AMP_SEED", "7", 1);
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "seed", "7"), AMP_OK);              /* the same: silent */
	cr_assert_eq(amp_config_set(ctx, "gradient_clipping", "1"), AMP_OK); /* not in the env */
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_fp32"), AMP_OK);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP32, "the program's setting wins");
	cr_assert_str_eq(amp_config_get(ctx, "precision_mode"), "force_fp32");
	amp_ctx_free(ctx);
	char buf[1024];
	cr_assert_str_eq(stderr_text(buf, sizeof buf),
	                 "libamprt: warning: environment AMP_PRECISION_MODE="
	                 "allow_mix_precision_bf16 is overridden by the program: "
	                 "amp_config_set(precision_mode, force_fp32)\n");
}

/* A value amp_config_get returned stays valid while other keys are read (each has its own
 * buffer): two numbers in one printf. */
Test(config, get_values_survive_reads_of_other_keys)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "seed", "7"), AMP_OK);
	const char *seed = amp_config_get(ctx, "seed");
	const char *init = amp_config_get(ctx, "loss_scale_init");
	const char *interval = amp_config_get(ctx, "loss_scale_growth_interval");
	cr_assert_str_eq(seed, "7");
	cr_assert_str_eq(init, "128");
	cr_assert_str_eq(interval, "2000");
	amp_ctx_free(ctx);
}

Test(config, amp_config_env_path)
{
	write_cfg("precision_mode = force_fp32\n");
	setenv("AMP_CONFIG", cfgpath, 1);
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP32);
	cr_assert_eq(amp_loss_scale(ctx), 1.0); /* no scaling in force_fp32 */
	amp_ctx_free(ctx);

	/* An explicit path wins over $AMP_CONFIG. */
	char other[200];
	snprintf(other, sizeof other, "%s/other.cfg", tmpdir);
	FILE *f = fopen(other, "w");
	cr_assert_not_null(f);
	fputs("precision_mode = force_fp16\n", f);
	fclose(f);
	cr_assert_eq(amp_ctx_new(other, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP16);
	amp_ctx_free(ctx);
	unlink(other);
}

/* ---- environment overrides --------------------------------------------------------------- */

Test(config, env_overrides_file)
{
	write_cfg("precision_mode = force_fp16\n"
	          "loss_scale_growth_interval = 100\n"
	          "loss_scale_init = 64\n"
	          "custom_black_list = MatMul\n");
	setenv("AMP_PRECISION_MODE", "force_fp32", 1);
	setenv("AMP_LOSS_SCALE_GROWTH_INTERVAL", "7", 1);
	setenv("AMP_CUSTOM_BLACK_LIST", "Add", 1);
	setenv("AMP_SEED", "9", 1);
	amp_ctx *ctx;
	char err[256] = "";
	cr_assert_eq(amp_ctx_new(cfgpath, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP32);
	cr_assert_eq(ctx->scaler.growth_interval, 7);
	cr_assert_eq(ctx->scaler.scale, 64.0); /* from the file, not overridden */
	/* The env list replaces the file's black list. */
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_MATMUL), AMP_LIST_WHITE);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_ADD), AMP_LIST_BLACK);
	cr_assert_eq(ctx->cfg.seed, 9u);
	/* amp_config_set comes last and wins over the environment. */
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "must_keep_origin_dtype"), AMP_OK);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_KEEP_ORIGIN);
	amp_ctx_free(ctx);
}

Test(config, env_without_file)
{
	setenv("AMP_LOSS_SCALE", "256", 1);
	setenv("AMP_NUM_THREADS", "2", 1);
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(ctx->scaler.dynamic, 0);
	cr_assert_eq(amp_loss_scale(ctx), 256.0);
	cr_assert_str_eq(amp_config_get(ctx, "num_threads"), "2");
	amp_ctx_free(ctx);
}

Test(config, env_bad_value)
{
	setenv("AMP_LOSS_SCALE_BACKOFF_FACTOR", "2", 1);
	amp_ctx *ctx = (amp_ctx *)0x1;
	char err[256] = "";
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_ECONFIG);
	cr_assert_null(ctx);
	cr_log_info("msg=\"%s\"", err);
	expect_msg(err, "AMP_LOSS_SCALE_BACKOFF_FACTOR");
	expect_msg(err, "loss_scale_backoff_factor");

	unsetenv("AMP_LOSS_SCALE_BACKOFF_FACTOR");
	setenv("AMP_CUSTOM_WHITE_LIST", "Softmax,Bogus", 1);
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_ECONFIG);
	expect_msg(err, "AMP_CUSTOM_WHITE_LIST");
	expect_msg(err, "unknown op name 'Bogus'");
}

Test(config, file_error_beats_env)
{
	/* The file is read first; its error is the one reported. */
	write_cfg("bar = 2\n");
	setenv("AMP_PRECISION_MODE", "force_fp32", 1);
	char err[256] = "";
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "amp.cfg:1: unknown key 'bar'");
}

/* ---- amp_config_set ---------------------------------------------------------------------- */

Test(config, set_errors_leave_state)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "custom_white_list", "Softmax"), AMP_OK);
	/* A list with one bad name changes nothing. */
	cr_assert_eq(amp_config_set(ctx, "custom_white_list", "Exp, Nope"), AMP_ECONFIG);
	cr_assert_not_null(strstr(amp_ctx_error(ctx), "unknown op name 'Nope'"), "%s",
	                   amp_ctx_error(ctx));
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_SOFTMAX), AMP_LIST_WHITE);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_EXP), AMP_LIST_BLACK);
	cr_assert_str_eq(amp_config_get(ctx, "custom_white_list"), "Softmax");
	/* A new white list replaces the old one; an empty one clears it. */
	cr_assert_eq(amp_config_set(ctx, "custom_white_list", "Exp"), AMP_OK);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_SOFTMAX), AMP_LIST_BLACK);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_EXP), AMP_LIST_WHITE);
	cr_assert_eq(amp_config_set(ctx, "custom_white_list", ""), AMP_OK);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_EXP), AMP_LIST_BLACK);
	/* A bad value keeps the previous one. */
	cr_assert_eq(amp_config_set(ctx, "loss_scale_init", "512"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_init", "-3"), AMP_ECONFIG);
	cr_assert_eq(amp_loss_scale(ctx), 512.0);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "fp16"), AMP_ECONFIG);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_MIX);
	cr_assert_eq(amp_config_set(ctx, "colour", "blue"), AMP_ECONFIG);
	cr_assert_str_eq(amp_ctx_error(ctx), "unknown key 'colour'");
	amp_ctx_free(ctx);
}

Test(config, seed_full_range)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "seed", "18446744073709551615"), AMP_OK);
	cr_assert_eq(ctx->cfg.seed, UINT64_MAX);
	cr_assert_str_eq(amp_config_get(ctx, "seed"), "18446744073709551615");
	cr_assert_eq(amp_config_set(ctx, "seed", "9007199254740993"), AMP_OK);
	cr_assert_eq(ctx->cfg.seed, 9007199254740993ull);
	cr_assert_eq(amp_config_set(ctx, "seed", "18446744073709551616"), AMP_ECONFIG);
	cr_assert_eq(amp_config_set(ctx, "seed", "0"), AMP_OK);
	cr_assert_eq(ctx->cfg.seed, 0u);
	amp_ctx_free(ctx);
}

Test(config, scaler_keys_locked_after_first_step)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_init", "32"), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_init", "64"), AMP_ESTATE);
	cr_assert_eq(amp_config_set(ctx, "loss_scale", "dynamic"), AMP_ESTATE);
	cr_assert_eq(amp_loss_scale(ctx), 32.0);
	/* The scaler's live state survives changes to other keys. */
	ctx->scaler.scale = 8;
	ctx->scaler.clean_steps = 5;
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_fp16"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "custom_black_list", "Add"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "seed", "5"), AMP_OK);
	cr_assert_eq(ctx->scaler.scale, 8.0, "scale reset to %g by an unrelated key",
	             ctx->scaler.scale);
	cr_assert_eq(ctx->scaler.clean_steps, 5);
	amp_ctx_free(ctx);
}

Test(config, init_scale_clamped_to_range)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_init", "1e9"), AMP_OK);
	cr_assert_eq(amp_loss_scale(ctx), 16777216.0, "got %g", amp_loss_scale(ctx));
	cr_assert_eq(amp_config_set(ctx, "loss_scale_max", "1e10"), AMP_OK);
	cr_assert_eq(amp_loss_scale(ctx), 1e9);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_min", "4"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_init", "0.5"), AMP_OK);
	cr_assert_eq(amp_loss_scale(ctx), 4.0);
	amp_ctx_free(ctx);
}

/* Lines of any length are read whole: a long comment is a comment, and a value that goes on
 * past a thousand characters is one value (here not a number), never a second line. */
Test(config, long_lines_read_whole)
{
	char text[4200];
	memset(text, '#', 3000);
	snprintf(text + 3000, sizeof text - 3000, "\nseed = 7\n");
	write_cfg(text);
	amp_ctx *ctx;
	char err[256] = "";
	cr_assert_eq(amp_ctx_new(cfgpath, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_str_eq(amp_config_get(ctx, "seed"), "7");
	amp_ctx_free(ctx);
	memset(text, ' ', 2100);
	memcpy(text, "seed = 1", 8);
	snprintf(text + 2100, sizeof text - 2100, "2\nseed = 3\n");
	write_cfg(text);
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "amp.cfg:1: seed: ");
}

/* A file that cannot be read to its end is an error, not a short file: a directory (its
 * read fails), a NUL byte (not text). */
Test(config, unreadable_or_binary_file)
{
	char err[256] = "";
	amp_ctx *ctx = (amp_ctx *)0x1;
	cr_assert_eq(amp_ctx_new(tmpdir, &ctx, err, sizeof err), AMP_EIO, "%s", err);
	cr_assert_null(ctx);
	expect_msg(err, "cannot read config");
	setenv("AMP_CONFIG", tmpdir, 1);
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_EIO, "%s", err);
	unsetenv("AMP_CONFIG");
	FILE *f = fopen(cfgpath, "w");
	cr_assert_not_null(f);
	fwrite("seed = 1\nseed\0 = 2\n", 1, 20, f);
	fclose(f);
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "amp.cfg:2: a NUL byte");
}

/* loss_scale_min above loss_scale_max is refused whichever was set last: from a file or the
 * environment when the context is made, through amp_config_set at the next step. */
Test(config, scale_min_above_max_refused)
{
	write_cfg("loss_scale_min = 1000\n");
	setenv("AMP_LOSS_SCALE_MAX", "10", 1);
	char err[256] = "";
	expect_fail(AMP_ECONFIG, err, sizeof err);
	expect_msg(err, "loss_scale_min (1000, from ");
	expect_msg(err, "amp.cfg:1) is above loss_scale_max (10, from environment AMP_LOSS_SCALE_MAX)");
	unsetenv("AMP_LOSS_SCALE_MAX");
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	/* raised together, min first: fine once both are set */
	cr_assert_eq(amp_config_set(ctx, "loss_scale_min", "1e8"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_max", "1e9"), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_max", "1e7"), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(ctx), "is above loss_scale_max (1e+07, from amp_config_set)"),
	          "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_config_set(ctx, "loss_scale_max", "1e9"), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(amp_loss_scale(ctx), 1e8);
	amp_ctx_free(ctx);
	/* a scale past the float range would make every seed gradient Inf */
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "loss_scale", "1e39"), AMP_ECONFIG);
	cr_assert_eq(amp_config_set(ctx, "loss_scale_max", "1e39"), AMP_ECONFIG);
	cr_assert_eq(amp_config_set(ctx, "loss_scale", "1e38"), AMP_OK);
	amp_ctx_free(ctx);
}

/* A mode changed after the first step must keep the kind of loss scaling the scaler started
 * with (fp16 modes dynamic, bf16 modes static 1): bf16 -> fp16 would run FP16 unscaled. */
Test(config, later_mode_keeps_the_scaling)
{
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision_bf16"), AMP_OK);
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	cr_assert_eq(amp_step_end(ctx), AMP_OK);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "allow_mix_precision"), AMP_ESTATE);
	cr_assert(strstr(amp_ctx_error(ctx), "allow_mix_precision needs dynamic loss scaling"),
	          "%s", amp_ctx_error(ctx));
	cr_assert_str_eq(amp_config_get(ctx, "precision_mode"), "allow_mix_precision_bf16");
	cr_assert_eq(ctx->half, AMP_BF16);
	cr_assert_eq(amp_config_set(ctx, "precision_mode", "force_bf16"), AMP_OK);
	amp_ctx_free(ctx);
}

/* num_threads and kernels are the process's: a context reads what another one set. */
Test(config, threads_and_kernels_are_the_process_s)
{
	amp_ctx *a, *b;
	cr_assert_eq(amp_ctx_new(NULL, &a, NULL, 0), AMP_OK);
	cr_assert_eq(amp_ctx_new(NULL, &b, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(a, "kernels", "scalar"), AMP_OK);
	cr_assert_eq(amp_config_set(a, "num_threads", "1"), AMP_OK);
	cr_assert_eq(amp_config_set(b, "kernels", "auto"), AMP_OK);
	cr_assert_eq(amp_config_set(b, "num_threads", "2"), AMP_OK);
	cr_assert_str_eq(amp_config_get(a, "kernels"), "auto");
	cr_assert_str_eq(amp_config_get(a, "num_threads"), "2");
	cr_assert_eq(amp_config_set(a, "kernels", "scalar"), AMP_OK);
	cr_assert_str_eq(amp_config_get(b, "kernels"), "scalar");
	cr_assert_eq(amp_config_set(a, "kernels", "auto"), AMP_OK);
	cr_assert_eq(amp_config_set(a, "num_threads", "1"), AMP_OK);
	amp_ctx_free(a);
	amp_ctx_free(b);
}

Test(config, last_line_without_newline)
{
	/* A final line of exactly the buffer's capacity, with no newline, is still fine. */
	char text[1100];
	memset(text, ' ', sizeof text);
	memcpy(text, "seed = 7", 8);
	text[1023] = 0;
	write_cfg(text);
	amp_ctx *ctx;
	char err[256] = "";
	cr_assert_eq(amp_ctx_new(cfgpath, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_eq(ctx->cfg.seed, 7u);
	amp_ctx_free(ctx);
	write_cfg("precision_mode = force_fp32");
	cr_assert_eq(amp_ctx_new(cfgpath, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP32);
	amp_ctx_free(ctx);
}

Test(config, crlf_and_load_into_live_context)
{
	write_cfg("precision_mode = force_fp16\r\ncustom_black_list = Exp\r\n");
	amp_ctx *ctx;
	cr_assert_eq(amp_ctx_new(NULL, &ctx, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_load(ctx, cfgpath), AMP_OK, "%s", amp_ctx_error(ctx));
	cr_assert_eq(ctx->cfg.mode, AMP_MODE_FORCE_FP16);
	cr_assert_eq(amp_policy_list(ctx, AMP_OP_EXP), AMP_LIST_BLACK);
	cr_assert_str_eq(amp_config_get(ctx, "custom_black_list"), "Exp");
	/* After the first step the scaler keys are refused, with file and line. */
	cr_assert_eq(amp_step_begin(ctx), AMP_OK);
	write_cfg("seed = 3\nloss_scale_init = 64\n");
	cr_assert_eq(amp_config_load(ctx, cfgpath), AMP_ESTATE);
	cr_assert_not_null(strstr(amp_ctx_error(ctx), "amp.cfg:2: loss_scale_init"), "%s",
	                   amp_ctx_error(ctx));
	cr_assert_eq(ctx->cfg.seed, 3u); /* lines before the error were applied */
	amp_ctx_free(ctx);
}

/* Every precision mode by name; the BF16 modes compute in BF16 and default to no loss scaling
 * (a static 1), which loss_scale = dynamic turns back on, before or after the mode is set. */
Test(config, precision_modes_and_bf16_scaling)
{
	static const struct {
		const char *name;
		amp_dtype half;
		const char *scale;
	} modes[] = {
	    {"force_fp32", AMP_F16, "dynamic"},          {"allow_mix_precision", AMP_F16, "dynamic"},
	    {"allow_mix_precision_fp16", AMP_F16, "dynamic"},
	    {"allow_mix_precision_bf16", AMP_BF16, "1"}, {"force_fp16", AMP_F16, "dynamic"},
	    {"force_bf16", AMP_BF16, "1"},               {"must_keep_origin_dtype", AMP_F16, "dynamic"},
	};
	for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
		amp_ctx *c = NULL;
		cr_assert_eq(amp_ctx_new(NULL, &c, NULL, 0), AMP_OK);
		cr_assert_eq(amp_config_set(c, "precision_mode", modes[i].name), AMP_OK);
		cr_assert_str_eq(amp_config_get(c, "precision_mode"), modes[i].name);
		cr_assert_eq(c->half, modes[i].half, "%s", modes[i].name);
		cr_assert_str_eq(amp_config_get(c, "loss_scale"), modes[i].scale, "%s", modes[i].name);
		if (modes[i].half == AMP_BF16) {
			cr_assert_eq(amp_loss_scale(c), 1.0);
			cr_assert_eq(amp_config_set(c, "loss_scale", "dynamic"), AMP_OK);
			cr_assert_eq(amp_loss_scale(c), 128.0);
		}
		amp_ctx_free(c);
	}
	/* dynamic set first, the BF16 mode after: the explicit key wins */
	amp_ctx *c = NULL;
	cr_assert_eq(amp_ctx_new(NULL, &c, NULL, 0), AMP_OK);
	cr_assert_eq(amp_config_set(c, "loss_scale", "dynamic"), AMP_OK);
	cr_assert_eq(amp_config_set(c, "precision_mode", "force_bf16"), AMP_OK);
	cr_assert_str_eq(amp_config_get(c, "loss_scale"), "dynamic");
	cr_assert_eq(amp_loss_scale(c), 128.0);
	cr_assert_eq(amp_config_set(c, "loss_scale", "64"), AMP_OK);
	cr_assert_eq(amp_loss_scale(c), 64.0);
	/* an unknown mode names every mode */
	cr_assert_eq(amp_config_set(c, "precision_mode", "bf16"), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(c), "allow_mix_precision_bf16") &&
	          strstr(amp_ctx_error(c), "force_bf16"), "%s", amp_ctx_error(c));
	amp_ctx_free(c);
}

/* The data-parallel keys (amp/amp_mpi.h): the all-reduce dtype, the bucket size and the
 * optimizer's sharding, from the API and the environment, with errors that list what is
 * accepted. */
Test(config, allreduce_keys)
{
	amp_ctx *ctx = NULL;
	char err[256];
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_str_eq(amp_config_get(ctx, "allreduce_dtype"), "fp32");
	cr_assert_str_eq(amp_config_get(ctx, "allreduce_bucket_kb"), "1024");
	cr_assert_eq(amp_config_set(ctx, "allreduce_dtype", "bf16"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "allreduce_dtype"), "bf16");
	cr_assert_eq(amp_config_set(ctx, "allreduce_dtype", "int8"), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(ctx), "expected fp32, fp16 or bf16") != NULL, "%s",
	          amp_ctx_error(ctx));
	cr_assert_str_eq(amp_config_get(ctx, "allreduce_dtype"), "bf16", "a refused value changes nothing");
	cr_assert_eq(amp_config_set(ctx, "allreduce_bucket_kb", "0"), AMP_ECONFIG);
	cr_assert_eq(amp_config_set(ctx, "allreduce_bucket_kb", "64"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "allreduce_bucket_kb"), "64");
	cr_assert_str_eq(amp_config_get(ctx, "optimizer_sharding"), "off");
	cr_assert_eq(amp_config_set(ctx, "optimizer_sharding", "yes"), AMP_ECONFIG);
	cr_assert(strstr(amp_ctx_error(ctx), "expected 'on' or 'off'") != NULL, "%s",
	          amp_ctx_error(ctx));
	cr_assert_eq(amp_config_set(ctx, "optimizer_sharding", "on"), AMP_OK);
	cr_assert_str_eq(amp_config_get(ctx, "optimizer_sharding"), "on");
	amp_ctx_free(ctx);
	setenv("AMP_OPTIMIZER_SHARDING", "on", 1);
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_str_eq(amp_config_get(ctx, "optimizer_sharding"), "on");
	unsetenv("AMP_OPTIMIZER_SHARDING");
	amp_ctx_free(ctx);
	setenv("AMP_ALLREDUCE_DTYPE", "fp16", 1);
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_OK, "%s", err);
	cr_assert_str_eq(amp_config_get(ctx, "allreduce_dtype"), "fp16");
	amp_ctx_free(ctx);
	setenv("AMP_ALLREDUCE_DTYPE", "fp64", 1);
	cr_assert_eq(amp_ctx_new(NULL, &ctx, err, sizeof err), AMP_ECONFIG);
	cr_assert(strstr(err, "AMP_ALLREDUCE_DTYPE") != NULL, "%s", err);
}
