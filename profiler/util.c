/* util.c — small helpers of ampprof: messages, option value parsers, clocks, names, output files
 * and the checks of a profile before a command reads it. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define PROF_HAVE_TSC 1
#else
#define PROF_HAVE_TSC 0
#endif

#include "amp_text.h"
#include "profile_db.h"
#include "prof.h"

void prof_error(const char *hint, const char *fmt, ...)
{
	/* messages quote labels and command lines from the application: sanitized */
	char msg[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fputs("ampprof: ", stderr);
	amp_text_put(stderr, msg);
	fputc('\n', stderr);
	if (hint) {
		fputs("hint: ", stderr);
		amp_text_put(stderr, hint);
		fputc('\n', stderr);
	}
}

int prof_refuse_live(sqlite3 *db, const char *path, const char *hint)
{
	if (amp_profile_live(path) != 1)
		return 0;
	char pid[32] = "?";
	int64_t steps = 0;
	amp_profile_meta_get(db, "pid", pid, sizeof pid);
	amp_profile_query_int64(db, &steps, "SELECT count(*) FROM steps", NULL);
	prof_error(hint, "'%s' is live: ampprof is still recording it (application pid %s, %lld "
	           "steps so far), so it has no final summary yet",
	           path, pid, (long long)steps);
	return 1;
}

int prof_same_file(const char *a, const char *b)
{
	struct stat sa, sb;
	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

int prof_out_open(prof_out *o, const char *path)
{
	memset(o, 0, sizeof *o);
	o->path = path;
	if (!path) {
		o->f = stdout;
		return 0;
	}
	struct stat sb;
	int exists = lstat(path, &sb) == 0;
	if (exists && !S_ISREG(sb.st_mode)) { /* a device, a FIFO, a symbolic link: in place */
		o->f = fopen(path, "w");
		return o->f ? 0 : -1;
	}
	if (snprintf(o->tmp, sizeof o->tmp, "%s.XXXXXX", path) >= (int)sizeof o->tmp) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = mkstemp(o->tmp);
	if (fd < 0)
		return -1;
	mode_t mask = umask(0);
	umask(mask);
	/* the mode an ordinary create would give, or the replaced file's */
	if (fchmod(fd, exists ? sb.st_mode & 07777 : 0666 & ~mask) != 0 ||
	    !(o->f = fdopen(fd, "w"))) {
		int e = errno;
		close(fd);
		unlink(o->tmp);
		o->tmp[0] = '\0';
		errno = e;
		return -1;
	}
	return 0;
}

int prof_out_close(prof_out *o, int keep)
{
	int err = 0;
	if (!o->f)
		return 0;
	errno = 0;
	if (fflush(o->f) != 0 || ferror(o->f))
		err = errno ? errno : EIO;
	if (o->f != stdout && fclose(o->f) != 0 && !err)
		err = errno;
	o->f = NULL;
	if (o->tmp[0]) {
		if (keep && !err && rename(o->tmp, o->path) != 0)
			err = errno;
		if (!keep || err)
			unlink(o->tmp);
		o->tmp[0] = '\0';
	}
	errno = err;
	return err ? -1 : 0;
}

static int parse_i64(const char **p, int64_t *out)
{
	const char *s = *p;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (errno || v < 0)
		return -1;
	*out = v;
	*p = end;
	return 0;
}

int prof_parse_ranges(const char *text, amp_step_range *out, int max)
{
	int n = 0;
	const char *p = text;
	if (!p || !*p)
		return -1;
	for (;;) {
		amp_step_range r;
		if (n >= max || parse_i64(&p, &r.lo) != 0)
			return -1;
		r.hi = r.lo;
		if (*p == '-') {
			p++;
			if (*p == '\0' || *p == ',')
				r.hi = INT64_MAX;
			else if (parse_i64(&p, &r.hi) != 0 || r.hi < r.lo)
				return -1;
		}
		out[n++] = r;
		if (*p == '\0')
			return n;
		if (*p != ',')
			return -1;
		p++;
	}
}

int prof_parse_size(const char *text, uint64_t *out)
{
	if (!text || !isdigit((unsigned char)*text))
		return -1;
	errno = 0;
	char *end;
	double v = strtod(text, &end);
	if (errno || v < 0)
		return -1;
	double mult = 1;
	switch (toupper((unsigned char)*end)) {
	case '\0': break;
	case 'K': mult = 1024.0; end++; break;
	case 'M': mult = 1024.0 * 1024; end++; break;
	case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: return -1;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v * mult > 1.8e19)
		return -1;
	*out = (uint64_t)(v * mult);
	return 0;
}

uint64_t prof_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int prof_tsc_invariant(void)
{
#if PROF_HAVE_TSC
	unsigned a, b, c, d;
	if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
		return 0;
	__get_cpuid(0x80000007u, &a, &b, &c, &d);
	return (d >> 8) & 1u;
#else
	return 0;
#endif
}

uint64_t prof_ticks(void)
{
#if PROF_HAVE_TSC
	static int tsc = -1;
	if (tsc < 0)
		tsc = prof_tsc_invariant();
	if (tsc)
		return __rdtsc();
#endif
	return prof_now_ns();
}

const char *prof_dtype_name(unsigned dt)
{
	return amp_dtype_code_name(dt);
}

const char *prof_signal_name(int signo)
{
	static char buf[32];
	const char *abbrev = sigabbrev_np(signo);
	if (abbrev) {
		snprintf(buf, sizeof buf, "SIG%s", abbrev);
		return buf;
	}
	snprintf(buf, sizeof buf, "signal %d", signo);
	return buf;
}

static char invoked_dir[1024];

void prof_set_invoked_as(const char *argv0)
{
	const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
	if (slash && (size_t)(slash - argv0) < sizeof invoked_dir)
		snprintf(invoked_dir, sizeof invoked_dir, "%.*s", (int)(slash - argv0), argv0);
}

const char *prof_tool_command(const char *tool, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", invoked_dir, tool);
	if (!invoked_dir[0] || access(buf, X_OK) != 0)
		snprintf(buf, len, "%s", tool);
	return buf;
}
