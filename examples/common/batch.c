/* batch.c — seeded RNG, shuffling, minibatch gathering, accuracy, the loss window and progress
 * lines for the example training loops.
 */
#include "batch.h"

#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void ex_rng_seed(ex_rng *r, uint64_t seed)
{
	r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
}

uint64_t ex_rng_next(ex_rng *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

double ex_rng_uniform(ex_rng *r)
{
	return (double)(ex_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t ex_rng_below(ex_rng *r, uint64_t n)
{
	/* Rejection keeps the draw unbiased for any n. */
	uint64_t limit = UINT64_MAX - UINT64_MAX % n;
	uint64_t x;
	do
		x = ex_rng_next(r);
	while (x >= limit);
	return x % n;
}

double ex_rng_normal(ex_rng *r)
{
	double u1 = ((double)(ex_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
	double u2 = ex_rng_uniform(r);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void ex_iota(int32_t *idx, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		idx[i] = (int32_t)i;
}

void ex_shuffle(int32_t *idx, int64_t n, ex_rng *r)
{
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)ex_rng_below(r, (uint64_t)i + 1);
		int32_t t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
}

void ex_gather(const ex_images *im, const int32_t *idx, int64_t start, int64_t count, float *x,
               int32_t *y)
{
	const int64_t px = (int64_t)im->rows * im->cols;
	for (int64_t b = 0; b < count; b++) {
		int64_t i = idx ? idx[start + b] : start + b;
		memcpy(x + b * px, im->pixels + i * px, (size_t)px * sizeof(float));
		y[b] = im->labels[i];
	}
}

int64_t ex_count_correct(const float *logits, const int32_t *labels, int64_t n, int64_t classes)
{
	int64_t correct = 0;
	for (int64_t i = 0; i < n; i++) {
		const float *row = logits + i * classes;
		int64_t best = 0;
		for (int64_t c = 1; c < classes; c++)
			if (row[c] > row[best])
				best = c;
		correct += best == labels[i];
	}
	return correct;
}

void ex_progress(int64_t step, int64_t epoch, double loss, double scale, double rate,
                 const char *unit)
{
	printf("step %6" PRId64 "  epoch %" PRId64 "  loss %.6f  scale %g  %.0f %s\n", step, epoch,
	       loss, scale, rate, unit);
	fflush(stdout);
}

void ex_loss_window_add(ex_loss_window *w, double loss)
{
	w->loss[w->n % EX_LOSS_WINDOW] = loss;
	w->n++;
}

double ex_loss_window_mean(const ex_loss_window *w)
{
	int64_t k = w->n < EX_LOSS_WINDOW ? w->n : EX_LOSS_WINDOW;
	double sum = 0;
	for (int64_t i = 0; i < k; i++)
		sum += w->loss[i];
	return k ? sum / (double)k : (double)NAN;
}

void ex_meter_start(ex_meter *m, int64_t every, const char *unit)
{
	m->every = every;
	m->unit = unit;
	m->t0 = ex_now();
	m->count = 0;
}

void ex_meter_step(ex_meter *m, int64_t step, int64_t epoch, double loss, double scale,
                   int64_t count)
{
	m->count += count;
	if (!m->every || step % m->every != 0)
		return;
	double now = ex_now();
	ex_progress(step, epoch, loss, scale, (double)m->count / (now - m->t0), m->unit);
	m->t0 = now;
	m->count = 0;
}
