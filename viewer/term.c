/* term.c — curses output, key input and terminal restoration (see term.h). */
#define NCURSES_WIDECHAR 1
#include "term.h"

#include <curses.h>
#include <execinfo.h>
#include <langinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <wchar.h>

#include "panel.h"
#include "sanitize.h"

static int active; /* curses is running */
static int use_utf8, use_color;
static int keys_utf8; /* the locale is UTF-8: get_wch gives characters whole */
static struct termios saved_tio; /* the terminal as we found it */
static int have_tio;
static char restore_seq[256]; /* sgr0 cnorm rmkx rmcup, written by the handlers */
static size_t restore_len;
static attr_t style_attr[VIEW_S_COUNT];
static short style_pair[VIEW_S_COUNT];

static const int term_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static void add_cap(const char *name)
{
	const char *s = tigetstr(name);
	if (!s || s == (char *)-1)
		return;
	size_t n = strlen(s);
	if (restore_len + n < sizeof restore_seq) {
		memcpy(restore_seq + restore_len, s, n);
		restore_len += n;
	}
}

/* Async-signal-safe: puts the terminal back as it was. */
static void restore_now(void)
{
	if (restore_len)
		(void)!write(STDOUT_FILENO, restore_seq, restore_len);
	(void)!write(STDOUT_FILENO, "\r\n", 2);
	if (have_tio)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
}

/* The keypad's application mode (smkx), which curses sets at start but not again when the
 * program resumes from a stop (Ctrl-Z, fg): without it the arrows send other sequences and
 * the first one read as Esc.  Async-signal-safe: written by the SIGCONT handler. */
static char keypad_seq[64];
static size_t keypad_len;

static void on_cont(int sig)
{
	(void)sig;
	if (active && keypad_len)
		(void)!write(STDOUT_FILENO, keypad_seq, keypad_len);
}

static void put_str(const char *s)
{
	(void)!write(STDERR_FILENO, s, strlen(s));
}

static void on_signal(int sig)
{
	if (active) {
		active = 0;
		restore_now();
	}
	int crash = 0;
	for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
		crash |= sig == crash_signals[i];
	if (crash) {
		void *frames[48];
		int n = backtrace(frames, 48);
		put_str("ampview: crashed on ");
		put_str(sig == SIGSEGV  ? "SIGSEGV"
		        : sig == SIGBUS ? "SIGBUS"
		        : sig == SIGFPE ? "SIGFPE"
		        : sig == SIGILL ? "SIGILL"
		                        : "SIGABRT");
		put_str("; backtrace:\n");
		backtrace_symbols_fd(frames, n, STDERR_FILENO);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void set_handlers(void (*h)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = h;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof term_signals / sizeof term_signals[0]; i++)
		sigaction(term_signals[i], &sa, NULL);
	for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
		sigaction(crash_signals[i], &sa, NULL);
}

static void setup_styles(void)
{
	/* {fg, bg, attrs with colour, attrs without} */
	static const struct {
		short fg, bg;
		attr_t color_attr, mono_attr;
	} map[VIEW_S_COUNT] = {
	    [VIEW_S_NORMAL] = {-1, -1, A_NORMAL, A_NORMAL},
	    [VIEW_S_BAR] = {COLOR_BLACK, COLOR_CYAN, A_NORMAL, A_REVERSE},
	    [VIEW_S_TAB] = {COLOR_BLACK, COLOR_YELLOW, A_BOLD, A_BOLD | A_UNDERLINE},
	    [VIEW_S_HEADER] = {COLOR_CYAN, -1, A_BOLD, A_BOLD},
	    [VIEW_S_BAD] = {COLOR_RED, -1, A_BOLD, A_BOLD | A_REVERSE},
	    [VIEW_S_GOOD] = {COLOR_GREEN, -1, A_NORMAL, A_BOLD},
	    [VIEW_S_WARN] = {COLOR_YELLOW, -1, A_BOLD, A_BOLD | A_UNDERLINE},
	    [VIEW_S_DIM] = {-1, -1, A_DIM, A_NORMAL},
	    [VIEW_S_FP16] = {COLOR_GREEN, -1, A_NORMAL, A_NORMAL},
	    [VIEW_S_FP32] = {COLOR_BLUE, -1, A_NORMAL, A_NORMAL},
	    [VIEW_S_COPY] = {COLOR_MAGENTA, -1, A_NORMAL, A_NORMAL},
	    [VIEW_S_OTHER] = {-1, -1, A_DIM, A_NORMAL},
	    [VIEW_S_MARK] = {COLOR_RED, -1, A_BOLD, A_BOLD},
	    [VIEW_S_BAND] = {COLOR_YELLOW, -1, A_NORMAL, A_NORMAL},
	    [VIEW_S_HILITE] = {COLOR_YELLOW, -1, A_NORMAL, A_UNDERLINE},
	    [VIEW_S_STATUS] = {-1, -1, A_REVERSE, A_REVERSE},
	};
	for (int i = 0; i < VIEW_S_COUNT; i++) {
		style_pair[i] = 0;
		style_attr[i] = use_color ? map[i].color_attr : map[i].mono_attr;
		if (use_color && (map[i].fg >= 0 || map[i].bg >= 0)) {
			init_pair((short)(i + 1), map[i].fg, map[i].bg);
			style_pair[i] = (short)(i + 1);
		}
	}
}

int view_term_init(int ascii, char *err, size_t errlen)
{
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		snprintf(err, errlen, "the standard input and output must be a terminal");
		return -1;
	}
	const char *cs = nl_langinfo(CODESET);
	keys_utf8 = cs && !strcmp(cs, "UTF-8");
	use_utf8 = !ascii && keys_utf8;
	have_tio = tcgetattr(STDIN_FILENO, &saved_tio) == 0;
	{
		void *warm[1];
		backtrace(warm, 1); /* loads libgcc now, not in a signal handler */
	}
	/* newterm, not initscr: initscr exits the process on an unknown TERM */
	if (!newterm(NULL, stdout, stdin)) {
		snprintf(err, errlen, "cannot start curses (TERM=%s)",
		         getenv("TERM") ? getenv("TERM") : "");
		return -1;
	}
	/* a terminal that cannot place the cursor (TERM=dumb) would show a blank screen */
	const char *cup = tigetstr("cup");
	if (!cup || cup == (char *)-1) {
		endwin();
		snprintf(err, errlen, "the terminal (TERM=%s) cannot place the cursor",
		         getenv("TERM") ? getenv("TERM") : "");
		return -1;
	}
	active = 1;
	restore_len = 0;
	add_cap("sgr0");
	add_cap("cnorm");
	add_cap("rmkx");
	add_cap("rmcup");
	set_handlers(on_signal);
	atexit(view_term_end);
	cbreak();
	noecho();
	nonl();
	keypad(stdscr, TRUE);
	{
		const char *smkx = tigetstr("smkx");
		keypad_len = smkx && smkx != (char *)-1 && strlen(smkx) < sizeof keypad_seq
		                 ? strlen(smkx)
		                 : 0;
		memcpy(keypad_seq, keypad_len ? smkx : "", keypad_len);
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_cont;
		sa.sa_flags = SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGCONT, &sa, NULL);
	}
	set_escdelay(25);
	curs_set(0);
	use_color = has_colors();
	if (use_color) {
		start_color();
		use_default_colors();
	}
	setup_styles();
	return 0;
}

