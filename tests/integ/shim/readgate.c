/* readgate.c - LD_PRELOAD shim for ckptd in t_restore_cancel: while
 * $READGATE_DIR/open does not exist, every read of a *.safetensors file
 * waits (creating $READGATE_DIR/waiting first), so a restore is held in
 * the middle for as long as a test needs, without timing.  Other files,
 * and everything once the gate is open, read normally. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static void gate(int fd)
{
	const char *dir = getenv("READGATE_DIR");
	char link[64], path[PATH_MAX], p[PATH_MAX];
	ssize_t n;
	int w;

	if (!dir)
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n < 12)
		return;
	path[n] = '\0';
	if (strcmp(path + n - 12, ".safetensors") != 0)
		return;
	snprintf(p, sizeof(p), "%s/open", dir);
	if (access(p, F_OK) == 0)
		return;
	snprintf(p, sizeof(p), "%s/waiting", dir);
	if ((w = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) >= 0)
		close(w);
	snprintf(p, sizeof(p), "%s/open", dir);
	while (access(p, F_OK) != 0)
		usleep(10000);
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	static ssize_t (*real)(int, void *, size_t, off_t);

	if (!real)
		real = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
	gate(fd);
	return real(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	return pread(fd, buf, len, off);
}

ssize_t read(int fd, void *buf, size_t len)
{
	static ssize_t (*real)(int, void *, size_t);

	if (!real)
		real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
	gate(fd);
	return real(fd, buf, len);
}
