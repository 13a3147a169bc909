/* trace_producer.c — drives libamprt's trace emitter directly, for ampprof's end-to-end tests.
 *
 * Emits steps of synthetic ops, copies, scale decisions and memory reports through
 * runtime/trace.h, then can crash, exit or be killed on cue, run several threads, or act as a
 * hostile application that writes garbage into its session's rings.
 *   trace_producer [--steps N] [--ops N] [--threads N] [--sleep-ms N] [--crash-at STEP]
 *                  [--abort-at STEP] [--exit-at STEP] [--garbage] [--gemm-engine NAME]
 *                  [--half fp16|bf16] [--mode PRECISION_MODE] [--custom-op NAME]
 *                  [--fake-wire N] [--sequential] [--unique-labels]
 * --custom-op names every fourth op by that name (an op type outside the runtime's enum, as a
 * producer other than libamprt would); --fake-wire poses as a library of wire version N that
 * refused the session (it sends nothing).  --threads runs up to 64 threads at once, or with
 * --sequential one after another.  --unique-labels gives every op of every step a label of its
 * own, so that string definitions keep coming all through the run.
 * The MatMuls run on the --gemm-engine (default fp32-fma: half storage computed in FP32), the
 * other ops on fp32-fma; --half is the half type of the MatMuls and ReLUs (default fp16).
 */
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"

typedef struct producer_opts {
	int steps, ops, threads, sleep_ms, crash_at, abort_at, exit_at, garbage;
} producer_opts;

static producer_opts g_opts = {10, 20, 1, 0, -1, -1, -1, 0};
static amp_engine g_gemm_engine = AMP_ENGINE_FP32_FMA;
static int g_half = AMP_DTYPE_F16;
static const char *g_mode = "allow_mix_precision";
static const char *g_custom_op;
static uint64_t g_ops_total; /* ops of all threads so far */
static int g_sequential;      /* --sequential: the threads run one after another */
static int g_unique_labels;   /* --unique-labels: every op of every step has its own label */
#define PRODUCER_MAX_THREADS 64

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* One op as the runtime would report it; the call site is this function's caller line. */
static __attribute__((noinline)) void emit_op(int64_t step, uint64_t seq, int i)
{
	char label[48];
	if (g_unique_labels)
		snprintf(label, sizeof label, "layer%d.step%lld", i, (long long)step);
	else
		snprintf(label, sizeof label, "layer%d", i % 4);
	amp_trace_op op;
	memset(&op, 0, sizeof op);
	op.t_begin = amp_trace_clock();
	op.op = i % 3 == 0 ? AMP_OP_MATMUL : i % 3 == 1 ? AMP_OP_RELU : AMP_OP_SOFTMAX;
	op.phase = AMP_PHASE_FORWARD;
	op.exec_dtype = op.op == AMP_OP_SOFTMAX ? AMP_DTYPE_F32 : g_half;
	op.engine = op.op == AMP_OP_MATMUL ? g_gemm_engine : AMP_ENGINE_FP32_FMA;
	if (g_custom_op && i % 4 == 1)
		op.op_name = g_custom_op;
	op.in_dtype = 0;
	op.out_dtype = op.exec_dtype;
	op.label = label;
	op.step = step;
	op.seq = seq;
	op.ndim = 2;
	op.shape[0] = 64;
	op.shape[1] = i % 4 == 3 ? 62 : 64; /* one in four not a multiple of 8 (K is 64) */
	op.flops = op.op == AMP_OP_MATMUL ? 2u * 64 * (uint64_t)op.shape[1] * 64 : 4096;
	op.bytes = 3 * 64 * 64 * 2;
	op.aligned = op.shape[1] % 8 == 0;
	volatile double x = 0;
	for (int k = 0; k < 200; k++)
		x += k;
	amp_trace_op_end(&op);
}

