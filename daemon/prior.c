/* prior.c - a rank's newest committed step on disk, file by file, for its
 * next save to link what did not change.  See prior.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csum.h"
#include "io.h"
#include "memt.h"
#include "mfst.h"
#include "plan.h"
#include "prior.h"
#include "rsave.h"

/* A copy of the ranges of a file of size bytes, or NULL. */
static struct file_range *ranges_dup(const struct file_range *r, uint64_t size)
{
	size_t n = (size_t)csum_count(size, RANGE_HASH_BYTES);
	struct file_range *c = malloc((n ? n : 1) * sizeof(*c));

	if (c)
		memcpy(c, r, n * sizeof(*c));
	return c;
}

struct prior *prior_from_rsave(const struct rsave *rs, uint64_t step)
{
	struct prior *p;

	if (rs->memory_only || rs->nfiles == 0 || !(p = calloc(1, sizeof(*p))))
		return NULL;
	p->refs = 1;
	p->step = step;
	p->sess_id = rs->sess_id;
	p->reg_gen = rs->reg_gen;
	if (!(p->files = calloc(rs->nfiles, sizeof(*p->files))))
		goto nomem;
	for (size_t i = 0; i < rs->nfiles; i++) {
		const struct wfile *f = &rs->files[i];
		struct prior_file *pf = &p->files[p->nfiles++];
		size_t n = (size_t)csum_count(f->size, CSUM_CHUNK_BYTES);

		memcpy(pf->path, f->path, sizeof(pf->path));
		pf->size = f->size;
		pf->digest = f->digest;
		pf->dev = f->dev;
		pf->ino = f->ino;
		pf->mtime = f->mtime;
		pf->unchecked = f->unchecked;
		if (!(pf->crcs = malloc((n ? n : 1) * sizeof(*pf->crcs))))
			goto nomem;
		if (f->crcs)
			memcpy(pf->crcs, f->crcs, n * sizeof(*pf->crcs));
		if (f->ranges && !(pf->ranges = ranges_dup(f->ranges, f->size)))
			goto nomem;
	}
	return p;
nomem:
	prior_put(p);
	return NULL;
}

