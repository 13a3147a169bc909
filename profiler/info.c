/* info.c — `ampprof info`: what this machine and the libamprt that programs load can do, before
 * a run: the CPU model and its half arithmetic, the kernel paths the library was built with
 * (and which of them this CPU runs), the engine the FP32, FP16 and BF16 GEMMs would run on,
 * and the library, schema and wire versions.
 *
 * The library is loaded with dlopen (the one beside ampprof, ../lib/libamprt.so, else the
 * system's), so that ampprof never links the runtime and reports the copy programs use.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp_events.h"
#include "install_dirs.h" /* generated: AMP_INSTALL_LIBDIR */
#include "amp_opt.h"
#include "prof.h"
#include "profile_db.h"

/* Exit status of info beside 0 and 2 (usage): no library could be loaded, stdout failed. */
#define INFO_EXIT_NO_LIBRARY 3
#define INFO_EXIT_FAILED 1

/* The library's introspection entry points (amp/amp.h, "the library and the CPU"); the dtype
 * codes are the schema's. */
typedef struct lib_api {
	const char *(*version)(void);
	unsigned (*wire_version)(void);
	int (*path_count)(void);
	const char *(*path_name)(int);
	const char *(*path_missing)(int);
	const char *(*gemm_engine)(int);
	const char *(*elementwise_engine)(void);
	const char *(*elementwise_engine_of)(int); /* NULL in libraries older than it */
	const char *(*path_active)(void);
	const char *(*gemm_engine_note)(int); /* NULL in libraries older than it */
} lib_api;

/* dlopens the library at path (or, NULL, beside this program, then the system's) and fills
 * api.  Returns the handle, or NULL with why in err. */
static void *load_library(const char *path, lib_api *api, char *used, size_t used_len, char *err,
                          size_t err_len)
{
	char beside[4200] = "";
	const char *tries[4];
	int n = 0;
	if (path) {
		tries[n++] = path;
	} else {
		char self[4096];
		ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
		if (k > 0) {
			self[k] = '\0';
			char *slash = strrchr(self, '/');
			if (slash) {
				*slash = '\0';
				snprintf(beside, sizeof beside, "%s/../lib/libamprt.so", self);
				tries[n++] = beside;
			}
		}
		/* where `make install` put it, when LIBDIR is not BINDIR/../lib */
		tries[n++] = AMP_INSTALL_LIBDIR "/libamprt.so";
		tries[n++] = "libamprt.so.0";
		tries[n++] = "libamprt.so";
	}
	void *h = NULL;
	snprintf(err, err_len, "no libamprt found");
	for (int i = 0; i < n && !h; i++) {
		if (tries[i] != path && tries[i][0] == '/' && access(tries[i], R_OK) != 0)
			continue;
		h = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
		if (h)
			snprintf(used, used_len, "%s", tries[i]);
		else
			snprintf(err, err_len, "%s", dlerror());
	}
	if (!h)
		return NULL;
	struct {
		const char *name;
		void **slot;
	} syms[] = {
	    {"amp_version", (void **)&api->version},
	    {"amp_wire_version", (void **)&api->wire_version},
	    {"amp_kernel_path_count", (void **)&api->path_count},
	    {"amp_kernel_path_name", (void **)&api->path_name},
	    {"amp_kernel_path_missing", (void **)&api->path_missing},
	    {"amp_gemm_engine", (void **)&api->gemm_engine},
	    {"amp_elementwise_engine", (void **)&api->elementwise_engine},
	    {"amp_kernel_path_active", (void **)&api->path_active},
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		*syms[i].slot = dlsym(h, syms[i].name);
		if (!*syms[i].slot) {
			snprintf(err, err_len, "'%s' has no %s: it predates ampprof info", used,
			         syms[i].name);
			dlclose(h);
			return NULL;
		}
	}
	*(void **)&api->gemm_engine_note = dlsym(h, "amp_gemm_engine_note");
	*(void **)&api->elementwise_engine_of = dlsym(h, "amp_elementwise_engine_of");
	return h;
}

/* s as a JSON string body: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* 0 once stdout is flushed; a full disk or a closed pipe is an error, not a silent success. */
static int finish_stdout(void)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	prof_error(NULL, "cannot write the output: %s", strerror(errno));
	return INFO_EXIT_FAILED;
}