static void *run_thread(void *arg)
{
	int64_t tid = (int64_t)(intptr_t)arg;
	uint64_t seq = 0;
	double scale = 128;
	for (int64_t step = 0; step < g_opts.steps; step++) {
		uint64_t t0 = amp_trace_clock();
		amp_trace_step_begin(0, step);
		uint64_t c0 = amp_trace_clock();
		amp_trace_copy(AMP_COPY_H2D, 128 * 784 * 4, 0, 0, c0, step, "input");
		for (int i = 0; i < g_opts.ops; i++) {
			emit_op(step, seq++, i); /* PRODUCER_OP_LINE */
			if (i % 3 == 0) {
				uint64_t t = amp_trace_clock();
				amp_trace_copy(AMP_COPY_CAST, 64 * 64 * 2, 0, 1, t, step, "cast");
			}
		}
		if (tid == 0 && step == g_opts.crash_at) {
			/* a store to an unmapped page: a real SIGSEGV even under UBSan, which would
			 * stop a null store itself */
			static volatile uintptr_t unmapped = 64;
			volatile int *p = (volatile int *)unmapped;
			*p = 1;
		}
		if (tid == 0 && step == g_opts.abort_at)
			abort();
		if (tid == 0 && step == g_opts.exit_at)
			exit(42);
		int overflow = step % 5 == 4;
		double next = overflow ? scale / 2 : scale;
		amp_trace_step_end(0, step, t0, 1.0 / (double)(step + 1), 1, scale, overflow,
		                   overflow, 128, NULL);
		amp_trace_scale(0, step, scale, next,
		                overflow ? AMP_SCALE_OVERFLOW : AMP_SCALE_HOLD);
		scale = next;
		uint64_t mem[AMP_MEM_NCAT] = {1000, 500, 2000 + (uint64_t)step, 1000, 2000};
		amp_trace_memory(0, step, mem, 8000, NULL,
		                 0); /* 0: as a producer without contexts */
		if (g_opts.sleep_ms)
			sleep_ms(g_opts.sleep_ms);
	}
	/* each thread's own count (summed by the collector), and a process-wide total any thread
	 * may report (counted once: the largest) */
	amp_trace_counter("ops_dispatched", (int64_t)seq);
	amp_trace_counter_process("ops_process_total",
	                          (int64_t)__atomic_add_fetch(&g_ops_total, seq, __ATOMIC_RELAXED));
	return NULL;
}

/* Hostile: claims two rings and fills them with garbage, lying about their heads. */
/* Poses as a library of another wire version: it found the session, said its version and did
 * not attach (the attach of this process's own libamprt is undone). */
static void fake_wire(unsigned version)
{
	const char *env = getenv(AMP_SESSION_ENV);
	struct stat st;
	if (!env || fstat(atoi(env), &st) != 0)
		return;
	amp_session_hdr *h =
	    mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, atoi(env), 0);
	if (h == MAP_FAILED)
		return;
	__atomic_store_n(&h->producer_wire, version, __ATOMIC_RELEASE);
	__atomic_store_n(&h->attached, 0, __ATOMIC_RELEASE);
}

