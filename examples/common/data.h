/* data.h — the examples' data sets: Fashion-MNIST from gzip IDX files (Debian package
 * dataset-fashion-mnist) and the King James Bible as plain text (package bible-kjv).
 *
 * Loaders fill caller-owned structs whose buffers they malloc; free with the matching _free.
 * On failure they return -1 and write a message naming the file (and a hint) into err.
 */
#ifndef AMP_EX_DATA_H
#define AMP_EX_DATA_H

#include <stddef.h>
#include <stdint.h>

#define EX_FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define EX_FASHION_HINT                                                                            \
	"hint: install it with: make deps (or apt-get install dataset-fashion-mnist)"
#define EX_KJV_HINT "hint: install it with: make deps (or apt-get install bible-kjv)"

/* ---- IDX files --------------------------------------------------------------------------- */
/* Reads a gzip (or plain) IDX file of unsigned bytes with ndim dimensions (magic 0x0000080N).
 * Checks the magic, the dimensions and that exactly prod(dims) bytes of data follow.
 * On success *data (malloc'd, prod(dims) bytes) and dims[0..ndim) are set. */
int ex_idx_read(const char *path, int ndim, uint8_t **data, int64_t *dims, char *err,
                size_t errlen);

/* ---- Fashion-MNIST ----------------------------------------------------------------------- */
#define EX_FASHION_CLASSES 10 /* labels 0..9 */

typedef struct ex_images {
	int64_t n;       /* number of images */
	int rows, cols;  /* 28 x 28 */
	float *pixels;   /* (n, rows*cols), scaled to [0,1] */
	int32_t *labels; /* (n), 0..9 */
} ex_images;

/* Loads split "train" (60000) or "t10k" (10000) from dir (NULL: EX_FASHION_DIR):
 * <split>-images-idx3-ubyte.gz and <split>-labels-idx1-ubyte.gz.  Counts must agree and labels
 * lie in 0..9. */
int ex_fashion_load(const char *dir, const char *split, ex_images *out, char *err, size_t errlen);
void ex_images_free(ex_images *im);
/* Subtracts mean and divides by std in place (over all pixels). */
void ex_images_standardize(ex_images *im, float mean, float std);

/* ---- text -------------------------------------------------------------------------------- */
typedef struct ex_text {
	char *data; /* malloc'd, NUL-terminated */
	size_t len;
} ex_text;

/* Turns the output of `bible` (chapter headings, indented verse numbers, wrapped lines) into
 * plain text, one verse per line.  dst must hold n + 1 bytes; returns the length written. */
size_t ex_kjv_clean(const char *raw, size_t n, char *dst);
/* Runs `bible -l1000 "Gen1:1-Rev22:21"` and cleans its output (about 4 MB).  Nothing is cached. */
int ex_kjv_load(ex_text *out, char *err, size_t errlen);
/* Reads a whole file as text. */
int ex_text_load_file(const char *path, ex_text *out, char *err, size_t errlen);
void ex_text_free(ex_text *t);

/* Byte-level vocabulary: the distinct bytes of a text, in byte order. */
typedef struct ex_vocab {
	int size;                 /* number of distinct bytes */
	unsigned char chars[256]; /* token id -> byte */
	int16_t ids[256];         /* byte -> token id, -1 if absent */
} ex_vocab;

void ex_vocab_build(ex_vocab *v, const char *text, size_t len);

#endif
