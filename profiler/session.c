/* session.c — the shared-memory session: one memfd holding the session header and the rings.
 *
 * memfd_create leaves nothing in /dev/shm; the fd is close-on-exec in ampprof and made
 * inheritable only in the child just before exec (launch.c).  Pages are allocated lazily,
 * so unused rings cost address space only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "prof.h"

amp_ring_hdr *prof_session_ring(const prof_session *s, uint32_t i)
{
	return (amp_ring_hdr *)((unsigned char *)s->hdr + s->ring_offset +
	                        (uint64_t)i * s->ring_stride);
}

void prof_session_ring_reset(const prof_session *s, uint32_t i, uint64_t pos)
{
	amp_ring_hdr *h = prof_session_ring(s, i);
	h->pid = h->tid = 0;
	h->clock = 0;
	__atomic_store_n(&h->dropped, 0, __ATOMIC_RELAXED);
	for (unsigned k = 0; k < AMP_DROP_SLOTS; k++)
		__atomic_store_n(&h->dropped_kind[k], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->head, pos, __ATOMIC_RELAXED);
	__atomic_store_n(&h->tail, pos, __ATOMIC_RELAXED);
	__atomic_store_n(&h->state, AMP_RING_REUSABLE, __ATOMIC_RELEASE);
}

#define SPOOL_PREFIX ".ampprof-spool-"

/* Removes the spool directories in dir that an ampprof killed before it could clean up left
 * behind: named SPOOL_PREFIX<pid>-XXXXXX, owned by this user, their ampprof (pid) gone.
 * Only plain files inside are removed, never followed through a link. */
