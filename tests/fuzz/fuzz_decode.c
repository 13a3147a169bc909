/* fuzz_decode.c — libFuzzer target for ampprof's ring decoder (profiler/decode.c).
 *
 * The input is a ring image: its first 16 bytes choose the start position and the claimed
 * number of readable slots, the rest is the slots (rounded down to a power of two).  Every
 * decoded record is read field by field, as the writer would, under ASan and UBSan.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "prof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 16 + AMP_SLOT_SIZE)
		return 0;
	uint64_t pos, avail;
	memcpy(&pos, data, 8);
	memcpy(&avail, data + 8, 8);
	uint64_t nslots = 1;
	while (nslots * 2 * AMP_SLOT_SIZE <= size - 16)
		nslots *= 2;
	/* a private copy, exactly nslots slots long, so ASan sees any overread */
	unsigned char *slots = malloc(nslots * AMP_SLOT_SIZE);
	memcpy(slots, data + 16, nslots * AMP_SLOT_SIZE);
	unsigned char buf[PROF_DECODE_BUF];
	uint64_t end = pos + (avail % (4 * nslots));
	volatile uint64_t sink = 0;
	while (pos < end) {
		prof_record rec;
		int n = prof_decode(slots, nslots, pos, end - pos, buf, &rec);
		if (n == PROF_DECODE_NEED)
			break;
		if (n < 0) {
			pos++;
			continue;
		}
		if (rec.rec) {
			const unsigned char *p = rec.rec;
			for (unsigned i = 0; i < rec.nslots * AMP_SLOT_SIZE; i++)
				sink += p[i];
			if (rec.type == AMP_REC_STRING) {
				amp_rec_string s;
				memcpy(&s, p, sizeof s);
				for (unsigned i = 0; i < s.h.len; i++)
					sink += p[AMP_REC_STRING_FIXED + i];
			} else if (rec.type == AMP_REC_META) {
				amp_rec_meta m;
				memcpy(&m, p, sizeof m);
				for (unsigned i = 0; i < (unsigned)m.klen + m.vlen; i++)
					sink += p[AMP_REC_META_FIXED + i];
			} else if (rec.type == AMP_REC_OP) {
				amp_rec_op o;
				memcpy(&o, p, sizeof o);
				sink += (uint64_t)amp_op_name((amp_op_type)o.op)[0];
				for (unsigned i = 0; i < o.ndim; i++)
					sink += (uint64_t)o.shape[i];
			} else if (rec.type == AMP_REC_CALLSITE) {
				amp_rec_callsite c;
				memcpy(&c, p, sizeof c);
				for (unsigned i = 0; i < c.nframes; i++)
					sink += c.frames[i] + c.paths[i];
			} else if (rec.type == AMP_REC_CRASH) {
				amp_rec_crash c;
				memcpy(&c, p, sizeof c);
				for (unsigned i = 0; i < c.nframes; i++)
					sink += c.frames[i];
			}
		}
		pos += (uint64_t)n;
	}
	free(slots);
	(void)sink;
	return 0;
}
