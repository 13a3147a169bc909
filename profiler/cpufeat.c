/* cpufeat.c — the CPU's half-arithmetic features as ampprof sees them (cpuid and xgetbv).
 *
 * Written into meta 'cpu_half_features' at the start of a run, so that finalize's advice can
 * say which engines the machine has without the runtime telling it.  An AVX-512 or AMX
 * feature counts only when the OS has enabled its register state (XCR0); on other
 * architectures the list is empty.
 */
#include <stdio.h>
#include <string.h>

#include "prof.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}
#endif

/* One feature: its meta name and where cpuid leaf 7 reports it. */
typedef struct half_feature {
	const char *name;
	unsigned subleaf;            /* leaf 7 subleaf */
	int reg;                     /* 0 eax, 3 edx */
	unsigned bit;
	int amx;                     /* needs the AMX tile state, else the AVX-512 state */
} half_feature;

static const half_feature features[] = {
    {"avx512_bf16", 1, 0, 5, 0},
    {"avx512_fp16", 0, 3, 23, 0},
    {"amx_bf16", 0, 3, 22, 1},
    {"amx_tile", 0, 3, 24, 1},
};

void prof_cpu_half_features(char *buf, size_t len)
{
	size_t used = 0;
	if (len)
		buf[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	if (__get_cpuid_max(0, NULL) >= 7 && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE)) {
		uint64_t x = xcr0();
		/* opmask, ZMM upper halves and ZMM16-31, plus SSE and AVX state; AMX TILECFG and
		 * TILEDATA */
		int avx512_os = (x & 0xe6) == 0xe6;
		int amx_os = (x & 0x60000) == 0x60000;
		for (size_t i = 0; i < sizeof features / sizeof features[0]; i++) {
			const half_feature *f = &features[i];
			unsigned r[4] = {0, 0, 0, 0};
			if (!__get_cpuid_count(7, f->subleaf, &r[0], &r[1], &r[2], &r[3]))
				continue;
			if (!(r[f->reg] >> f->bit & 1) || !(f->amx ? amx_os : avx512_os))
				continue;
			if (used < len)
				used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "",
				                         f->name);
		}
	}
#endif
	if (used == 0 && len)
		snprintf(buf, len, "none");
}

void prof_cpu_vendor(char *buf, size_t len)
{
	if (len)
		buf[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, v[3];
	if (__get_cpuid(0, &a, &v[0], &v[2], &v[1])) { /* EBX, EDX, ECX spell it */
		char s[13];
		memcpy(s, v, 12);
		s[12] = '\0';
		snprintf(buf, len, "%s", s);
		return;
	}
#endif
	snprintf(buf, len, "unknown");
}

void prof_cpu_model(char *buf, size_t len)
{
	snprintf(buf, len, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *colon = strchr(line, ':');
			if (colon) {
				colon += colon[1] == ' ' ? 2 : 1;
				colon[strcspn(colon, "\n")] = '\0';
				snprintf(buf, len, "%s", colon);
			}
			break;
		}
	}
	fclose(f);
}
