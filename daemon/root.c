/* root.c - the checkpoint root is ckptd's own: dedicated check, marker,
 * lifetime lock.  See root.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout.h"
#include "names.h"
#include "perm.h"
#include "root.h"
#include "store.h"

#define MARKER_TEXT "ckpt root\n"

static int lock_fd = -1, lock_dir_fd = -1;

/* A directory of an older ckptd: it carries job.json (a regular file),
 * and both are ckptd's (store_job_dir_is_ours). */
static int is_job_dir(int rootfd, const char *name)
{
	struct stat st;
	char why[160];
	int fd, r;

	if (name_check(name, NAME_MAX_JOB, NULL, 0) < 0)
		return 0;
	fd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	r = fstatat(fd, LAYOUT_JOBFILE, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	    store_job_dir_is_ours(fd, why, sizeof(why));
	close(fd);
	return r;
}

/* The marker as ckptd writes it (an empty or torn one is not). */
static int marker_check(int rootfd, const char *path, char *err, size_t errlen)
{
	char buf[sizeof(MARKER_TEXT) + 1];
	struct stat st;
	ssize_t n = -1;
	int fd = openat(rootfd, ROOT_MARKER, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		n = read(fd, buf, sizeof(buf));
	if (fd >= 0)
		close(fd);
	if (n == (ssize_t)strlen(MARKER_TEXT) && !memcmp(buf, MARKER_TEXT, (size_t)n))
		return 0;
	snprintf(err, errlen, "'%s/%s' is not ckptd's marker (%s): if '%s' is ckptd's root, "
		 "remove the marker and start again", path, ROOT_MARKER,
		 n < 0 ? "not a readable regular file" : n == 0 ? "empty" : "other contents",
		 path);
	return -EINVAL;
}

/* Is the open directory ours to use?  0 or -errno with err. */
static int check_dedicated(int rootfd, const char *path, char *err, size_t errlen)
{
	struct dirent *e;
	struct stat st;
	char why[160];
	DIR *d;
	int fd, r = 0;

	/* whoever else may write into the root could plant job directories
	 * and read what ckptd writes into them */
	if (fstat(rootfd, &st) < 0 || !perm_is_ours(&st)) {
		perm_why_not_ours(&st, why, sizeof(why));
		snprintf(err, errlen, "root '%s' is %s: it must be ckptd's own (owned by "
			 "ckptd's user, writable by nobody else)", path, why);
		return -EPERM;
	}
	if (fstatat(rootfd, ROOT_MARKER, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return marker_check(rootfd, path, err, errlen);
	if ((fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    !(d = fdopendir(fd))) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		snprintf(err, errlen, "cannot read root '%s': %s", path, strerror(-r));
		return r;
	}
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		/* a fresh file system's lost+found, our own lock from a start
		 * that ended before the marker, a marker being written by
		 * another node (or a crash's leftover of one), an older
		 * ckptd's jobs */
		if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "lost+found") ||
		    !strcmp(n, ROOT_LOCK) || !strcmp(n, ROOT_MARKER) ||
		    layout_is_unique_tmp(n, ROOT_MARKER) || is_job_dir(rootfd, n))
			continue;
		/* the nodes of a cluster start together on a shared root:
		 * another may have marked it meanwhile */
		if (fstatat(rootfd, ROOT_MARKER, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			r = marker_check(rootfd, path, err, errlen);
			break;
		}
		snprintf(err, errlen, "root '%s' is not empty and not a ckpt root (it holds "
			 "'%.64s' and no %s marker): give ckptd a new or empty directory "
			 "of its own", path, n, ROOT_MARKER);
		r = -ENOTEMPTY;
		break;
	}
	closedir(d);
	return r;
}

/* A root inside another ckptd's root would be that daemon's job
 * directory or be recovered by it: refused when a directory above path
 * carries the marker. */
static int check_not_nested(const char *path, char *err, size_t errlen)
{
	char up[4096], marker[4096 + sizeof(ROOT_MARKER)];
	struct stat st;
	size_t n = strlen(path);

	if (n >= sizeof(up)) {
		snprintf(err, errlen, "root path too long");
		return -ENAMETOOLONG;
	}
	memcpy(up, path, n + 1);
	for (;;) {
		while (n > 1 && up[n - 1] == '/')      /* "/a/b/" is "/a/b" */
			up[--n] = '\0';
		while (n > 0 && up[n - 1] != '/')      /* up one: "/a/" */
			up[--n] = '\0';
		if (n == 0)
			return 0;
		snprintf(marker, sizeof(marker), "%s%s", up, ROOT_MARKER);
		if (lstat(marker, &st) == 0) {
			if (n > 1)
				up[n - 1] = '\0';
			snprintf(err, errlen, "root '%s' is inside the ckpt root '%s' (it has the "
				 "%s marker): give each ckptd a root outside any other", path, up,
				 ROOT_MARKER);
			return -EINVAL;
		}
		if (n == 1)
			return 0;
	}
}

int root_check(const char *path, char *err, size_t errlen)
{
	struct stat st;
	int fd, r;

	if (!path || path[0] != '/') {
		snprintf(err, errlen, "root must be an absolute path");
		return -EINVAL;
	}
	if ((r = check_not_nested(path, err, errlen)) < 0)
		return r;
	if (stat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;      /* created at start-up */
		r = -errno;
		snprintf(err, errlen, "root '%s': %s", path, strerror(errno));
		return r;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "root '%s' is not a directory", path);
		return -ENOTDIR;
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open root '%s': %s", path, strerror(errno));
		return r;
	}
	r = check_dedicated(fd, path, err, errlen);
	close(fd);
	return r;
}

int root_lock(int rootfd, const char *path, char *err, size_t errlen)
{
	char who[160], host[64] = "?";
	ssize_t n;
	int fd, dir_fd, r;

	if (lock_fd >= 0)
		return 0;
	fd = openat(rootfd, ROOT_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open the lock file '%s/%s': %s", path, ROOT_LOCK,
			 strerror(errno));
		return r;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		n = pread(fd, who, sizeof(who) - 1, 0);
		who[n > 0 ? n : 0] = '\0';
		who[strcspn(who, "\n")] = '\0';
		if (r == -EBUSY)
			snprintf(err, errlen, "root '%s' is in use by another ckptd (%s): one "
				 "daemon (or cluster) per root", path, who[0] ? who : "holder unknown");
		else
			snprintf(err, errlen, "cannot lock '%s/%s': %s", path, ROOT_LOCK,
				 strerror(-r));
		close(fd);
		return r;
	}
	/* The root directory itself too, where the file system allows it
	 * (not NFS): a lock file removed by hand does not let a second
	 * daemon in.  This fd stays open with the lock file's. */
	dir_fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir_fd >= 0 && flock(dir_fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK) {
			snprintf(err, errlen, "root '%s' is in use by another ckptd (its lock "
				 "file %s was replaced): one daemon per root", path, ROOT_LOCK);
			close(dir_fd);
			close(fd);
			return -EBUSY;
		}
		close(dir_fd);          /* no directory locks here: the file's will do */
		dir_fd = -1;
	}
	lock_dir_fd = dir_fd;
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	n = snprintf(who, sizeof(who), "pid %d on %s\n", (int)getpid(), host);
	/* only informative: a failure here does not weaken the lock */
	if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)n, 0) < 0)
		(void)0;
	lock_fd = fd;
	return 0;
}

