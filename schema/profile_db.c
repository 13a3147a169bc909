/* profile_db.c — creating, opening and validating profile databases (see profile_db.h).
 *
 * The schema is schema/profile.sql, turned into the byte array of profile_sql.h by the
 * Makefile, so the file that documents the database is the one that creates it.
 */
#include "profile_db.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp_events.h"
#include "profile_sql.h" /* generated: amp_profile_sql_bytes[] */

/* ---- damage seen while reading ------------------------------------------------------------
 * A page found damaged in the middle of a query ends that query as if it had no more rows:
 * every loop over sqlite3_step would take a damaged table for a short one.  SQLite logs each
 * corruption where it detects it, so one log callback sees them all, whichever query met it. */

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int damage_claimed, damage_code; /* the first damage's writer claims damage_msg */
static char damage_msg[256];

static void damage_log(void *arg, int code, const char *msg)
{
	(void)arg;
	int primary = code & 0xff, unclaimed = 0;
	if ((primary != SQLITE_CORRUPT && primary != SQLITE_NOTADB) ||
	    !__atomic_compare_exchange_n(&damage_claimed, &unclaimed, 1, 0, __ATOMIC_ACQ_REL,
	                                 __ATOMIC_ACQUIRE))
		return;
	snprintf(damage_msg, sizeof damage_msg, "%s (%s)", sqlite3_errstr(code), msg ? msg : "");
	__atomic_store_n(&damage_code, code, __ATOMIC_RELEASE);
}

/* Before SQLite's first use in the process (the tools' first call is an open or a create);
 * later, SQLite refuses the settings (damage then goes unseen, as before).  URI file names
 * as Debian's build has them anyway: ampprof merge attaches its inputs read-only by URI. */
static void sqlite_setup(void)
{
	sqlite3_config(SQLITE_CONFIG_LOG, damage_log, NULL);
	sqlite3_config(SQLITE_CONFIG_URI, 1);
}

int amp_profile_damaged(char *msg, size_t len)
{
	pthread_once(&setup_once, sqlite_setup);
	if (!__atomic_load_n(&damage_code, __ATOMIC_ACQUIRE))
		return 0;
	if (msg && len)
		snprintf(msg, len, "%s", damage_msg);
	return 1;
}

const char *amp_profile_strerror(int code)
{
	switch (code) {
	case AMP_PROFILE_OK: return "success";
	case AMP_PROFILE_ENOENT: return "no such file";
	case AMP_PROFILE_EEXIST: return "file exists";
	case AMP_PROFILE_EACCES: return "permission denied";
	case AMP_PROFILE_ENOTPROFILE: return "not an ampkit profile";
	case AMP_PROFILE_ENEWER: return "written by a newer ampkit";
	case AMP_PROFILE_ECORRUPT: return "file is truncated or corrupt";
	case AMP_PROFILE_ENOTREG: return "not a regular file";
	case AMP_PROFILE_EBUSY: return "being written by another process";
	default: return "database error";
	}
}

const char *amp_profile_schema_sql(void)
{
	return (const char *)amp_profile_sql_bytes;
}

static int fail(int code, char *err, size_t errlen, const char *verb, const char *path,
                const char *detail)
{
	if (err && errlen)
		snprintf(err, errlen, "cannot %s '%s': %s", verb, path,
		         detail ? detail : amp_profile_strerror(code));
	return code;
}

int amp_profile_meta_set(sqlite3 *db, const char *key, const char *value)
{
	sqlite3_stmt *st = NULL;
	int rc = AMP_PROFILE_EIO;
	if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", -1, &st,
	                       NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_DONE)
		rc = AMP_PROFILE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

int amp_profile_meta_get(sqlite3 *db, const char *key, char *buf, size_t len)
{
	sqlite3_stmt *st = NULL;
	int rc = AMP_PROFILE_EIO;
	if (len)
		buf[0] = '\0';
	if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) !=
	    SQLITE_OK)
		goto out;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
	int s = sqlite3_step(st);
	if (s == SQLITE_ROW) {
		const unsigned char *v = sqlite3_column_text(st, 0);
		if (len)
			snprintf(buf, len, "%s", v ? (const char *)v : "");
		rc = AMP_PROFILE_OK;
	} else if (s == SQLITE_DONE) {
		rc = AMP_PROFILE_ENOENT;
	}
out:
	sqlite3_finalize(st);
	return rc;
}

static void remove_sidecars(const char *path)
{
	static const char *const suffix[] = {"-wal", "-shm", "-journal"};
	char name[4096];
	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		snprintf(name, sizeof name, "%s%s", path, suffix[i]);
		unlink(name);
	}
}

/* Removes the profile at path, whose output lock the caller holds: its sidecars first, then the
 * file.  In that order because the moment the file is gone another run may create its own
 * profile at path, and SQLite its -journal and -wal beside it: after the unlink of the file
 * nothing more may be removed by name.  (The other order let a --force run that lost the race
 * delete the winner's -journal as the winner created its schema: both were refused.) */
static void remove_profile_files(const char *path)
{
	remove_sidecars(path);
	unlink(path);
}

/* Reason a file cannot be created in its directory, from errno-like checks. */
static int dir_problem(const char *path)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	struct stat st;
	if (stat(dir, &st) != 0)
		return AMP_PROFILE_ENOENT;
	if (access(dir, W_OK | X_OK) != 0)
		return AMP_PROFILE_EACCES;
	return AMP_PROFILE_EIO;
}

/* ---- the output lock ------------------------------------------------------------------------
 * An open-file-description lock (F_OFD_SETLK) on one byte far past the ones SQLite locks (those
 * sit at 1 GiB): it conflicts with no lock of SQLite's, survives the closing of other
 * descriptors of the file, and goes away with its descriptor, so a SIGKILLed holder leaves no
 * stale lock.  Whoever writes a profile holds it: the collector from creation to its last
 * commit, a reader that completes an unfinalized profile while it does.  It is attached to the
 * connection as the user data of a function whose destructor closes it, so that
 * amp_profile_close releases it. */
