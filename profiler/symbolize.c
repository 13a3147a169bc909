/* symbolize.c — file addresses to function, file and line with binutils' addr2line.
 *
 * Called once at finalize with every distinct address of a module, so the cost is one
 * process per module (addresses passed as arguments, in chunks), never per event.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "profile_db.h"
#include "writer_int.h"

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

/* ---- the writer's call sites and crash frames at finish ------------------------------------ */
typedef struct sym_req {
	uint32_t path;               /* module path string id */
	uint64_t addr;               /* file address to symbolize */
	prof_symbol sym;
} sym_req;

static int cmp_req(const void *a, const void *b)
{
	const sym_req *x = a, *y = b;
	if (x->path != y->path)
		return x->path < y->path ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static sym_req *find_req(sym_req *reqs, size_t n, uint32_t path, uint64_t addr)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		sym_req key = {path, addr, {{0}, {0}, 0}};
		int c = cmp_req(&reqs[mid], &key);
		if (c == 0)
			return &reqs[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Module (path, bias) holding an absolute pc, from the module records. */
static int module_for_pc(const prof_writer *w, uint64_t pc, uint32_t *path, uint64_t *bias)
{
	for (uint32_t id = 1; id <= w->modules.n; id++) {
		const module_key *m = prof_keytab_key(&w->modules, id);
		if (pc >= m->lo && pc < m->hi) {
			*path = m->path;
			*bias = m->bias;
			return 1;
		}
	}
	return 0;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Symbolizes every call-site frame and crash frame with one addr2line run per module. */
int prof_writer_symbolize(prof_writer *w)
{
	size_t cap = 0, n = 0;
	for (uint32_t i = 0; i < w->callsites.n; i++)
		cap += w->cs_info[i].nframes;
	for (uint32_t i = 0; i < w->n_crashes; i++)
		cap += w->crashes[i].nframes;
	if (cap == 0)
		return 0;
	sym_req *reqs = calloc(cap, sizeof *reqs);
	if (!reqs)
		return -1;
	for (uint32_t i = 0; i < w->callsites.n; i++) {
		const callsite_info *ci = &w->cs_info[i];
		for (uint32_t f = 0; f < ci->nframes; f++)
			if (ci->paths[f] && ci->frames[f]) {
				reqs[n].path = ci->paths[f];
				reqs[n].addr = ci->frames[f] - ci->biases[f] - 1;
				n++;
			}
	}
	for (uint32_t i = 0; i < w->n_crashes; i++) {
		const crash_info *c = &w->crashes[i];
		for (uint32_t f = 0; f < c->nframes; f++) {
			uint32_t path;
			uint64_t bias;
			if (module_for_pc(w, c->frames[f], &path, &bias)) {
				reqs[n].path = path;
				reqs[n].addr = c->frames[f] - bias - (f ? 1 : 0);
				n++;
			}
		}
	}
	qsort(reqs, n, sizeof *reqs, cmp_req);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (u == 0 || cmp_req(&reqs[u - 1], &reqs[i]) != 0)
			reqs[u++] = reqs[i];
	n = u;
	uint64_t *addrs = malloc((n ? n : 1) * sizeof *addrs);
	prof_symbol *syms = malloc((n ? n : 1) * sizeof *syms);
	int rc = -1;
	if (!addrs || !syms)
		goto out;
	/* a module that cannot be read (its path cut short, no read permission) leaves its frames
	 * unnamed: said on stderr and in meta, not only as '??' */
	char unread[1200] = "";
	size_t n_unread = 0, mods_unread = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && reqs[j].path == reqs[i].path) {
			addrs[j - i] = reqs[j].addr;
			j++;
		}
		const char *module = prof_writer_text(w, reqs[i].path);
		if (prof_symbolize(module, addrs, j - i, syms) != 0 && module &&
		    access(module, R_OK) != 0) {
			if (!mods_unread++)
				snprintf(unread, sizeof unread, "%s (%s)", module[0] ? module : "?",
				         strerror(errno));
			n_unread += j - i;
		}
		for (size_t k = i; k < j; k++)
			reqs[k].sym = syms[k - i];
		i = j;
	}
	if (n_unread) {
		char v[1400];
		snprintf(v, sizeof v, "%zu frame(s) in %zu module(s) could not be read, first %s",
		         n_unread, mods_unread, unread);
		fprintf(stderr, "ampprof: warning: call sites left unnamed: %s\n", v);
		amp_profile_meta_set(w->db, "callsites_unnamed", v);
	}
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(w->db,
	                       "UPDATE callsites SET function = ?, file = ?, line = ?, frames = ? "
	                       "WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
		goto out;
	for (uint32_t i = 0; i < w->callsites.n; i++) {
		const callsite_info *ci = &w->cs_info[i];
		char frames[AMP_CALLSITE_FRAMES * 800];
		size_t used = 0;
		const prof_symbol *top = NULL;
		frames[0] = '\0';
		for (uint32_t f = 0; f < ci->nframes; f++) {
			sym_req *r = ci->paths[f] ? find_req(reqs, n, ci->paths[f],
			                                     ci->frames[f] - ci->biases[f] - 1)
			                          : NULL;
			if (f == 0)
				top = r ? &r->sym : NULL;
			if (used < sizeof frames)
				used += (size_t)snprintf(frames + used, sizeof frames - used, "%s%s %s:%d",
				                         f ? "\n" : "", r ? r->sym.function : "??",
				                         r ? r->sym.file : "??", r ? r->sym.line : 0);
		}
		sqlite3_bind_text(st, 1, top ? top->function : "??", -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, top ? top->file : "??", -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 3, top ? top->line : 0);
		sqlite3_bind_text(st, 4, frames, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, i + 1);
		if (prof_writer_run(w, st, "callsites") != 0)
			goto out_st;
	}
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(w->db, "UPDATE crashes SET frames = ? WHERE id = ?", -1, &st, NULL) !=
	    SQLITE_OK)
		goto out;
	for (uint32_t i = 0; i < w->n_crashes; i++) {
		const crash_info *c = &w->crashes[i];
		char frames[AMP_CRASH_FRAMES * 900];
		size_t used = 0;
		frames[0] = '\0';
		for (uint32_t f = 0; f < c->nframes && used < sizeof frames; f++) {
			uint32_t path = 0;
			uint64_t bias = 0;
			sym_req *r = NULL;
			if (module_for_pc(w, c->frames[f], &path, &bias))
				r = find_req(reqs, n, path, c->frames[f] - bias - (f ? 1 : 0));
			if (r)
				used += (size_t)snprintf(frames + used, sizeof frames - used,
				                         "%s%s %s:%d (%s+0x%" PRIx64 ")", f ? "\n" : "",
				                         r->sym.function, r->sym.file, r->sym.line,
				                         base_name(prof_writer_text(w, path)), c->frames[f] - bias);
			else
				used += (size_t)snprintf(frames + used, sizeof frames - used,
				                         "%s?? (0x%" PRIx64 ")", f ? "\n" : "", c->frames[f]);
		}
		sqlite3_bind_text(st, 1, frames, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, c->row);
		if (prof_writer_run(w, st, "crashes") != 0)
			goto out_st;
	}
	rc = 0;
out_st:
	sqlite3_finalize(st);
out:
	free(addrs);
	free(syms);
	free(reqs);
	return rc;
}
