/* opcheck_cr.h — the Criterion side of the op tests: a fixture with the inputs loaded as
 * parameters, forward errors against an FP64 reference in force_fp32, force_fp16 and
 * force_bf16 with the stated tolerances, gradient checks by central differences
 * (opcheck_grad), and the master gradients of an op in a given mode.
 *
 * Tolerances: fp32 forward |y - ref| / max(1, |ref|) <= 1e-5; fp16 paths (force_fp16)
 * |y - ref| / max|ref| <= 1e-2; bf16 paths (force_bf16) <= 2^-6 (8 significant bits: inputs
 * and outputs rounded by up to 2^-9 each, amplified by exp/log/division in the op).
 * Header-only, for test files that include criterion first.
 */
#ifndef AMP_TEST_OPCHECK_CR_H
#define AMP_TEST_OPCHECK_CR_H

#include "opcheck.h"

#define TOL_F32  1e-5
#define TOL_F16  1e-2
#define TOL_BF16 0x1p-6

/* An open context with the inputs loaded as parameters and a step begun. */
typedef struct fixture {
	amp_ctx *ctx;
	amp_tensor *in[OPCHECK_MAX_IN];
	amp_tensor *out;
} fixture;

static inline void fx_open(fixture *f, const char *mode, int n, const amp_shape *shapes,
                           float **vals)
{
	memset(f, 0, sizeof *f);
	f->ctx = opcheck_ctx(mode);
	cr_assert_not_null(f->ctx, "context for %s", mode);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(amp_param_new(f->ctx, "in", shapes[i], AMP_INIT_ZEROS, 0, &f->in[i]),
		             AMP_OK);
		cr_assert_eq(amp_param_load(f->ctx, f->in[i], vals[i]), AMP_OK);
	}
	cr_assert_eq(amp_step_begin(f->ctx), AMP_OK);
}

/* Runs fn in mode; checks the output dtype and count, and returns its error against ref:
 * |y - ref| / max(1, |ref|) for fp32 outputs, |y - ref| / max|ref| for fp16 ones. */
static inline double fwd_err(const char *mode, int n, const amp_shape *shapes, float **vals,
                             opcheck_fn fn, void *arg, const double *ref, int64_t nref,
                             amp_dtype want)
{
	fixture f;
	fx_open(&f, mode, n, shapes, vals);
	int rc = fn(f.ctx, f.in, &f.out, arg);
	cr_assert_eq(rc, AMP_OK, "%s: %s", mode, amp_ctx_error(f.ctx));
	cr_assert_eq(f.out->dtype, want, "%s: output is %s, expected %s", mode,
	             amp_dtype_name(f.out->dtype), amp_dtype_name(want));
	cr_assert_eq(f.out->numel, nref);
	float *y = malloc((size_t)nref * sizeof(float));
	cr_assert_not_null(y);
	cr_assert_eq(amp_tensor_read_f32(f.ctx, f.out, y), AMP_OK);
	double scale = 0, err = 0;
	for (int64_t i = 0; i < nref; i++)
		scale = fmax(scale, fabs(ref[i]));
	for (int64_t i = 0; i < nref; i++) {
		double d = fabs((double)y[i] - ref[i]);
		double e = want != AMP_F32 ? d / fmax(scale, 1e-30) : d / fmax(1.0, fabs(ref[i]));
		if (!(e <= err))
			err = e; /* NaN stays */
	}
	free(y);
	amp_ctx_free(f.ctx);
	return err;
}

/* Forward in force_fp32, force_fp16 and force_bf16 against ref, with the stated tolerances. */
static inline void check_fwd(const char *what, int n, const amp_shape *shapes, float **vals,
                             opcheck_fn fn, void *arg, const double *ref, int64_t nref)
{
	double e32 = fwd_err("force_fp32", n, shapes, vals, fn, arg, ref, nref, AMP_F32);
	double e16 = fwd_err("force_fp16", n, shapes, vals, fn, arg, ref, nref, AMP_F16);
	double eb = fwd_err("force_bf16", n, shapes, vals, fn, arg, ref, nref, AMP_BF16);
	cr_log_info("%s forward: fp32 max rel err %.3g (tol %g), fp16 max err/scale %.3g (tol %g), "
	            "bf16 %.3g (tol %g)",
	            what, e32, TOL_F32, e16, TOL_F16, eb, TOL_BF16);
	cr_expect(e32 <= TOL_F32, "%s fp32 forward err %.3g", what, e32);
	cr_expect(e16 <= TOL_F16, "%s fp16 forward err %.3g", what, e16);
	cr_expect(eb <= TOL_BF16, "%s bf16 forward err %.3g", what, eb);
}

