/* fmt.c — human figures (see fmt.h). */
#include "fmt.h"

#include <math.h>
#include <stdio.h>

char *view_fmt_ns(int64_t ns, char *buf, size_t len)
{
	double v = (double)ns;
	if (ns < 0)
		snprintf(buf, len, "-");
	else if (ns < 1000)
		snprintf(buf, len, "%lld ns", (long long)ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%.*f us", v < 1e4 ? 2 : v < 1e5 ? 1 : 0, v / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, len, "%.*f ms", v < 1e7 ? 2 : v < 1e8 ? 1 : 0, v / 1e6);
	else if (ns < 600000000000LL)
		snprintf(buf, len, "%.*f s", v < 1e10 ? 2 : 1, v / 1e9);
	else
		snprintf(buf, len, "%lldm%02llds", (long long)(ns / 60000000000LL),
		         (long long)(ns / 1000000000LL % 60));
	return buf;
}

char *view_fmt_count(double n, char *buf, size_t len)
{
	static const char units[] = " kMGTP";
	int u = 0;
	if (n < 1000) {
		snprintf(buf, len, "%.0f", n);
		return buf;
	}
	while (n >= 999.5 && u < 5) {
		n /= 1000;
		u++;
	}
	snprintf(buf, len, "%.*f%c", n < 10 ? 2 : n < 100 ? 1 : 0, n, units[u]);
	return buf;
}

char *view_fmt_bytes(int64_t n, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	int u = 0;
	if (n < 1024) {
		snprintf(buf, len, "%lld B", (long long)n);
		return buf;
	}
	while (v >= 1023.5 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
	return buf;
}

char *view_fmt_scale(double s, char *buf, size_t len)
{
	if (isnan(s)) /* unknown (a step that never ended): no scaler makes a NaN scale */
		snprintf(buf, len, "-");
	else if (s >= 1 && s < 1e7 && s == floor(s))
		snprintf(buf, len, "%.0f", s);
	else
		snprintf(buf, len, "%.3g", s);
	return buf;
}
