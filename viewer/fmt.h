/* fmt.h — short human figures for narrow columns: durations, counts, bytes, percentages.
 * Each writes a NUL-terminated string into buf (len bytes) and returns buf. */
#ifndef VIEW_FMT_H
#define VIEW_FMT_H

#include <stddef.h>
#include <stdint.h>

/* "812 ns", "45.2 us", "3.07 ms", "12.4 s", "3m12s"; "-" for a negative value (unknown). */
char *view_fmt_ns(int64_t ns, char *buf, size_t len);
/* "999", "12.3k", "10.0M", "2.10G". */
char *view_fmt_count(double n, char *buf, size_t len);
/* "512 B", "4.0 KiB", "1.50 MiB", "2.00 GiB". */
char *view_fmt_bytes(int64_t n, char *buf, size_t len);
/* A loss scale: "65536", "0.5", "1.68e+07". */
char *view_fmt_scale(double s, char *buf, size_t len);

#endif
