/* profile_hist.h — the exponent histograms of tensor_stats.exp_hist read back on FP16's range:
 * what each bin means, its zone (zero, subnormal, normal, overflow) and the histograms summed
 * per tensor name, over a run or at one step.  ampdump --hist prints them, ampview's exponent
 * panel draws them.  Depends on SQLite only.  Thread-compatible.
 *
 * Bins (the runtime's statistics kernels, schema/amp_events.h amp_rec_tstats): 0 zero; 1 a
 * non-zero magnitude below 2^-14, FP16's smallest normal (an FP16 subnormal, or for a wider
 * type a value FP16 would make subnormal or flush to zero); 2..31 [2^(bin-16), 2^(bin-15)),
 * FP16's normal binades 2^-14 .. 2^15; 32 Inf or NaN, or a magnitude of 2^16 or more (beyond
 * FP16's largest finite value, 65504).  Bins 33..39 are reserved.
 */
#ifndef AMP_PROFILE_HIST_H
#define AMP_PROFILE_HIST_H

#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#define AMP_HIST_BINS 33 /* the bins in use of the 40 stored */

typedef enum amp_hist_zone {
	AMP_HIST_ZERO,
	AMP_HIST_SUBNORMAL,
	AMP_HIST_NORMAL,
	AMP_HIST_OVERFLOW,
} amp_hist_zone;

/* The zone of bin (0 .. AMP_HIST_BINS - 1). */
amp_hist_zone amp_hist_zone_of(int bin);
/* "zero", "subnormal", "normal", "overflow". */
const char *amp_hist_zone_name(amp_hist_zone z);
/* The power of two at the low edge of a normal bin (bin - 16: -14 .. 15). */
int amp_hist_bin_exp(int bin);
/* A bin's range as text: "0", "(0, 2^-14)", "[2^-14, 2^-13)", ..., ">= 2^16, inf, nan". */
void amp_hist_bin_range(int bin, char *buf, size_t len);

/* The histogram of one tensor name, summed over its rows. */
typedef struct amp_hist_tensor {
	char name[256];
	char dtype[24]; /* its dtypes ("fp16", "fp16,fp32") */
	int64_t rows;   /* tensor_stats rows summed */
	uint64_t bins[AMP_HIST_BINS];
	uint64_t count;  /* sum of the bins */
	int64_t zone[4]; /* the bins summed per amp_hist_zone */
} amp_hist_tensor;

/* Reads the histograms per tensor name of the whole run (step < 0) or of one step, of every
 * tensor (name NULL) or of the one named; in name order.  On success returns the count and
 * *out (free() it; NULL when 0); on an SQLite error -1 with the message in err. */
long amp_hist_read(sqlite3 *db, int64_t step, const char *name, amp_hist_tensor **out, char *err,
                   size_t errlen);

#endif