#define LOCK_OFFSET ((off_t)1 << 62)

/* Takes (F_WRLCK) the output lock on fd: 0, 1 if another open file holds it, -1 on error. */
static int output_lock(int fd)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_OFFSET,
	                   .l_len = 1};
	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	return errno == EAGAIN || errno == EACCES ? 1 : -1;
}

static void lock_release(void *box)
{
	close(*(int *)box);
	free(box);
}

/* amp_output_lock(): the descriptor that holds the lock (amp_profile_discard keeps it open
 * past the close of the connection). */
static void lock_sql(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void)argc;
	(void)argv;
	sqlite3_result_int(ctx, *(int *)sqlite3_user_data(ctx));
}

/* Hands fd (holding the output lock) to db, closed when db is.  0, or -1 (fd then closed). */
static int lock_attach(sqlite3 *db, int fd)
{
	int *box = malloc(sizeof *box);
	if (!box) {
		close(fd);
		return -1;
	}
	*box = fd;
	/* on failure SQLite calls the destructor itself */
	return sqlite3_create_function_v2(db, "amp_output_lock", 0, SQLITE_UTF8, box, lock_sql,
	                                  NULL, NULL, lock_release) == SQLITE_OK ? 0 : -1;
}

/* Nonzero if path names the file open as fd (not replaced since it was opened). */
static int same_file(const char *path, int fd)
{
	struct stat a, b;
	return lstat(path, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

int amp_profile_live(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? AMP_PROFILE_ENOENT
		       : errno == EACCES ? AMP_PROFILE_EACCES : AMP_PROFILE_EIO;
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_OFFSET,
	                   .l_len = 1};
	int rc = fcntl(fd, F_OFD_GETLK, &fl) != 0 ? AMP_PROFILE_EIO : fl.l_type != F_UNLCK;
	close(fd);
	return rc;
}

/* What lstat found at an output path that is not a regular file, for "cannot create": NULL
 * for a regular file. */
static const char *not_regular(const char *path, const struct stat *sb)
{
	struct stat target;
	if (S_ISREG(sb->st_mode))
		return NULL;
	if (S_ISLNK(sb->st_mode))
		return stat(path, &target) != 0
		           ? "is a dangling symbolic link (its target does not exist); ampprof "
		             "writes only new or regular files, never through a link"
		           : "is a symbolic link; ampprof writes only new or regular files, never "
		             "through a link";
	if (S_ISDIR(sb->st_mode))
		return "is a directory";
	if (S_ISCHR(sb->st_mode))
		return "is a character device, not a regular file; --force overwrites only "
		       "regular files";
	if (S_ISBLK(sb->st_mode))
		return "is a block device, not a regular file; --force overwrites only regular "
		       "files";
	if (S_ISFIFO(sb->st_mode))
		return "is a FIFO, not a regular file; --force overwrites only regular files";
	if (S_ISSOCK(sb->st_mode))
		return "is a socket, not a regular file; --force overwrites only regular files";
	return "is not a regular file; --force overwrites only regular files";
}

/* fd, opened on path, is the regular file lstat saw there (sb: the change time tells a new
 * file on a reused inode apart) and no collector holds its output lock: then it takes that
 * lock for the caller (released when fd closes).  AMP_PROFILE_OK, AMP_PROFILE_EBUSY or
 * AMP_PROFILE_EIO, reported in err. */
static int lock_old_output(const char *path, const struct stat *sb, int fd, char *err,
                           size_t errlen)
{
	struct stat fsb;
	int lk = fstat(fd, &fsb) != 0 || !S_ISREG(fsb.st_mode) || fsb.st_dev != sb->st_dev ||
	                 fsb.st_ino != sb->st_ino || fsb.st_ctim.tv_sec != sb->st_ctim.tv_sec ||
	                 fsb.st_ctim.tv_nsec != sb->st_ctim.tv_nsec
	             ? 1
	             : output_lock(fd);
	if (lk > 0 || (lk == 0 && !same_file(path, fd)))
		return fail(
		    AMP_PROFILE_EBUSY, err, errlen, "create", path,
		    "another ampprof is writing it (it holds the output lock); wait for that "
		    "run to end or choose another --output");
	if (lk < 0)
		return fail(AMP_PROFILE_EIO, err, errlen, "create", path, strerror(errno));
	return AMP_PROFILE_OK;
}

/* --force: removes the regular file at path (sb: its lstat) and its sidecars, once it holds
 * the output lock of that very file, so that a profile another collector is writing is never
 * removed.  AMP_PROFILE_OK or the failure, reported in err. */
static int remove_old_output(const char *path, const struct stat *sb, char *err, size_t errlen)
{
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? AMP_PROFILE_OK /* gone meanwhile */
		       : fail(errno == EACCES || errno == EPERM ? AMP_PROFILE_EACCES : AMP_PROFILE_EIO,
		              err, errlen, "create", path, strerror(errno));
	int rc = lock_old_output(path, sb, fd, err, errlen);
	if (rc == AMP_PROFILE_OK)
		remove_profile_files(path);
	close(fd); /* only now: the lock is held until the file and its sidecars are gone */
	return rc;
}

/* amp_profile_replace's --force case: fd is the file that lstat saw at path (sb), opened; tmp
 * is renamed over it under its output lock, once its sidecars are gone (a stale -wal would
 * be read into the new file), unless another collector holds that lock (see
 * remove_old_output).  tmp NULL: the check alone.  Closes fd. */
static int replace_locked(const char *tmp, const char *path, const struct stat *sb, int fd,
                          char *err, size_t errlen)
{
	int rc = lock_old_output(path, sb, fd, err, errlen);
	if (rc == AMP_PROFILE_OK && tmp) {
		remove_sidecars(path);
		if (rename(tmp, path) != 0)
			rc = fail(errno == EACCES || errno == EPERM ? AMP_PROFILE_EACCES
			                                            : AMP_PROFILE_EIO,
			          err, errlen, "create", path, strerror(errno));
	}
	close(fd);
	return rc;
}

int amp_profile_replace(const char *tmp, const char *path, int force, char *err, size_t errlen)
{
	struct stat sb;
	if (lstat(path, &sb) == 0) {
		const char *why = not_regular(path, &sb);
		if (why)
			return fail(AMP_PROFILE_ENOTREG, err, errlen, "create", path, why);
		if (!force)
			return fail(AMP_PROFILE_EEXIST, err, errlen, "create", path, "file exists");
		int fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0)
			return replace_locked(tmp, path, &sb, fd, err, errlen);
		if (errno != ENOENT)
			return fail(errno == EACCES || errno == EPERM ? AMP_PROFILE_EACCES
			                                              : AMP_PROFILE_EIO,
			            err, errlen, "create", path, strerror(errno));
		/* gone meanwhile: as if there had been nothing */
	}
	if (!tmp)
		return AMP_PROFILE_OK;
	/* nothing there: tmp takes the name unless another file took it meanwhile, under its own
	 * output lock, kept while the sidecars a removed profile left at the name go (a stale
	 * -wal would be read into this one) */
	int fd = open(tmp, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || output_lock(fd) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return fail(AMP_PROFILE_EIO, err, errlen, "create", path, strerror(e));
	}
	int moved = renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0;
	if (!moved && (errno == EINVAL || errno == ENOSYS) && link(tmp, path) == 0) {
		unlink(tmp); /* a file system without it: link, unlink */
		moved = 1;
	}
	int e = errno;
	if (moved && same_file(path, fd))
		remove_sidecars(path);
	close(fd);
	if (moved)
		return AMP_PROFILE_OK;
	errno = e;
	if (errno == EEXIST)
		return fail(AMP_PROFILE_EEXIST, err, errlen, "create", path,
		            force ? "another run created it at the same time" : "file exists");
	return fail(errno == EACCES || errno == EPERM ? AMP_PROFILE_EACCES : AMP_PROFILE_EIO, err,
	            errlen, "create", path, strerror(errno));
}

