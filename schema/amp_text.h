/* amp_text.h — strings that come from an application (op names, layer labels, file names, the
 * command line) written safely: UTF-8 decoding, the terminal sanitizer shared by every text
 * output of the tools (ampview's screen, ampprof's report, ampdump's tables), and the JSON and
 * CSV scalars of every machine output.
 *
 * The rules, one for all tools:
 *  - text for a terminal (amp_sanitize, amp_text_put): control characters (C0, DEL, C1) and so
 *    every escape sequence, bidirectional overrides, invalid UTF-8 and surrogates become '?'
 *    (AMP_BADCHAR); zero-width and combining marks are dropped, so one code point is one or two
 *    columns.  Valid printable UTF-8 is kept.
 *  - JSON strings (amp_json_string): invalid UTF-8 becomes U+FFFD; '"', '\\', control
 *    characters (C0, DEL, C1) and U+2028/U+2029 are escaped; the output is valid UTF-8.
 *  - CSV fields (amp_csv_field, RFC 4180): invalid UTF-8 and control characters other than
 *    tab, CR and LF become U+FFFD; a field holding ',', '"', CR or LF is quoted.
 *  - numbers: %.9g; in text `nan`, `inf`, `-inf` (and so in CSV); in JSON a number that is not
 *    finite is null, followed by the member "<key>_nonfinite": "nan" | "inf" | "-inf"
 *    (amp_json_member_real); a null without that member means "no value".
 * Pure functions (the writers only write to the FILE given), thread-safe.  Depends on libc.
 */
#ifndef AMP_TEXT_H
#define AMP_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define AMP_BADCHAR 0x3Fu      /* '?': what an unsafe code point becomes in text */
#define AMP_REPLACEMENT 0xFFFDu /* what invalid UTF-8 becomes in JSON and CSV */
#define AMP_UTF8_INVALID 0xFFFFFFFFu

/* Version of the JSON documents the tools write ("format_version"). */
#define AMP_JSON_FORMAT_VERSION 1

/* Decodes the next code point of s (n > 0 bytes available) into *cp: the code point, or
 * AMP_UTF8_INVALID for a byte that does not start a valid, shortest-form, non-surrogate
 * sequence (1 byte consumed; a whole overlong, surrogate or out-of-range sequence counts as
 * one).  Returns the bytes consumed (1..4). */
size_t amp_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* As amp_utf8_decode, for the terminal: *cp is a printable code point, AMP_BADCHAR for
 * anything unsafe or invalid, or 0 for a code point to drop (zero width). */
size_t amp_utf8_next(const char *s, size_t n, uint32_t *cp);

/* Terminal columns of a code point returned by amp_utf8_next: 1, or 2 for East Asian wide and
 * fullwidth forms and most emoji. */
int amp_cp_width(uint32_t cp);

/* Appends the UTF-8 encoding of cp to buf (4 bytes room needed); returns the bytes written. */
size_t amp_utf8_put(uint32_t cp, char *buf);

/* Copies src (NULL: "") into dst (dstlen > 0 bytes, always NUL-terminated) sanitized for the
 * terminal; never cuts a UTF-8 sequence.  Returns the display columns of the result. */
size_t amp_sanitize(const char *src, char *dst, size_t dstlen);

/* Display columns of src once sanitized. */
size_t amp_text_width(const char *src);

/* Writes src (NULL: "") sanitized for the terminal to f.  Returns the columns written. */
size_t amp_text_put(FILE *f, const char *src);

/* Writes src (NULL: "") as a JSON string, quotes included. */
void amp_json_string(FILE *f, const char *src);

/* Writes v as a JSON number (%.9g), or null when it is not finite. */
void amp_json_number(FILE *f, double v);

/* Writes the members `"key": v` — or, v not finite, `"key": null, "key_nonfinite": "inf"` —
 * preceded by sep (", " or "" for the first member). */
void amp_json_member_real(FILE *f, const char *sep, const char *key, double v);

/* Writes src (NULL: an empty field) as one CSV field. */
void amp_csv_field(FILE *f, const char *src);

/* Formats v with %.9g, or "nan", "inf", "-inf".  Returns buf. */
char *amp_format_real(double v, char *buf, size_t len);

#endif
