/* plug.c — a plugin for the call-site test of a reloaded object (tests/e2e/profiler.sh): built
 * twice, with OP amp_relu and with OP amp_gelu, into two objects whose plug() lies at the same
 * offset, so that one loaded where the other was unloaded puts its call at the same address. */
#include <amp/amp.h>

int plug(amp_ctx *c, amp_tensor *t, amp_tensor **o);

int plug(amp_ctx *c, amp_tensor *t, amp_tensor **o)
{
	return OP(c, "plug", t, o);
}
