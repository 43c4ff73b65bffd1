/* layout.c - names of things inside a job directory, the latest pointer
 * and the list of published steps. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"
#include "layout.h"
#include "names.h"

#define LAYOUT_MAX_STEP 999999999ull   /* nine digits */
#define LAYOUT_MAX_RANK 99999          /* five digits */
#define LATEST_TMP      LAYOUT_LATEST ".tmp"

/* snprintf into buf; -ENAMETOOLONG rather than a silently cut name. */
static int fmt(char *buf, size_t len, const char *f, ...)
	__attribute__((format(printf, 3, 4)));

static int fmt(char *buf, size_t len, const char *f, ...)
{
	va_list ap;
	int n;

	if (!buf)
		return -EINVAL;
	va_start(ap, f);
	n = vsnprintf(buf, len, f, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= len) {
		if (len)
			buf[0] = '\0';
		return -ENAMETOOLONG;
	}
	return 0;
}

int layout_iter_name(uint64_t step, char *buf, size_t len)
{
	if (step > LAYOUT_MAX_STEP)
		return -ERANGE;
	return fmt(buf, len, "iter_%09llu", (unsigned long long)step);
}

int layout_iter_parse(const char *name, uint64_t *step)
{
	uint64_t v = 0;

	if (!name || !step || strlen(name) != LAYOUT_ITER_LEN ||
	    strncmp(name, "iter_", 5) != 0)
		return -EINVAL;
	for (int i = 5; i < LAYOUT_ITER_LEN; i++) {
		if (name[i] < '0' || name[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	*step = v;
	return 0;
}

int layout_staging_name(uint64_t step, const char *txid, char *buf,
			size_t len)
{
	if (step > LAYOUT_MAX_STEP)
		return -ERANGE;
	/* txid becomes part of a directory name. */
	if (name_check(txid, 64, NULL, 0) < 0)
		return -EINVAL;
	return fmt(buf, len, ".iter_%09llu.staging-%s",
		   (unsigned long long)step, txid);
}

static int all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

int layout_is_unique_tmp(const char *name, const char *base)
{
	size_t n = strlen(name), b = strlen(base);

	return n == b + 1 + 32 + 4 && !strncmp(name, base, b) && name[b] == '.' &&
	       all_hex(name + b + 1, 32) && !strcmp(name + n - 4, ".tmp");
}

int layout_is_leftover(const char *name)
{
	uint64_t step;
	char iter[LAYOUT_ITER_LEN + 1];
	size_t n;

	if (!name)
		return 0;
	n = strlen(name);
	/* ".iter_NNNNNNNNN.staging-<txid (32 hex) or 'pruned'>" exactly */
	if (n > 1 + LAYOUT_ITER_LEN + 9 && name[0] == '.' &&
	    !strncmp(name + 1 + LAYOUT_ITER_LEN, ".staging-", 9)) {
		const char *tail = name + 1 + LAYOUT_ITER_LEN + 9;
		memcpy(iter, name + 1, LAYOUT_ITER_LEN);
		iter[LAYOUT_ITER_LEN] = '\0';
		return layout_iter_parse(iter, &step) == 0 &&
		       ((strlen(tail) == 32 && all_hex(tail, 32)) || !strcmp(tail, "pruned"));
	}
	if (!strcmp(name, LATEST_TMP) || !strcmp(name, LAYOUT_JOBFILE ".tmp"))
		return 1;
	return layout_is_unique_tmp(name, LAYOUT_JOBFILE);
}

int layout_shard_path(const char *group, int rank, int frozen, char *buf, size_t len)
{
	if (name_check(group, NAME_MAX_GROUP, NULL, 0) < 0 ||
	    rank < 0 || rank > LAYOUT_MAX_RANK)
		return -EINVAL;
	return fmt(buf, len, "%s/rank_%05d%s", group, rank,
		   frozen ? LAYOUT_FROZEN_SUFFIX : ".safetensors");
}

int layout_frozen_shard(const char *path)
{
	size_t n = strlen(path), k = strlen(LAYOUT_FROZEN_SUFFIX);

	return strncmp(path, LAYOUT_EXTRA "/", strlen(LAYOUT_EXTRA) + 1) != 0 && n > k &&
	       strcmp(path + n - k, LAYOUT_FROZEN_SUFFIX) == 0;
}

int layout_blob_path(const char *blob, int rank, char *buf, size_t len)
{
	if (name_check(blob, NAME_MAX_BLOB, NULL, 0) < 0 ||
	    rank < 0 || rank > LAYOUT_MAX_RANK)
		return -EINVAL;
	return fmt(buf, len, LAYOUT_EXTRA "/rank_%05d/%s", rank, blob);
}

int layout_rank_dir(int rank, char *buf, size_t len)
{
	if (rank < 0 || rank > LAYOUT_MAX_RANK)
		return -EINVAL;
	return fmt(buf, len, "rank_%05d", rank);
}

int layout_latest_read(int jobfd, uint64_t *step)
{
	char buf[LAYOUT_ITER_LEN + 2];
	size_t got = 0;
	ssize_t r;
	int fd, ret;

	if (!step)
		return -EINVAL;
	fd = openat(jobfd, LAYOUT_LATEST,
		    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	/* Read one byte more than a valid pointer holds, to catch junk. */
	while (got < sizeof(buf)) {
		r = read(fd, buf + got, sizeof(buf) - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			goto out_close;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	ret = -EINVAL;
	/* "iter_NNNNNNNNN\n"; a missing newline (hand-edited) is tolerated. */
	if (got == LAYOUT_ITER_LEN + 1 && buf[LAYOUT_ITER_LEN] == '\n')
		got--;
	if (got != LAYOUT_ITER_LEN)
		goto out_close;
	buf[LAYOUT_ITER_LEN] = '\0';
	ret = layout_iter_parse(buf, step);
out_close:
	close(fd);
	return ret;
}

int layout_latest_write(int jobfd, uint64_t step)
{
	char buf[LAYOUT_ITER_LEN + 2];
	size_t len;
	int ret;

	ret = layout_iter_name(step, buf, sizeof(buf));
	if (ret < 0)
		return ret;
	len = strlen(buf);
	buf[len++] = '\n';
	/* The temporary name is ours: whatever is there (a crash's leftover,
	 * a planted symlink, link or directory) goes, and io_write_file
	 * creates it afresh, so nothing outside the job is ever written
	 * through it.  Through the I/O table: fault injection reaches it. */
	return io_write_file(jobfd, LAYOUT_LATEST, LATEST_TMP, buf, len,
			     IO_FILE_REPLACE | IO_FILE_SYNC_DIR, 0644);
}

int layout_step_exists(int jobfd, uint64_t step)
{
	char iter[LAYOUT_ITER_LEN + 1];
	struct stat st;

	return layout_iter_name(step, iter, sizeof(iter)) == 0 &&
	       fstatat(jobfd, iter, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

int layout_is_dir(int dfd, const struct dirent *de)
{
	struct stat st;

	if (de->d_type != DT_UNKNOWN)
		return de->d_type == DT_DIR;
	return fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISDIR(st.st_mode);
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

int layout_list_steps(int jobfd, uint64_t **steps)
{
	uint64_t *v = NULL, *nv, step;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int fd, ret;

	if (!steps)
		return -EINVAL;
	/* fdopendir takes the fd; keep the caller's. */
	fd = openat(jobfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		ret = -errno;
		close(fd);
		return ret;
	}
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno) {
				ret = -errno;
				goto out_free;
			}
			break;
		}
		if (layout_iter_parse(de->d_name, &step) < 0)
			continue;
		/* Only real directories; a symlink named iter_* is not ours. */
		if (!layout_is_dir(jobfd, de))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				ret = -ENOMEM;
				goto out_free;
			}
			v = nv;
		}
		v[n++] = step;
	}
	if (n > INT32_MAX) {
		ret = -EOVERFLOW;
		goto out_free;
	}
	if (n)          /* qsort(NULL, 0) is still undefined */
		qsort(v, n, sizeof(*v), cmp_desc);
	closedir(d);
	*steps = v;
	return (int)n;
out_free:
	free(v);
	closedir(d);
	return ret;
}