void view_term_end(void)
{
	if (!active)
		return;
	active = 0;
	endwin();
	set_handlers(SIG_DFL);
	signal(SIGCONT, SIG_DFL);
}

void view_term_size(int *w, int *h)
{
	*w = COLS;
	*h = LINES;
}

static attr_t cell_attrs(const view_cell *c)
{
	attr_t a = style_attr[c->style < VIEW_S_COUNT ? c->style : 0];
	if (c->attr & VIEW_A_BOLD)
		a |= A_BOLD;
	if (c->attr & VIEW_A_REVERSE)
		a ^= A_REVERSE;
	if (c->attr & VIEW_A_UNDERLINE)
		a |= A_UNDERLINE;
	return a;
}

void view_term_draw(const view_screen *s)
{
	int h = s->h < LINES ? s->h : LINES, w = s->w < COLS ? s->w : COLS;
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			const view_cell *c = &s->cells[y * s->w + x];
			attr_t a = cell_attrs(c);
			short pair = style_pair[c->style < VIEW_S_COUNT ? c->style : 0];
			if (use_utf8) {
				if (c->ch == 0)
					continue; /* covered by the wide character on its left */
				wchar_t wc[2] = {(wchar_t)c->ch, 0};
				cchar_t cc;
				setcchar(&cc, wc, a, pair, NULL);
				mvadd_wch(y, x, &cc);
			} else {
				char g = c->ch == 0 ? '?' : view_glyph_ascii(c->ch);
				mvaddch(y, x, (chtype)(unsigned char)g | a | COLOR_PAIR(pair));
			}
		}
	refresh();
}

int view_term_key(void)
{
	static int errors;
	/* the bytes of a character get_wch gave whole, handed out one a call as the headless
	 * keys are (the prompts and filters take UTF-8 bytes) */
	static char pend[4];
	static int npend, ipend;
	if (ipend < npend)
		return (unsigned char)pend[ipend++];
	wint_t ch;
	int r = get_wch(&ch);
	if (r == ERR)
		return ++errors > 100 ? -1 : 0;
	errors = 0;
	if (r == KEY_CODE_YES) {
		switch (ch) {
		case KEY_UP: return VIEW_KEY_UP;
		case KEY_DOWN: return VIEW_KEY_DOWN;
		case KEY_LEFT: return VIEW_KEY_LEFT;
		case KEY_RIGHT: return VIEW_KEY_RIGHT;
		case KEY_PPAGE: return VIEW_KEY_PGUP;
		case KEY_NPAGE: return VIEW_KEY_PGDN;
		case KEY_HOME: return VIEW_KEY_HOME;
		case KEY_END: return VIEW_KEY_END;
		case KEY_ENTER: return VIEW_KEY_ENTER;
		case KEY_BACKSPACE: return VIEW_KEY_BACKSPACE;
		case KEY_BTAB: return VIEW_KEY_BTAB;
		case KEY_RESIZE: return VIEW_KEY_RESIZE;
		case KEY_F(1): return VIEW_KEY_F1;
		default: return 0;
		}
	}
	switch (ch) {
	case '\n':
	case '\r': return VIEW_KEY_ENTER;
	case 27: return VIEW_KEY_ESC;
	case 127:
	case 8: return VIEW_KEY_BACKSPACE;
	case '\t': return VIEW_KEY_TAB;
	default: break;
	}
	if (ch >= 0x20 && ch < 0x7F)
		return (int)ch;
	if (ch >= 0x80 && !keys_utf8) /* a byte of the locale's charset */
		return ch <= 0xFF ? (int)ch : 0;
	if (ch < 0xA0 || ch > 0x10FFFF || (ch >= 0xD800 && ch <= 0xDFFF))
		return 0; /* C1 controls, and no character */
	npend = (int)view_utf8_put((uint32_t)ch, pend); /* a character: its UTF-8 bytes */
	ipend = 1;
	return (unsigned char)pend[0];
}