static const char *const info_usage[] = {"ampprof info [--format=text|json] [--library=<file>]",
                                         NULL};

enum { OPT_FORMAT = 256, OPT_LIBRARY, OPT_HELP };

static const amp_opt info_opts[] = {
    {OPT_FORMAT, 0, "format", "<fmt>", "text or json", "text"},
    {OPT_LIBRARY, 0, "library", "<file>",
     "the libamprt to ask (default: ../lib/libamprt.so beside ampprof, else the system's)",
     NULL},
    {OPT_HELP, 'h', "help", NULL, "show this help", NULL},
};

static const amp_opt_spec info_spec = {
    .tool = "ampprof", /* messages read "ampprof: ...", as the other commands' */
    .usage = info_usage,
    .about = "What this machine can run before training on it: the CPU and its half "
             "arithmetic,\nthe kernel paths of the library and the engine each half type's "
             "GEMMs would use.",
    .opts = info_opts,
    .n_opts = sizeof info_opts / sizeof info_opts[0],
    .footer = "Exit status: 0; 1 the output could not be written; 2 usage error; 3 no libamprt\n"
              "could be loaded.\n",
};

int prof_cmd_info(int argc, char **argv)
{
	const char *format = "text", *library = NULL, *v;
	amp_opt_state st;
	if (amp_opt_begin(&st, &info_spec, argc, argv) != 0)
		return PROF_EXIT_USAGE;
	for (int id; (id = amp_opt_next(&st, &v)) != AMP_OPT_END;) {
		switch (id) {
		case OPT_FORMAT: format = v; break;
		case OPT_LIBRARY: library = v; break;
		case OPT_HELP: amp_opt_help(&info_spec, stdout); return finish_stdout();
		default: return PROF_EXIT_USAGE;
		}
	}
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0)
		return amp_opt_error(&info_spec, NULL, "unknown format '%s' (text, json)", format);
	if (st.optind < argc)
		return amp_opt_error(&info_spec, NULL, "unexpected argument '%s'", argv[st.optind]);

	char model[256], features[256], used[4200] = "", err[4400];
	prof_cpu_model(model, sizeof model);
	prof_cpu_half_features(features, sizeof features);
	lib_api api;
	void *h = load_library(library, &api, used, sizeof used, err, sizeof err);
	if (!h) {
		prof_error("give the library with --library=<file>", "cannot load the runtime: %s", err);
		return INFO_EXIT_NO_LIBRARY;
	}
	int json = strcmp(format, "json") == 0;
	static const int dtypes[] = {AMP_DTYPE_F32, AMP_DTYPE_F16, AMP_DTYPE_BF16};
	/* $AMP_KERNELS as programs run here will read it: a path forced, or a name they refuse
	 * (the library itself falls back to "auto" here, and says nothing) */
	const char *forced = getenv("AMP_KERNELS");
	const int by_env = forced && *forced && strcmp(forced, "auto") != 0;
	char env_note[300] = ""; /* why programs refuse it, if they do */
	if (by_env) {
		int found = -1;
		for (int i = 0; i < api.path_count(); i++)
			if (strcmp(api.path_name(i), forced) == 0)
				found = i;
		if (found < 0)
			snprintf(
			    env_note, sizeof env_note,
			    "AMP_KERNELS=%.64s names no kernel path: programs run here refuse to "
			    "start",
			    forced);
		else if (api.path_missing(found))
			snprintf(
			    env_note, sizeof env_note,
			    "AMP_KERNELS=%.64s needs %s, which this CPU lacks: programs run here "
			    "refuse to start",
			    forced, api.path_missing(found));
		if (env_note[0])
			prof_error("unset it, or name a path this CPU runs", "%s", env_note);
	}
	if (json) {
		printf("{\"format_version\":1,\"cpu\":");
		json_str(stdout, model);
		printf(",\"cpu_half_features\":[");
		int first = 1;
		/* the words of the list ("none": no half arithmetic, an empty array) */
		for (char *p = strcmp(features, "none") ? features : "", *e; *p;
		     p = *e ? e + 1 : e) {
			e = p + strcspn(p, " ");
			printf("%s\"%.*s\"", first ? "" : ",", (int)(e - p), p);
			first = 0;
		}
		printf("],\"library\":");
		json_str(stdout, used);
		printf(",\"library_version\":");
		json_str(stdout, api.version());
		printf(",\"schema_version\":%d,\"wire_version\":%u,\"library_wire_version\":%u",
		       AMP_PROFILE_VERSION, AMP_WIRE_VERSION, api.wire_version());
		printf(",\"active_path\":\"%s\",\"forced_by_env\":%s,\"env_error\":",
		       api.path_active(), by_env && !env_note[0] ? "true" : "false");
		if (env_note[0])
			json_str(stdout, env_note);
		else
			printf("null");
		printf(",\"paths\":[");
		for (int i = 0; i < api.path_count(); i++) {
			const char *miss = api.path_missing(i);
			printf("%s{\"name\":\"%s\",\"runs\":%s,\"missing\":", i ? "," : "",
			       api.path_name(i), miss ? "false" : "true");
			if (miss)
				json_str(stdout, miss);
			else
				printf("null");
			printf("}");
		}
		printf("],\"engines\":{");
		for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
			printf("%s\"%s\":\"%s\"", i ? "," : "", amp_dtype_code_name((unsigned)dtypes[i]),
			       api.gemm_engine(dtypes[i]));
		printf(",\"elementwise\":\"%s\"", api.elementwise_engine());
		for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes && api.elementwise_engine_of; i++)
			printf(",\"elementwise_%s\":\"%s\"", amp_dtype_code_name((unsigned)dtypes[i]),
			       api.elementwise_engine_of(dtypes[i]));
		printf("},\"engine_notes\":{");
		for (size_t i = 0, n = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
			const char *note = api.gemm_engine_note ? api.gemm_engine_note(dtypes[i]) : NULL;
			if (!note)
				continue;
			printf("%s\"%s\":", n++ ? "," : "", amp_dtype_code_name((unsigned)dtypes[i]));
			json_str(stdout, note);
		}
		printf("}}\n");
	} else {
		printf("cpu              %s\n", model);
		printf("half arithmetic  %s\n", *features ? features : "none");
		printf("library          %s (version %s)\n", used, api.version());
		printf("versions         schema %d, wire %u (library %u)%s\n", AMP_PROFILE_VERSION,
		       AMP_WIRE_VERSION, api.wire_version(),
		       api.wire_version() == AMP_WIRE_VERSION ? "" : "  MISMATCH: rebuild one of them");
		if (env_note[0])
			printf("kernel paths     (active here: %s; %s)\n", api.path_active(),
			       env_note);
		else if (by_env)
			printf("kernel paths     (active: %s, forced by AMP_KERNELS)\n",
			       api.path_active());
		else /* auto combines paths: "active" would name only the top one */
			printf(
			    "kernel paths     (auto: each kernel from the best path here that has "
			    "one, the engines below)\n");
		for (int i = 0; i < api.path_count(); i++) {
			const char *miss = api.path_missing(i);
			printf("  %-13s  %s%s\n", api.path_name(i), miss ? "not on this CPU: needs " : "runs",
			       miss ? miss : "");
		}
		printf("engines          ");
		for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
			const char *dt = amp_dtype_code_name((unsigned)dtypes[i]);
			const char *e = api.gemm_engine(dtypes[i]);
			int emulated = dtypes[i] != AMP_DTYPE_F32 && amp_engine_is_half(
			                   (amp_engine)amp_engine_from_name(e)) == 0;
			printf("%s%s GEMM on %s%s", i ? "; " : "", dt, e, emulated ? " (emulated)" : "");
		}
		if (api.elementwise_engine_of) {
			printf("; elementwise");
			for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
				printf("%s %s on %s", i ? "," : "",
				       amp_dtype_code_name((unsigned)dtypes[i]),
				       api.elementwise_engine_of(dtypes[i]));
			printf("\n");
		} else {
			printf("; elementwise on %s\n", api.elementwise_engine());
		}
		for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
			const char *note = api.gemm_engine_note ? api.gemm_engine_note(dtypes[i]) : NULL;
			if (note)
				printf("  %-13s  %s\n", amp_dtype_code_name((unsigned)dtypes[i]), note);
		}
	}
	dlclose(h);
	return finish_stdout();
}
