/* match.c — pairing the dumped tensors of two runs (see match.h).
 *
 * Tensors are lined up per step by layer group (op, role, and the tensor's name or its op's
 * label), in execution order within a group (match_group).  Execution order is (step, seq):
 * the runtime numbers backward ops after the forward ones.
 */
#include "match.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile_db.h"

void dump_run_release(cmp_run *r)
{
	for (size_t i = 0; i < r->n; i++) {
		dump_tensor_release(&r->v[i].meta);
		free(r->v[i].label);
	}
	free(r->v);
	amp_profile_close(r->db);
	memset(r, 0, sizeof *r);
}

#define CMP(x, y)                                                                                  \
	do {                                                                                       \
		if ((x) != (y))                                                                    \
			return (x) < (y) ? -1 : 1;                                                 \
	} while (0)

/* Exact key: step, seq, role, name (dump_tensor_cmp), then op. */
static int exact_cmp(const cmp_tensor *a, const cmp_tensor *b)
{
	int c = dump_tensor_cmp(&a->meta, &b->meta);
	return c ? c : dump_null_strcmp(a->meta.op, b->meta.op);
}

static int exact_sort(const void *pa, const void *pb)
{
	const cmp_tensor *a = pa, *b = pb;
	int c = exact_cmp(a, b);
	if (c)
		return c;
	CMP(a->id, b->id);
	return 0;
}

/* Layer key: step, op, role, and the tensor's name or, for an unnamed tensor, its op's
 * label (then execution order within the group). */
static int layer_cmp(const cmp_tensor *a, const cmp_tensor *b)
{
	int c;
	CMP(a->meta.step, b->meta.step);
	if ((c = dump_null_strcmp(a->meta.op, b->meta.op)) ||
	    (c = dump_null_strcmp(a->meta.role, b->meta.role)))
		return c;
	return dump_null_strcmp(a->meta.name ? a->meta.name : a->label,
	                        b->meta.name ? b->meta.name : b->label);
}

static int layer_sort(const void *pa, const void *pb)
{
	const cmp_tensor *a = *(const cmp_tensor *const *)pa, *b = *(const cmp_tensor *const *)pb;
	int c = layer_cmp(a, b);
	if (c)
		return c;
	CMP(a->meta.seq, b->meta.seq);
	CMP(a->id, b->id);
	return 0;
}

/* Loads the dump metadata of run r for one step, or for the steps both runs dumped (the
 * cmp_steps table) when step < 0.  Returns 0 or -1 (SQLite or memory). */
static int load_run(cmp_run *r, int64_t step)
{
	sqlite3_stmt *st = NULL;
	size_t cap = 0;
	int rc = -1, s;
	const char *sql =
	    step >= 0 ? "SELECT id, step, seq, op, role, name, dtype, shape, data IS NOT NULL, "
	                "(SELECT scale FROM steps s WHERE s.step = d.step ORDER BY rowid LIMIT 1) "
	                "FROM dumps d WHERE step = ?1 ORDER BY step, seq, id"
	              : "SELECT id, step, seq, op, role, name, dtype, shape, data IS NOT NULL, "
	                "(SELECT scale FROM steps s WHERE s.step = d.step ORDER BY rowid LIMIT 1) "
	                "FROM dumps d WHERE step IN (SELECT step FROM cmp_steps) "
	                "ORDER BY step, seq, id";
	if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	if (step >= 0)
		sqlite3_bind_int64(st, 1, step);
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		cmp_tensor *v = dump_grow(r->v, &cap, r->n, sizeof *v);
		if (!v)
			goto out;
		r->v = v;
		cmp_tensor *t = &r->v[r->n++];
		memset(t, 0, sizeof *t);
		t->id = sqlite3_column_int64(st, 0);
		dump_tensor_read(st, 1, &t->meta);
		t->has_data = sqlite3_column_int(st, 8);
		t->scale = sqlite3_column_type(st, 9) == SQLITE_NULL ? (double)NAN
		                                                     : sqlite3_column_double(st, 9);
	}
	rc = s == SQLITE_DONE ? 0 : -1;
