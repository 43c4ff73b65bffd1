/* notify.c - sd_notify(3) protocol, the few lines it takes. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

int notify_send(const char *state)
{
	return notify_send_fd(state, -1);
}

int notify_send_fd(const char *state, int sendfd)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct iovec iov = { (void *)state, strlen(state) };
	union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
	struct msghdr mh = { .msg_name = &sa, .msg_iov = &iov, .msg_iovlen = 1 };
	size_t plen;
	int fd, r = 0;

	if (!path || !*path)
		return 0;
	plen = strlen(path);
	mh.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
	if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, path, plen);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';      /* abstract namespace */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendfd >= 0) {
		struct cmsghdr *cm;
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &sendfd, sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0)
		r = -errno;
	close(fd);
	return r;
}

int notify_statusf(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	if (!getenv("NOTIFY_SOCKET"))
		return 0;
	n = snprintf(buf, sizeof(buf), "STATUS=");
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	return notify_send(buf);
}