static int not_after(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

int prior_read_back(const struct prior_file *pf, int dirfd)
{
	struct csum_stream cs = { 0 };
	struct digest d;
	struct stat st;
	uint64_t size = 0;
	size_t n = (size_t)csum_count(pf->size, CSUM_CHUNK_BYTES);
	int fd = openat(dirfd, pf->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), ok;

	if (fd < 0)
		return 0;
	ok = fstat(fd, &st) == 0 && prior_same_inode(pf, &st) &&
	     csum_stream_init(&cs, CSUM_CHUNK_BYTES, pf->size) == 0 &&
	     digest_fd_csum(fd, pf->digest.alg, &d, &size, &cs) == 0 &&
	     size == pf->size && digest_eq(&d, &pf->digest) &&
	     memcmp(cs.crcs, pf->crcs, n * sizeof(*cs.crcs)) == 0;
	csum_stream_release(&cs);
	close(fd);
	return ok;
}

/* pf from the manifest's mf and the file as it is in dirfd: a regular file
 * of the recorded size, not modified since the manifest was written.  Its
 * bytes are read back when a save would link it (prior_read_back): ckptd
 * has no record of its inode from before a restart.  0 if usable. */
static int load_file(struct prior_file *pf, const struct mfst_file *mf, int dirfd,
		     const struct stat *mst)
{
	size_t n = (size_t)csum_count(mf->size, CSUM_CHUNK_BYTES);
	struct stat st;
	int fd;

	if (mf->chunk_size != CSUM_CHUNK_BYTES || !mf->crc32c ||
	    (fd = openat(dirfd, mf->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return -1;
	/* blocks cloned by saves before the restart: in 2 checkpoints at
	 * least (how many, only the ckptd that cloned them knew) */
	pf->disk_copies = io_shares_blocks(fd) ? 2 : 1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != mf->size || !not_after(&st.st_mtim, &mst->st_mtim) ||
	    !(pf->crcs = malloc((n ? n : 1) * sizeof(*pf->crcs)))) {
		close(fd);
		return -1;
	}
	close(fd);
	memcpy(pf->crcs, mf->crc32c, n * sizeof(*pf->crcs));
	snprintf(pf->path, sizeof(pf->path), "%s", mf->path);
	pf->size = mf->size;
	pf->digest = mf->digest;
	pf->dev = st.st_dev;
	pf->ino = st.st_ino;
	pf->mtime = st.st_mtim;
	return 0;
}

struct prior *prior_load(int jobfd, char *const *paths, size_t n)
{
	struct prior *p = NULL;
	struct mfst *m = NULL;
	struct stat mst;
	uint64_t step;
	char name[32], err[128];
	int dfd = -1;

	if (layout_latest_read(jobfd, &step) < 0 ||
	    layout_iter_name(step, name, sizeof(name)) < 0 ||
	    (dfd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fstatat(dfd, MFST_NAME, &mst, AT_SYMLINK_NOFOLLOW) < 0 ||
	    mfst_read(dfd, &m, err, sizeof(err)) < 0 || m->step != step ||
	    !(p = calloc(1, sizeof(*p))) || !(p->files = calloc(n + 1, sizeof(*p->files))))
		goto out;
	p->refs = 1;
	p->step = step;
	p->from_disk = 1;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < m->nfiles; k++)
			if (strcmp(m->files[k].path, paths[i]) == 0) {
				if (load_file(&p->files[p->nfiles], &m->files[k], dfd, &mst) == 0)
					p->nfiles++;
				break;
			}
out:
	if (p && !p->nfiles) {
		prior_put(p);
		p = NULL;
	}
	mfst_free(m);
	if (dfd >= 0)
		close(dfd);
	return p;
}

struct prior *prior_get(struct prior *p)
{
	if (p)
		p->refs++;
	return p;
}

void prior_put(struct prior *p)
{
	if (!p || --p->refs > 0)
		return;
	for (size_t i = 0; i < p->nfiles; i++) {
		free(p->files[i].crcs);
		free(p->files[i].ranges);
	}
	free(p->files);
	free(p);
}

const struct prior_file *prior_find(const struct prior *p, size_t hint,
				    const char *path)
{
	if (!p)
		return NULL;
	if (hint < p->nfiles && strcmp(p->files[hint].path, path) == 0)
		return &p->files[hint];
	for (size_t i = 0; i < p->nfiles; i++)
		if (strcmp(p->files[i].path, path) == 0)
			return &p->files[i];
	return NULL;
}

/* The inode's names count the links, also of saves that overlap, and
 * pruning takes them away; clones leave no name, so they are counted
 * along the saves (ranges), or guessed after a restart (disk_copies), and
 * the saves cloning now claim the file (sharers). */
unsigned prior_copies(const struct prior_file *pf, nlink_t names, uint64_t i)
{
	unsigned chain = pf->ranges ? pf->ranges[i].shared + 1 :
			 pf->disk_copies ? pf->disk_copies : 1;

	return (names > chain ? (unsigned)names : chain) +
	       atomic_load((atomic_uint *)&pf->sharers);
}

/* (sharers is the one part of a prior that changes once it is built) */
void prior_claim(const struct prior_file *pf)
{
	atomic_fetch_add((atomic_uint *)&pf->sharers, 1);
}

void prior_unclaim(const struct prior_file *pf)
{
	atomic_fetch_sub((atomic_uint *)&pf->sharers, 1);
}

/* The most checkpoints any block of pf's file is in (prior_copies). */
static unsigned most_copies(const struct prior_file *pf, nlink_t names)
{
	uint64_t n = pf->ranges ? csum_count(pf->size, RANGE_HASH_BYTES) : 1;
	unsigned most = 0;

	for (uint64_t i = 0; i < n; i++) {
		unsigned c = prior_copies(pf, names, i);
		most = c > most ? c : most;
	}
	return most;
}

int prior_may_share(const struct prior_file *pf, int dirfd, unsigned max_shared)
{
	struct stat st;

	return !max_shared || (fstatat(dirfd, pf->path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			       most_copies(pf, st.st_nlink) < max_shared);
}

void prior_note_inode(struct wfile *f, const struct stat *st)
{
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->mtime = st->st_mtim;
}

int prior_link(const struct prior_file *pf, const struct rsave *rs, struct wfile *f)
{
	struct stat st;
	int r = io_link(rs->prior_dirfd, f->path, rs->staging_fd, f->path);

	if (r < 0)
		return r;
	if (fstatat(rs->staging_fd, f->path, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !prior_same_inode(pf, &st))
		r = -ESTALE;
	else if (rs->max_shared && most_copies(pf, st.st_nlink) > rs->max_shared)
		r = -ETOOMANYREFS;       /* another save linked or cloned it meanwhile */
	if (r < 0) {
		(void)unlinkat(rs->staging_fd, f->path, 0);      /* ours */
		return r;
	}
	f->linked = 1;
	prior_note_inode(f, &st);
	prior_share_ranges(f, pf, 0, f->size, st.st_nlink - 1, 0);
	return 0;
}

uint64_t prior_prelink(struct rsave *rs, struct memt *tier)
{
	uint64_t bytes = 0;

	/* Only while the trainer's registrations are the ones saved then: a
	 * tensor renamed, recast or reshaped to the same byte size, or put in
	 * a new buffer, makes another header (or other bytes) in a file of
	 * the same size, which a link would not have. */
	if (!rs->prior || rs->prior->from_disk || rs->prior->sess_id != rs->sess_id ||
	    rs->prior->reg_gen != rs->reg_gen)
		return 0;
	for (size_t i = 0; !rs->memory_only && i < rs->nfiles; i++) {
		struct wfile *f = &rs->files[i];
		const struct prior_file *pf = prior_find(rs->prior, i, f->path);
		size_t n = (size_t)csum_count(f->size, CSUM_CHUNK_BYTES);

		if (!layout_frozen_shard(f->path) || !pf || pf->size != f->size ||
		    f->size < rs->link_min || pf->digest.alg != rs->digest_alg ||
		    pf->unchecked + 1 >= PRIOR_FROZEN_CHECK ||
		    !prior_may_share(pf, rs->prior_dirfd, rs->max_shared) ||
		    !memt_can_share(tier, rs->job, f->path, f->size, &pf->digest,
				    rs->chunk_bytes) ||
		    !(f->crcs = malloc((n ? n : 1) * sizeof(*f->crcs))))
			continue;
		/* its ranges (prior_link fills them), else it is not cloned
		 * from next time */
		if (pf->ranges)
			f->ranges = calloc(csum_count(f->size, RANGE_HASH_BYTES), sizeof(*f->ranges));
		if (prior_link(pf, rs, f) < 0) {
			free(f->crcs);
			free(f->ranges);
			f->crcs = NULL;
			f->ranges = NULL;
			continue;
		}
		plan_drop_chunks(rs, i);
		memcpy(f->crcs, pf->crcs, n * sizeof(*f->crcs));
		f->digest = pf->digest;
		f->unchecked = pf->unchecked + 1;
		bytes += f->size;
	}
	return bytes;
}

void prior_share_ranges(struct wfile *f, const struct prior_file *pf, uint64_t off,
			uint64_t end, nlink_t names, int claimed)
{
	if (!f->ranges)
		return;
	for (uint64_t i = off / RANGE_HASH_BYTES; i < csum_count(end, RANGE_HASH_BYTES); i++) {
		if (pf->ranges)
			f->ranges[i].hash = pf->ranges[i].hash;
		f->ranges[i].shared = prior_copies(pf, names, i) - (claimed ? 1 : 0);
	}
}

void prior_shared_bytes(const struct rsave *rs, uint64_t *linked, uint64_t *cloned)
{
	*linked = *cloned = 0;
	for (size_t i = 0; i < rs->nfiles; i++) {
		if (rs->files[i].linked)
			*linked += rs->files[i].size;
		*cloned += rs->files[i].cloned;
	}
}

int prior_same_inode(const struct prior_file *pf, const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_dev == pf->dev && st->st_ino == pf->ino &&
	       (uint64_t)st->st_size == pf->size &&
	       st->st_mtim.tv_sec == pf->mtime.tv_sec &&
	       st->st_mtim.tv_nsec == pf->mtime.tv_nsec;
}
