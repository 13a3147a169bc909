/* decode.c — ring record decoding with strict bounds checks.
 *
 * The rings are written by the application, which may be buggy or hostile: every record is
 * copied out of shared memory first, then its stamp, type, size and variable-length fields are
 * checked against the wire format of amp_events.h.  Nothing here trusts a length it has not
 * checked; the libFuzzer target (tests/fuzz/fuzz_decode.c) drives this file.
 */
#include <string.h>

#include "writer_int.h"

/* The record's size and content against its row of the record table (records.c). */
static int record_valid(const unsigned char *buf, unsigned type, unsigned n)
{
	const prof_rec_type *t = &prof_rec_types[type];
	if (t->slots && n != t->slots)
		return 0;
	if (!t->slots && !t->valid)
		return 0; /* a variable-size type must say what a valid size is */
	return t->valid ? t->valid(buf, n) : 1;
}

int prof_decode(const unsigned char *slots, uint64_t nslots, uint64_t pos, uint64_t avail,
                unsigned char *buf, prof_record *out)
{
	if (!slots || nslots == 0 || (nslots & (nslots - 1)) || avail == 0)
		return PROF_DECODE_NEED;
	uint64_t idx = pos & (nslots - 1);
	/* the header first, copied, then the whole record */
	amp_rec_hdr h;
	memcpy(&h, slots + idx * AMP_SLOT_SIZE, sizeof h);
	if (h.stamp != (uint32_t)pos)
		return PROF_DECODE_BAD;
	unsigned n = h.nslots;
	if (h.type == AMP_REC_PAD) {
		/* padding runs exactly to the end of the ring */
		if (n == 0 || idx + n != nslots)
			return PROF_DECODE_BAD;
		if (n > avail)
			return PROF_DECODE_NEED;
		out->type = AMP_REC_PAD;
		out->nslots = n;
		out->rec = NULL;
		return (int)n;
	}
	if (n == 0 || n > AMP_REC_MAX_SLOTS || idx + n > nslots || h.type >= AMP_REC_TYPE_COUNT)
		return PROF_DECODE_BAD;
	if (n > avail)
		return PROF_DECODE_NEED;
	memcpy(buf, slots + idx * AMP_SLOT_SIZE, (size_t)n * AMP_SLOT_SIZE);
	/* the copy must still carry the stamp we checked (the producer may have moved on) */
	amp_rec_hdr h2;
	memcpy(&h2, buf, sizeof h2);
	if (memcmp(&h, &h2, sizeof h) != 0 || !record_valid(buf, h.type, n))
		return PROF_DECODE_BAD;
	out->type = h.type;
	out->nslots = n;
	out->rec = buf;
	return (int)n;
}