out:
	sqlite3_finalize(st);
	return rc;
}

/* Fills the labels of r's tensors from the ops view (first execution of each step/seq). */
static int load_labels(cmp_run *r)
{
	sqlite3_stmt *st = NULL;
	int rc = -1;
	if (sqlite3_prepare_v2(r->db, "SELECT label, min(id) FROM ops WHERE step = ? AND seq = ?",
	                       -1, &st, NULL) != SQLITE_OK)
		goto out;
	for (size_t i = 0; i < r->n; i++) {
		cmp_tensor *t = &r->v[i];
		if (i && t->meta.step == r->v[i - 1].meta.step &&
		    t->meta.seq == r->v[i - 1].meta.seq) {
			t->label = r->v[i - 1].label ? strdup(r->v[i - 1].label) : NULL;
			continue;
		}
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, t->meta.step);
		sqlite3_bind_int64(st, 2, t->meta.seq);
		if (sqlite3_step(st) != SQLITE_ROW)
			goto out;
		t->label = dump_column_strdup(st, 0);
	}
	rc = 0;
out:
	sqlite3_finalize(st);
	return rc;
}

/* Steps dumped in both runs, into the temp table cmp_steps of each connection.  Returns the
 * count, or -1 on error. */
int64_t dump_common_steps(cmp_run *a, cmp_run *b)
{
	sqlite3_stmt *sel = NULL, *ins_a = NULL, *ins_b = NULL, *probe = NULL;
	int64_t n = -1;
	const char *mk = "CREATE TEMP TABLE IF NOT EXISTS cmp_steps(step INTEGER PRIMARY KEY)";
	if (sqlite3_exec(a->db, mk, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(b->db, mk, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db, "SELECT DISTINCT step FROM dumps ORDER BY step", -1, &sel,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(b->db, "SELECT 1 FROM dumps WHERE step = ? LIMIT 1", -1, &probe,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db, "INSERT INTO cmp_steps VALUES (?)", -1, &ins_a, NULL) !=
	        SQLITE_OK ||
	    sqlite3_prepare_v2(b->db, "INSERT INTO cmp_steps VALUES (?)", -1, &ins_b, NULL) !=
	        SQLITE_OK)
		goto out;
	int64_t count = 0;
	int s;
	while ((s = sqlite3_step(sel)) == SQLITE_ROW) {
		int64_t step = sqlite3_column_int64(sel, 0);
		sqlite3_reset(probe);
		sqlite3_bind_int64(probe, 1, step);
		if (sqlite3_step(probe) != SQLITE_ROW)
			continue;
		sqlite3_reset(ins_a);
		sqlite3_reset(ins_b);
		sqlite3_bind_int64(ins_a, 1, step);
		sqlite3_bind_int64(ins_b, 1, step);
		if (sqlite3_step(ins_a) != SQLITE_DONE || sqlite3_step(ins_b) != SQLITE_DONE)
			goto out;
		count++;
	}
	if (s == SQLITE_DONE)
		n = count;
out:
	sqlite3_finalize(sel);
	sqlite3_finalize(probe);
	sqlite3_finalize(ins_a);
	sqlite3_finalize(ins_b);
	return n;
}

/* Pairs the tensors of one layer group (the same step, op, role and name in both runs), each
 * side in execution order: the k-th with the k-th when both ran the group as often (a model
 * with an op more elsewhere moves every later seq, so equal seqs say nothing there); when one
 * side has fewer (a dump limit cut it), equal seqs first, then what is left in order. */
static void match_group(cmp_tensor **ga, size_t na, cmp_tensor **gb, size_t nb)
{
	size_t i = 0, j = 0;
	if (na != nb)
		while (i < na && j < nb) {
			if (ga[i]->meta.seq == gb[j]->meta.seq) {
				ga[i]->peer = gb[j];
				gb[j]->peer = ga[i];
			}
			if (ga[i]->meta.seq <= gb[j]->meta.seq)
				i++;
			else
				j++;
		}
	for (i = j = 0; i < na && j < nb;) {
		if (ga[i]->peer) {
			i++;
		} else if (gb[j]->peer) {
			j++;
		} else {
			ga[i]->peer = gb[j];
			gb[j]->peer = ga[i];
			i++;
			j++;
		}
	}
}

/* Pairs the tensors of a and b by layer group (layer_cmp), in execution order. */
static int match(cmp_run *a, cmp_run *b)
{
	cmp_tensor **la = malloc((a->n + 1) * sizeof *la), **lb = malloc((b->n + 1) * sizeof *lb);
	if (!la || !lb) {
		free(la);
		free(lb);
		return -1;
	}
	for (size_t i = 0; i < a->n; i++)
		la[i] = &a->v[i];
	for (size_t j = 0; j < b->n; j++)
		lb[j] = &b->v[j];
	qsort(la, a->n, sizeof *la, layer_sort);
	qsort(lb, b->n, sizeof *lb, layer_sort);
	size_t i = 0, j = 0;
	while (i < a->n && j < b->n) {
		int c = layer_cmp(la[i], lb[j]);
		if (c < 0) {
			i++;
		} else if (c > 0) {
			j++;
		} else {
			size_t i1 = i, j1 = j;
			while (i1 < a->n && layer_cmp(la[i1], la[i]) == 0)
				i1++;
			while (j1 < b->n && layer_cmp(lb[j1], lb[j]) == 0)
				j1++;
			match_group(la + i, i1 - i, lb + j, j1 - j);
			i = i1;
			j = j1;
		}
	}
	free(la);
	free(lb);
	return 0;
}

static int display_sort(const void *pa, const void *pb)
{
	return exact_sort(*(const cmp_tensor *const *)pa, *(const cmp_tensor *const *)pb);
}

/* Notes on stderr about the tensors of r that have no counterpart in other. */
void dump_note_unmatched(const cmp_run *r, const char *other)
{
	size_t n = 0;
	const cmp_tensor *firstt = NULL;
	for (size_t i = 0; i < r->n; i++)
		if (!r->v[i].peer) {
			if (!firstt)
				firstt = &r->v[i];
			n++;
		}
	if (!n)
		return;
	char line[2048];
	snprintf(line, sizeof line,
	         "ampdump: note: %zu dumped tensor%s of '%s' ha%s no counterpart in '%s' "
	         "(first: step %lld seq %lld %s %s '%s')",
	         n, n == 1 ? "" : "s", r->path, n == 1 ? "s" : "ve", other,
	         (long long)firstt->meta.step, (long long)firstt->meta.seq,
	         firstt->meta.op ? firstt->meta.op : "?", firstt->meta.role ? firstt->meta.role : "?",
	         firstt->meta.name ? firstt->meta.name : "");
	amp_text_put(stderr, line); /* names from the profile: sanitized */
	fputc('\n', stderr);
}

int dump_match_runs(cmp_run *a, cmp_run *b, int64_t step, cmp_tensor ***pairs, size_t *npairs)
{
	*pairs = NULL;
	*npairs = 0;
	if (load_run(a, step) != 0 || load_labels(a) != 0)
		return DUMP_MATCH_ESQL_A;
	if (load_run(b, step) != 0 || load_labels(b) != 0)
		return DUMP_MATCH_ESQL_B;
	if (a->n)
		qsort(a->v, a->n, sizeof *a->v, exact_sort);
	if (b->n)
		qsort(b->v, b->n, sizeof *b->v, exact_sort);
	if (match(a, b) != 0)
		return DUMP_MATCH_ENOMEM;
	cmp_tensor **v = malloc((a->n + 1) * sizeof *v);
	if (!v)
		return DUMP_MATCH_ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].peer)
			v[n++] = &a->v[i];
	qsort(v, n, sizeof *v, display_sort);
	*pairs = v;
	*npairs = n;
	return DUMP_MATCH_OK;
}