int amp_profile_create(const char *path, int force, sqlite3 **out, char *err, size_t errlen)
{
	pthread_once(&setup_once, sqlite_setup);
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	char *msg = NULL;
	int rc, fd = -1, owned = 0;
	struct stat sb;

	*out = NULL;
	if (lstat(path, &sb) == 0) {
		const char *why = not_regular(path, &sb);
		if (why) {
			rc = fail(AMP_PROFILE_ENOTREG, err, errlen, "create", path, why);
			goto out;
		}
		if (!force) {
			rc = fail(AMP_PROFILE_EEXIST, err, errlen, "create", path, "file exists");
			goto out;
		}
		if ((rc = remove_old_output(path, &sb, err, errlen)) != AMP_PROFILE_OK)
			goto out;
	}
	/* the file is created here, not by SQLite, so that it is new (O_EXCL: a run that created
	 * it meanwhile wins) and locked before anything is written */
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
	if (fd < 0) {
		int e = errno;
		rc = dir_problem(path);
		if (e == EEXIST)
			rc = force ? fail(AMP_PROFILE_EBUSY, err, errlen, "create", path,
			                  "another run created it at the same time")
			           : fail(AMP_PROFILE_EEXIST, err, errlen, "create", path, "file exists");
		else if (rc == AMP_PROFILE_ENOENT || rc == AMP_PROFILE_EACCES)
			rc = fail(rc, err, errlen, "create", path,
			          rc == AMP_PROFILE_ENOENT ? "no such directory" : "permission denied");
		else
			rc = fail(e == EACCES || e == EPERM || e == EROFS ? AMP_PROFILE_EACCES
			                                                  : AMP_PROFILE_EIO,
			          err, errlen, "create", path, strerror(e));
		goto out;
	}
	int lk = output_lock(fd);
	if (lk != 0 || !same_file(path, fd)) {
		/* another run with --force took it between our open and our lock: theirs now */
		rc = fail(lk < 0 ? AMP_PROFILE_EIO : AMP_PROFILE_EBUSY, err, errlen, "create", path,
		          lk < 0 ? strerror(errno) : "another ampprof replaced it at the same time");
		goto out;
	}
	owned = 1;
	remove_sidecars(path); /* a stale -wal of a removed profile would be read into this one */
	/* NOMUTEX: a connection is used by one thread at a time (see the header), and the
	 * collector's per-row calls no longer pay for SQLite's mutexes (~8 % of ingest). */
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		rc = fail(AMP_PROFILE_EIO, err, errlen, "create", path, sqlite3_errmsg(db));
		goto out;
	}
	/* the connection holds the lock through a second descriptor; fd keeps it too until the
	 * end, so that a creation that fails removes its file while the file is still its own */
	int held = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (held < 0 || lock_attach(db, held) != 0) {
		rc = fail(AMP_PROFILE_EIO, err, errlen, "create", path,
		          held < 0 ? strerror(errno) : "out of memory");
		goto out;
	}
	if (sqlite3_exec(db,
	                 "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL;"
	                 "PRAGMA synchronous = OFF; PRAGMA cache_size = -65536;"
	                 "PRAGMA wal_autocheckpoint = 4096;",
	                 NULL, NULL, &msg) != SQLITE_OK ||
	    sqlite3_exec(db, "BEGIN", NULL, NULL, &msg) != SQLITE_OK ||
	    sqlite3_exec(db, amp_profile_schema_sql(), NULL, NULL, &msg) != SQLITE_OK) {
		int ec = sqlite3_errcode(db);
		rc = fail(ec == SQLITE_READONLY || ec == SQLITE_PERM ? AMP_PROFILE_EACCES
		                                                      : AMP_PROFILE_EIO,
		          err, errlen, "create", path, msg ? msg : sqlite3_errmsg(db));
		goto out;
	}
	if (sqlite3_prepare_v2(db, "INSERT INTO op_types(id, name, list) VALUES (?, ?, ?)", -1, &st,
	                       NULL) != SQLITE_OK) {
		rc = fail(AMP_PROFILE_EIO, err, errlen, "create", path, sqlite3_errmsg(db));
		goto out;
	}
	for (int op = 0; op < AMP_OP_COUNT; op++) {
		sqlite3_bind_int(st, 1, op);
		sqlite3_bind_text(st, 2, amp_op_name((amp_op_type)op), -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, amp_op_list_name(amp_op_default_list((amp_op_type)op)), -1,
		                  SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE) {
			rc = fail(AMP_PROFILE_EIO, err, errlen, "create", path, sqlite3_errmsg(db));
			goto out;
		}
		sqlite3_reset(st);
	}
	char ver[16];
	snprintf(ver, sizeof ver, "%d", AMP_PROFILE_VERSION);
	if (amp_profile_meta_set(db, "schema_version", ver) != AMP_PROFILE_OK ||
	    sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
		rc = fail(AMP_PROFILE_EIO, err, errlen, "create", path,
		          msg ? msg : sqlite3_errmsg(db));
		goto out;
	}
	*out = db;
	db = NULL;
	rc = AMP_PROFILE_OK;
