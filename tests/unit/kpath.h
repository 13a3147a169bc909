/* kpath.h — the one way a unit test forces a kernel path (header-only, for Criterion tests).
 *
 * kpath_force("avx512") selects the path and returns true; when this CPU lacks it, it prints
 * "SKIPPED: <path> needs <feature>" and returns false, and the test returns without checking
 * anything (never a silent pass).  kpath_restore() goes back to "auto" and one GEMM thread;
 * use it as the test's .fini.
 */
#ifndef AMP_TESTS_KPATH_H
#define AMP_TESTS_KPATH_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"

static inline bool kpath_force(const char *path)
{
	const char *missing = amp_kernels_path_missing(path);
	if (missing != NULL) {
		printf("SKIPPED: %s needs %s\n", path, missing);
		fflush(stdout);
		return false;
	}
	/* The CPU has it: selecting it must work. */
	cr_assert_geq(amp_kernels_select(path), 0, "amp_kernels_select(\"%s\") refused", path);
	cr_assert_str_eq(amp_isa_name(amp_kernels_isa()), path);
	return true;
}

static inline void kpath_restore(void)
{
	amp_kernels_select("auto");
	amp_kernels_set_threads(1);
}

#endif
