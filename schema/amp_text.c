/* amp_text.c — UTF-8 decoding, the terminal sanitizer and the JSON and CSV scalars (see
 * amp_text.h).  Every string an ampkit tool writes from a profile passes through one of the
 * writers here, so no output can forget to check it. */
#include "amp_text.h"

#include <math.h>
#include <string.h>

static int is_zero_width(uint32_t cp)
{
	return (cp >= 0x0300 && cp <= 0x036F) || (cp >= 0x1AB0 && cp <= 0x1AFF) ||
	       (cp >= 0x1DC0 && cp <= 0x1DFF) || (cp >= 0x20D0 && cp <= 0x20FF) ||
	       (cp >= 0xFE20 && cp <= 0xFE2F) || cp == 0x200B || cp == 0x200C || cp == 0x200D ||
	       cp == 0x2060 || cp == 0xFEFF || (cp >= 0xFE00 && cp <= 0xFE0F);
}

static int is_control(uint32_t cp)
{
	return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F);
}

static int is_unsafe(uint32_t cp)
{
	return is_control(cp) || (cp >= 0x200E && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
	       (cp >= 0x2066 && cp <= 0x2069) || cp == 0x061C || (cp >= 0x2028 && cp <= 0x2029) ||
	       (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF || (cp >= 0xFFF9 && cp <= 0xFFFB) ||
	       cp == 0xFFFE || cp == 0xFFFF || (cp >= 0xE0000 && cp <= 0xE007F);
}

size_t amp_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	uint32_t c = u[0];
	size_t len;
	uint32_t min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF)
		len = 2, c &= 0x1F, min = 0x80;
	else if (c >= 0xE0 && c <= 0xEF)
		len = 3, c &= 0x0F, min = 0x800;
	else if (c >= 0xF0 && c <= 0xF4)
		len = 4, c &= 0x07, min = 0x10000;
	else {
		*cp = AMP_UTF8_INVALID;
		return 1;
	}
	if (n < len) {
		*cp = AMP_UTF8_INVALID;
		return 1;
	}
	for (size_t i = 1; i < len; i++) {
		if ((u[i] & 0xC0) != 0x80) {
			*cp = AMP_UTF8_INVALID;
			return 1;
		}
		c = c << 6 | (u[i] & 0x3F);
	}
	/* an overlong form, a surrogate or a value past U+10FFFF: one replacement for the
	 * whole well-formed-looking sequence */
	if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
		*cp = AMP_UTF8_INVALID;
		return len;
	}
	*cp = c;
	return len;
}

size_t amp_utf8_next(const char *s, size_t n, uint32_t *cp)
{
	uint32_t c;
	size_t len = amp_utf8_decode(s, n, &c);
	if (c == AMP_UTF8_INVALID || is_unsafe(c))
		*cp = AMP_BADCHAR;
	else if (is_zero_width(c))
		*cp = 0;
	else
		*cp = c;
	return len;
}

int amp_cp_width(uint32_t cp)
{
	if (cp < 0x1100)
		return 1;
	if ((cp <= 0x115F) || cp == 0x2329 || cp == 0x232A ||
	    (cp >= 0x2E80 && cp <= 0xA4CF && cp != 0x303F) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
	    (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
	    (cp >= 0xFF00 && cp <= 0xFF60) || (cp >= 0xFFE0 && cp <= 0xFFE6) ||
	    (cp >= 0x1F300 && cp <= 0x1F64F) || (cp >= 0x1F900 && cp <= 0x1F9FF) ||
	    (cp >= 0x20000 && cp <= 0x3FFFD))
		return 2;
	return 1;
}

size_t amp_utf8_put(uint32_t cp, char *buf)
{
	if (cp < 0x80) {
		buf[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		buf[0] = (char)(0xC0 | cp >> 6);
		buf[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		buf[0] = (char)(0xE0 | cp >> 12);
		buf[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		buf[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	buf[0] = (char)(0xF0 | cp >> 18);
	buf[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	buf[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	buf[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t amp_sanitize(const char *src, char *dst, size_t dstlen)
{
	size_t n = src ? strlen(src) : 0, used = 0, cols = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += amp_utf8_next(src + i, n - i, &cp);
		if (!cp)
			continue;
		char enc[4];
		size_t k = amp_utf8_put(cp, enc);
		if (used + k + 1 > dstlen)
			break;
		memcpy(dst + used, enc, k);
		used += k;
		cols += (size_t)amp_cp_width(cp);
	}
	dst[used] = '\0';
	return cols;
}

size_t amp_text_width(const char *src)
{
	size_t n = src ? strlen(src) : 0, cols = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += amp_utf8_next(src + i, n - i, &cp);
		if (cp)
			cols += (size_t)amp_cp_width(cp);
	}
	return cols;
}

size_t amp_text_put(FILE *f, const char *src)
{
	size_t n = src ? strlen(src) : 0, cols = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = amp_utf8_next(src + i, n - i, &cp);
		if (cp == AMP_BADCHAR)
			fputc((int)AMP_BADCHAR, f);
		else if (cp)
			fwrite(src + i, 1, len, f);
		if (cp)
			cols += (size_t)amp_cp_width(cp);
		i += len;
	}
	return cols;
}

void amp_json_string(FILE *f, const char *src)
{
	size_t n = src ? strlen(src) : 0;
	fputc('"', f);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = amp_utf8_decode(src + i, n - i, &cp);
		if (cp == AMP_UTF8_INVALID)
			fputs("\xEF\xBF\xBD", f); /* U+FFFD */
		else if (cp == '"' || cp == '\\')
			fprintf(f, "\\%c", (int)cp);
		else if (cp == '\n')
			fputs("\\n", f);
		else if (cp == '\t')
			fputs("\\t", f);
		else if (cp == '\r')
			fputs("\\r", f);
		else if (is_control(cp) || cp == 0x2028 || cp == 0x2029)
			fprintf(f, "\\u%04x", (unsigned)cp);
		else
			fwrite(src + i, 1, len, f);
		i += len;
	}
	fputc('"', f);
}

static const char *nonfinite_name(double v)
{
	return isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

void amp_json_number(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.9g", v);
	else
		fputs("null", f);
}

void amp_json_member_real(FILE *f, const char *sep, const char *key, double v)
{
	fputs(sep, f);
	amp_json_string(f, key);
	fputs(": ", f);
	amp_json_number(f, v);
	if (!isfinite(v)) {
		fputs(", ", f);
		size_t k = strlen(key);
		char name[128];
		snprintf(name, sizeof name, "%.*s_nonfinite", (int)(k < 100 ? k : 100), key);
		amp_json_string(f, name);
		fprintf(f, ": \"%s\"", nonfinite_name(v));
	}
}

void amp_csv_field(FILE *f, const char *src)
{
	size_t n = src ? strlen(src) : 0;
	int quote = src && strpbrk(src, ",\"\r\n") != NULL;
	if (quote)
		fputc('"', f);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = amp_utf8_decode(src + i, n - i, &cp);
		if (cp == AMP_UTF8_INVALID ||
		    (is_control(cp) && cp != '\t' && cp != '\r' && cp != '\n'))
			fputs("\xEF\xBF\xBD", f); /* U+FFFD */
		else if (cp == '"')
			fputs("\"\"", f);
		else
			fwrite(src + i, 1, len, f);
		i += len;
	}
	if (quote)
		fputc('"', f);
}

char *amp_format_real(double v, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "nan");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "inf" : "-inf");
	else
		snprintf(buf, len, "%.9g", v);
	return buf;
}
