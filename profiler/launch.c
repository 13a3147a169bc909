/* launch.c — starting the application under a session.
 *
 * --application="cmd args" runs through /bin/sh -c, as msprof does (a simple command as
 * "exec cmd args", so that the program is the process ampprof started and signals reach it as
 * they would without the shell); "-- prog args" is exec'd directly.  Before forking, the program is looked up so that a missing or non-executable one
 * gets a clear message; after forking, exec failures come back through a close-on-exec pipe.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prof.h"

/* Words that the shell runs itself: no file to check. */
static int shell_word(const char *w)
{
	static const char *const words[] = {
	    ".", ":", "exec", "cd", "set", "export", "eval", "command", "if", "for", "while", "until",
	    "case", "{", "(", "!", "time", "ulimit", "umask", "trap", "unset", "wait", "true",
	    "false", "echo", "printf", "test", "[", "read", "shift", "source", "builtin", "type",
	    "exit", "return", "kill",
	};
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		if (strcmp(w, words[i]) == 0)
			return 1;
	return 0;
}

/* Whether name, as execvp would look for it (a path, else each directory of $PATH), is a file
 * that exists: then an ENOENT from exec is its interpreter's or loader's. */
static int file_exists_for_exec(const char *name)
{
	if (strchr(name, '/'))
		return access(name, F_OK) == 0;
	const char *path = getenv("PATH");
	if (!path)
		path = "/bin:/usr/bin";
	for (const char *p = path;; p++) {
		const char *q = strchr(p, ':');
		size_t len = q ? (size_t)(q - p) : strlen(p);
		char full[4096];
		/* an empty entry is the current directory */
		if (snprintf(full, sizeof full, "%.*s/%s", len ? (int)len : 1, len ? p : ".", name) <
		        (int)sizeof full &&
		    access(full, F_OK) == 0)
			return 1;
		if (!q)
			return 0;
		p = q;
	}
}

/* The program at path is also the output: with --force the profile would replace it. */
static int program_is_output(const char *path, const char *output)
{
	if (!output || !prof_same_file(path, output))
		return 0;
	prof_error("name another file with --output",
	           "the output '%s' is the program '%s' (its profile would replace it)", output, path);
	return 1;
}

/* Checks one program name as execvp would find it, and that it is not the output.  Returns 0,
 * or PROF_EXIT_NOTFOUND, PROF_EXIT_NOEXEC or PROF_EXIT_USAGE (message printed). */
static int check_program(const char *name, const char *output)
{
	struct stat st;
	if (strchr(name, '/')) {
		if (stat(name, &st) != 0) {
			int e = errno;
			prof_error("check the path, or give it with ./ if it is in this directory",
			           "cannot run '%s': %s", name, strerror(e));
			return e == ENOENT || e == ENOTDIR ? PROF_EXIT_NOTFOUND : PROF_EXIT_NOEXEC;
		}
		if (S_ISDIR(st.st_mode)) {
			prof_error(NULL, "cannot run '%s': is a directory", name);
			return PROF_EXIT_NOEXEC;
		}
		if (access(name, X_OK) != 0) {
			prof_error("chmod +x it, or check that it was built", "cannot run '%s': %s",
			           name, "permission denied (not executable)");
			return PROF_EXIT_NOEXEC;
		}
		return program_is_output(name, output) ? PROF_EXIT_USAGE : 0;
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	char buf[4096];
	for (const char *p = path; *p;) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		snprintf(buf, sizeof buf, "%.*s/%s", (int)(n ? n : 1), n ? p : ".", name);
		if (stat(buf, &st) == 0 && !S_ISDIR(st.st_mode) && access(buf, X_OK) == 0)
			return program_is_output(buf, output) ? PROF_EXIT_USAGE : 0;
		p += n + (colon ? 1 : 0);
		if (!colon)
			break;
	}
	prof_error("give a path (./prog) or check PATH", "cannot run '%s': command not found", name);
	return PROF_EXIT_NOTFOUND;
}

