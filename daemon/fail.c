/* fail.c - failpoints for crash tests: kill or hold the thread that reaches
 * the point $CKPT_FAILPOINT names.  See fail.h. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
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

/* Says it got here (FIFO.held appears), then blocks until the test opens
 * the FIFO for writing and closes it again. */
static void fail_hold(const char *fifo)
{
	char buf[64], held[4096];
	int fd;

	snprintf(held, sizeof(held), "%s.held", fifo);
	if ((fd = open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) >= 0)
		close(fd);
	if ((fd = open(fifo, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

void fail_point(const char *name)
{
	const char *hold;

	if (strcmp(name, fail_name) != 0 || atomic_fetch_add(&fail_count, 1) + 1 != fail_nth)
		return;
	hold = getenv("CKPT_FAILPOINT_HOLD");
	if (hold && *hold)
		fail_hold(hold);
	else
		kill(getpid(), SIGKILL);
}
