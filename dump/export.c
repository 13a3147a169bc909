/* export.c — `ampdump --step N [--tensor ID|NAME] --npy DIR`: dumped tensors as .npy files.
 *
 * A tensor is chosen by dumps.id or by dumps.name (an ambiguous name is an error listing the
 * candidates).  Files are named step<N>_seq<S>_<role>_<name>.npy from the sanitized name and
 * created inside DIR with openat, so no name can lead outside it.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dump.h"
#include "profile_db.h"

typedef struct dump_ref {
	int64_t id; /* dumps.id */
	dump_tensor meta;
	char file[160];
} dump_ref;

typedef struct ref_list {
	dump_ref *v;
	size_t n, cap;
} ref_list;

static void refs_release(ref_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		dump_tensor_release(&l->v[i].meta);
	free(l->v);
	memset(l, 0, sizeof *l);
}

/* Runs a dumps query (id, then dump_tensor_read's step, seq, op, role, name, dtype, shape) with one
 * bound int64 and one optional bound text, appending the rows to out.  Returns 0 or -1. */
static int query_refs(sqlite3 *db, const char *sql, int64_t i1, const char *t2, ref_list *out)
{
	sqlite3_stmt *st = NULL;
	int rc = -1, s;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(st, 1, i1);
	if (t2)
		sqlite3_bind_text(st, 2, t2, -1, SQLITE_STATIC);
	while ((s = sqlite3_step(st)) == SQLITE_ROW) {
		dump_ref *v = dump_grow(out->v, &out->cap, out->n, sizeof *v);
		if (!v)
			goto out;
		out->v = v;
		dump_ref *r = &out->v[out->n++];
		memset(r, 0, sizeof *r);
		r->id = sqlite3_column_int64(st, 0);
		dump_tensor_read(st, 1, &r->meta);
	}
	rc = s == SQLITE_DONE ? 0 : -1;
out:
	sqlite3_finalize(st);
	return rc;
}

#define REF_COLS "SELECT id, step, seq, op, role, name, dtype, shape FROM dumps "

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

/* Resolves --tensor at step into sel.  Returns 0, 1 (message printed) or -1 (SQLite). */
static int select_tensor(sqlite3 *db, int64_t step, const char *tensor, ref_list *sel)
{
	ref_list by_id = {0};
	int rc = -1;

	if (query_refs(db, REF_COLS "WHERE step = ? AND name = ? ORDER BY id", step, tensor, sel))
		goto out;
	if (sel->n == 0 && all_digits(tensor) && strlen(tensor) < 19) {
		if (query_refs(db, REF_COLS "WHERE id = ?", strtoll(tensor, NULL, 10), NULL,
		               &by_id))
			goto out;
		if (by_id.n && by_id.v[0].meta.step != step) {
			char hint[120];
			snprintf(hint, sizeof hint, "ampdump --step %lld --tensor %s --npy DIR",
			         (long long)by_id.v[0].meta.step, tensor);
			dump_error(hint, "dump %s is a tensor of step %lld, not of step %lld",
			           tensor, (long long)by_id.v[0].meta.step, (long long)step);
			rc = 1;
			goto out;
		}
		if (by_id.n) {
			*sel = by_id;
			memset(&by_id, 0, sizeof by_id);
		}
	}
	if (sel->n == 0) {
		char hint[160];
		snprintf(hint, sizeof hint,
		         "`ampdump --step %lld` lists the tensors of the step; dumped ones have a "
		         "dump_id",
		         (long long)step);
		dump_error(hint, "no tensor '%s' was dumped at step %lld", tensor, (long long)step);
		rc = 1;
		goto out;
	}
	if (sel->n > 1) {
		dump_error(NULL, "tensor name '%s' is ambiguous at step %lld: %zu dumps have it",
		           tensor, (long long)step, sel->n);
		for (size_t i = 0; i < sel->n; i++) {
			const dump_tensor *m = &sel->v[i].meta;
			char line[1024];
			snprintf(line, sizeof line, "  dump_id %lld: seq %lld %s %s, %s %s",
			         (long long)sel->v[i].id, (long long)m->seq, m->op ? m->op : "?",
			         m->role ? m->role : "?", m->dtype ? m->dtype : "?",
			         m->shape ? m->shape : "?");
			amp_text_put(stderr, line); /* names from the profile: sanitized */
			fputc('\n', stderr);
		}
		fprintf(stderr, "hint: choose one by its id: --tensor %lld\n",
		        (long long)sel->v[0].id);
		rc = 1;
		goto out;
	}
	rc = 0;
out:
	refs_release(&by_id);
	return rc;
}