int prof_launch_check(const prof_options *opts)
{
	if (opts->argv)
		return check_program(opts->argv[0], opts->output);
	/* first word of the shell command, when it is a plain word */
	const char *s = opts->application;
	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	size_t n = strcspn(s, " \t\n");
	if (n == 0) {
		prof_error(NULL, "--application is empty");
		return PROF_EXIT_USAGE;
	}
	char word[1024];
	if (n >= sizeof word)
		return 0;
	memcpy(word, s, n);
	word[n] = '\0';
	if (strpbrk(word, "$`'\"\\;&|<>(){}*?[]~=#") || shell_word(word))
		return 0;
	return check_program(word, opts->output);
}

/* The signals a launcher may have set for the job as a whole: ignored ones are inherited. */
static const int job_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
static int job_ignored[sizeof job_signals / sizeof job_signals[0]];
static sigset_t start_mask;

void prof_signals_save(void)
{
	sigprocmask(SIG_SETMASK, NULL, &start_mask);
	for (size_t i = 0; i < sizeof job_signals / sizeof job_signals[0]; i++) {
		struct sigaction sa;
		job_ignored[i] = sigaction(job_signals[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
	}
}

int prof_signal_was_ignored(int sig)
{
	for (size_t i = 0; i < sizeof job_signals / sizeof job_signals[0]; i++)
		if (job_signals[i] == sig)
			return job_ignored[i];
	return 0;
}

/* The script for sh -c: "exec " and app when app is one simple command (no operator,
 * redirection, substitution or newline; not an assignment or a word the shell runs itself),
 * else app as it is.  NULL when out of memory. */
static char *application_script(const char *app)
{
	const char *w = app + strspn(app, " \t");
	size_t n = strcspn(w, " \t");
	char first[256];
	int simple = !strpbrk(app, ";&|<>()`\n") && n > 0 && n < sizeof first;
	if (simple) {
		memcpy(first, w, n);
		first[n] = '\0';
		simple = !strchr(first, '=') && !shell_word(first);
	}
	char *script = malloc(strlen(app) + 6);
	if (script)
		sprintf(script, "%s%s", simple ? "exec " : "", app);
	return script;
}

int prof_launch(const prof_options *opts, const prof_session *s, pid_t *pid)
{
	char *script = NULL;
	if (opts->application && !(script = application_script(opts->application))) {
		prof_error(NULL, "cannot launch: out of memory");
		return PROF_EXIT_FAILED;
	}
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0) {
		prof_error(NULL, "cannot launch: %s", strerror(errno));
		free(script);
		return PROF_EXIT_FAILED;
	}
	fflush(NULL);
	pid_t child = fork();
	if (child < 0) {
		prof_error(NULL, "cannot launch: fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		free(script);
		return PROF_EXIT_FAILED;
	}
	if (child == 0) {
		int err = 0;
		char fdtext[16];
		/* the program starts as it would have without ampprof: the signal mask and the
		 * ignored signals (nohup) it was started with, the others at their default */
		sigprocmask(SIG_SETMASK, &start_mask, NULL);
		for (size_t i = 0; i < sizeof job_signals / sizeof job_signals[0]; i++)
			signal(job_signals[i], job_ignored[i] ? SIG_IGN : SIG_DFL);
		int flags = fcntl(s->fd, F_GETFD);
		if (flags < 0 || fcntl(s->fd, F_SETFD, flags & ~FD_CLOEXEC) != 0)
			err = errno;
		snprintf(fdtext, sizeof fdtext, "%d", s->fd);
		if (!err && setenv(AMP_SESSION_ENV, fdtext, 1) != 0)
			err = errno;
		if (!err && opts->stats_every > 0) {
			char every[16];
			snprintf(every, sizeof every, "%u", opts->stats_every);
			if (setenv(PROF_STATS_EVERY_ENV, every, 1) != 0)
				err = errno;
		}
		if (!err) {
			if (opts->argv)
				execvp(opts->argv[0], opts->argv);
			else
				execl("/bin/sh", "sh", "-c", script, (char *)NULL);
			err = errno;
		}
		ssize_t w = write(fds[1], &err, sizeof err);
		(void)w;
		_exit(127);
	}
	close(fds[1]);
	free(script);
	int err = 0;
	ssize_t got;
	do
		got = read(fds[0], &err, sizeof err);
	while (got < 0 && errno == EINTR);
	close(fds[0]);
	if (got == (ssize_t)sizeof err) {
		while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
			;
		/* the file was there when it was checked: ENOENT from exec is then its interpreter
		 * (a script's #! line) or its dynamic loader that is missing */
		const char *prog = opts->argv ? opts->argv[0] : "/bin/sh";
		if (err == ENOENT && opts->argv && file_exists_for_exec(prog))
			prof_error("check the interpreter on its #! line (or, for a binary, its loader)",
			           "cannot run '%s': %s (its interpreter)", prog, strerror(err));
		else
			prof_error(NULL, "cannot run '%s': %s", prog, strerror(err));
		return err == ENOENT || err == ENOTDIR ? PROF_EXIT_NOTFOUND : PROF_EXIT_NOEXEC;
	}
	*pid = child;
	return 0;
}

int prof_proc_stat(const char *path, char *state, pid_t *ppid)
{
	char buf[512];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	int e = n < 0 ? errno : EINVAL;
	close(fd);
	if (n <= 0) {
		errno = e;
		return -1;
	}
	buf[n] = '\0';
	char *end = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	char st;
	int pp;
	if (!end || sscanf(end + 1, " %c %d", &st, &pp) != 2) {
		errno = EINVAL;
		return -1;
	}
	if (state)
		*state = st;
	if (ppid)
		*ppid = (pid_t)pp;
	return 0;
}

void prof_signal_tree(pid_t pid, int sig)
{
	/* every process with its parent (however many the host runs), then the descendants of
	 * pid by rounds; the collector's thread only */
	pid_t *procs = NULL, *parents = NULL, *tree = NULL;
	size_t np = 0, cap = 0, n = 0;
	DIR *d = opendir("/proc");
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			char *tail;
			long v = strtol(e->d_name, &tail, 10);
			if (*tail || v <= 0 || (pid_t)v == pid)
				continue;
			char path[64];
			pid_t pp;
			snprintf(path, sizeof path, "/proc/%ld/stat", v);
			if (prof_proc_stat(path, NULL, &pp) != 0 || pp <= 0)
				continue;
			if (np == cap) {
				size_t nc = cap ? 2 * cap : 1024;
				pid_t *a = realloc(procs, nc * sizeof *a),
				      *b = a ? realloc(parents, nc * sizeof *b) : NULL;
				if (a)
					procs = a;
				if (!b)
					break; /* what was found so far */
				parents = b;
				cap = nc;
			}
			procs[np] = (pid_t)v, parents[np++] = pp;
		}
		closedir(d);
	}
	tree = malloc((np + 1) * sizeof *tree);
	if (!tree) { /* the shell alone, as without the tree */
		kill(pid, sig);
		free(procs), free(parents);
		return;
	}
	tree[n++] = pid;
	for (int grew = 1; grew;) {
		grew = 0;
		for (size_t i = 0; i < np; i++) {
			if (procs[i] == 0)
				continue;
			for (size_t k = 0; k < n; k++)
				if (parents[i] == tree[k]) {
					tree[n++] = procs[i];
					procs[i] = 0; /* taken */
					grew = 1;
					break;
				}
		}
	}
	/* the program first, the shell last: a shell signalled first could exit and leave its
	 * command to init before it is signalled */
	for (size_t k = n; k-- > 0;)
		kill(tree[k], sig);
	free(tree), free(procs), free(parents);
}
