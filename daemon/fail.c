/* fail.c - see fail.h. */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fail.h"

int fail_armed;
static char fail_name[128];
static long fail_nth = 1;
static atomic_long fail_count;

void fail_setup(void)
{
	const char *s = getenv("CKPT_FAILPOINT");
	const char *colon;
	if (!s || !*s || strlen(s) >= sizeof(fail_name))
		return;
	colon = strchr(s, ':');
	memcpy(fail_name, s, colon ? (size_t)(colon - s) : strlen(s));
	if (colon)
		fail_nth = atol(colon + 1) > 0 ? atol(colon + 1) : 1;
	fail_armed = 1;
}

void fail_point(const char *name)
{
	if (strcmp(name, fail_name) == 0 && atomic_fetch_add(&fail_count, 1) + 1 == fail_nth)
		kill(getpid(), SIGKILL);
}
