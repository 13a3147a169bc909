/* sanitize.c — safe text for the terminal (see sanitize.h): the viewer's names for the one
 * sanitizer of schema/amp_text.c, which ampprof's report and ampdump's tables share.  Nothing
 * that comes from a profile reaches the screen without passing through view_utf8_next: the
 * screen module decodes every string with it, so a panel cannot forget. */
#include "sanitize.h"

#include "amp_text.h"

size_t view_utf8_next(const char *s, size_t n, uint32_t *cp)
{
	return amp_utf8_next(s, n, cp);
}

int view_cp_width(uint32_t cp)
{
	return amp_cp_width(cp);
}

size_t view_utf8_put(uint32_t cp, char *buf)
{
	return amp_utf8_put(cp, buf);
}

size_t view_sanitize(const char *src, char *dst, size_t dstlen)
{
	return amp_sanitize(src, dst, dstlen);
}

size_t view_text_width(const char *src)
{
	return amp_text_width(src);
}
