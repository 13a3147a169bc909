/* host.c — loads each object named on its command line in turn (dlopen), runs one step through
 * its plug() and unloads it (dlclose): a plugin reloaded between steps. */
#include <amp/amp.h>
#include <dlfcn.h>
#include <stdio.h>

typedef int (*plug_fn)(amp_ctx *, amp_tensor *, amp_tensor **);

int main(int argc, char **argv)
{
	amp_ctx *ctx;
	char err[256];
	if (amp_ctx_new(NULL, &ctx, err, sizeof err)) {
		fprintf(stderr, "host: %s\n", err);
		return 1;
	}
	float v[16] = {0};
	int status = 0;
	for (int i = 1; i < argc && !status; i++) {
		void *h = dlopen(argv[i], RTLD_NOW);
		plug_fn f = h ? (plug_fn)dlsym(h, "plug") : NULL;
		amp_tensor *t, *o;
		if (!f) {
			fprintf(stderr, "host: %s\n", dlerror());
			status = 1;
		} else if (amp_step_begin(ctx) ||
		           amp_tensor_from_f32(ctx, v, amp_shape1(16), AMP_F32, &t) || f(ctx, t, &o) ||
		           amp_step_end(ctx)) {
			fprintf(stderr, "host: %s\n", amp_ctx_error(ctx));
			status = 1;
		}
		if (h)
			dlclose(h);
	}
	amp_ctx_free(ctx);
	return status;
}