out:
	sqlite3_free(msg);
	sqlite3_finalize(st);
	if (db)
		sqlite3_close(db);
	if (owned && rc != AMP_PROFILE_OK)
		remove_profile_files(path); /* under the lock, which fd still holds */
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Nonzero if path's -wal holds at least one frame (more than its 32-byte header). */
static int wal_has_frames(const char *path)
{
	char wal[4200];
	struct stat st;
	snprintf(wal, sizeof wal, "%s-wal", path);
	return stat(wal, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 32;
}

/* Checks the 100-byte SQLite header: magic, and a file at least as long as the header says
 * (when the in-header size is valid and no -wal holds pages).  Catches most truncations
 * before SQLite reads a page. */
static int check_header(const char *path, char *err, size_t errlen)
{
	unsigned char h[100];
	struct stat st;
	/* not opened: opening a FIFO for reading waits for a writer */
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return fail(AMP_PROFILE_EIO, err, errlen, "open", path,
		            S_ISFIFO(st.st_mode)   ? "is a pipe, not a file: a profile is read "
		                                     "from a regular file"
		            : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
		                                   : "is a device, not a regular file");
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		return fail(e == ENOENT ? AMP_PROFILE_ENOENT
		            : e == EACCES ? AMP_PROFILE_EACCES : AMP_PROFILE_EIO,
		            err, errlen, "open", path,
		            e == ENOENT ? "no such file" : strerror(e));
	}
	size_t n = fread(h, 1, sizeof h, f);
	int fstat_ok = fstat(fileno(f), &st) == 0;
	fclose(f);
	if (fstat_ok && S_ISDIR(st.st_mode))
		return fail(AMP_PROFILE_EIO, err, errlen, "open", path, "is a directory");
	if (n == 0)
		return fail(AMP_PROFILE_ENOTPROFILE, err, errlen, "open", path,
		            "empty file, not an ampkit profile");
	if (n < sizeof h) {
		if (memcmp(h, "SQLite format 3", n < 16 ? n : 16) == 0)
			return fail(AMP_PROFILE_ECORRUPT, err, errlen, "open", path,
			            "file is truncated");
		return fail(AMP_PROFILE_ENOTPROFILE, err, errlen, "open", path,
		            "not an SQLite database, not an ampkit profile");
	}
	if (memcmp(h, "SQLite format 3", 16) != 0)
		return fail(AMP_PROFILE_ENOTPROFILE, err, errlen, "open", path,
		            "not an SQLite database, not an ampkit profile");
	uint32_t page = (uint32_t)h[16] << 8 | h[17];
	if (page == 1)
		page = 65536;
	uint32_t pages = (uint32_t)h[28] << 24 | (uint32_t)h[29] << 16 | (uint32_t)h[30] << 8 | h[31];
	uint32_t change = (uint32_t)h[24] << 24 | (uint32_t)h[25] << 16 | (uint32_t)h[26] << 8 | h[27];
	uint32_t valid = (uint32_t)h[92] << 24 | (uint32_t)h[93] << 16 | (uint32_t)h[94] << 8 | h[95];
	if (page < 512 || (page & (page - 1)))
		return fail(AMP_PROFILE_ECORRUPT, err, errlen, "open", path, "corrupt header");
	/* With pages in the -wal, the main file's size says nothing: a checkpoint writes page 1
	 * (the new count) before the pages that extend the file, and one cut short (SIGKILL, a
	 * full disk) leaves it shorter than its header until SQLite reads the rest from the -wal. */
	if (fstat_ok && pages && change == valid && (uint64_t)st.st_size < (uint64_t)page * pages &&
	    !wal_has_frames(path))
		return fail(AMP_PROFILE_ECORRUPT, err, errlen, "open", path,
		            "file is truncated (shorter than its header says)");
	return AMP_PROFILE_OK;
}

/* Prepares sql with the args of amp_profile_query_* bound and steps it once.  Returns the
 * SQLite code of the step (SQLITE_ROW with a row) or of the failed prepare or bind; *st is
 * the statement to finalize (NULL after a failed prepare). */