static void spool_sweep(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, SPOOL_PREFIX, sizeof SPOOL_PREFIX - 1) != 0)
			continue;
		char *end;
		const char *p = e->d_name + sizeof SPOOL_PREFIX - 1;
		long pid = strtol(p, &end, 10);
		struct stat st;
		if (end == p || *end != '-' || pid <= 0 || pid > INT32_MAX || pid == (long)getpid() ||
		    (kill((pid_t)pid, 0) == 0 || errno != ESRCH) ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
			continue;
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *sd = fd >= 0 ? fdopendir(fd) : NULL;
		if (!sd) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		struct dirent *f;
		while ((f = readdir(sd)) != NULL)
			if (strcmp(f->d_name, ".") != 0 && strcmp(f->d_name, "..") != 0)
				unlinkat(dirfd(sd), f->d_name, 0);
		closedir(sd);
		unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

/* Spool directory beside the output file (not in /tmp): <dir>/.ampprof-spool-<pid>-XXXXXX, as
 * an absolute path, since the application may change its working directory before it dumps.
 * The pid names the ampprof that owns it, so that the next run in that directory can remove
 * what a killed one left (spool_sweep). */
/* The directory of output, as an absolute path in abs (PATH_MAX bytes); dir gets it as given.
 * Returns 0, or -1 with errno set. */
static int output_dir(const char *output, char *dir, size_t dirlen, char *abs)
{
	snprintf(dir, dirlen, "%s", output);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, dirlen, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	return realpath(dir, abs) ? 0 : -1;
}

static int make_spool(prof_session *s, const char *output)
{
	char name[64];
	snprintf(name, sizeof name, "/" SPOOL_PREFIX "%ld-XXXXXX", (long)getpid());
	char dir[4096], abs[PATH_MAX];
	if (output_dir(output, dir, sizeof dir, abs) != 0) {
		prof_error(NULL, "cannot create a spool directory in '%s': %s", dir, strerror(errno));
		return -1;
	}
	spool_sweep(abs);
	size_t len = strcmp(abs, "/") ? strlen(abs) : 0, nlen = strlen(name) + 1;
	if (len + nlen > sizeof s->spool_dir) {
		prof_error("write the profile to a shorter path with --output",
		           "cannot create a spool directory in '%s': path longer than %zu bytes", abs,
		           sizeof s->spool_dir - nlen);
		return -1;
	}
	memcpy(s->spool_dir, abs, len);
	memcpy(s->spool_dir + len, name, nlen);
	if (!mkdtemp(s->spool_dir)) {
		prof_error(NULL, "cannot create a spool directory in '%s': %s", abs, strerror(errno));
		s->spool_dir[0] = '\0';
		return -1;
	}
	return 0;
}

int prof_session_init(prof_session *s, const prof_options *opts)
{
	memset(s, 0, sizeof *s);
	s->fd = -1;
	uint64_t stride = AMP_RING_HDR_SIZE + (uint64_t)opts->ring_slots * AMP_SLOT_SIZE;
	s->size = AMP_SESSION_HDR_SIZE + (size_t)(stride * opts->ring_count);
	s->fd = memfd_create("ampprof-session", MFD_CLOEXEC);
	if (s->fd < 0) {
		prof_error(NULL, "cannot create the shared-memory session: %s", strerror(errno));
		goto fail;
	}
	if (ftruncate(s->fd, (off_t)s->size) != 0) {
		prof_error(NULL, "cannot size the shared-memory session: %s", strerror(errno));
		goto fail;
	}
	void *map = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (map == MAP_FAILED) {
		prof_error(NULL, "cannot map the shared-memory session: %s", strerror(errno));
		goto fail;
	}
	s->hdr = map;
	s->ring_offset = AMP_SESSION_HDR_SIZE;
	s->ring_stride = stride;
	s->ring_count = opts->ring_count;
	s->ring_slots = opts->ring_slots;
	amp_session_hdr *h = s->hdr;
	h->hdr_size = AMP_SESSION_HDR_SIZE;
	h->total_size = s->size;
	h->ring_offset = AMP_SESSION_HDR_SIZE;
	h->ring_stride = stride;
	h->ring_count = opts->ring_count;
	h->ring_slots = opts->ring_slots;
	h->collector_pid = (uint32_t)getpid();
	h->flags = (opts->callstack ? AMP_SESS_CALLSTACK : 0u) | (opts->drop ? AMP_SESS_DROP : 0u);
	h->nan_check = (uint32_t)opts->nan_check;
	h->dump = (uint32_t)opts->dump;
	h->dump_limit = opts->dump_limit;
	h->n_steps = (uint32_t)opts->n_steps;
	h->n_dump_steps = (uint32_t)opts->n_dump_steps;
	memcpy(h->steps, opts->steps, sizeof h->steps);
	memcpy(h->dump_steps, opts->dump_steps, sizeof h->dump_steps);
	if (opts->dump != AMP_DUMP_OFF || opts->n_dump_steps > 0) {
		if (make_spool(s, opts->output) != 0)
			goto fail;
	} else {
		/* no spool of its own, but what a killed run left beside the output goes */
		char dir[4096], abs[PATH_MAX];
		if (output_dir(opts->output, dir, sizeof dir, abs) == 0)
			spool_sweep(abs);
	}
	snprintf(h->spool_dir, sizeof h->spool_dir, "%s", s->spool_dir);
	for (uint32_t i = 0; i < opts->ring_count; i++)
		prof_session_ring(s, i)->magic = AMP_RING_MAGIC;
	h->version = AMP_WIRE_VERSION;
	/* magic last: a half-made session is never valid */
	__atomic_store_n(&h->magic, AMP_SESSION_MAGIC, __ATOMIC_RELEASE);
	return 0;
fail:
	prof_session_release(s);
	return -1;
}

void prof_session_release(prof_session *s)
{
	if (s->hdr)
		munmap(s->hdr, s->size);
	s->hdr = NULL;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	if (s->spool_dir[0]) {
		DIR *d = opendir(s->spool_dir);
		if (d) {
			struct dirent *e;
			while ((e = readdir(d)) != NULL)
				if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
					unlinkat(dirfd(d), e->d_name, 0);
			closedir(d);
		}
		rmdir(s->spool_dir);
		s->spool_dir[0] = '\0';
	}
}