static void write_garbage(void)
{
	const char *env = getenv(AMP_SESSION_ENV);
	struct stat st;
	if (!env || fstat(atoi(env), &st) != 0)
		return;
	unsigned char *map =
	    mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, atoi(env), 0);
	if (map == MAP_FAILED)
		return;
	amp_session_hdr *h = (amp_session_hdr *)map;
	uint64_t rng = 88172645463325252ull;
	for (int r = 0; r < 2; r++) {
		uint32_t idx = __atomic_fetch_add(&h->rings_claimed, 1, __ATOMIC_ACQ_REL);
		if (idx >= h->ring_count)
			break;
		amp_ring_hdr *rh = (amp_ring_hdr *)(map + h->ring_offset + idx * h->ring_stride);
		unsigned char *slots = (unsigned char *)rh + AMP_RING_HDR_SIZE;
		rh->state = AMP_RING_OPEN;
		rh->clock = 7;
		for (uint64_t pos = 0; pos < h->ring_slots; pos++) {
			unsigned char *s = slots + (pos % h->ring_slots) * AMP_SLOT_SIZE;
			for (unsigned k = 0; k < AMP_SLOT_SIZE; k += 8) {
				rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
				memcpy(s + k, &rng, 8);
			}
			amp_rec_hdr rec;
			memcpy(&rec, s, sizeof rec);
			if (pos % 3 == 0) {
				/* valid stamp and a plausible type, garbage inside */
				rec.stamp = (uint32_t)pos;
				rec.type = (uint8_t)(rng % AMP_REC_TYPE_COUNT);
				rec.nslots = (uint8_t)(1 + rng % 4);
				memcpy(s, &rec, sizeof rec);
			}
		}
		__atomic_store_n(&rh->head, r == 0 ? h->ring_slots : UINT64_MAX - 5,
		                 __ATOMIC_RELEASE);
	}
	h->ring_count = 1u << 30; /* lies in the header too */
	h->ring_offset = 12345;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : "0";
		if (strcmp(a, "--steps") == 0)
			g_opts.steps = atoi(v), i++;
		else if (strcmp(a, "--ops") == 0)
			g_opts.ops = atoi(v), i++;
		else if (strcmp(a, "--threads") == 0)
			g_opts.threads = atoi(v), i++;
		else if (strcmp(a, "--sequential") == 0)
			g_sequential = 1;
		else if (strcmp(a, "--unique-labels") == 0)
			g_unique_labels = 1;
		else if (strcmp(a, "--sleep-ms") == 0)
			g_opts.sleep_ms = atoi(v), i++;
		else if (strcmp(a, "--crash-at") == 0)
			g_opts.crash_at = atoi(v), i++;
		else if (strcmp(a, "--abort-at") == 0)
			g_opts.abort_at = atoi(v), i++;
		else if (strcmp(a, "--exit-at") == 0)
			g_opts.exit_at = atoi(v), i++;
		else if (strcmp(a, "--garbage") == 0)
			g_opts.garbage = 1;
		else if (strcmp(a, "--gemm-engine") == 0 && amp_engine_from_name(v) >= 0)
			g_gemm_engine = (amp_engine)amp_engine_from_name(v), i++;
		else if (strcmp(a, "--half") == 0 && amp_dtype_code_from_name(v) >= 0 &&
		         amp_dtype_code_is_half((unsigned)amp_dtype_code_from_name(v)))
			g_half = amp_dtype_code_from_name(v), i++;
		else if (strcmp(a, "--mode") == 0)
			g_mode = v, i++;
		else if (strcmp(a, "--custom-op") == 0)
			g_custom_op = v, i++;
		else if (strcmp(a, "--fake-wire") == 0) {
			fake_wire((unsigned)atoi(v));
			return 0;
		}
		else {
			fprintf(stderr, "trace_producer: unknown option '%s'\n", a);
			return 2;
		}
	}
	amp_trace_meta("precision_mode", g_mode);
	if (g_opts.garbage)
		write_garbage();
	pthread_t th[PRODUCER_MAX_THREADS];
	int n = g_opts.threads < 1 ? 1
	        : g_opts.threads > PRODUCER_MAX_THREADS ? PRODUCER_MAX_THREADS : g_opts.threads;
	if (g_sequential) {
		/* one thread after another: each ends (its ring is reclaimed) before the next */
		run_thread((void *)(intptr_t)0);
		for (int t = 1; t < n; t++) {
			pthread_create(&th[t], NULL, run_thread, (void *)(intptr_t)t);
			pthread_join(th[t], NULL);
		}
		return 0;
	}
	for (int t = 1; t < n; t++)
		pthread_create(&th[t], NULL, run_thread, (void *)(intptr_t)t);
	run_thread((void *)(intptr_t)0);
	for (int t = 1; t < n; t++)
		pthread_join(th[t], NULL);
	return 0;
}
