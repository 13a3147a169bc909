/* prof.h — ampprof internals shared between its files: options, exit codes, the session, the
 * launcher, the writer (ring records -> SQLite), finalize, report and export.
 *
 * ampprof is single-threaded: one loop drains the rings, writes batches and watches the child.
 */
#ifndef PROF_H
#define PROF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "amp_events.h"

/* Exit codes.  The profile command exits with the application's status (its exit code, or
 * 128 + signal number); its own failures once its command line is accepted use the codes
 * env(1), timeout(1) and the shell use for theirs, so that they never read as one of the
 * small statuses programs exit with: */
enum {
	PROF_EXIT_FAILED = 125,   /* ampprof failed: the output database could not be created or
	                             written, an internal error, or the application ran but sent
	                             no events (not linked with libamprt, another wire format) */
	PROF_EXIT_NOEXEC = 126,   /* the application was found but cannot be executed */
	PROF_EXIT_NOTFOUND = 127, /* the application was not found */
};
/* Usage errors (every command) and the failures of report and export, which run no
 * application. */
enum {
	PROF_EXIT_USAGE = 2,      /* bad command line or option value */
	PROF_EXIT_DB = 4,         /* export: the output could not be written */
	PROF_EXIT_PROFILE = 6,    /* report/export: the profile could not be read */
};

typedef struct prof_options {
	const char *application;     /* --application string (run by /bin/sh -c), or NULL */
	char **argv;                 /* program and arguments after --, or NULL */
	const char *output;          /* --output (default profile.db) */
	int force;                   /* --force */
	int quiet;                   /* --quiet */
	int callstack;               /* --callstack=on|off (default on) */
	int nan_check;               /* amp_nan_check (default op) */
	int dump;                    /* amp_dump_mode (default off) */
	uint64_t dump_limit;         /* --dump-limit bytes (default 256 MiB) */
	int drop;                    /* --drop: drop events when a ring is full */
	uint32_t stats_every;        /* --stats-every: full tensor statistics every N steps (counts
	                                of non-finite values every step); 0 = the runtime's default
	                                or $AMPPROF_STATS_EVERY as inherited */
	int n_steps, n_dump_steps;
	amp_step_range steps[AMP_MAX_RANGES];      /* --steps */
	amp_step_range dump_steps[AMP_MAX_RANGES]; /* --dump-steps */
	const char *steps_text, *dump_steps_text, *dump_limit_text;
	double fp16_threshold;       /* percent, default 70 */
	double memcpy_threshold;     /* percent, default 15 */
	uint32_t ring_slots;         /* slots per ring (default 32768) */
	uint32_t ring_count;         /* --rings (default 64) */
} prof_options;