static int query_one(sqlite3 *db, sqlite3_stmt **st, const char *sql, const char *args,
                     va_list ap)
{
	int rc = sqlite3_prepare_v2(db, sql, -1, st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	for (int i = 0; args && args[i] && rc == SQLITE_OK; i++) {
		switch (args[i]) {
		case 'i': rc = sqlite3_bind_int64(*st, i + 1, va_arg(ap, int64_t)); break;
		case 'd': rc = sqlite3_bind_double(*st, i + 1, va_arg(ap, double)); break;
		case 't': {
			const char *t = va_arg(ap, const char *);
			rc = t ? sqlite3_bind_text(*st, i + 1, t, -1, SQLITE_TRANSIENT)
			       : sqlite3_bind_null(*st, i + 1);
			break;
		}
		default: rc = SQLITE_MISUSE; break;
		}
	}
	return rc == SQLITE_OK ? sqlite3_step(*st) : rc;
}

/* AMP_PROFILE_* for query_one's code and the row's first column. */
static int query_code(sqlite3_stmt *st, int rc)
{
	if (rc == SQLITE_DONE || (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_NULL))
		return AMP_PROFILE_ENOENT;
	return rc == SQLITE_ROW ? AMP_PROFILE_OK : AMP_PROFILE_EIO;
}

int amp_profile_query_int64(sqlite3 *db, int64_t *out, const char *sql, const char *args, ...)
{
	sqlite3_stmt *st = NULL;
	va_list ap;
	va_start(ap, args);
	int step = query_one(db, &st, sql, args, ap);
	va_end(ap);
	int rc = query_code(st, step);
	if (rc == AMP_PROFILE_OK)
		*out = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return rc;
}

int amp_profile_query_double(sqlite3 *db, double *out, const char *sql, const char *args, ...)
{
	sqlite3_stmt *st = NULL;
	va_list ap;
	va_start(ap, args);
	int step = query_one(db, &st, sql, args, ap);
	va_end(ap);
	int rc = query_code(st, step);
	if (rc == AMP_PROFILE_OK)
		*out = sqlite3_column_double(st, 0);
	sqlite3_finalize(st);
	return rc;
}

int amp_profile_query_text(sqlite3 *db, char *buf, size_t len, const char *sql,
                           const char *args, ...)
{
	sqlite3_stmt *st = NULL;
	va_list ap;
	va_start(ap, args);
	int step = query_one(db, &st, sql, args, ap);
	va_end(ap);
	int rc = query_code(st, step);
	if (rc == AMP_PROFILE_OK && len)
		snprintf(buf, len, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return rc;
}

/* An integer pragma (or one-value query) into *value; the SQLite code (SQLITE_OK on a row). */
static int pragma_int(sqlite3 *db, const char *sql, int *value)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*value = sqlite3_column_int(st, 0);
			rc = SQLITE_OK;
		}
	}
	sqlite3_finalize(st);
	return rc;
}

static int sqlite_to_code(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_NOTADB: return AMP_PROFILE_ENOTPROFILE;
	case SQLITE_CORRUPT: return AMP_PROFILE_ECORRUPT;
	case SQLITE_PERM: case SQLITE_READONLY: case SQLITE_AUTH: return AMP_PROFILE_EACCES;
	case SQLITE_CANTOPEN: return AMP_PROFILE_EIO;
	default: return AMP_PROFILE_EIO;
	}
}

int amp_profile_open(const char *path, int writable, sqlite3 **out, char *err, size_t errlen)
{
	sqlite3 *db = NULL;
	int rc, app_id = 0, version = 0, tables = 0;
	char detail[256];

	*out = NULL;
	pthread_once(&setup_once, sqlite_setup);
	rc = check_header(path, err, errlen);
	if (rc != AMP_PROFILE_OK)
		goto out;
	int flags = writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY;
	if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
		rc = fail(sqlite_to_code(sqlite3_errcode(db)), err, errlen, "open", path,
		          sqlite3_errmsg(db));
		goto out;
	}
	sqlite3_busy_timeout(db, 2000);
	if (writable) {
		/* a writer other than the collector (completing an unfinalized profile) holds the
		 * output lock too: never while a collector records it, never two at once */
		int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
		int lk = fd < 0 ? -1 : output_lock(fd);
		if (lk != 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			rc = fail(lk > 0 ? AMP_PROFILE_EBUSY
			          : e == EACCES || e == EPERM || e == EROFS ? AMP_PROFILE_EACCES
			                                                      : AMP_PROFILE_EIO,
			          err, errlen, "open", path,
			          lk > 0 ? "it is being written by another process (ampprof is still "
			                   "recording it)"
			                 : strerror(e));
			goto out;
		}
		if (lock_attach(db, fd) != 0) {
			rc = fail(AMP_PROFILE_EIO, err, errlen, "open", path, "out of memory");
			goto out;
		}
	}
	rc = pragma_int(db, "PRAGMA application_id", &app_id);
	if (rc != SQLITE_OK && !writable && sqlite3_extended_errcode(db) == SQLITE_READONLY_ROLLBACK) {
		/* a hot journal: a write in rollback mode was cut short (ampprof SIGKILLed as it
		 * switched the journal mode back at finalize, right after its last checkpoint), and
		 * until the journal is played back the file is not the committed profile, which a
		 * read-only connection cannot do.  A writable one does it on its first read, as any
		 * SQLite opener would; it restores what was committed and writes nothing new */
		sqlite3_close(db);
		db = NULL;
		sqlite3 *rw = NULL;
		char why[512];
		rc = amp_profile_open(path, 1, &rw, why, sizeof why);
		amp_profile_close(rw);
		if (rc != AMP_PROFILE_OK) {
			snprintf(detail, sizeof detail, "its -journal must be rolled back first (a write "
			         "to it was cut short), which needs write access: %s",
			         rc == AMP_PROFILE_EBUSY ? "another process writes it"
			                                 : amp_profile_strerror(rc));
			rc = fail(rc, err, errlen, "open", path, detail);
			goto out;
		}
		return amp_profile_open(path, 0, out, err, errlen);
	}
	if (rc != SQLITE_OK || (rc = pragma_int(db, "PRAGMA user_version", &version)) != SQLITE_OK) {
		int code = sqlite_to_code(rc);
		rc = fail(code, err, errlen, "open", path,
		          code == AMP_PROFILE_ENOTPROFILE ? "not an SQLite database, not an ampkit profile"
		                                          : sqlite3_errmsg(db));
		goto out;
	}
	if ((uint32_t)app_id != AMP_PROFILE_APP_ID) {
		rc = fail(AMP_PROFILE_ENOTPROFILE, err, errlen, "open", path,
		          "not an ampkit profile (wrong application_id)");
		goto out;
	}
	if (version > AMP_PROFILE_VERSION) {
		snprintf(detail, sizeof detail,
		         "profile schema version %d is newer than this tool's %d", version,
		         AMP_PROFILE_VERSION);
		rc = fail(AMP_PROFILE_ENEWER, err, errlen, "open", path, detail);
		goto out;
	}
	if (version < 1) {
		rc = fail(AMP_PROFILE_ENOTPROFILE, err, errlen, "open", path,
		          "not an ampkit profile (no schema version)");
		goto out;
	}
	rc = pragma_int(db,
	                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
	                "('meta', 'op_events', 'op_sigs', 'steps', 'copy_events', 'copy_sigs')",
	                &tables);
	if (rc != SQLITE_OK) {
		rc = fail(sqlite_to_code(rc), err, errlen, "open", path, sqlite3_errmsg(db));
		goto out;
	}
	if (tables != 6) {
		rc = fail(AMP_PROFILE_ECORRUPT, err, errlen, "open", path,
		          "profile is missing tables (corrupt)");
		goto out;
	}
	*out = db;
	db = NULL;
	rc = AMP_PROFILE_OK;
