/* profile_db.h — the one module that creates, opens and validates an ampkit profile database.
 *
 * Every tool (ampprof, ampdump, ampview) opens profiles through here: a file that is not a
 * profile, was written by a newer schema, or is truncated or corrupt is refused with a message
 * naming the file and the reason.  The schema text is schema/profile.sql, embedded at build
 * time.  Functions are thread-compatible (one connection per thread).
 */
#ifndef AMP_PROFILE_DB_H
#define AMP_PROFILE_DB_H

#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#define AMP_PROFILE_APP_ID 0x414D5046   /* 'AMPF', PRAGMA application_id */
#define AMP_PROFILE_VERSION 3           /* PRAGMA user_version written by this schema; version 1
                                           and 2 files are still read (see amp_profile_upgrade) */

enum {
	AMP_PROFILE_OK = 0,
	AMP_PROFILE_ENOENT = -1,      /* the file does not exist */
	AMP_PROFILE_EEXIST = -2,      /* create: the file exists and force is off */
	AMP_PROFILE_EACCES = -3,      /* permission denied (file or directory) */
	AMP_PROFILE_ENOTPROFILE = -4, /* not an SQLite database, or not an ampkit profile */
	AMP_PROFILE_ENEWER = -5,      /* written by a newer schema than this reader knows */
	AMP_PROFILE_ECORRUPT = -6,    /* truncated or corrupt */
	AMP_PROFILE_EIO = -7,         /* any other SQLite or system error */
	AMP_PROFILE_ENOTREG = -8,     /* create: the path is a device, FIFO, socket, directory or
	                                 symbolic link (only new or regular files are written) */
	AMP_PROFILE_EBUSY = -9,       /* another process holds the output lock (writes it) */
};

/* Short description of an AMP_PROFILE_* code ("not an ampkit profile"); never NULL. */
const char *amp_profile_strerror(int code);

/* The embedded schema/profile.sql text (NUL-terminated, static). */
const char *amp_profile_schema_sql(void);

/* Creates a new profile at path: schema, op_types, meta schema_version.  An existing regular
 * file is refused with AMP_PROFILE_EEXIST unless force is set (then it and its
 * -wal/-shm/-journal files are removed first, unless another process holds its output lock:
 * AMP_PROFILE_EBUSY); anything else at path (device, FIFO, socket, directory, a symbolic link,
 * dangling or not) is refused with AMP_PROFILE_ENOTREG, force or not.  The file is created
 * exclusively and the connection holds its output lock until amp_profile_close, so of two
 * creators of one path at most one succeeds.  The connection is set up for bulk writing (WAL,
 * synchronous off).  On success *out is the connection (close with amp_profile_close); on
 * failure *out is NULL, nothing at path was touched unless this call created it, and err (if
 * not NULL) holds "cannot create 'path': reason". */
int amp_profile_create(const char *path, int force, sqlite3 **out, char *err, size_t errlen);
/* Puts the finished profile at tmp (closed: one file, no sidecars) in place of path, with
 * amp_profile_create's rules for what is there: nothing (never clobbering a file created
 * meanwhile), or with force a regular file that no collector is writing (its output lock taken
 * while its sidecars are removed and tmp renamed over it).  tmp is left where it was on a
 * failure.  AMP_PROFILE_OK, or AMP_PROFILE_EEXIST, ENOTREG, EBUSY, EACCES, EIO with
 * "cannot create 'path': reason" in err.  tmp NULL: only whether it could (nothing touched). */
int amp_profile_replace(const char *tmp, const char *path, int force, char *err, size_t errlen);

/* Opens and validates an existing profile, read-only unless writable is set.  Checks the file
 * header (SQLite magic, not truncated; a file whose -wal holds pages is left to SQLite, which
 * reads those pages from it: a read-only connection never writes them back; a hot -journal,
 * left by a write cut short, is rolled back first through a short writable connection, as any
 * SQLite opener would: a read-only open fails only if the file cannot be written),
 * application_id, user_version (newer is refused, older than 1 too) and the presence of the
 * core tables.  A writable connection takes the output lock (AMP_PROFILE_EBUSY while a
 * collector records the file) and holds it until amp_profile_close.  Same *out and err
 * conventions as amp_profile_create ("cannot open 'path': reason"). */
