/* batch.h — small helpers shared by the training loops: a seeded RNG, an epoch shuffler,
 * minibatch gathering, accuracy counting, the window of recent losses and progress lines.
 *
 * Nothing here allocates.  Everything is deterministic for a given seed except the rate on
 * the progress lines, which is measured with the wall clock.
 */
#ifndef AMP_EX_BATCH_H
#define AMP_EX_BATCH_H

#include <stdint.h>

#include "data.h"

/* splitmix64: the whole state is one word, seeded directly. */
typedef struct ex_rng {
	uint64_t s;
} ex_rng;

void ex_rng_seed(ex_rng *r, uint64_t seed);
uint64_t ex_rng_next(ex_rng *r);
/* Uniform in [0, 1). */
double ex_rng_uniform(ex_rng *r);
/* Uniform integer in [0, n), n >= 1. */
uint64_t ex_rng_below(ex_rng *r, uint64_t n);
/* Standard normal (Box-Muller). */
double ex_rng_normal(ex_rng *r);

/* Sets idx to 0..n-1. */
void ex_iota(int32_t *idx, int64_t n);
/* Fisher-Yates shuffle of idx (n entries). */
void ex_shuffle(int32_t *idx, int64_t n, ex_rng *r);

/* Copies images idx[start .. start+count) into x (count, rows*cols) and their labels into y. */
void ex_gather(const ex_images *im, const int32_t *idx, int64_t start, int64_t count, float *x,
               int32_t *y);

/* Number of rows of logits (n, classes) whose argmax equals the label (first max wins). */
int64_t ex_count_correct(const float *logits, const int32_t *labels, int64_t n, int64_t classes);

/* Prints one progress line to stdout:
 * "step    100  epoch 1  loss 0.512345  scale 128  1234 samples/s" (unit "samples/s" here). */
void ex_progress(int64_t step, int64_t epoch, double loss, double scale, double rate,
                 const char *unit);

/* ---- the last losses ----------------------------------------------------------------------- */
#define EX_LOSS_WINDOW 50

/* The training losses of the last EX_LOSS_WINDOW steps; zero-initialise ({0}) before use. */
typedef struct ex_loss_window {
	double loss[EX_LOSS_WINDOW]; /* ring, loss of step s at s % EX_LOSS_WINDOW */
	int64_t n;                   /* losses added so far */
} ex_loss_window;

/* Records the loss of the next step. */
void ex_loss_window_add(ex_loss_window *w, double loss);
/* Mean of the last min(n, EX_LOSS_WINDOW) losses (summed in ring order); NAN when empty. */
double ex_loss_window_mean(const ex_loss_window *w);

/* ---- progress lines every N steps ---------------------------------------------------------- */
typedef struct ex_meter {
	int64_t every;    /* a line every N steps; 0 = none */
	const char *unit; /* of the rate: "samples/s", "tokens/s" (not copied) */
	double t0;        /* ex_now() at the start or the last line */
	int64_t count;    /* samples (or tokens) since t0 */
} ex_meter;

/* Starts measuring now. */
void ex_meter_start(ex_meter *m, int64_t every, const char *unit);
/* Counts the count samples of training step number step (1-based: steps done so far) and, when
 * step is a multiple of every, prints an ex_progress line with their rate since the last one. */
void ex_meter_step(ex_meter *m, int64_t step, int64_t epoch, double loss, double scale,
                   int64_t count);

#endif
