/* fdcount.h - the number of open descriptors of this process (entries of
 * /proc/self/fd, including the one opendir holds), for tests that check
 * nothing leaks: compare two counts, never a count with a constant. */
#ifndef CKPT_TESTS_FDCOUNT_H
#define CKPT_TESTS_FDCOUNT_H

#include <dirent.h>

static inline int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

#endif