int amp_profile_open(const char *path, int writable, sqlite3 **out, char *err, size_t errlen);

/* Whether any query of this process has met a damaged page of a profile (SQLite's
 * "database disk image is malformed") since it first opened or created one: such a query
 * ends as if it had no more rows, so a reader that saw damage must not present what it read
 * as whole.  1 with the first damage's description in msg (if not NULL), else 0. */
int amp_profile_damaged(char *msg, size_t len);

/* Whether a process holds the output lock of the profile at path, i.e. it is being recorded
 * (or completed by a writable amp_profile_open): 1 if so, 0 if not, a negative AMP_PROFILE_*
 * if path cannot be opened.  A collector that was killed holds nothing. */
int amp_profile_live(const char *path);

/* Brings a profile written by schema version 1 or 2 (any revision) up to this version, in place:
 * adds the tables and columns added since (within version 1: tensor_stats.neg_inf, .phase,
 * .thread, the nonfinite table; version 2: op_sigs.engine, op_summary.native_ns,
 * run_summary.native_half_share and .half_types, the engine column of the ops view; version 3:
 * loss_scale.thread, memory.thread, op_summary.median_ns, .min_ns, .max_ns, .stddev_ns, and
 * what profile.sql lists under version 3 for the diagnostics) and sets
 * user_version and meta schema_version to AMP_PROFILE_VERSION.  Old rows keep NULL in the new
 * columns (an unknown engine).  A read-only reader of a version-1 file must test the columns
 * it needs with amp_profile_has_column instead.  Idempotent; needs a writable connection.
 * Returns AMP_PROFILE_OK or AMP_PROFILE_EIO. */
int amp_profile_upgrade(sqlite3 *db);

/* Nonzero if the profile has table (or view) name. */
int amp_profile_has_table(sqlite3 *db, const char *name);
/* Nonzero if table (or view) has column (a version-1 profile lacks the version-2 columns). */
int amp_profile_has_column(sqlite3 *db, const char *table, const char *column);

/* "A step's memory", the one definition every reader uses: into buf (len bytes; 2048 leave
 * room for a before and an after of a few hundred), before, then a query whose rows are
 * (step, master_weights, working_copies, activations, grads, optimizer_state, total, peak,
 * rank), one per step, then after.  A rank's memory is its contexts' together: from
 * memory_sum when finalize filled it (a rank had contexts that may not have coexisted), of the
 * step's rows there the one with the largest peak; else the sums of the step's memory rows
 * (one context, or a profile from before memory_sum).  Each rank's memory is its own: a step's
 * row is the rank with the largest peak (a merged profile).  where is NULL or a condition on
 * the column step (it may use parameters).  Returns buf, or NULL when it is too small. */
const char *amp_profile_memory_steps(sqlite3 *db, const char *before, const char *where,
                                     const char *after, char *buf, size_t len);
/* A merged data-parallel profile (ampprof merge) holds every rank's rows under the same step
 * numbers: temporary views named like the n tables, holding rank's rows only, shadow them for
 * the connection's unqualified queries (a reader that shows one rank).  AMP_PROFILE_OK, or
 * AMP_PROFILE_EIO (SQLite's message in the connection). */
int amp_profile_shadow_rank(sqlite3 *db, int64_t rank, const char *const *tables, size_t n);

/* What every call site of the profile says when the application linked libamprt statically
 * (each one is the program's entry, __libc_start_call_main, or unknown): a sentence saying
 * so and how to see the program's lines; when none was named at all (the profile was not
 * finalized: nothing symbolized them), a sentence saying that instead; "" otherwise (or
 * without call sites).  Static. */
const char *amp_profile_callsites_static(sqlite3 *db);

/* The label of the half share for run_summary.half_types: "FP16 share" for 'fp16' and for
 * NULL or "" (an FP32 run, read as its FP16 readiness), "BF16 share" for 'bf16', "half share
 * (fp16+bf16)" when both ran.  Static string, never NULL. */
const char *amp_profile_half_label(const char *half_types);

