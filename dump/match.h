/* match.h — pairing the dumped tensors of two runs for `ampdump --compare` (match.c): which
 * tensor of run B is the counterpart of which tensor of run A.  The metrics, the verdict and
 * the printing are compare.c's.  Private to dump/.
 */
#ifndef DUMP_MATCH_H
#define DUMP_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "dump.h"

/* A dumped tensor of a run. */
typedef struct cmp_tensor {
	int64_t id; /* dumps.id */
	dump_tensor meta;
	char *label;  /* layer label of the op (ops view), NULL if not traced */
	double scale; /* steps.scale of its step; NaN if the run did not record it */
	int has_data;
	struct cmp_tensor *peer; /* the matched tensor of the other run */
} cmp_tensor;

/* One run: its profile and its dumped tensors (of one step, or of the steps both runs dumped). */
typedef struct cmp_run {
	const char *path;
	sqlite3 *db;
	cmp_tensor *v;
	size_t n;
	int scale_noted; /* the note about a missing loss scale was printed */
} cmp_run;

/* Frees r's tensors and closes its profile; r is left empty (path NULL). */
void dump_run_release(cmp_run *r);

/* Steps dumped in both runs, into the temp table cmp_steps of each connection (what
 * dump_match_runs reads with step < 0).  Returns the count, or -1 on an SQLite error. */
int64_t dump_common_steps(cmp_run *a, cmp_run *b);

enum {
	DUMP_MATCH_OK = 0,
	DUMP_MATCH_ENOMEM = -1,
	DUMP_MATCH_ESQL_A = -2, /* reading a->db failed (sqlite3_errmsg(a->db) says why) */
	DUMP_MATCH_ESQL_B = -3,
};

/* Loads the dumps of step (step < 0: of the steps in cmp_steps, see dump_common_steps) of both
 * runs, with their op labels, and pairs them: per step first on (seq, op, role, name), then
 * what is left on (op, role, name-or-label) in execution order, so that a run whose op
 * sequence numbers shifted still lines up by layer.  Sets each tensor's peer; *pairs (malloc'd,
 * the caller frees it) gets the tensors of a that have a peer, in execution order (step, seq,
 * role, name), and *npairs their count.  Returns DUMP_MATCH_OK or a DUMP_MATCH_E* code. */
int dump_match_runs(cmp_run *a, cmp_run *b, int64_t step, cmp_tensor ***pairs, size_t *npairs);

/* Notes on stderr about the tensors of r that have no counterpart in the run at path other. */
void dump_note_unmatched(const cmp_run *r, const char *other);

#endif
