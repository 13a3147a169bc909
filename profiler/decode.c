/* decode.c — ring record decoding with strict bounds checks.
 *
 * The rings are written by the application, which may be buggy or hostile: every record is
 * copied out of shared memory first, then its stamp, type, size and variable-length fields are
 * checked against the wire format of amp_events.h.  Nothing here trusts a length it has not
 * checked; the libFuzzer target (tests/fuzz/fuzz_decode.c) drives this file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, pipe2, dladdr1, sigabbrev_np */
#endif
#include <string.h>

#include "prof.h"

/* Slots a fixed-size record of this type must span, 0 for variable-size types. */
static unsigned fixed_slots(unsigned type)
{
	switch (type) {
	case AMP_REC_CLOCK: return AMP_REC_SLOTS(amp_rec_clock);
	case AMP_REC_MODULE: return AMP_REC_SLOTS(amp_rec_module);
	case AMP_REC_CALLSITE: return AMP_REC_SLOTS(amp_rec_callsite);
	case AMP_REC_OP: return AMP_REC_SLOTS(amp_rec_op);
	case AMP_REC_COPY: return AMP_REC_SLOTS(amp_rec_copy);
	case AMP_REC_STEP_BEGIN:
	case AMP_REC_STEP_END: return AMP_REC_SLOTS(amp_rec_step);
	case AMP_REC_SCALE: return AMP_REC_SLOTS(amp_rec_scale);
	case AMP_REC_MEMORY: return AMP_REC_SLOTS(amp_rec_memory);
	case AMP_REC_CRASH: return AMP_REC_SLOTS(amp_rec_crash);
	case AMP_REC_TSTATS: return AMP_REC_SLOTS(amp_rec_tstats);
	case AMP_REC_DUMP: return AMP_REC_SLOTS(amp_rec_dump);
	case AMP_REC_COUNTER: return AMP_REC_SLOTS(amp_rec_counter);
	default: return 0;
	}
}

static unsigned slots_for(size_t bytes)
{
	return (unsigned)((bytes + AMP_SLOT_SIZE - 1) / AMP_SLOT_SIZE);
}

/* Type-specific checks on the copied record. */
static int record_valid(const unsigned char *buf, unsigned type, unsigned n)
{
	amp_rec_hdr h;
	memcpy(&h, buf, sizeof h);
	unsigned fixed = fixed_slots(type);
	if (fixed)
		if (n != fixed)
			return 0;
	switch (type) {
	case AMP_REC_PAD:
		return 1;
	case AMP_REC_STRING: {
		if (h.len > AMP_STRING_MAX || n != slots_for(AMP_REC_STRING_FIXED + h.len))
			return 0;
		amp_rec_string s;
		memcpy(&s, buf, sizeof s);
		return s.id != 0;
	}
	case AMP_REC_META: {
		amp_rec_meta m;
		memcpy(&m, buf, sizeof m);
		size_t total = (size_t)m.klen + m.vlen;
		return m.klen > 0 && total == h.len &&
		       total <= AMP_REC_MAX_SLOTS * AMP_SLOT_SIZE - AMP_REC_META_FIXED &&
		       n == slots_for(AMP_REC_META_FIXED + total);
	}
	case AMP_REC_CALLSITE: {
		amp_rec_callsite c;
		memcpy(&c, buf, sizeof c);
		return c.id != 0 && c.nframes >= 1 && c.nframes <= AMP_CALLSITE_FRAMES;
	}
	case AMP_REC_CRASH: {
		amp_rec_crash c;
		memcpy(&c, buf, sizeof c);
		return c.nframes <= AMP_CRASH_FRAMES;
	}
	case AMP_REC_OP: {
		amp_rec_op o;
		memcpy(&o, buf, sizeof o);
		return (o.op < AMP_OP_COUNT || o.op_name != 0) && o.phase <= AMP_PHASE_OPTIMIZER &&
		       o.ndim <= 4;
	}
	case AMP_REC_COPY: {
		amp_rec_copy c;
		memcpy(&c, buf, sizeof c);
		return c.kind <= AMP_COPY_MASTER;
	}
	case AMP_REC_SCALE: {
		amp_rec_scale s;
		memcpy(&s, buf, sizeof s);
		return s.reason <= AMP_SCALE_STATIC;
	}
	case AMP_REC_TSTATS: {
		amp_rec_tstats t;
		memcpy(&t, buf, sizeof t);
		return (t.op < AMP_OP_COUNT || t.op_name != 0) && t.role <= 2 &&
		       (!(t.flags & AMP_TSTATS_EXT) || t.phase <= AMP_PHASE_OPTIMIZER);
	}
	case AMP_REC_DUMP: {
		amp_rec_dump d;
		memcpy(&d, buf, sizeof d);
		return (d.op < AMP_OP_COUNT || d.op_name != 0) && d.role <= 2 && d.ndim <= 4 &&
		       d.reason <= 2 &&
		       d.file != 0;
	}
	case AMP_REC_CLOCK:
	case AMP_REC_MODULE:
	case AMP_REC_STEP_BEGIN:
	case AMP_REC_STEP_END:
	case AMP_REC_MEMORY:
	case AMP_REC_COUNTER:
		return 1;
	default:
		return 0;
	}
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