/* Gives every selected dump a distinct file name. */
static void name_files(ref_list *sel, int64_t step)
{
	for (size_t i = 0; i < sel->n; i++) {
		char safe[101], role[16];
		dump_ref *r = &sel->v[i];
		dump_sanitize_name(r->meta.name, safe, sizeof safe);
		dump_sanitize_name(r->meta.role, role, sizeof role);
		snprintf(r->file, sizeof r->file, "step%lld_seq%lld_%s_%s.npy", (long long)step,
		         (long long)r->meta.seq, role, safe);
	}
	for (size_t i = 0; i < sel->n; i++)
		for (size_t j = 0; j < sel->n; j++)
			if (i != j && strcmp(sel->v[i].file, sel->v[j].file) == 0) {
				char *dot = strrchr(sel->v[j].file, '.');
				size_t room =
				    sizeof sel->v[j].file - (size_t)(dot - sel->v[j].file);
				snprintf(dot, room, "_%lld.npy", (long long)sel->v[j].id);
			}
}

/* Opens the export directory, creating it and its missing parents like `mkdir -p`.
 * Returns an fd or -1 (message printed). */
static int open_dir(const char *dir)
{
	char path[4096];
	struct stat sb;
	if (strlen(dir) >= sizeof path) {
		dump_error(NULL, "cannot write to '%s': %s", dir, strerror(ENAMETOOLONG));
		return -1;
	}
	snprintf(path, sizeof path, "%s", dir);
	if (stat(path, &sb) != 0) {
		for (char *p = path + 1;; p++) {
			if (*p != '/' && *p != '\0')
				continue;
			char c = *p;
			*p = '\0';
			if (mkdir(path, 0777) != 0 && errno != EEXIST) {
				dump_error("give a directory that can be created, with --npy DIR",
				           "cannot create directory '%s': %s", path,
				           strerror(errno));
				return -1;
			}
			*p = c;
			if (!c)
				break;
		}
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		dump_error("give a writable directory with --npy DIR", "cannot write to '%s': %s",
		           dir, strerror(errno));
		return -1;
	}
	return fd;
}

