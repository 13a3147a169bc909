/* trace_crash.c — the fatal-signal handler: a crash record with libunwind's backtrace into the
 * crashing thread's ring, then the default action.  Async-signal-safe code only.
 */
#include "trace_int.h"

#include <errno.h>
#include <signal.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

/* ---- crash handler ----------------------------------------------------------------------- */
static const int g_fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_FATAL ((int)(sizeof g_fatal_signals / sizeof g_fatal_signals[0]))

/* The backtrace of the code the signal interrupted, innermost first, into frames (at most
 * max): libunwind's local cursor started from the interrupted context the kernel handed the
 * handler (uctx), so that the first frame is the faulting instruction and neither this
 * handler nor the signal trampoline appears (they are where the crash was reported, not where
 * it happened).  Without that context, from here, every frame.  Returns the count. */
static int crash_backtrace(void *uctx, uint64_t *frames, int max)
{
	unw_context_t here;
	unw_cursor_t c;
	if (!uctx || unw_init_local2(&c, (unw_context_t *)uctx, UNW_INIT_SIGNAL_FRAME) != 0) {
		if (unw_getcontext(&here) != 0 || unw_init_local(&c, &here) != 0)
			return 0;
	}
	int n = 0;
	do {
		unw_word_t ip = 0;
		if (unw_get_reg(&c, UNW_REG_IP, &ip) != 0)
			break;
		frames[n++] = (uint64_t)ip;
	} while (n < max && unw_step(&c) > 0);
	return n;
}

/* Async-signal-safe: plain stores into the mapped ring, libunwind's local unwinder, sigaction
 * and raise.  The record is written only by the thread that owns the ring. */
static void trace_on_fatal(int signo, siginfo_t *si, void *uctx)
{
	int saved_errno = errno;
	trace_ring *r = amp_trace_tl_ring;
	if (r && !amp_trace_tl_in_signal) {
		amp_trace_tl_in_signal = 1;
		unsigned slots = AMP_REC_SLOTS(amp_rec_crash);
		amp_rec_crash *rec = ring_reserve(r, slots);
		if (rec) {
			uint64_t frames[AMP_CRASH_FRAMES];
			int n = crash_backtrace(uctx, frames, AMP_CRASH_FRAMES);
			rec->signo = signo;
			rec->code = si ? si->si_code : 0;
			rec->addr = si ? (uint64_t)(uintptr_t)si->si_addr : 0;
			rec->t = amp_trace_clock();
			rec->nframes = (uint32_t)n;
			rec->pad = 0;
			for (int i = 0; i < AMP_CRASH_FRAMES; i++)
				rec->frames[i] = i < n ? frames[i] : 0;
			ring_commit(r, rec, AMP_REC_CRASH, slots, 0);
		}
		amp_trace_ring_close(r);
	}
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(signo, &dfl, NULL);
	errno = saved_errno;
	raise(signo);
}

void amp_trace_install_fatal_handlers(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = trace_on_fatal;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < N_FATAL; i++) {
		struct sigaction old;
		/* leave a handler the program installed before us alone */
		if (sigaction(g_fatal_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_DFL)
			continue;
		sigaction(g_fatal_signals[i], &sa, NULL);
	}
}
