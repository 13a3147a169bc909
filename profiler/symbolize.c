/* symbolize.c — file addresses to function, file and line with binutils' addr2line.
 *
 * Called once at finalize with every distinct address of a module, so the cost is one
 * process per module (addresses passed as arguments, in chunks), never per event.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, pipe2, dladdr1, sigabbrev_np */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prof.h"

#define SYM_CHUNK 256

static void sym_unknown(prof_symbol *s)
{
	snprintf(s->function, sizeof s->function, "??");
	snprintf(s->file, sizeof s->file, "??");
	s->line = 0;
}

/* Reads one line (without newline) from the stream; 0 at end. */
static int read_line(FILE *f, char *buf, size_t len)
{
	if (!fgets(buf, (int)len, f))
		return 0;
	size_t n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	else {
		int c;
		while ((c = fgetc(f)) != EOF && c != '\n')
			;
	}
	return 1;
}

static int run_chunk(const char *module, const uint64_t *addrs, size_t n, prof_symbol *out)
{
	char *argv[SYM_CHUNK + 8];
	char args[SYM_CHUNK][24];
	int fds[2];
	size_t a = 0;
	argv[a++] = "addr2line";
	argv[a++] = "-f";
	argv[a++] = "-C";
	argv[a++] = "-e";
	argv[a++] = (char *)module;
	for (size_t i = 0; i < n; i++) {
		snprintf(args[i], sizeof args[i], "0x%" PRIx64, addrs[i]);
		argv[a++] = args[i];
	}
	argv[a] = NULL;
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(fds[1], 1);
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0)
			dup2(devnull, 2);
		execvp("addr2line", argv);
		_exit(127);
	}
	close(fds[1]);
	FILE *f = fdopen(fds[0], "r");
	int rc = -1;
	if (!f) {
		close(fds[0]);
		goto wait;
	}
	char fn[1024], loc[1024];
	for (size_t i = 0; i < n; i++) {
		if (!read_line(f, fn, sizeof fn) || !read_line(f, loc, sizeof loc))
			break;
		snprintf(out[i].function, sizeof out[i].function, "%.255s", fn);
		/* "file:line" or "file:line (discriminator N)" or "??:0" / "??:?" */
		char *disc = strstr(loc, " (discriminator");
		if (disc)
			*disc = '\0';
		char *colon = strrchr(loc, ':');
		out[i].line = 0;
		if (colon) {
			*colon = '\0';
			out[i].line = atoi(colon + 1);
		}
		snprintf(out[i].file, sizeof out[i].file, "%.511s", loc[0] ? loc : "??");
	}
	rc = 0;
	fclose(f);
wait:
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return rc;
}

int prof_symbolize(const char *module, const uint64_t *addrs, size_t n, prof_symbol *out)
{
	int rc = 0;
	for (size_t i = 0; i < n; i++)
		sym_unknown(&out[i]);
	if (!module || !*module || access(module, R_OK) != 0)
		return -1;
	for (size_t i = 0; i < n; i += SYM_CHUNK) {
		size_t m = n - i < SYM_CHUNK ? n - i : SYM_CHUNK;
		if (run_chunk(module, addrs + i, m, out + i) != 0)
			rc = -1;
	}
	return rc;
}
