/* remote_jrnl.c - the record of this ckptd's unfinished uploads, under the
 * root: what a clean-up of the bucket may remove. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"
#include "layout.h"
#include "names.h"
#include "remote_jrnl.h"

#define JRNL_DIR ".remote-journal"

static int jfd = -1;

int rjrnl_open(int rootfd)
{
	struct stat st;
	int fd;

	if (mkdirat(rootfd, JRNL_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(rootfd, JRNL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		close(fd);
		return -EPERM;                  /* not the directory ckptd made */
	}
	if (jfd >= 0)
		close(jfd);
	jfd = fd;
	return 0;
}

void rjrnl_close(void)
{
	if (jfd >= 0)
		close(jfd);
	jfd = -1;
}

static int job_dir(const char *job, int create)
{
	int fd;

	if (jfd < 0)
		return -EBADF;
	if (name_check(job, NAME_MAX_JOB, NULL, 0) < 0)
		return -EINVAL;
	if (create && mkdirat(jfd, job, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(jfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int rjrnl_add(const char *job, uint64_t step, const char *mbuf, size_t mlen)
{
	char iter[32], tmp[48];
	int dfd = job_dir(job, 1), r;

	if (dfd < 0)
		return dfd;
	layout_iter_name(step, iter, sizeof(iter));
	snprintf(tmp, sizeof(tmp), "%s.tmp", iter);
	r = io_write_file(dfd, iter, tmp, mbuf, mlen, IO_FILE_REPLACE | IO_FILE_SYNC_DIR,
			  0600);
	close(dfd);
	return r;
}

int rjrnl_read(const char *job, uint64_t step, struct mfst **m, char *err,
	       size_t errlen)
{
	char iter[32], *buf;
	struct stat st;
	ssize_t n;
	int dfd = job_dir(job, 0), fd, r;

	if (dfd < 0)
		return dfd;
	layout_iter_name(step, iter, sizeof(iter));
	fd = openat(dfd, iter, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MFST_MAX_BYTES ||
	    !(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		snprintf(err, errlen, "not a journal record");
		return -EINVAL;
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (n != st.st_size) {
		free(buf);
		snprintf(err, errlen, "short read");
		return -EIO;
	}
	r = mfst_parse(buf, (size_t)n, m, err, errlen);
	free(buf);
	if (r == 0 && (*m)->step != step) {
		mfst_free(*m);
		*m = NULL;
		snprintf(err, errlen, "the record is of another step");
		return -EINVAL;
	}
	return r;
}

int rjrnl_del(const char *job, uint64_t step)
{
	char iter[32];
	int dfd = job_dir(job, 0), r = 0;

	if (dfd < 0)
		return dfd == -ENOENT ? 0 : dfd;
	layout_iter_name(step, iter, sizeof(iter));
	if (unlinkat(dfd, iter, 0) < 0 && errno != ENOENT)
		r = -errno;
	else
		fsync(dfd);
	close(dfd);
	/* the job's directory goes with its last record */
	if (r == 0 && unlinkat(jfd, job, AT_REMOVEDIR) < 0 && errno != ENOTEMPTY &&
	    errno != EEXIST && errno != ENOENT)
		r = -errno;
	return r;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Names in dirfd (a dup is read) that pass keep: into *out. */
static int list_dir(int dirfd, int (*keep)(const char *name, void *out, size_t n),
		    void *out)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0, r;
	struct dirent *e;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	while ((e = readdir(d)))
		if ((r = keep(e->d_name, out, (size_t)n)) < 0) {
			n = r;
			break;
		} else {
			n += r;
		}
	closedir(d);
	return n;
}

static int keep_step(const char *name, void *out, size_t n)
{
	uint64_t **v = out, step, *nv;

	if (layout_iter_parse(name, &step) < 0)
		return 0;
	if (!(nv = realloc(*v, (n + 1) * sizeof(*nv))))
		return -ENOMEM;
	nv[n] = step;
	*v = nv;
	return 1;
}

int rjrnl_steps(const char *job, uint64_t **steps)
{
	uint64_t *v = NULL;
	int dfd = job_dir(job, 0), n;

	if (dfd < 0)
		return dfd == -ENOENT ? (*steps = NULL, 0) : dfd;
	n = list_dir(dfd, keep_step, &v);
	close(dfd);
	if (n < 0) {
		free(v);
		return n;
	}
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	*steps = v;
	return n;
}

static int keep_job(const char *name, void *out, size_t n)
{
	char ***v = out, **nv;

	if (name_check(name, NAME_MAX_JOB, NULL, 0) < 0)
		return 0;
	if (!(nv = realloc(*v, (n + 1) * sizeof(*nv))))
		return -ENOMEM;
	*v = nv;
	return (nv[n] = strdup(name)) ? 1 : -ENOMEM;
}

int rjrnl_jobs(char ***jobs)
{
	char **v = NULL;
	int n;

	if (jfd < 0)
		return -EBADF;
	n = list_dir(jfd, keep_job, &v);
	if (n < 0) {
		free(v);
		return n;
	}
	*jobs = v;
	return n;
}