/* Prints "ampprof: <message>" (and "hint: <hint>" if not NULL) on stderr. */
void prof_error(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether the profile at path (open as db) is still being recorded by an ampprof: then says so,
 * with the application's pid and the steps so far (and hint), and returns 1; else 0. */
int prof_refuse_live(sqlite3 *db, const char *path, const char *hint);

/* Whether paths a and b name one existing file (the same device and inode). */
int prof_same_file(const char *a, const char *b);

/* An output file of a command that is either written whole or not at all: a regular file (or
 * a new one) is written to a temporary file beside it and renamed over it at the end, so that
 * a failure (a full disk, damage found in the profile) leaves what was there before; a device,
 * a FIFO or a symbolic link is written in place (through the link); NULL is stdout. */
typedef struct prof_out {
	FILE *f;
	const char *path;
	char tmp[4096];
} prof_out;
/* Opens o for path (NULL: stdout).  0, or -1 with errno set. */
int prof_out_open(prof_out *o, const char *path);
/* Flushes and closes o; keep: put the file in place (else it is discarded).  0, or -1 with
 * errno set when anything written was lost (nothing is then left in place of the file). */
int prof_out_close(prof_out *o, int keep);

/* Parses "A", "A-B", "A-" lists separated by commas into ranges.  Returns the count or -1. */
int prof_parse_ranges(const char *text, amp_step_range *out, int max);
/* Parses "64M", "1G", "1000" (bytes) into *out.  Returns 0 or -1. */
int prof_parse_size(const char *text, uint64_t *out);

/* The profile command (collect.c): returns the exit status for ampprof. */
int prof_run(const prof_options *opts);

/* ---- session (session.c) ----------------------------------------------------------------- */
typedef struct prof_session {
	int fd;                      /* memfd, close-on-exec in ampprof */
	amp_session_hdr *hdr;        /* mapping of the whole memfd */
	size_t size;
	uint64_t ring_offset, ring_stride;  /* ampprof's own copies: the header is writable */
	uint32_t ring_count, ring_slots;    /* by the application, so never read back from it */
	char spool_dir[256];         /* absolute path, created when dumps are on, removed by
	                                prof_session_release */
} prof_session;

/* Creates the memfd session for opts (rings, config, and with dumps on a spool directory next
 * to the output, named by its absolute path).
 * Returns 0 or -1 with a message printed. */
int prof_session_init(prof_session *s, const prof_options *opts);
/* Unmaps, closes and removes the spool directory.  Safe on a zeroed or half-made session. */
void prof_session_release(prof_session *s);
/* The ring header of ring i. */
amp_ring_hdr *prof_session_ring(const prof_session *s, uint32_t i);
/* Hands ring i, drained up to pos and whose owner ended, to the next thread that needs one:
 * head = tail = pos, owner and drop counts cleared, state AMP_RING_REUSABLE (stored last). */
void prof_session_ring_reset(const prof_session *s, uint32_t i, uint64_t pos);

/* ---- launch (launch.c) ------------------------------------------------------------------- */
/* Notes the signal mask and which of SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGPIPE ampprof was
 * started with ignored (nohup, a shell's background job): the application inherits them as
 * they were, and ampprof catches none of those itself.  First thing in main. */
void prof_signals_save(void);
/* 1 if sig was ignored when ampprof started (prof_signals_save). */
int prof_signal_was_ignored(int sig);
/* Checks that the application exists and is executable (first word of --application, or
 * argv[0] searched in PATH).  Returns 0, or PROF_EXIT_NOTFOUND / PROF_EXIT_NOEXEC (or
 * PROF_EXIT_USAGE for an empty --application) with a message printed. */
int prof_launch_check(const prof_options *opts);
/* Forks and execs the application with the session fd in $AMPPROF_SESSION.  Returns 0 and the
 * child's pid; or, with a message printed, PROF_EXIT_NOTFOUND / PROF_EXIT_NOEXEC when the exec
 * failed (reported through a pipe), PROF_EXIT_FAILED when ampprof could not fork. */
int prof_launch(const prof_options *opts, const prof_session *s, pid_t *pid);
/* Sends sig to pid and to every process descended from it (found in /proc before any is
 * signalled): under --application the shell stands between ampprof and the program, and a
 * shell that waits for its command neither passes signals on nor dies with it. */
void prof_signal_tree(pid_t pid, int sig);
/* The state letter and the parent pid from a /proc stat file ("pid (comm) state ppid ...",
 * /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat; either pointer may be NULL).  0, or -1
 * with errno (ENOENT: no such process; EINVAL: not read as one). */
int prof_proc_stat(const char *path, char *state, pid_t *ppid);

/* ---- decoding (decode.c) ----------------------------------------------------------------- */
/* A record copied out of a ring and validated.  rec points into the caller's buffer. */
typedef struct prof_record {
	unsigned type;               /* amp_rec_type */
	unsigned nslots;
	const void *rec;             /* the record, nslots * AMP_SLOT_SIZE bytes */
} prof_record;

#define PROF_DECODE_BUF (AMP_REC_MAX_SLOTS * AMP_SLOT_SIZE)
enum {
	PROF_DECODE_NEED = 0,        /* no complete record in [pos, pos + avail) */
	PROF_DECODE_BAD = -1,        /* garbage at pos: skip one slot */
};
/* Decodes the record at position pos of a ring of nslots slots (a power of two), with avail
 * slots readable from pos.  The record is copied into buf (PROF_DECODE_BUF bytes) before any
 * check, so a producer writing concurrently cannot change what was validated.  Returns the
 * slots to consume (> 0) and fills *out, or PROF_DECODE_NEED / PROF_DECODE_BAD.  Never reads
 * outside slots[0 .. nslots * AMP_SLOT_SIZE). */
int prof_decode(const unsigned char *slots, uint64_t nslots, uint64_t pos, uint64_t avail,
                unsigned char *buf, prof_record *out);

/* ---- writer (writer.c) ------------------------------------------------------------------- */
typedef struct prof_writer prof_writer;

/* Prepares the statements on db (a fresh profile).  run_start_mono is the CLOCK_MONOTONIC ns
 * all times are measured from.  NULL on failure (message printed). */
prof_writer *prof_writer_new(sqlite3 *db, const prof_options *opts, uint64_t run_start_mono);
void prof_writer_free(prof_writer *w);
/* Feeds a calibration pair (ticks, CLOCK_MONOTONIC ns) for TSC conversion. */
void prof_writer_calibrate(prof_writer *w, uint64_t ticks, uint64_t mono);
/* Writes one decoded record from ring `ring`.  Bad ids and values are ignored or clamped;
 * never fails on content.  Returns 0, or -1 on an SQLite error (message printed). */
int prof_writer_put(prof_writer *w, uint32_t ring, unsigned clock, const prof_record *r);
/* Marks ring as seen with its owner's pid/tid and dropped counts, in all and by
 * amp_drop_kind (the threads table). */
void prof_writer_thread(prof_writer *w, uint32_t ring, uint32_t pid, uint32_t tid,
                        uint64_t dropped, const uint64_t dropped_kind[AMP_DROP_KINDS]);
/* The ring's owner ended and the ring was drained: closes its open step, writes its threads
 * row, keeps its counters in the run's totals and readies the ring's map for a new owner (a
 * thread id of its own).  Returns 0 or -1 (reported). */
int prof_writer_ring_retire(prof_writer *w, uint32_t ring);
/* A ring-scoped counter total of the threads that had no ring (amp_session_hdr.lost): added to
 * the run's total of name, and kept as meta 'unrecorded.<name>'.  0 or -1 (reported). */
int prof_writer_lost_counter(prof_writer *w, const char *name, int64_t value);
/* Records dropped over every thread so far, in all and by amp_drop_kind (into by_kind). */
uint64_t prof_writer_dropped(const prof_writer *w, uint64_t by_kind[AMP_DROP_KINDS]);
/* Commits the open transaction and begins the next one.  Returns 0 or -1. */
int prof_writer_commit(prof_writer *w);
/* Directory whose dump payloads AMP_REC_DUMP records name (read, stored, then deleted). */
void prof_writer_set_spool(prof_writer *w, const char *dir);
/* Events written so far, and events whose content was rejected. */
uint64_t prof_writer_events(const prof_writer *w);
uint64_t prof_writer_rejected(const prof_writer *w);
/* Finalize: closes open steps, symbolizes call sites and crash frames, writes per-signature
 * aggregates and thread rows, and commits (no transaction is left open; later writes on the
 * connection autocommit).  Returns 0 or -1. */
int prof_writer_finish(prof_writer *w);
/* Last step index seen, or -1. */
int64_t prof_writer_last_step(const prof_writer *w);

/* ---- symbolization (symbolize.c) --------------------------------------------------------- */
typedef struct prof_symbol {
	char function[256];
	char file[512];
	int line;
} prof_symbol;
/* Symbolizes n file addresses of one module with a single addr2line run (in chunks).  Missing
 * information is "??" / 0.  Returns 0, or -1 if addr2line could not be run (all "??"). */
int prof_symbolize(const char *module, const uint64_t *addrs, size_t n, prof_symbol *out);

/* ---- finalize (finalize.c) --------------------------------------------------------------- */
/* Builds indexes, op_summary, run_summary, the classes of the nonfinite table and advice on a
 * collected profile (upgrading one written by an earlier revision of schema version 1 first,
 * so db must be writable).  thresholds are percentages.  Idempotent (clears what it builds
 * first).  Returns 0 or -1 (SQLite error). */
int prof_summarize(sqlite3 *db, double fp16_threshold, double memcpy_threshold);
/* One advice row (finalize.c); step, callsite < 0 for none.  0 or -1. */
int prof_advice_add(sqlite3 *db, const char *rule, const char *severity, const char *message,
                    const char *evidence, const char *op, int64_t step, int64_t callsite);

/* ---- data-parallel runs (dist.c, merge.c) ------------------------------------------------ */
/* rank_summary and run_summary's comm_share, rank_spread, ranks (after the run summary). */
int prof_dist_summary(sqlite3 *db, char **msg);

/* Fills memory_sum (schema/profile.sql) from the memory rows, when a rank had more than one
 * context (memsum.c); empties it otherwise.  0, or -1 on an SQLite error. */
int prof_memory_sum(sqlite3 *db);
/* The advice rules on communication: comm_share, straggler, fp32_allreduce,
 * unscaled_fp16_allreduce, rank_overflow. */
int prof_dist_rules(sqlite3 *db);
/* The report's communication lines and per-rank table (nothing without collectives). */
int prof_report_dist_text(sqlite3 *db, FILE *f);
/* The same as the JSON value of the report's "comm" member: {share, threshold, ok,
 * allreduce_dtype, world_size, rank_spread, ranks: [{rank, steps, and per step step_ns,
 * busy_ns, compute_ns, comm_ns, wait_ns, comm_bytes, end}]}, or null without collectives. */
int prof_report_dist_json(sqlite3 *db, FILE *f);
/* Expands %r (the MPI rank from the launcher's environment: OMPI_COMM_WORLD_RANK, PMIX_RANK,
 * PMI_RANK, SLURM_PROCID; 0 without one), %p (ampprof's pid) and %% in an --output pattern.
 * 0, or -1 with *bad set to the offending text (unknown %x, or too long). */
int prof_output_expand(const char *pattern, char *out, size_t len, const char **bad);
/* `ampprof merge -o OUT IN...`. */
int prof_cmd_merge(int argc, char **argv);

/* ---- report and export (report.c, export.c) ---------------------------------------------- */
/* Prints the summary of an open profile as text (to f) or JSON.  Returns 0 or -1. */
int prof_report_text(sqlite3 *db, FILE *f, const char *path);
int prof_report_json(sqlite3 *db, FILE *f, const char *path);
/* "37.20 MiB", "17.6 KiB", "n/a" for a negative count (report.c). */
void prof_bytes_text(char *buf, size_t len, int64_t b);
/* The memory section of the report (report_memory.c): the text lines after "memory peak";
 * in JSON the members ",\n \"memory\": {...}" (bytes per category at the peak and over the
 * steps) and ",\n \"history\": {...}" (loss and loss scale step by step).  0, or -1 on an
 * SQLite error. */
void prof_report_memory_text(sqlite3 *db, FILE *f);
int prof_report_memory_json(sqlite3 *db, FILE *f);
int prof_report_history_json(sqlite3 *db, FILE *f);
/* Exports the profile as a Chrome trace (JSON) or CSV of table (ops, copies, steps,
 * loss_scale, memory).  Returns 0 or -1. */
int prof_export_chrome(sqlite3 *db, FILE *f);
int prof_export_csv(sqlite3 *db, FILE *f, const char *table);

/* ---- status line (status.c) -------------------------------------------------------------- */
typedef struct prof_status {
	int fd;                      /* the terminal, or -1 when no status line is drawn */
	int rows, cols;              /* its size when the line was last drawn */
	int region;                  /* the scroll region is narrowed to rows 1 .. rows-1 */
	int shown;                   /* something was drawn since init or end */
} prof_status;
/* Prepares a status line on fd if it is a terminal (not TERM=dumb); otherwise the other calls
 * do nothing. */
void prof_status_init(prof_status *s, int fd);
/* Shows text (one row, cut to the terminal's width) on the terminal's last row, which the
 * application's output no longer scrolls over.  Safe to call often (a few times a second). */
void prof_status_draw(prof_status *s, const char *text);
/* Erases the line and restores the terminal's scroll region.  Idempotent. */
void prof_status_end(prof_status *s);

/* The runtime's environment knob for the statistics period (runtime/check.h). */
#define PROF_STATS_EVERY_ENV "AMPPROF_STATS_EVERY"

/* ---- the CPU (cpufeat.c) ----------------------------------------------------------------- */
/* The CPU's half-arithmetic features enabled by the OS, space-separated names out of
 * avx512_bf16, avx512_fp16, amx_bf16, amx_tile (in that order), or "none"; the value of meta
 * 'cpu_half_features'.  Truncated to len. */
void prof_cpu_half_features(char *buf, size_t len);
/* The CPU's model name from /proc/cpuinfo ("unknown" if there is none), truncated to len. */
void prof_cpu_model(char *buf, size_t len);
/* cpuid's vendor string ("GenuineIntel", "AuthenticAMD"; "unknown" off x86), the value of meta
 * 'cpu_vendor': the half engines' rates differ by vendor (finalize.c, half_engines[]). */
void prof_cpu_vendor(char *buf, size_t len);
/* `ampprof info` (info.c): argv[0] is "info".  Returns the exit status. */
int prof_cmd_info(int argc, char **argv);
/* `ampprof diff A.db B.db` (diff.c); returns the exit status. */
int prof_cmd_diff(int argc, char **argv);

/* ---- small helpers ----------------------------------------------------------------------- */
uint64_t prof_now_ns(void);      /* CLOCK_MONOTONIC */
uint64_t prof_ticks(void);       /* TSC ticks, or CLOCK_MONOTONIC ns without an invariant TSC */
int prof_tsc_invariant(void);
const char *prof_dtype_name(unsigned dt);
const char *prof_signal_name(int signo);
/* The tools' folder as ampprof was invoked ("build/bin" for build/bin/ampprof; unset when it
 * was found on PATH), set once by main. */
void prof_set_invoked_as(const char *argv0);
/* How to run tool (ampdump) in a hint: beside ampprof when ampprof was invoked by a path and the
 * tool is there ("build/bin/ampdump"), else its name (on PATH).  Into buf. */
const char *prof_tool_command(const char *tool, char *buf, size_t len);

#endif
