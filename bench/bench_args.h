/* bench_args.h — the command line of the benches that take no options: --help prints what the
 * bench measures and exits; anything else is an error. */
#ifndef BENCH_ARGS_H
#define BENCH_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void bench_no_options(int argc, char **argv, const char *name, const char *help)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("usage: %s\n\n%s", name, help);
			exit(0);
		}
		fprintf(stderr, "%s: unknown option '%s'\nusage: %s (--help)\n", name, argv[i], name);
		exit(2);
	}
}

#endif