/* Single-value queries: the first column of the first row of sql.  args names the types of
 * the values that follow, bound to ?1, ?2, ... in order: 'i' int64_t, 'd' double, 't' const
 * char * (NULL binds NULL); NULL or "" for none.  Return AMP_PROFILE_OK with the value in
 * *out (text: copied into buf, NUL-terminated, truncated to len), AMP_PROFILE_ENOENT when there
 * is no row or the value is NULL, AMP_PROFILE_EIO on an SQLite error (a missing table or
 * column included); *out and buf are left as they were unless AMP_PROFILE_OK, so a caller may
 * set a default first.  No allocation survives the call. */
int amp_profile_query_int64(sqlite3 *db, int64_t *out, const char *sql, const char *args, ...);
int amp_profile_query_double(sqlite3 *db, double *out, const char *sql, const char *args, ...);
int amp_profile_query_text(sqlite3 *db, char *buf, size_t len, const char *sql,
                           const char *args, ...);

/* One row of op_summary: an op type in one exec dtype and the distribution of the durations
 * of its executions (`nsys stats`-style), as the report, its JSON and ampview show it. */
typedef struct amp_op_stats {
	char op[64];               /* op type name (truncated) */
	char exec_dtype[16];       /* dtype the kernel ran in */
	int64_t calls;             /* executions */
	int64_t total_ns;          /* their total time */
	double mean_ns;            /* mean duration */
	double median_ns;          /* median duration; NAN if unknown (a version-2 profile) */
	int64_t min_ns, max_ns;    /* shortest and longest; -1 if unknown */
	double stddev_ns;          /* population standard deviation; NAN if unknown */
	double share;              /* of all op time (0..1); NAN if unknown */
	int64_t flops;             /* total floating-point operations */
} amp_op_stats;

/* Reads up to max rows of op_summary into out (caller's array), the largest total first (ties
 * by op, then exec dtype); *n is the count read.  Works on every version (the statistics of
 * an older profile are unknown).  Returns AMP_PROFILE_OK or AMP_PROFILE_EIO. */
int amp_profile_op_stats(sqlite3 *db, amp_op_stats *out, size_t max, size_t *n);

/* Folds the WAL back into the file (journal mode DELETE), so the profile is one file.  0, or
 * -1 with the reason in why: another process has it open, or the disk is full; the profile is
 * then the file and its -wal, which every reader opens.  Through journal mode OFF: leaving WAL
 * ends with a write of page 1 (the file format bytes) in a transaction of its own, which in
 * mode DELETE takes a rollback journal, and a SIGKILL at that write would leave it hot, which
 * a read-only reader cannot roll back; without one, the one page is written or it is not (the
 * file then still says WAL, with every page checkpointed: read as it is).  DELETE then
 * journals whatever is written after. */
int amp_profile_fold_wal(sqlite3 *db, char *why, size_t len);

/* Closes a connection from amp_profile_create/open.  NULL is a no-op. */
void amp_profile_close(sqlite3 *db);

/* Closes a connection from amp_profile_create (or a writable amp_profile_open) and removes its
 * profile with the -wal/-shm/-journal files, all while still holding the output lock, so that a
 * profile another run put at the path meanwhile is never removed; nothing is removed if the
 * lock cannot be kept past the close (no descriptor left).  For a writer that gives up on the
 * output it created.  NULL is a no-op. */
void amp_profile_discard(sqlite3 *db);

/* Sets meta key to value (replacing it).  Returns AMP_PROFILE_OK or AMP_PROFILE_EIO. */
int amp_profile_meta_set(sqlite3 *db, const char *key, const char *value);
/* Copies meta key's value into buf (NUL-terminated, truncated to len).  Returns
 * AMP_PROFILE_OK, AMP_PROFILE_ENOENT if the key is absent, or AMP_PROFILE_EIO. */
int amp_profile_meta_get(sqlite3 *db, const char *key, char *buf, size_t len);

/* Why dumps were not kept, as a run's meta counts them (the keys profile.sql lists beside
 * dumps_skipped): the meta key, its name in ampprof's JSON, and its words for people. */
typedef struct amp_dump_skip_reason {
	const char *key, *json, *text;
} amp_dump_skip_reason;
enum { AMP_DUMP_SKIP_REASONS = 5 };
extern const amp_dump_skip_reason amp_dump_skip_reasons[AMP_DUMP_SKIP_REASONS];

#endif