out:
	sqlite3_close(db);
	return rc;
}

int amp_profile_has_table(sqlite3 *db, const char *name)
{
	int64_t found = 0;
	amp_profile_query_int64(db, &found, "SELECT count(*) FROM sqlite_master WHERE name = ? AND "
	                        "type IN ('table', 'view')", "t", name);
	return found > 0;
}

int amp_profile_shadow_rank(sqlite3 *db, int64_t rank, const char *const *tables, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *sql = sqlite3_mprintf("CREATE TEMP VIEW %s AS SELECT * FROM main.%s"
		                            " WHERE rank = %lld", tables[i], tables[i], (long long)rank);
		int rc = sql ? sqlite3_exec(db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
		sqlite3_free(sql);
		if (rc != SQLITE_OK)
			return AMP_PROFILE_EIO;
	}
	return AMP_PROFILE_OK;
}

int amp_profile_has_column(sqlite3 *db, const char *table, const char *column)
{
	char sql[128];
	sqlite3_stmt *st = NULL;
	int found = 0;
	snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK)
		while (!found && sqlite3_step(st) == SQLITE_ROW) {
			const unsigned char *n = sqlite3_column_text(st, 1);
			found = n && strcmp((const char *)n, column) == 0;
		}
	sqlite3_finalize(st);
	return found;
}

const char *amp_profile_memory_steps(sqlite3 *db, const char *before, const char *where,
                                     const char *after, char *buf, size_t len)
{
	int64_t summed = 0;
	if (amp_profile_has_table(db, "memory_sum"))
		amp_profile_query_int64(db, &summed, "SELECT EXISTS (SELECT 1 FROM memory_sum)",
		                        NULL);
	int ranked = amp_profile_has_column(db, "memory", "rank");
	const char *w = where ? " WHERE " : "", *cond = where ? where : "";
	/* SQLite takes a group's bare columns from the row max() chose */
	int n = summed ? snprintf(buf, len,
	                          "%sSELECT step, master_weights, working_copies, activations, grads,"
	                          " optimizer_state, total, max(peak) AS peak, rank FROM (SELECT"
	                          " step, rank, master_weights, working_copies, activations, grads,"
	                          " optimizer_state, total, max(peak) AS peak FROM memory_sum%s%s"
	                          " GROUP BY step, rank) GROUP BY step%s",
	                          before, w, cond, after)
	               : snprintf(buf, len,
	                          "%sSELECT step, mw AS master_weights, wc AS working_copies, act AS"
	                          " activations, gr AS grads, os AS optimizer_state, tot AS total,"
	                          " max(pk) AS peak, r AS rank FROM (SELECT step, %s AS r,"
	                          " sum(master_weights) AS mw,"
	                          " sum(working_copies) AS wc, sum(activations) AS act, sum(grads) AS"
	                          " gr, sum(optimizer_state) AS os, sum(total) AS tot, sum(peak) AS pk"
	                          " FROM memory%s%s GROUP BY step%s) GROUP BY step%s",
	                          before, ranked ? "rank" : "0", w, cond, ranked ? ", rank" : "",
	                          after);
	return n > 0 && (size_t)n < len ? buf : NULL;
}

const char *amp_profile_callsites_static(sqlite3 *db)
{
	static const char warning[] =
	    "every call site is the program's entry (__libc_start_call_main) or unknown: the "
	    "program links libamprt statically, so its frames cannot be told from the library's "
	    "(or it has no symbols); link it against libamprt.so (-lamprt with the shared library "
	    "installed), with -g, to see its source lines";
	static const char unresolved[] =
	    "every call site is unnamed: ampprof names them from the program's memory map when "
	    "the run ends, and this profile's collector stopped before that (or it is still "
	    "recording)";
	int64_t all = 0, start = 0, unnamed = 0;
	amp_profile_query_int64(db, &all, "SELECT count(*) FROM callsites", NULL);
	amp_profile_query_int64(db, &unnamed,
	                        "SELECT count(*) FROM callsites WHERE function IS NULL", NULL);
	amp_profile_query_int64(db, &start,
	                        "SELECT count(*) FROM callsites WHERE function LIKE "
	                        "'\\_\\_libc\\_start%' ESCAPE '\\' OR function = '?\?'",
	                        NULL);
	if (all > 0 && unnamed == all)
		return unresolved; /* nothing symbolized them: no sign of static linking */
	return all > 0 && start + unnamed == all && start > 0 ? warning : "";
}

const char *amp_profile_half_label(const char *half_types)
{
	if (!half_types || !*half_types || strcmp(half_types, "fp16") == 0)
		return "FP16 share";
	if (strcmp(half_types, "bf16") == 0)
		return "BF16 share";
	return "half share (fp16+bf16)";
}

/* Replaces view name by "CREATE VIEW name AS ...;" as it stands in the embedded schema. */
static int view_from_schema(sqlite3 *db, const char *name)
{
	char head[96], drop[128];
	snprintf(head, sizeof head, "CREATE VIEW %s AS", name);
	snprintf(drop, sizeof drop, "DROP VIEW IF EXISTS %s", name);
	const char *sql = amp_profile_schema_sql();
	const char *start = strstr(sql, head);
	const char *end = start ? strchr(start, ';') : NULL;
	if (!end || sqlite3_exec(db, drop, NULL, NULL, NULL) != SQLITE_OK)
		return AMP_PROFILE_EIO;
	char *stmt = sqlite3_mprintf("%.*s", (int)(end - start), start);
	if (!stmt)
		return AMP_PROFILE_EIO;
	int rc = sqlite3_exec(db, stmt, NULL, NULL, NULL) == SQLITE_OK ? AMP_PROFILE_OK
	                                                                : AMP_PROFILE_EIO;
	sqlite3_free(stmt);
	return rc;
}

