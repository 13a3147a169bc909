/* batch.h — small helpers shared by the training loops: a seeded RNG, an epoch shuffler,
 * minibatch gathering, accuracy counting and progress lines.
 *
 * Everything is deterministic for a given seed and allocates nothing.
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

#endif