void root_unlock(void)
{
	if (lock_fd >= 0)
		close(lock_fd);
	if (lock_dir_fd >= 0)
		close(lock_dir_fd);
	lock_fd = lock_dir_fd = -1;
}

/* Through the I/O table, whole or not at all: the nodes of a cluster mark
 * a shared root at once, each under a temp name of its own, and the first
 * rename wins (-EEXIST: another node's marker, if it is one). */
static int write_marker(int rootfd, const char *path, char *err, size_t errlen)
{
	struct stat st;
	int r;

	/* marked already: checked, no write at each start */
	if (fstatat(rootfd, ROOT_MARKER, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return marker_check(rootfd, path, err, errlen);
	r = store_create_exclusive(rootfd, ROOT_MARKER, MARKER_TEXT, strlen(MARKER_TEXT), 0644);
	if (r == -EEXIST)
		return marker_check(rootfd, path, err, errlen);
	if (r < 0)
		snprintf(err, errlen, "cannot write the marker '%s/%s': %s", path, ROOT_MARKER,
			 strerror(-r));
	return r;
}

int root_open(const char *path, int lock, int *rootfd, char *err, size_t errlen)
{
	char p[4096];
	int fd, r, created = 0;

	if ((r = root_check(path, err, errlen)) < 0)
		return r;
	if (strlen(path) >= sizeof(p)) {
		snprintf(err, errlen, "root path too long");
		return -ENAMETOOLONG;
	}
	/* mkdir -p, so a fresh machine needs no set-up */
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			goto fail_mkdir;
		*s = '/';
	}
	if (mkdir(p, ROOT_MODE) == 0)
		created = 1;
	else if (errno != EEXIST)
		goto fail_mkdir;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open root '%s': %s", path, strerror(errno));
		return r;
	}
	if (created)
		(void)fchmod(fd, ROOT_MODE);   /* the umask narrowed it */
	/* checked again on the open directory: it may have changed */
	if ((r = check_dedicated(fd, path, err, errlen)) < 0 ||
	    (lock && (r = root_lock(fd, path, err, errlen)) < 0) ||
	    (r = write_marker(fd, path, err, errlen)) < 0) {
		close(fd);
		return r;
	}
	*rootfd = fd;
	return 0;
fail_mkdir:
	r = -errno;
	snprintf(err, errlen, "cannot create root '%s': %s", p, strerror(errno));
	return r;
}