/* Runs "CREATE TABLE name (...);" as it stands in the embedded schema, with IF NOT EXISTS. */
static int create_from_schema(sqlite3 *db, const char *name)
{
	char head[96];
	snprintf(head, sizeof head, "CREATE TABLE %s (", name);
	const char *sql = amp_profile_schema_sql();
	const char *start = strstr(sql, head);
	const char *end = start ? strstr(start, "\n);") : NULL;
	if (!end)
		return AMP_PROFILE_EIO;
	size_t body = (size_t)(end + 3 - (start + strlen("CREATE TABLE ")));
	size_t len = strlen("CREATE TABLE IF NOT EXISTS ") + body + 1;
	char *stmt = sqlite3_malloc64(len);
	if (!stmt)
		return AMP_PROFILE_EIO;
	snprintf(stmt, len, "CREATE TABLE IF NOT EXISTS %.*s", (int)body,
	         start + strlen("CREATE TABLE "));
	int rc = sqlite3_exec(db, stmt, NULL, NULL, NULL) == SQLITE_OK ? AMP_PROFILE_OK
	                                                                : AMP_PROFILE_EIO;
	sqlite3_free(stmt);
	return rc;
}

int amp_profile_upgrade(sqlite3 *db)
{
	/* what was added since the first revision of version 1, in the order it was added */
	static const struct {
		const char *table, *column, *type;
	} columns[] = {
	    {"tensor_stats", "neg_inf", "INTEGER"},
	    {"tensor_stats", "phase", "TEXT"},
	    {"tensor_stats", "thread", "INTEGER"},
	    /* version 2 */
	    {"op_sigs", "engine", "TEXT"},
	    {"op_summary", "native_ns", "INTEGER"},
	    {"run_summary", "native_half_share", "REAL"},
	    {"run_summary", "half_types", "TEXT"},
	    /* version 3 */
	    {"loss_scale", "thread", "INTEGER"},
	    {"memory", "thread", "INTEGER"},
	    {"op_summary", "median_ns", "REAL"},
	    {"op_summary", "min_ns", "INTEGER"},
	    {"op_summary", "max_ns", "INTEGER"},
	    {"op_summary", "stddev_ns", "REAL"},
	    {"tensor_stats", "src_seq", "INTEGER"},
	    {"tensor_stats", "cast_source", "INTEGER"},
	    {"tensor_stats", "tiny_at_nonfinite", "INTEGER"},
	    {"tensor_stats", "param_grad", "INTEGER"},
	    {"steps", "loss_state", "TEXT"},
	    {"loss_scale", "cause_class", "TEXT"},
	    {"loss_scale", "cause_op", "TEXT"},
	    {"loss_scale", "cause_tensor", "TEXT"},
	    {"loss_scale", "cause_callsite", "INTEGER"},
	    {"loss_scale", "cause_fwd_callsite", "INTEGER"},
	    {"loss_scale", "cause_absmax", "REAL"},
	    {"loss_scale", "clean_steps", "INTEGER"},
	    {"nonfinite", "src_op", "TEXT"},
	    {"nonfinite", "src_label", "TEXT"},
	    {"nonfinite", "src_dtype", "TEXT"},
	    {"nonfinite", "src_seq", "INTEGER"},
	    {"nonfinite", "src_callsite", "INTEGER"},
	    {"nonfinite", "src_tensor", "TEXT"},
	    {"nonfinite", "src_absmax", "REAL"},
	    {"nonfinite", "fwd_callsite", "INTEGER"},
	    {"run_summary", "scale_history", "TEXT"},
	    {"run_summary", "scale_history_steps", "TEXT"},
	    {"run_summary", "skipped_share", "REAL"},
	    {"run_summary", "fp16_ready", "TEXT"},
	    {"threads", "rank", "INTEGER DEFAULT 0"},
	    {"op_events", "rank", "INTEGER DEFAULT 0"},
	    {"copy_events", "rank", "INTEGER DEFAULT 0"},
	    {"steps", "rank", "INTEGER DEFAULT 0"},
	    {"loss_scale", "rank", "INTEGER DEFAULT 0"},
	    {"memory", "rank", "INTEGER DEFAULT 0"},
	    {"tensor_stats", "rank", "INTEGER DEFAULT 0"},
	    {"dumps", "rank", "INTEGER DEFAULT 0"},
	    {"crashes", "rank", "INTEGER DEFAULT 0"},
	    {"nonfinite", "rank", "INTEGER DEFAULT 0"},
	    {"run_summary", "comm_share", "REAL"},
	    {"run_summary", "rank_spread", "REAL"},
	    {"run_summary", "ranks", "INTEGER"},
	    {"steps", "grad_norm", "REAL"},
	    {"steps", "clipped", "INTEGER"},
	    {"steps", "micro_batches", "INTEGER"},
	    {"memory", "master_weights_unopt", "INTEGER"},
	    {"memory", "working_copies_unopt", "INTEGER"},
	    {"memory", "activations_unopt", "INTEGER"},
	    {"memory", "grads_unopt", "INTEGER"},
	    {"memory", "optimizer_state_unopt", "INTEGER"},
	    {"memory", "total_unopt", "INTEGER"},
	    {"memory", "peak_unopt", "INTEGER"},
	    {"memory", "context", "INTEGER"},
	    {"loss_scale", "context", "INTEGER"},
	    {"steps", "context", "INTEGER"},
	};
	static const char *const tables[] = {"nonfinite",    "forecast",   "comm",
	                                     "rank_summary", "memory_sum", "context_ends"};
	int version = 0;
	if (pragma_int(db, "PRAGMA user_version", &version) != SQLITE_OK)
		return AMP_PROFILE_EIO;
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
		if (create_from_schema(db, tables[i]) != AMP_PROFILE_OK)
			return AMP_PROFILE_EIO;
	for (size_t i = 0; i < sizeof columns / sizeof columns[0]; i++) {
		/* a table that was missing has just been created whole */
		if (!amp_profile_has_table(db, columns[i].table) ||
		    amp_profile_has_column(db, columns[i].table, columns[i].column))
			continue;
		char sql[160];
		snprintf(sql, sizeof sql, "ALTER TABLE %s ADD COLUMN %s %s", columns[i].table,
		         columns[i].column, columns[i].type);
		if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
			return AMP_PROFILE_EIO;
	}
	if (version >= AMP_PROFILE_VERSION)
		return AMP_PROFILE_OK;
	/* the views that gained columns, then the version itself */
	char sql[64], ver[16];
	snprintf(sql, sizeof sql, "PRAGMA user_version = %d", AMP_PROFILE_VERSION);
	snprintf(ver, sizeof ver, "%d", AMP_PROFILE_VERSION);
	if (!amp_profile_has_column(db, "ops", "rank") &&
	    view_from_schema(db, "ops") != AMP_PROFILE_OK)
		return AMP_PROFILE_EIO;
	if (!amp_profile_has_column(db, "copies", "rank") &&
	    view_from_schema(db, "copies") != AMP_PROFILE_OK)
		return AMP_PROFILE_EIO;
	/* SELECT * views keep the columns they were made with */
	if (!amp_profile_has_column(db, "overview", "comm_share") &&
	    view_from_schema(db, "overview") != AMP_PROFILE_OK)
		return AMP_PROFILE_EIO;
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK ||
	    amp_profile_meta_set(db, "schema_version", ver) != AMP_PROFILE_OK)
		return AMP_PROFILE_EIO;
	return AMP_PROFILE_OK;
}

