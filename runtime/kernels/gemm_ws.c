/* gemm_ws.c — thread-local, grow-only scratch buffers for the GEMM packing panels.
 *
 * Each thread gets its own set on first use, so GEMMs on different threads never share
 * memory; a pthread key destructor frees a thread's set when it exits.
 */
#include <pthread.h>
#include <stdlib.h>

#include "kernels/kernels_impl.h"

typedef struct gemm_ws {
	float *buf[AMP_WS_COUNT];
	size_t cap[AMP_WS_COUNT];  /* in floats */
} gemm_ws;

static pthread_key_t ws_key;
static int ws_key_ok;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static _Thread_local gemm_ws *ws_this_thread;

static void ws_release(void *arg)
{
	gemm_ws *ws = arg;
	for (int i = 0; i < AMP_WS_COUNT; i++)
		free(ws->buf[i]);
	free(ws);
}

static void ws_key_create(void)
{
	ws_key_ok = pthread_key_create(&ws_key, ws_release) == 0;
}

float *amp_kernels_workspace(amp_ws_slot slot, size_t nfloats)
{
	gemm_ws *ws = ws_this_thread;
	if (ws == NULL) {
		pthread_once(&ws_once, ws_key_create);
		ws = calloc(1, sizeof *ws);
		if (ws == NULL)
			return NULL;
		/* Without a key the set is still usable; it just outlives the thread. */
		if (ws_key_ok)
			pthread_setspecific(ws_key, ws);
		ws_this_thread = ws;
	}
	if (ws->cap[slot] < nfloats) {
		/* Round to whole 64-byte lines, as aligned_alloc requires, plus headroom. */
		size_t want = nfloats + nfloats / 4;
		want = (want + 15) & ~(size_t)15;
		if (want > SIZE_MAX / sizeof(float))
			return NULL;
		float *p = aligned_alloc(64, want * sizeof(float));
		if (p == NULL)
			return NULL;
		free(ws->buf[slot]);
		ws->buf[slot] = p;
		ws->cap[slot] = want;
	}
	return ws->buf[slot];
}
