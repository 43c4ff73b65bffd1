/* failmalloc.c - LD_PRELOAD shim for the allocation-failure campaign
 * (tests/reliability/memory.sh).  Inert until armed, so ckptd starts
 * normally: SIGUSR2 reads a number N from the file $CKPT_FAIL_MALLOC_FILE and
 * arms the shim; the Nth malloc/calloc/realloc (strdup and every library's
 * allocations included) after that returns NULL (ENOMEM), once, and writes
 * "failmalloc: failed allocation #N" and a backtrace to stderr; then
 * everything succeeds again.  N = 0 disarms.  Build:
 *   cc -shared -fPIC -O1 -g -o failmalloc.so failmalloc.c */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static atomic_long fm_target;     /* 0: disarmed */
static atomic_long fm_count;
static atomic_int  fm_in;         /* backtrace() may allocate */

static void fm_arm(int sig)
{
	char buf[32] = { 0 };
	const char *p = getenv("CKPT_FAIL_MALLOC_FILE");
	int fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
	long n = 0;

	(void)sig;
	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf) - 1) > 0)
			for (char *c = buf; *c >= '0' && *c <= '9'; c++)
				n = n * 10 + (*c - '0');
		close(fd);
	}
	atomic_store(&fm_count, 0);
	atomic_store(&fm_target, n);
}

/* A crash after a failed allocation: say where, then die of the signal. */
static void fm_crash(int sig)
{
	void *bt[32];
	int n = backtrace(bt, 32);

	write(2, "failmalloc: crashed here:\n", 26);
	backtrace_symbols_fd(bt, n, 2);
	signal(sig, SIG_DFL);
	raise(sig);
}

__attribute__((constructor)) static void fm_init(void)
{
	void *bt[2];
	struct sigaction sa;

	signal(SIGSEGV, fm_crash);
	signal(SIGABRT, fm_crash);
	signal(SIGBUS, fm_crash);

	backtrace(bt, 2);          /* loads libgcc_s now, not while failing */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fm_arm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR2, &sa, NULL);
}

static int fm_fail(void)
{
	long t = atomic_load_explicit(&fm_target, memory_order_relaxed);
	if (t <= 0 || atomic_load(&fm_in))
		return 0;
	if (atomic_fetch_add(&fm_count, 1) + 1 != t)
		return 0;
	atomic_store(&fm_target, 0);
	atomic_store(&fm_in, 1);
	{
		void *bt[24];
		char msg[64];
		int n = snprintf(msg, sizeof(msg), "failmalloc: failed allocation #%ld\n", t);
		write(2, msg, (size_t)n);
		n = backtrace(bt, 24);
		backtrace_symbols_fd(bt, n, 2);
		write(2, "failmalloc: end\n", 16);
	}
	atomic_store(&fm_in, 0);
	errno = ENOMEM;
	return 1;
}

void *malloc(size_t n)            { return fm_fail() ? NULL : __libc_malloc(n); }
void *calloc(size_t a, size_t b)  { return fm_fail() ? NULL : __libc_calloc(a, b); }
void *realloc(void *p, size_t n)  { return fm_fail() ? NULL : __libc_realloc(p, n); }
