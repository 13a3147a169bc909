/* test_alloc.c — failing the Nth allocation on purpose (SQLite's test_malloc.c discipline):
 * a small training step through libamprt, and creating and opening a profile through the
 * schema module, each with N walked from 0 until the run needs no more allocations.  Every
 * failure must give a clean error (AMP_ENOMEM and a message; an error code from the profile
 * module) and leave no block behind once the context or connection is closed.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "internal.h"
#include "profile_db.h"

/* ---- the runtime ---------------------------------------------------------------------------- */

#define IN 24
#define HID 40
#define OUT 5
#define BATCH 8

/* Two training steps of a small MLP in mode.  Returns AMP_OK, or the first error; *loss is the
 * last step's loss. */
static int train_small(const char *mode, double *loss)
{
	float x[BATCH * IN];
	int32_t y[BATCH];
	for (int i = 0; i < BATCH * IN; i++)
		x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
	for (int i = 0; i < BATCH; i++)
		y[i] = i % OUT;
	char err[256] = "";
	amp_ctx *ctx = NULL;
	int rc = amp_ctx_new(NULL, &ctx, err, sizeof err);
	if (rc != AMP_OK) {
		cr_assert_eq(rc, AMP_ENOMEM, "amp_ctx_new: %d", rc);
		cr_assert(strstr(err, "out of memory"), "amp_ctx_new said '%s'", err);
		cr_assert_null(ctx);
		return rc;
	}
	amp_tensor *w1, *b1, *w2, *b2;
	amp_optim *opt;
	amp_sgd_options so = {.lr = 0.1f, .momentum = 0.9f};
	if ((rc = amp_config_set(ctx, "precision_mode", mode)) ||
	    (rc = amp_param_new(ctx, "fc1.w", amp_shape2(HID, IN), AMP_INIT_KAIMING, 1, &w1)) ||
	    (rc = amp_param_new(ctx, "fc1.b", amp_shape1(HID), AMP_INIT_ZEROS, 0, &b1)) ||
	    (rc = amp_param_new(ctx, "fc2.w", amp_shape2(OUT, HID), AMP_INIT_KAIMING, 1, &w2)) ||
	    (rc = amp_param_new(ctx, "fc2.b", amp_shape1(OUT), AMP_INIT_ZEROS, 0, &b2)) ||
	    (rc = amp_optim_sgd_new(ctx, &so, &opt)))
		goto out;
	for (int step = 0; step < 2; step++) {
		amp_tensor *xt, *yt, *h, *a, *z, *l;
		if ((rc = amp_step_begin(ctx)) ||
		    (rc = amp_tensor_from_f32(ctx, x, amp_shape2(BATCH, IN), AMP_F32, &xt)) ||
		    (rc = amp_tensor_from_i32(ctx, y, amp_shape1(BATCH), &yt)) ||
		    (rc = amp_linear(ctx, "fc1", xt, w1, b1, &h)) || (rc = amp_relu(ctx, "relu", h, &a)) ||
		    (rc = amp_linear(ctx, "fc2", a, w2, b2, &z)) ||
		    (rc = amp_cross_entropy(ctx, "loss", z, yt, &l)))
			goto out;
		*loss = amp_tensor_item(ctx, l);
		if ((rc = amp_backward(ctx, l)) || (rc = amp_optim_step(opt, NULL)) ||
		    (rc = amp_step_end(ctx)))
			goto out;
	}
out:
	if (rc != AMP_OK) {
		cr_assert_eq(rc, AMP_ENOMEM, "%s: error %d (%s) where an allocation failed", mode, rc,
		             amp_ctx_error(ctx));
		cr_assert(strstr(amp_ctx_error(ctx), "out of memory"), "%s: message '%s'", mode,
		          amp_ctx_error(ctx));
	}
	amp_ctx_free(ctx);
	return rc;
}

static void walk_training(const char *mode, int persistent)
{
	double want = 0, got = 0;
	cr_assert_eq(train_small(mode, &want), AMP_OK);
	int64_t base = amp_mem_outstanding(), n;
	for (n = 0; n < 10000; n++) {
		amp_mem_fail_at(n, persistent);
		int rc = train_small(mode, &got);
		int64_t failed = amp_mem_failures();
		amp_mem_fail_at(-1, 0);
		cr_assert_eq(amp_mem_outstanding(), base, "%s: allocation %lld failed: %lld blocks left",
		             mode, (long long)n, (long long)(amp_mem_outstanding() - base));
		if (!failed) { /* past the last allocation: the run is whole again */
			cr_assert_eq(rc, AMP_OK);
			cr_assert_eq(got, want, "%s: loss %.17g after the walk, %.17g before", mode, got,
			             want);
			break;
		}
		cr_assert_eq(rc, AMP_ENOMEM, "%s: allocation %lld failed but the run said %d", mode,
		             (long long)n, rc);
	}
	cr_log_info("%s (%s): each of %lld allocations failed in turn, each a clean "
	            "AMP_ENOMEM with nothing left behind", mode, persistent ? "from then on" : "once",
	            (long long)n);
	cr_assert_gt(n, 5, "the walk should cover the context, parameters, optimizer and arena");
}