int amp_profile_op_stats(sqlite3 *db, amp_op_stats *out, size_t max, size_t *n)
{
	const char *stats = amp_profile_has_column(db, "op_summary", "median_ns")
	                        ? "median_ns, min_ns, max_ns, stddev_ns"
	                        : "NULL, NULL, NULL, NULL";
	char sql[320];
	snprintf(sql, sizeof sql,
	         "SELECT op, exec_dtype, calls, total_ns, mean_ns, %s, share, flops FROM op_summary "
	         "ORDER BY total_ns DESC, op, exec_dtype",
	         stats);
	sqlite3_stmt *st = NULL;
	*n = 0;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return AMP_PROFILE_EIO;
	int rc = SQLITE_DONE;
	while (*n < max && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		amp_op_stats *o = &out[(*n)++];
		const unsigned char *op = sqlite3_column_text(st, 0), *dt = sqlite3_column_text(st, 1);
		snprintf(o->op, sizeof o->op, "%s", op ? (const char *)op : "");
		snprintf(o->exec_dtype, sizeof o->exec_dtype, "%s", dt ? (const char *)dt : "");
		o->calls = sqlite3_column_int64(st, 2);
		o->total_ns = sqlite3_column_int64(st, 3);
		o->mean_ns = sqlite3_column_double(st, 4);
		o->median_ns = sqlite3_column_type(st, 5) == SQLITE_NULL ? (double)NAN
		                                                          : sqlite3_column_double(st, 5);
		o->min_ns = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 6);
		o->max_ns = sqlite3_column_type(st, 7) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 7);
		o->stddev_ns = sqlite3_column_type(st, 8) == SQLITE_NULL ? (double)NAN
		                                                          : sqlite3_column_double(st, 8);
		o->share = sqlite3_column_type(st, 9) == SQLITE_NULL ? (double)NAN
		                                                      : sqlite3_column_double(st, 9);
		o->flops = sqlite3_column_int64(st, 10);
	}
	if (*n == max)
		rc = SQLITE_DONE;
	sqlite3_finalize(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? AMP_PROFILE_OK : AMP_PROFILE_EIO;
}

int amp_profile_fold_wal(sqlite3 *db, char *why, size_t len)
{
	char mode[16] = "";
	int rc = amp_profile_query_text(db, mode, sizeof mode, "PRAGMA journal_mode = OFF", NULL);
	if (rc == AMP_PROFILE_OK && strcmp(mode, "off") == 0)
		rc = amp_profile_query_text(db, mode, sizeof mode, "PRAGMA journal_mode = DELETE",
		                            NULL);
	if (rc == AMP_PROFILE_OK && strcmp(mode, "delete") == 0)
		return 0;
	snprintf(why, len, "%s",
	         rc == AMP_PROFILE_EIO ? sqlite3_errmsg(db) : "another process has it open");
	return -1;
}

void amp_profile_close(sqlite3 *db)
{
	if (db)
		sqlite3_close(db);
}

void amp_profile_discard(sqlite3 *db)
{
	if (!db)
		return;
	char path[4096];
	const char *name = sqlite3_db_filename(db, "main");
	snprintf(path, sizeof path, "%s", name ? name : "");
	/* a descriptor of the lock that outlives the connection's own */
	int held = -1;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT amp_output_lock()", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		held = fcntl(sqlite3_column_int(st, 0), F_DUPFD_CLOEXEC, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	if (held < 0)
		return; /* without the lock the file at path may be another run's: left alone */
	if (path[0] && same_file(path, held))
		remove_profile_files(path);
	close(held);
}

const amp_dump_skip_reason amp_dump_skip_reasons[AMP_DUMP_SKIP_REASONS] = {
    {"dumps_skipped_limit", "limit", "--dump-limit reached"},
    {"dumps_skipped_step_cap", "step_cap", "per-step cap"},
    {"dumps_skipped_steps_cap", "steps_cap", "cap on steps with non-finite dumps"},
    {"dumps_skipped_nospool", "nospool", "no spool directory"},
    {"dumps_failed", "failed", "write errors"},
};
