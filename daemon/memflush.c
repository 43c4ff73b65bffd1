/* memflush.c - memory-level steps to the shared root as a world ends
 * (memflush.h; store.c's recovery publishes them). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord.h"
#include "io.h"
#include "layout.h"
#include "log.h"
#include "mcat.h"
#include "memflush.h"
#include "memt.h"
#include "srv.h"
#include "store.h"

struct flush {                    /* one step's files, written */
	int         stagingfd;
	unsigned    files;
	uint64_t    bytes;
	char        msg[300];
};

/* memt_file_fn: one held file into the staging directory, under a temp
 * name of this node's (another survivor may write the same file: the
 * same bytes, renamed over each other). */
static int flush_file(void *arg, const char *path, const uint8_t *data, uint64_t size,
		      const struct digest *d)
{
	struct flush *f = arg;
	char tmp[LAYOUT_PATH_MAX + 32];
	const char *slash = strrchr(path, '/');
	int r = 0;

	(void)d;            /* recovery checks it */
	if (slash) {
		char dir[LAYOUT_PATH_MAX];
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
		r = store_mkdirs(f->stagingfd, dir);
	}
	snprintf(tmp, sizeof(tmp), "%s.flush-%d.tmp", path, coord_rank());
	if (r == 0)
		r = io_write_file(f->stagingfd, path, tmp, data, size, IO_FILE_REPLACE, 0640);
	if (r < 0) {
		snprintf(f->msg, sizeof(f->msg), "write %s: %s", path, strerror(-r));
		return r;
	}
	f->files++;
	f->bytes += size;
	return 0;
}

/* mcat_each_memory: one job's memory-level step, when newer than disk. */
static void flush_step(void *arg, const char *job, const struct mcat_step *s)
{
	struct srv *S = arg;
	struct flush f = { .stagingfd = -1 };
	struct memt_step *ms;
	char why[300], name[96], tmp[64];
	uint64_t latest = 0;
	int jobfd, r;

	jobfd = openat(S->rootfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (jobfd < 0)
		return;
	if (layout_latest_read(jobfd, &latest) == 0 && latest >= s->step) {
		close(jobfd);
		return;
	}
	if (!(ms = memt_get(S->memt, job, s->step, s->txid, why, sizeof(why)))) {
		log_warnx("job %s: memory-level step %llu: nothing of it here to write (%s)",
			  job, (unsigned long long)s->step, why);
		close(jobfd);
		return;
	}
	r = store_staging_join(jobfd, s->step, s->txid, &f.stagingfd, name, sizeof(name));
	if (r < 0)
		snprintf(f.msg, sizeof(f.msg), "cannot open its staging directory: %s",
			 strerror(-r));
	if (r == 0)
		r = memt_each_file(ms, flush_file, &f);
	snprintf(tmp, sizeof(tmp), LAYOUT_MEMORY_MANIFEST ".%d.tmp", coord_rank());
	if (r == 0 && (r = io_write_file(f.stagingfd, LAYOUT_MEMORY_MANIFEST, tmp, s->manifest,
					 strlen(s->manifest), IO_FILE_REPLACE |
					 IO_FILE_SYNC_DIR, 0640)) < 0)
		snprintf(f.msg, sizeof(f.msg), "write the manifest: %s", strerror(-r));
	memt_put(ms);
	if (r < 0)
		log_warnx("job %s: memory-level step %llu: cannot write it to the disk: %s",
			  job, (unsigned long long)s->step, f.msg);
	else
		log_info("job %s: memory-level step %llu: wrote %u files (%llu bytes) held "
			 "here to %s for the next world's recovery", job,
			 (unsigned long long)s->step, f.files, (unsigned long long)f.bytes, name);
	if (f.stagingfd >= 0)
		close(f.stagingfd);
	close(jobfd);
}

void memflush_all(struct srv *S)
{
	if (coord_active() && S->memt)
		mcat_each_memory(flush_step, S);
}
