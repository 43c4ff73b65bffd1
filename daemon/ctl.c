/* ctl.c - the operator's requests (ckptctl): STATUS, FLUSH, and LIST and
 * PRUNE, which run on the pool (cmd.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"
#include "coord.h"
#include "fail.h"
#include "flush.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "mfst.h"
#include "names.h"
#include "restore.h"
#include "session.h"
#include "status.h"
#include "srv.h"
#include "store.h"

int ctl_status(struct req *q)
{
	struct status st;
	json_t *o;

	if (status_take(q->s->srv, &st) < 0)
		return -ENOMEM;
	o = status_json(&st, q->s->uid);
	status_release(&st);
	if (!o)
		return -ENOMEM;
	cmd_reply_json(q, o);
	return 0;
}

int ctl_flush(struct req *q)
{
	uint64_t timeout = 600000;
	const char *job = cmd_get_str(q->j, "job");
	cmd_get_u64(q->j, "timeout_ms", &timeout);
	if (timeout > 86400000)
		timeout = 86400000;
	return flush_start(q->s->srv, q->s, q->req_id, job, (uint32_t)timeout);
}

/* The files LIST saw, each inode once: what the checkpoints take on disk
 * (incremental saves link a file into several). */
struct inodes {
	struct inode_seen { dev_t dev; ino_t ino; uint64_t size; } *v;
	size_t n, cap;
};

static void inode_add(struct inodes *s, int dirfd, const char *path)
{
	struct stat st;

	if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		void *v = realloc(s->v, cap * sizeof(*s->v));
		if (!v)
			return;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (struct inode_seen){ st.st_dev, st.st_ino, (uint64_t)st.st_size };
}

static int cmp_inode(const void *a, const void *b)
{
	const struct inode_seen *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static uint64_t inodes_bytes(struct inodes *s)
{
	uint64_t n = 0;

	qsort(s->v, s->n, sizeof(*s->v), cmp_inode);
	for (size_t i = 0; i < s->n; i++)
		if (i == 0 || cmp_inode(&s->v[i], &s->v[i - 1]))
			n += s->v[i].size;
	return n;
}

/* One job's checkpoints for LIST. */
static void list_job(const char *name, int jobfd, json_t *arr, struct inodes *seen)
{
	uint64_t *steps = NULL, latest = 0;
	int have_latest = layout_latest_read(jobfd, &latest) == 0;
	int n = layout_list_steps(jobfd, &steps);

	for (int i = 0; i < n; i++) {
		char iter[32], err[128];
		struct mfst *m = NULL;
		uint64_t bytes = 0;
		int fd;
		layout_iter_name(steps[i], iter, sizeof(iter));
		fd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || mfst_read(fd, &m, err, sizeof(err)) < 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		for (size_t k = 0; k < m->nfiles; k++) {
			bytes += m->files[k].size;
			inode_add(seen, fd, m->files[k].path);
		}
		close(fd);
		json_array_append_new(arr, json_pack("{sssIsbsIsIsIsI}", "job", name,
			"step", (json_int_t)steps[i], "latest", have_latest && latest == steps[i],
			"files", (json_int_t)m->nfiles, "bytes", (json_int_t)bytes,
			"bytes_written", (json_int_t)m->bytes_written,
			"created_unix", (json_int_t)m->created_unix));
		mfst_free(m);
	}
	free(steps);
}

/* LIST and PRUNE read (and remove) whole directory trees: on the pool. */
int ctl_list_check(struct req *q)
{
	const char *want = cmd_get_str(q->j, "job");
	char why[96];

	if (want && name_check(want, NAME_MAX_JOB, why, sizeof(why)) < 0)
		return cmd_fail(q, -EINVAL, "bad job name: %s", why);
	return 0;
}

int ctl_list_work(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *want = cmd_get_str(q->j, "job");
	json_t *arr = json_array();
	struct inodes seen = { 0 };
	struct dirent *e;
	DIR *d;
	int r;

	FAILPOINT("ctl.list");
	/* a dup shares the directory offset: start from the top */
	d = fdopendir(fcntl(S->rootfd, F_DUPFD_CLOEXEC, 3));
	if (d)
		rewinddir(d);
	while (d && (e = readdir(d))) {
		struct store_job_info info;
		int jobfd;
		if (name_check(e->d_name, NAME_MAX_JOB, NULL, 0) < 0 ||
		    (want && strcmp(want, e->d_name)))
			continue;
		char why[256];
		if (store_job_open(S->rootfd, e->d_name, q->s->uid, 0, &info, &jobfd, why,
				   sizeof(why)) < 0)
			continue;      /* another user's job, or not a job */
		list_job(e->d_name, jobfd, arr, &seen);
		close(jobfd);
	}
	if (d)
		closedir(d);
	r = cmd_set_reply(q, json_pack("{sosI}", "checkpoints", arr, "bytes_on_disk",
				       (json_int_t)inodes_bytes(&seen)));
	free(seen.v);
	return r;
}

int ctl_prune_check(struct req *q)
{
	const char *name = cmd_get_str(q->j, "job");
	char why[96];
	uint64_t keep;

	if (!name || name_check(name, NAME_MAX_JOB, why, sizeof(why)) < 0)
		return cmd_fail(q, -EINVAL, "bad job name: %s", name ? why : "missing");
	if (cmd_get_u64(q->j, "keep", &keep) < 0 || keep == 0)
		return cmd_fail(q, -EINVAL, "PRUNE needs \"keep\" >= 1");
	return 0;
}

int ctl_prune_work(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *name = cmd_get_str(q->j, "job");
	struct store_job_info info;
	char why[256];
	uint64_t keep = 0, *removed = NULL;
	json_t *arr;
	int jobfd, n;

	FAILPOINT("ctl.prune");
	cmd_get_u64(q->j, "keep", &keep);
	n = store_job_open(S->rootfd, name, q->s->uid, 0, &info, &jobfd, why, sizeof(why));
	if (n < 0)
		return cmd_fail(q, n, "%s", why);
	n = store_prune_held(jobfd, info.run_id, (unsigned)keep, commit_held, (void *)name,
			     &removed);
	close(jobfd);
	if (n < 0)
		return cmd_fail(q, n, "prune failed: %s", strerror(-n));
	restore_cache_clear();
	arr = json_array();
	for (int i = 0; i < n; i++) {
		/* as keep_last's prunes are: what went, and who asked */
		log_info("job %s: pruned iter_%09llu (ckptctl prune --keep %llu, uid %u)", name,
			 (unsigned long long)removed[i], (unsigned long long)keep,
			 (unsigned)q->s->uid);
		json_array_append_new(arr, json_integer((json_int_t)removed[i]));
	}
	free(removed);
	return cmd_set_reply(q, json_pack("{so}", "removed", arr));
}