static inline void check_grad(const char *what, int n, const amp_shape *shapes, float **vals,
                              opcheck_fn fn, void *arg, float h, int samples, double tol)
{
	double e = opcheck_grad(n, shapes, vals, fn, arg, h, samples);
	cr_log_info("%s backward: max grad err %.3g (h %g, tol %g)", what, e, (double)h, tol);
	cr_expect(e <= tol, "%s gradient err %.3g > %g", what, e, tol);
}

static inline float *fill(int64_t n, uint64_t seed, float lo, float hi)
{
	float *v = malloc((size_t)n * sizeof(float));
	cr_assert_not_null(v);
	opcheck_fill(v, n, seed, lo, hi);
	return v;
}

static inline double *dalloc(int64_t n)
{
	double *v = calloc((size_t)n, sizeof(double));
	cr_assert_not_null(v);
	return v;
}

/* Master gradients of fn's inputs in mode (seeded like opcheck_grad); grads[i] is malloc'd. */
static inline void grads_in_mode(const char *mode, int n, const amp_shape *shapes, float **vals,
                                 opcheck_fn fn, void *arg, float **grads)
{
	fixture f;
	fx_open(&f, mode, n, shapes, vals);
	cr_assert_eq(fn(f.ctx, f.in, &f.out, arg), AMP_OK, "%s: %s", mode, amp_ctx_error(f.ctx));
	float *seed = malloc((size_t)f.out->numel * sizeof(float));
	cr_assert_not_null(seed);
	uint64_t s = 99;
	for (int64_t i = 0; i < f.out->numel; i++)
		seed[i] = amp_rng_uniform(&s) - 0.5f;
	cr_assert_eq(amp_backward_seeded(f.ctx, f.out, seed), AMP_OK, "%s: %s", mode,
	             amp_ctx_error(f.ctx));
	for (int i = 0; i < n; i++) {
		grads[i] = calloc((size_t)f.in[i]->numel, sizeof(float));
		cr_assert_not_null(grads[i]);
		amp_tensor *g = amp_tensor_grad(f.in[i]); /* the public reader: masters settled */
		cr_assert_not_null(g, "%s: input %d got no gradient", mode, i);
		cr_assert_eq(g->dtype, AMP_F32);
		memcpy(grads[i], g->data, (size_t)f.in[i]->numel * sizeof(float));
	}
	free(seed);
	amp_ctx_free(f.ctx);
}

/* The master gradients of fn's inputs in force_fp16 and force_bf16 against force_fp32:
 * max |g - g32| / max|g32| over each input within tol16 and tolbf. */
static inline void check_bwd_half(const char *what, int n, const amp_shape *shapes, float **vals,
                                  opcheck_fn fn, void *arg, double tol16, double tolbf)
{
	static const char *const modes[2] = {"force_fp16", "force_bf16"};
	float *g32[OPCHECK_MAX_IN] = {0}, *gh[OPCHECK_MAX_IN] = {0};
	grads_in_mode("force_fp32", n, shapes, vals, fn, arg, g32);
	for (int m = 0; m < 2; m++) {
		grads_in_mode(modes[m], n, shapes, vals, fn, arg, gh);
		double worst = 0;
		for (int i = 0; i < n; i++) {
			int64_t cnt = amp_shape_numel(shapes[i]);
			double scale = 0, d = 0;
			for (int64_t j = 0; j < cnt; j++) {
				scale = fmax(scale, fabs((double)g32[i][j]));
				d = fmax(d, fabs((double)gh[i][j] - (double)g32[i][j]));
			}
			double e = d / fmax(scale, 1e-30);
			if (!(e <= worst))
				worst = e;
			free(gh[i]);
		}
		double tol = m ? tolbf : tol16;
		cr_log_info("%s backward in %s vs force_fp32: max err/scale %.3g (tol %g)", what,
		            modes[m], worst, tol);
		cr_expect(worst <= tol, "%s backward in %s: err/scale %.3g > %g", what, modes[m],
		          worst, tol);
	}
	for (int i = 0; i < n; i++)
		free(g32[i]);
}

#endif
