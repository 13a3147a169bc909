/* sanitize.h — turning untrusted strings (op names, labels, file names, meta values written by
 * the user's program) into text that is safe to draw: printable code points only.
 *
 * Control characters (C0, DEL, C1), ESC and so every escape sequence, bidirectional overrides,
 * invalid UTF-8 and surrogates become VIEW_BADCHAR; zero-width and combining marks are dropped
 * so that one code point is one or two terminal columns.  Pure functions, thread-safe.  These
 * are the viewer's names for schema/amp_text.h's sanitizer, which every text output shares.
 */
#ifndef VIEW_SANITIZE_H
#define VIEW_SANITIZE_H

#include <stddef.h>
#include <stdint.h>

#define VIEW_BADCHAR 0x3Fu /* '?' */

/* Decodes the next code point of s (n bytes available, n > 0) into *cp and returns the bytes
 * consumed (1..4).  *cp is a printable code point, VIEW_BADCHAR for anything unsafe, or 0 for
 * a code point to drop (zero width). */
size_t view_utf8_next(const char *s, size_t n, uint32_t *cp);

/* Terminal columns of a code point returned by view_utf8_next: 1, or 2 for East Asian wide
 * and fullwidth forms and most emoji. */
int view_cp_width(uint32_t cp);

/* Copies src into dst (dstlen > 0 bytes, always NUL-terminated) with every unsafe code point
 * replaced as view_utf8_next does; never cuts a UTF-8 sequence.  Returns the display columns
 * of the result. */
size_t view_sanitize(const char *src, char *dst, size_t dstlen);

/* Display columns of src once sanitized. */
size_t view_text_width(const char *src);

/* Appends the UTF-8 encoding of cp to buf (4 bytes room needed); returns the bytes written. */
size_t view_utf8_put(uint32_t cp, char *buf);

#endif