/* Writes one dump.  Returns 0 or 1 (message printed). */
static int export_one(sqlite3 *db, int dirfd, const char *dir, const dump_ref *r, int force,
                      FILE *out)
{
	sqlite3_stmt *st = NULL;
	float *wide = NULL;
	int code = 1;
	const char *dtype = r->meta.dtype, *shape = r->meta.shape;
	int64_t dims[DUMP_MAX_DIMS];
	int ndim = dump_parse_shape(shape, dims);
	dump_dtype dt = dump_dtype_parse(dtype);

	if (ndim < 0) {
		dump_error(NULL, "dump %lld has an unreadable shape '%s'", (long long)r->id,
		           shape ? shape : "NULL");
		goto out;
	}
	if (dt == DUMP_DT_UNKNOWN) {
		dump_error(NULL, "dump %lld has dtype '%s', which ampdump cannot export",
		           (long long)r->id, dtype ? dtype : "NULL");
		goto out;
	}
	if (dump_data_query(db, r->id, &st) != SQLITE_ROW) {
		dump_error(NULL, "cannot read dump %lld: %s", (long long)r->id, sqlite3_errmsg(db));
		goto out;
	}
	if (sqlite3_column_type(st, 0) == SQLITE_NULL) {
		dump_error("the spool file was missing when ampprof wrote the profile; record the "
		           "step again",
		           "dump %lld has no data", (long long)r->id);
		goto out;
	}
	const void *data = sqlite3_column_blob(st, 0);
	size_t bytes = (size_t)sqlite3_column_bytes(st, 0);
	uint64_t count = dump_shape_count(dims, ndim);
	if (count * dump_dtype_size(dt) != bytes) {
		dump_error(NULL, "dump %lld holds %zu bytes, but %s %s needs %llu",
		           (long long)r->id, bytes, dtype, shape,
		           (unsigned long long)(count * dump_dtype_size(dt)));
		goto out;
	}
	if (dt == DUMP_DT_BF16) {
		/* numpy has no bfloat16: widen exactly to float32 */
		wide = malloc(count ? count * sizeof *wide : 1);
		if (!wide) {
			dump_error(NULL, "out of memory");
			goto out;
		}
		dump_npy_widen_bf16(data, count, wide);
		data = wide;
		bytes = count * sizeof *wide;
	}
	if (dump_npy_write(dirfd, r->file, force, dump_npy_descr(dt), dims, ndim, data, bytes) !=
	    0) {
		int e = errno;
		int special = e == ENXIO || e == EINVAL; /* a FIFO, a device (dump_npy_write) */
		dump_error(e == EEXIST                 ? "use --force to overwrite it"
		           : e == EACCES || e == EROFS ? "give a writable directory with --npy DIR"
		           : e == ELOOP
		               ? "it is a symbolic link; ampdump does not write through links"
		           : special ? "ampdump writes regular files only: remove it, or give another "
		                       "--npy DIR"
		                     : NULL,
		           "cannot write '%s/%s': %s", dir, r->file,
		           e == EEXIST ? "file exists" : special ? "not a regular file" : strerror(e));
		goto out;
	}
	fprintf(out, "%s/%s\t%s %s\n", dir, r->file, dtype, shape);
	code = 0;
out:
	free(wide);
	sqlite3_finalize(st);
	return code;
}

int dump_cmd_npy(const char *db_path, int64_t step, const char *tensor, const char *dir, int force,
                 FILE *out)
{
	ref_list sel = {0};
	int dirfd = -1, code = DUMP_EXIT_FAIL;

	sqlite3 *db = dump_open_step(db_path, step);
	if (!db)
		return DUMP_EXIT_FAIL;
	if (tensor) {
		int rc = select_tensor(db, step, tensor, &sel);
		if (rc < 0)
			goto sql_error;
		if (rc > 0)
			goto out;
	} else {
		if (query_refs(db,
		               REF_COLS
		               "WHERE step = ? ORDER BY seq, CASE role WHEN 'input' THEN 0 "
		               "WHEN 'output' THEN 1 WHEN 'grad' THEN 2 ELSE 3 END, id",
		               step, NULL, &sel))
			goto sql_error;
		if (sel.n == 0) {
			char hint[1400];
			dump_error("`ampdump --list` shows the steps that have dumps",
			           "nothing was dumped at step %lld in '%s'", (long long)step,
			           db_path);
			/* the hint quotes the run's command line: sanitized */
			fputs("hint: ", stderr);
			amp_text_put(stderr, dump_rerun_hint(db, step, hint, sizeof hint));
			fputc('\n', stderr);
			goto out;
		}
	}
	name_files(&sel, step);
	if ((dirfd = open_dir(dir)) < 0)
		goto out;
	int failed = 0;
	for (size_t i = 0; i < sel.n; i++)
		failed |= export_one(db, dirfd, dir, &sel.v[i], force, out);
	if (!failed && (fflush(out) != 0 || ferror(out))) { /* the list of files written */
		dump_error(NULL, "cannot write the output");
		failed = 1;
	}
	code = failed ? DUMP_EXIT_FAIL : DUMP_EXIT_OK;
	goto out;
sql_error:
	dump_sql_error(db, db_path);
out:
	if (dirfd >= 0)
		close(dirfd);
	refs_release(&sel);
	amp_profile_close(db);
	return code;
}