Test(alloc, training_step_fp16_once)
{
	walk_training("allow_mix_precision", 0);
}

Test(alloc, training_step_bf16_persistent)
{
	walk_training("allow_mix_precision_bf16", 1);
}

/* ---- the profile module (SQLite's allocator) ------------------------------------------------ */

static int64_t sq_countdown = -1, sq_failures, sq_outstanding;

static void *sq_malloc(int n)
{
	if (sq_countdown == 0) {
		sq_countdown = -1;
		sq_failures++;
		return NULL;
	}
	if (sq_countdown > 0)
		sq_countdown--;
	/* the size before the block, as SQLite's xSize needs it */
	int64_t *p = malloc((size_t)n + sizeof(int64_t));
	if (!p)
		return NULL;
	*p = n;
	sq_outstanding++;
	return p + 1;
}

static void sq_free(void *p)
{
	if (!p)
		return;
	sq_outstanding--;
	free((int64_t *)p - 1);
}

static void *sq_realloc(void *p, int n)
{
	if (!p)
		return sq_malloc(n);
	if (sq_countdown == 0) {
		sq_countdown = -1;
		sq_failures++;
		return NULL;
	}
	if (sq_countdown > 0)
		sq_countdown--;
	int64_t *q = realloc((int64_t *)p - 1, (size_t)n + sizeof(int64_t));
	if (!q)
		return NULL;
	*q = n;
	return q + 1;
}

static int sq_size(void *p)
{
	return p ? (int)((int64_t *)p)[-1] : 0;
}

static int sq_roundup(int n)
{
	return (n + 7) & ~7;
}

static int sq_init(void *arg)
{
	(void)arg;
	return SQLITE_OK;
}

static void sq_shutdown(void *arg)
{
	(void)arg;
}

static const sqlite3_mem_methods sq_methods = {sq_malloc, sq_free,   sq_realloc, sq_size,
                                               sq_roundup, sq_init, sq_shutdown, NULL};

/* Creates a profile at path, closes it, opens it read-only and reads a meta key.  Returns 0
 * when all of it worked, else the first error's code (err holds its message). */
static int profile_round_trip(const char *path, char *err, size_t len)
{
	sqlite3 *db = NULL;
	err[0] = '\0';
	int rc = amp_profile_create(path, 1, &db, err, len);
	if (rc == AMP_PROFILE_OK) {
		rc = amp_profile_meta_set(db, "probe", "1");
		amp_profile_close(db);
		db = NULL;
	}
	if (rc == AMP_PROFILE_OK)
		rc = amp_profile_open(path, 0, &db, err, len);
	if (rc == AMP_PROFILE_OK) {
		char v[16];
		rc = amp_profile_meta_get(db, "probe", v, sizeof v);
		if (rc == AMP_PROFILE_OK && strcmp(v, "1") != 0)
			rc = AMP_PROFILE_ECORRUPT;
		amp_profile_close(db);
	}
	return rc;
}

Test(alloc, profile_create_and_open)
{
	char dir[] = "/tmp/test_alloc.XXXXXX", path[64], err[512];
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/p.db", dir);
	int64_t n;
	for (n = 0; n < 100000; n++) {
		cr_assert_eq(sqlite3_shutdown(), SQLITE_OK);
		cr_assert_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &sq_methods), SQLITE_OK);
		cr_assert_eq(sqlite3_initialize(), SQLITE_OK);
		sq_failures = 0;
		sq_countdown = n;
		int rc = profile_round_trip(path, err, sizeof err);
		sq_countdown = -1;
		int64_t failed = sq_failures;
		cr_assert_eq(sqlite3_shutdown(), SQLITE_OK);
		cr_assert_eq(sq_outstanding, 0, "allocation %lld failed: %lld SQLite blocks left",
		             (long long)n, (long long)sq_outstanding);
		if (!failed) {
			cr_assert_eq(rc, AMP_PROFILE_OK, "no failure, but %d: %s", rc, err);
			break;
		}
		/* A failure surfaces as an error code (with a message where the call takes a
		 * buffer), or was absorbed by SQLite and the round trip still worked. */
		if (rc != AMP_PROFILE_OK && err[0])
			cr_assert(strstr(err, path), "message without the path: '%s'", err);
	}
	cr_log_info("profile create + open: each of %lld SQLite allocations failed in turn, each "
	            "an error or absorbed, nothing left behind", (long long)n);
	cr_assert_gt(n, 50);
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	for (int i = 0; i < 4; i++) {
		char f[96];
		snprintf(f, sizeof f, "%s%s", path, suffix[i]);
		unlink(f);
	}
	rmdir(dir);
}
