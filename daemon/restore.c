/* restore.c - see restore.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "io.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "mfst.h"
#include "restore.h"
#include "session.h"
#include "verify.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PIECE_BYTES (8u << 20)   /* as the write chunks; with READ_DEPTH in flight */
#define READ_DEPTH  8             /* buffered reads: deep enough for the disk */

/* --- verification verdicts, shared by the ranks of a job ---------------- */

/* What a verdict was computed from: every entry of the checkpoint tree
 * (count, and the newest ctime, which any write, truncation, rename or
 * removal inside it moves and nobody can set back).  A file changed after
 * its checkpoint was verified makes the verdict stale. */
struct tree_stamp {
	unsigned long   n;
	struct timespec ctime;
};

static void stamp_add(struct tree_stamp *t, const struct stat *st)
{
	t->n++;
	if (st->st_ctim.tv_sec > t->ctime.tv_sec ||
	    (st->st_ctim.tv_sec == t->ctime.tv_sec && st->st_ctim.tv_nsec > t->ctime.tv_nsec))
		t->ctime = st->st_ctim;
}

static void tree_stamp(int dirfd, int depth, struct tree_stamp *t)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *e;
	struct stat st;
	DIR *d;

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0)
		stamp_add(t, &st);
	if (!(d = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < 4) {
			int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY |
					 O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				tree_stamp(sub, depth + 1, t);
				close(sub);
			}
		} else {
			stamp_add(t, &st);
		}
	}
	closedir(d);
}

/* Verification is shared by the ranks of a job and done in the same pass
 * as the restore: a rank reading its own shards into the trainer hashes
 * them anyway, so those files are verified by that read; whatever file no
 * rank claims (another rank's, a blob) is hashed by whichever rank is free.
 * Each file is read from disk once.  All ranks wait for the whole verdict,
 * so all pick the same step; a rank whose step then fails verification
 * restores an older one over the bytes it read. */
enum { VF_TODO = 0, VF_BUSY, VF_OK, VF_BAD };

struct verdict {
	char     job[65];
	uint64_t step;
	dev_t    dev;
	ino_t    ino;
	struct timespec mtime;
	struct tree_stamp tree;
	int      state;      /* 0 free, 1 verifying, 2 done */
	int      users;      /* threads on it while verifying */
	size_t   nfiles;
	uint8_t *fst;        /* VF_* per file while verifying */
	size_t   bad;        /* lowest failed file, reported (stable) */
	int      r;
	char     why[256];
};

static struct verdict verdicts[64];
static unsigned verdict_next;
static pthread_mutex_t verdict_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t verdict_cond = PTHREAD_COND_INITIALIZER;

void restore_cache_clear(void)
{
	pthread_mutex_lock(&verdict_lock);
	for (unsigned i = 0; i < 64; i++)
		if (verdicts[i].state == 2) {
			verdicts[i].state = 0;
			free(verdicts[i].fst);
			verdicts[i].fst = NULL;
		}
	pthread_mutex_unlock(&verdict_lock);
}

/* Find the verdict of one checkpoint (job, step, manifest identity and
 * tree stamp).  Done: returns NULL with *r and why set.  Being verified, or
 * new: returns it joined (verdict_leave when finished).  NULL with *r < 0
 * when it cannot be tracked (then *r is a full verification's result). */
static struct verdict *verdict_join(const char *job, uint64_t step, int iterfd,
				    size_t nfiles, unsigned threads, int *r,
				    char *why, size_t whylen)
{
	struct stat st;
	struct verdict *v = NULL;
	struct tree_stamp ts = { 0 };

	if (fstatat(iterfd, MFST_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		*r = -errno;
		snprintf(why, whylen, "%s: %s", MFST_NAME, strerror(errno));
		return NULL;
	}
	tree_stamp(iterfd, 0, &ts);
	pthread_mutex_lock(&verdict_lock);
	for (unsigned i = 0; i < 64 && !v; i++) {
		struct verdict *c = &verdicts[i];
		if (c->state && c->step == step && !strcmp(c->job, job) &&
		    c->dev == st.st_dev && c->ino == st.st_ino &&
		    c->mtime.tv_sec == st.st_mtim.tv_sec &&
		    c->mtime.tv_nsec == st.st_mtim.tv_nsec &&
		    c->tree.n == ts.n && c->tree.ctime.tv_sec == ts.ctime.tv_sec &&
		    c->tree.ctime.tv_nsec == ts.ctime.tv_nsec && c->nfiles == nfiles)
			v = c;
	}
	if (v && v->state == 2) {
		*r = v->r;
		snprintf(why, whylen, "%s", v->why);
		pthread_mutex_unlock(&verdict_lock);
		return NULL;
	}
	if (v) {
		v->users++;
		pthread_mutex_unlock(&verdict_lock);
		return v;
	}
	/* claim a slot (never one still being verified) */
	for (unsigned n = 0; n < 64 && !v; n++) {
		struct verdict *c = &verdicts[verdict_next++ % 64];
		if (c->state != 1)
			v = c;
	}
	if (v) {
		free(v->fst);
		*v = (struct verdict){ .step = step, .dev = st.st_dev, .ino = st.st_ino,
				       .mtime = st.st_mtim, .tree = ts, .state = 1,
				       .users = 1, .nfiles = nfiles, .bad = SIZE_MAX };
		snprintf(v->job, sizeof(v->job), "%s", job);
		v->fst = calloc(nfiles + 1, 1);
		if (!v->fst)
			v->state = 0;
	}
	if (!v || !v->fst) {
		pthread_mutex_unlock(&verdict_lock);
		*r = verify_checkpoint(iterfd, VERIFY_FULL, threads, NULL, why, whylen);
		if (*r == 0)
			*r = -EAGAIN;      /* verified, not tracked: no verdict to join */
		return NULL;
	}
	pthread_mutex_unlock(&verdict_lock);
	return v;
}

/* Take file f to verify it (1), or not: someone else has (0). */
static int verdict_claim(struct verdict *v, size_t f)
{
	int mine = 0;

	pthread_mutex_lock(&verdict_lock);
	if (v->state == 1 && v->fst[f] == VF_TODO) {
		v->fst[f] = VF_BUSY;
		mine = 1;
	}
	pthread_mutex_unlock(&verdict_lock);
	return mine;
}

/* Record the outcome of a claimed file: r == 0 verified, r < 0 failed,
 * r == 1 not decided (handed back for someone to hash). */
static void verdict_mark(struct verdict *v, size_t f, int r, const char *why)
{
	pthread_mutex_lock(&verdict_lock);
	v->fst[f] = r == 0 ? VF_OK : r < 0 ? VF_BAD : VF_TODO;
	if (r < 0 && f < v->bad) {
		v->bad = f;
		v->r = r;
		snprintf(v->why, sizeof(v->why), "%s", why);
	}
	pthread_cond_broadcast(&verdict_cond);
	pthread_mutex_unlock(&verdict_lock);
}

struct vhelp {
	struct verdict    *v;
	int                iterfd;
	const struct mfst *m;
};

/* Hash every file nobody claimed, until none is left or one failed. */
static void *verdict_help(void *arg)
{
	struct vhelp *h = arg;
	struct verdict *v = h->v;
	char why[256];

	for (;;) {
		size_t f = SIZE_MAX;
		int r;

		pthread_mutex_lock(&verdict_lock);
		for (size_t i = 0; v->state == 1 && v->bad == SIZE_MAX && i < v->nfiles; i++)
			if (v->fst[i] == VF_TODO) {
				v->fst[i] = VF_BUSY;
				f = i;
				break;
			}
		pthread_mutex_unlock(&verdict_lock);
		if (f == SIZE_MAX)
			break;
		why[0] = '\0';
		r = verify_file(h->iterfd, h->m, f, 1, why, sizeof(why));
		verdict_mark(v, f, r < 0 ? r : 0, why);
	}
	return NULL;
}

/* Help hash the unclaimed files (on up to `threads` threads), wait for the
 * verdict, leave it.  Returns the verdict: 0 or -errno with why. */
static int verdict_finish(struct verdict *v, int iterfd, const struct mfst *m,
			  unsigned threads, char *why, size_t whylen)
{
	struct vhelp h = { v, iterfd, m };
	pthread_t tid[16];
	unsigned started = 0;
	int r;

	for (unsigned t = 1; t < threads && t <= 16; t++)
		if (pthread_create(&tid[started], NULL, verdict_help, &h) == 0)
			started++;
	verdict_help(&h);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tid[t], NULL);

	pthread_mutex_lock(&verdict_lock);
	for (;;) {
		size_t busy = 0;
		for (size_t i = 0; i < v->nfiles; i++)
			busy += v->fst[i] != VF_OK && v->fst[i] != VF_BAD;
		if (v->state != 1 || v->bad != SIZE_MAX || busy == 0)
			break;
		pthread_cond_wait(&verdict_cond, &verdict_lock);
	}
	if (v->state == 1) {
		if (v->bad == SIZE_MAX) {
			v->r = 0;
			v->why[0] = '\0';
		}
		v->state = 2;
		pthread_cond_broadcast(&verdict_cond);
	}
	r = v->r;
	snprintf(why, whylen, "%s", v->why);
	v->users--;
	pthread_mutex_unlock(&verdict_lock);
	return r;
}

/* --- the work item ------------------------------------------------------ */

struct want {                 /* a registered tensor, snapshotted */
	char    *group, *name;
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	uint64_t nbytes;
	uint8_t *dst;              /* host memory, or NULL for CUDA memory: */
	struct gpu_mem *gm;        /* bytes [goff, goff+nbytes) of it */
	uint64_t goff;
	int      matched;
};

struct got_blob {
	char    *name;
	uint8_t *data;
	size_t   len;
};

struct restore_work {
	uv_work_t        req;
	struct srv      *S;
	struct session  *s;
	uint64_t         req_id;
	int64_t          step;
	int              partial;
	char             job[65];
	int              jobfd;
	int              rank, world;
	unsigned         threads;
	size_t           max_reply;
	struct want     *want;     size_t nwant;
	struct region_ref **regions; size_t nregions;
	/* results */
	int              r;
	char             msg[1024];
	uint64_t         chosen;
	json_t          *skipped, *restored, *missing, *unexpected;
	struct got_blob *blobs;    size_t nblobs;
};

struct piece {
	uint64_t off, len;
	uint8_t *dst;              /* in the trainer's memory, or scratch */
	int      done;
	ssize_t  res;
	const struct want *gw;     /* CUDA tensor: copy scratch there at goff */
	uint64_t goff;
};

/* The bytes read must hash to what the manifest says, or the restored
 * tensors cannot be trusted. */
static int finish_hash(struct sha_ctx *sha, const struct mfst_file *mf,
		       char *msg, size_t msglen)
{
	char hex[SHA_HEX_LEN + 1];

	sha_final_hex(sha, hex);
	sha->md = NULL;
	if (strcmp(hex, mf->sha256) == 0)
		return 0;
	snprintf(msg, msglen, "%s changed after it was verified (sha256 %s, manifest %s): "
		 "the restored tensors are not trustworthy", mf->path, hex, mf->sha256);
	return -EBADMSG;
}

/* After an error: wait for reads still in flight, say what failed. */
static void drain_reads(struct io_ctx *io, const struct mfst_file *mf, int r,
			char *msg, size_t msglen)
{
	while (io->inflight > 0) {
		struct io_cqe cqe[READ_DEPTH];
		if (io_reap(io, cqe, READ_DEPTH, 1) <= 0)
			break;
	}
	if (!msg[0])
		snprintf(msg, msglen, "read %s: %s", mf->path, strerror(-r));
}

/* Read one shard file in order, hashing every byte, tensors straight into
 * the trainer's memory; bytes nobody wants go through scratch buffers. */
static int read_shard(struct io_ctx *io, int iterfd, const struct mfst *m, size_t fidx,
		      struct want **dst_of, char *msg, size_t msglen)
{
	const struct mfst_file *mf = &m->files[fidx];
	struct piece *pc = NULL;
	size_t np = 0, cap = 0, next = 0, hashed = 0;
	uint8_t *scratch[READ_DEPTH] = { 0 };
	int pinned[READ_DEPTH] = { 0 };
	struct sha_ctx sha = { 0 };
	char dir[LAYOUT_PATH_MAX], *slash;
	int fd = -1, dfd = -1, r = 0;

	/* pieces: every byte of the file, in order */
	for (uint64_t off = 0; off < mf->size;) {
		uint64_t end = mf->size;
		uint8_t *dst = NULL;
		const struct want *gw = NULL;
		uint64_t goff = 0;
		for (size_t t = 0; t < m->ntensors; t++) {
			const struct mfst_tensor *mt = &m->tensors[t];
			if (mt->file != fidx)
				continue;
			if (mt->begin <= off && off < mt->end) {     /* inside a tensor */
				end = mt->end;
				dst = dst_of[t] && dst_of[t]->dst ?
				      dst_of[t]->dst + (off - mt->begin) : NULL;
				if (dst_of[t] && dst_of[t]->gm) {   /* via scratch */
					gw = dst_of[t];
					goff = gw->goff + (off - mt->begin);
				}
				break;
			}
			if (mt->begin > off && mt->begin < end)      /* header or gap */
				end = mt->begin;
		}
		if (end - off > PIECE_BYTES)
			end = off + PIECE_BYTES;
		if (np == cap) {
			cap = cap ? cap * 2 : 64;
			struct piece *n = realloc(pc, cap * sizeof(*pc));
			if (!n) {
				r = -ENOMEM;
				goto out;
			}
			pc = n;
		}
		pc[np++] = (struct piece){ off, end - off, dst, 0, 0, gw, goff };
		off = end;
	}

	snprintf(dir, sizeof(dir), "%s", mf->path);
	slash = strchr(dir, '/');
	if (slash)
		*slash = '\0';
	dfd = openat(iterfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	fd = dfd < 0 ? -1 : openat(dfd, slash ? slash + 1 : dir, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || sha_init(&sha) < 0) {
		r = -errno ? -errno : -ENOMEM;
		snprintf(msg, msglen, "open %s: %s", mf->path, strerror(-r));
		goto out;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

	while (hashed < np) {
		/* keep READ_DEPTH pieces in flight; scratch slot = index % depth */
		while (next < np && next - hashed < READ_DEPTH) {
			struct piece *p = &pc[next];
			if (!p->dst) {
				uint8_t **sb = &scratch[next % READ_DEPTH];
				if (!*sb && !(*sb = malloc(PIECE_BYTES))) {
					r = -ENOMEM;
					goto drain;
				}
				if (p->gw && !pinned[next % READ_DEPTH])   /* fast H2D */
					pinned[next % READ_DEPTH] =
						gpu_host_register(*sb, PIECE_BYTES) == 0;
				p->dst = *sb;
			}
			r = io_submit(io, IO_READ, fd, p->dst, p->len, (off_t)p->off, p);
			if (r == -EBUSY)
				break;
			if (r < 0)
				goto drain;
			next++;
		}
		while (!pc[hashed].done) {
			struct io_cqe cqe[READ_DEPTH];
			int n = io_reap(io, cqe, READ_DEPTH, 1);
			if (n < 0) {
				r = n;
				goto drain;
			}
			for (int i = 0; i < n; i++) {
				struct piece *p = cqe[i].tag;
				p->done = 1;
				p->res = cqe[i].res;
			}
		}
		if (pc[hashed].res != (ssize_t)pc[hashed].len) {
			r = pc[hashed].res < 0 ? (int)pc[hashed].res : -EIO;
			snprintf(msg, msglen, "read %s: %s", mf->path, pc[hashed].res < 0 ?
				 strerror((int)-pc[hashed].res) : "file shorter than its manifest says");
			goto drain;
		}
		sha_update(&sha, pc[hashed].dst, pc[hashed].len);
		if (pc[hashed].gw) {
			char why[200];
			r = gpu_copy_h2d(pc[hashed].gw->gm, pc[hashed].goff, pc[hashed].dst,
					 pc[hashed].len, why, sizeof(why));
			if (r < 0) {
				snprintf(msg, msglen, "%s: cannot copy to the GPU: %s",
					 mf->path, why);
				goto drain;
			}
		}
		hashed++;
	}
	r = finish_hash(&sha, mf, msg, msglen);
	goto out;
drain:
	drain_reads(io, mf, r, msg, msglen);
out:
	sha_release(&sha);
	for (int i = 0; i < READ_DEPTH; i++) {
		if (pinned[i])
			gpu_host_unregister(scratch[i]);
		free(scratch[i]);
	}
	free(pc);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return r;
}

/* --- O_DIRECT restore of one shard ---------------------------------------
 * Tensors in a shard are packed, so their file offsets are not block
 * aligned: the file is read in aligned windows straight from the disk (no
 * page cache, no kernel copy) into buffers borrowed from the idle staging
 * pool, each window hashed in order and its tensor bytes copied out to the
 * trainer.  -EOPNOTSUPP: not possible here (no O_DIRECT on this file
 * system, CUDA destinations), use read_shard. */

struct dseg {
	uint64_t begin, end;       /* absolute in the file */
	uint8_t *dst;
};

static int cmp_dseg(const void *a, const void *b)
{
	const struct dseg *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int read_shard_direct(struct restore_work *w, struct io_ctx *io, int iterfd,
			     const struct mfst *m, size_t fidx, struct want **dst_of,
			     char *msg, size_t msglen)
{
	const struct mfst_file *mf = &m->files[fidx];
	struct shm_pool *pool = &w->S->pool;
	size_t win = pool->chunk_bytes ? pool->chunk_bytes : PIECE_BYTES;
	uint8_t *buf[READ_DEPTH] = { 0 };
	int bidx[READ_DEPTH], done[READ_DEPTH] = { 0 };
	ssize_t res[READ_DEPTH] = { 0 };
	struct dseg *seg = NULL;
	size_t nseg = 0, cur = 0;
	uint64_t nwin, next = 0, hashed = 0;
	struct sha_ctx sha = { 0 };
	char dir[LAYOUT_PATH_MAX], *slash;
	int fd = -1, dfd = -1, r = 0;

	if (win % 4096)
		return -EOPNOTSUPP;
	seg = calloc(m->ntensors + 1, sizeof(*seg));
	if (!seg)
		return -ENOMEM;
	for (size_t t = 0; t < m->ntensors; t++) {
		if (m->tensors[t].file != fidx || !dst_of[t])
			continue;
		if (!dst_of[t]->dst) {         /* CUDA memory: read_shard's way */
			free(seg);
			return -EOPNOTSUPP;
		}
		seg[nseg++] = (struct dseg){ m->tensors[t].begin, m->tensors[t].end,
					     dst_of[t]->dst };
	}
	qsort(seg, nseg, sizeof(*seg), cmp_dseg);

	snprintf(dir, sizeof(dir), "%s", mf->path);
	slash = strchr(dir, '/');
	if (slash)
		*slash = '\0';
	dfd = openat(iterfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	fd = dfd < 0 ? -1 : openat(dfd, slash ? slash + 1 : dir,
				   O_RDONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = errno == EINVAL ? -EOPNOTSUPP : -errno;
		if (r != -EOPNOTSUPP)
			snprintf(msg, msglen, "open %s: %s", mf->path, strerror(-r));
		goto out;
	}
	if (sha_init(&sha) < 0) {
		r = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < READ_DEPTH; i++) {
		bidx[i] = shm_pool_try_take(pool);
		if (bidx[i] >= 0)
			buf[i] = shm_pool_chunk(pool, (unsigned)bidx[i]);
		else if (posix_memalign((void **)&buf[i], 4096, win))
			buf[i] = NULL;
		if (!buf[i]) {
			r = -ENOMEM;
			goto out;
		}
	}

	nwin = (mf->size + win - 1) / win;
	while (hashed < nwin) {
		/* window k lives in buffer k % READ_DEPTH */
		while (next < nwin && next - hashed < READ_DEPTH) {
			uint64_t off = next * win, want = mf->size - off < win ? mf->size - off : win;
			int b = (int)(next % READ_DEPTH);
			done[b] = 0;
			r = io_submit(io, IO_READ, fd, buf[b], (want + 4095) & ~(uint64_t)4095,
				      (off_t)off, &done[b]);
			if (r == -EBUSY)
				break;
			if (r < 0)
				goto drain;
			next++;
		}
		while (!done[hashed % READ_DEPTH]) {
			struct io_cqe cqe[READ_DEPTH];
			int n = io_reap(io, cqe, READ_DEPTH, 1);
			if (n < 0) {
				r = n;
				goto drain;
			}
			for (int i = 0; i < n; i++) {
				int *d = cqe[i].tag;
				*d = 1;
				res[d - done] = cqe[i].res;
			}
		}
		{
			int b = (int)(hashed % READ_DEPTH);
			uint64_t off = hashed * win, end;
			uint64_t want = mf->size - off < win ? mf->size - off : win;
			if (res[b] < (ssize_t)want) {
				r = res[b] < 0 ? (int)res[b] : -EIO;
				snprintf(msg, msglen, "read %s: %s", mf->path, res[b] < 0 ?
					 strerror((int)-res[b]) :
					 "file shorter than its manifest says");
				goto drain;
			}
			sha_update(&sha, buf[b], want);
			/* copy out every tensor byte of this window */
			end = off + want;
			while (cur < nseg && seg[cur].end <= off)
				cur++;
			for (size_t k = cur; k < nseg && seg[k].begin < end; k++) {
				uint64_t lo = seg[k].begin > off ? seg[k].begin : off;
				uint64_t hi = seg[k].end < end ? seg[k].end : end;
				if (hi > lo)
					memcpy(seg[k].dst + (lo - seg[k].begin), buf[b] + (lo - off),
					       hi - lo);
			}
		}
		hashed++;
	}
	r = finish_hash(&sha, mf, msg, msglen);
	goto out;
drain:
	drain_reads(io, mf, r, msg, msglen);
out:
	sha_release(&sha);
	for (int i = 0; i < READ_DEPTH; i++) {
		if (buf[i] && bidx[i] >= 0)
			shm_pool_give(pool, (unsigned)bidx[i]);
		else
			free(buf[i]);
	}
	free(seg);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return r;
}

/* One shard into the trainer's memory, through O_DIRECT when possible. */
static int read_one(struct restore_work *w, struct io_ctx *io, int iterfd,
		    const struct mfst *m, size_t fidx, struct want **dst_of)
{
	int r = read_shard_direct(w, io, iterfd, m, fidx, dst_of, w->msg, sizeof(w->msg));

	if (r != -EOPNOTSUPP)
		return r;
	w->msg[0] = '\0';
	return read_shard(io, iterfd, m, fidx, dst_of, w->msg, sizeof(w->msg));
}

static int read_blob(int iterfd, const struct mfst *m, const struct mfst_blob *b,
		     struct got_blob *out, char *msg, size_t msglen)
{
	const struct mfst_file *mf = &m->files[b->file];
	char hex[SHA_HEX_LEN + 1];
	struct sha_ctx sha = { 0 };
	int dfd, fd = -1, r = 0;
	char rankdir[32];

	layout_rank_dir(b->rank, rankdir, sizeof(rankdir));
	dfd = openat(iterfd, LAYOUT_EXTRA, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd >= 0) {
		int rd = openat(dfd, rankdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dfd);
		dfd = rd;
	}
	if (dfd >= 0)
		fd = openat(dfd, b->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	out->data = malloc(mf->size ? mf->size : 1);
	out->name = strdup(b->name);
	out->len = mf->size;
	if (fd < 0 || !out->data || !out->name) {
		r = fd < 0 ? -ENOENT : -ENOMEM;
		snprintf(msg, msglen, "blob %s: %s", mf->path, strerror(-r));
		goto out;
	}
	if (pread(fd, out->data, mf->size, 0) != (ssize_t)mf->size) {
		r = -EIO;
		snprintf(msg, msglen, "blob %s: short read", mf->path);
		goto out;
	}
	if ((r = sha_init(&sha)) < 0)
		goto out;
	sha_update(&sha, out->data, mf->size);
	sha_final_hex(&sha, hex);
	sha.md = NULL;
	if (strcmp(hex, mf->sha256)) {
		r = -EBADMSG;
		snprintf(msg, msglen, "blob %s changed after it was verified", mf->path);
	}
out:
	sha_release(&sha);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return r;
}

/* Compare what the trainer registered with the checkpoint's tensors of this
 * rank; fills dst_of[t] for manifest tensor t. */
static int match(struct restore_work *w, const struct mfst *m, struct want **dst_of)
{
	char bad[512] = "";
	size_t nb = 0;

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mfst_tensor *mt = &m->tensors[i];
		struct want *wt = NULL;
		if (mt->rank != w->rank)
			continue;
		for (size_t k = 0; k < w->nwant && !wt; k++)
			if (!strcmp(w->want[k].group, mt->group) && !strcmp(w->want[k].name, mt->name))
				wt = &w->want[k];
		if (!wt) {
			json_array_append_new(w->unexpected, json_sprintf("%s/%s", mt->group, mt->name));
			continue;
		}
		wt->matched = 1;
		if (strcmp(wt->dtype, mt->dtype) || wt->ndim != mt->ndim ||
		    memcmp(wt->shape, mt->shape, sizeof(int64_t) * (size_t)mt->ndim)) {
			if (nb < sizeof(bad) - 64)
				nb += (size_t)snprintf(bad + nb, sizeof(bad) - nb, "%s%s/%s (checkpoint %s%s)",
					nb ? ", " : "", mt->group, mt->name, mt->dtype,
					mt->ndim ? " with another shape" : "");
			continue;
		}
		dst_of[i] = wt;
		json_array_append_new(w->restored, json_sprintf("%s/%s", mt->group, mt->name));
	}
	for (size_t k = 0; k < w->nwant; k++)
		if (!w->want[k].matched)
			json_array_append_new(w->missing, json_sprintf("%s/%s", w->want[k].group,
								       w->want[k].name));
	if (nb) {
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu: dtype or shape differs for %s",
			 (unsigned long long)m->step, bad);
		return -EINVAL;
	}
	if (!w->partial && (json_array_size(w->missing) || json_array_size(w->unexpected))) {
		char *mi = json_dumps(w->missing, JSON_COMPACT);
		char *un = json_dumps(w->unexpected, JSON_COMPACT);
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu does not match the registered tensors: "
			 "missing from the checkpoint %s, not registered %s (CKPT_PARTIAL restores "
			 "the intersection)", (unsigned long long)m->step, mi ? mi : "?", un ? un : "?");
		free(mi);
		free(un);
		return -ENOENT;
	}
	return 0;
}

/* Read this rank's tensors and blobs from a checkpoint.  With a verdict
 * being computed (v), each shard this rank reads and nobody else verifies
 * yet counts as verified by that read. */
static int restore_from(struct restore_work *w, int iterfd, struct mfst *m,
			struct verdict *v)
{
	struct want **dst_of = calloc(m->ntensors + 1, sizeof(*dst_of));
	struct io_ctx io = { 0 };
	size_t total = 0;
	int r;

	if (!dst_of)
		return -ENOMEM;
	if (m->world_size != w->world) {
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu was written by %d ranks; this job "
			 "has %d", (unsigned long long)m->step, m->world_size, w->world);
		r = -EINVAL;
		goto out;
	}
	if ((r = match(w, m, dst_of)) < 0)
		goto out;
	if ((r = io_ctx_init(&io, w->S->pipe.io_backend, READ_DEPTH, NULL)) < 0)
		goto out;
	/* The trainer's memory is new to this mapping: map all of it now in
	 * one call per tensor rather than one page fault per 4 KiB page in
	 * the middle of the copies (best effort; 5.14+). */
	for (size_t t = 0; t < m->ntensors; t++)
		if (dst_of[t] && dst_of[t]->dst && dst_of[t]->nbytes) {
			uintptr_t a = (uintptr_t)dst_of[t]->dst & ~(uintptr_t)4095;
			(void)madvise((void *)a, (uintptr_t)dst_of[t]->dst + dst_of[t]->nbytes - a,
				      MADV_POPULATE_WRITE);
		}
	for (size_t f = 0; f < m->nfiles && r == 0; f++) {
		int mine = 0;
		for (size_t t = 0; t < m->ntensors && !mine; t++)
			mine = m->tensors[t].file == f && dst_of[t];
		if (!mine)
			continue;
		if (v && verdict_claim(v, f)) {
			char why[256] = "";
			int hr = verify_file(iterfd, m, f, 0, why, sizeof(why));
			if (hr < 0 && hr != -ENOMEM) {
				verdict_mark(v, f, hr, why);   /* header: a verdict */
				r = hr;
				snprintf(w->msg, sizeof(w->msg), "%s", why);
				break;
			}
			r = hr < 0 ? hr : read_one(w, &io, iterfd, m, f, dst_of);
			/* a failed read is judged again by a plain hash */
			verdict_mark(v, f, r == 0 ? 0 : 1, "");
		} else {
			r = read_one(w, &io, iterfd, m, f, dst_of);
		}
	}
	io_ctx_release(&io);
	for (size_t b = 0; b < m->nblobs && r == 0; b++) {
		if (m->blobs[b].rank != w->rank)
			continue;
		total += m->files[m->blobs[b].file].size;
		if (total > w->max_reply) {
			snprintf(w->msg, sizeof(w->msg), "the blobs of rank %d exceed one message",
				 w->rank);
			r = -EMSGSIZE;
			break;
		}
		r = read_blob(iterfd, m, &m->blobs[b], &w->blobs[w->nblobs++], w->msg,
			      sizeof(w->msg));
	}
out:
	free(dst_of);
	return r;
}

static void drop_results(struct restore_work *w)
{
	for (size_t i = 0; i < w->nblobs; i++) {
		free(w->blobs[i].name);
		free(w->blobs[i].data);
	}
	free(w->blobs);
	w->blobs = NULL;
	w->nblobs = 0;
	json_array_clear(w->restored);
	json_array_clear(w->missing);
	json_array_clear(w->unexpected);
}

/* Verify checkpoint `step` (directory iterfd) and restore this rank from it
 * in the same pass.  Returns < 0 (why filled) when the step does not verify;
 * 0 when it does, with the restore's own outcome in w->r (and *out_m the
 * manifest, the caller frees it). */
static int restore_step(struct restore_work *w, uint64_t step, int iterfd,
			struct mfst **out_m, char *why, size_t whylen)
{
	struct verdict *v;
	struct mfst *m = NULL;
	int r, rr;

	r = verify_checkpoint(iterfd, VERIFY_STRUCTURE, 0, &m, why, whylen);
	if (r < 0)
		return r;
	v = verdict_join(w->job, step, iterfd, m->nfiles, w->threads, &r, why, whylen);
	if (!v && r < 0 && r != -EAGAIN) {
		mfst_free(m);
		return r;
	}
	w->msg[0] = '\0';
	w->blobs = calloc(m->nblobs + 1, sizeof(*w->blobs));
	rr = w->blobs ? restore_from(w, iterfd, m, v) : -ENOMEM;
	if (v && (r = verdict_finish(v, iterfd, m, w->threads, why, whylen)) < 0) {
		drop_results(w);
		mfst_free(m);
		return r;
	}
	w->r = rr;
	*out_m = m;
	return 0;
}

static void restore_thread(uv_work_t *req)
{
	struct restore_work *w = req->data;
	uint64_t *steps = NULL, one;
	int n;

	if (w->step >= 0) {
		one = (uint64_t)w->step;
		steps = &one;
		n = 1;
	} else if ((n = layout_list_steps(w->jobfd, &steps)) < 0) {
		w->r = n;
		snprintf(w->msg, sizeof(w->msg), "cannot list checkpoints: %s", strerror(-n));
		return;
	}
	w->r = -ENOENT;
	snprintf(w->msg, sizeof(w->msg), "no checkpoint of job '%s' verifies", w->job);
	for (int i = 0; i < n; i++) {
		char iter[32], why[512] = "";
		struct mfst *m = NULL;
		int fd, r;

		layout_iter_name(steps[i], iter, sizeof(iter));
		fd = openat(w->jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			snprintf(why, sizeof(why), "%s", strerror(errno));
		} else {
			r = restore_step(w, steps[i], fd, &m, why, sizeof(why));
		}
		if (r < 0) {
			log_warnx("job %s: restore skips %s: %s", w->job, iter, why);
			json_array_append_new(w->skipped, json_pack("{sIss}", "step",
						(json_int_t)steps[i], "reason", why));
			if (fd >= 0)
				close(fd);
			if (w->step >= 0) {
				w->r = r;
				snprintf(w->msg, sizeof(w->msg), "%s does not verify: %s", iter, why);
			} else {         /* a read of the failed step may have set it */
				snprintf(w->msg, sizeof(w->msg), "no checkpoint of job '%s' verifies",
					 w->job);
			}
			continue;
		}
		w->chosen = steps[i];
		mfst_free(m);
		close(fd);
		break;
	}
	if (steps != &one)
		free(steps);
}

static void restore_done(uv_work_t *req, int status)
{
	struct restore_work *w = req->data;
	struct session *s = w->s;

	if (w->r == 0) {
		json_t *bl = json_array();
		size_t total = 0, off = 0;
		uint8_t *bin;
		char *txt;
		int lost = !bl;      /* out of memory: no reply that lacks a blob */
		for (size_t i = 0; i < w->nblobs; i++) {
			lost |= json_array_append_new(bl, json_pack("{sssI}", "name", w->blobs[i].name,
							    "len", (json_int_t)w->blobs[i].len)) < 0;
			total += w->blobs[i].len;
		}
		bin = lost ? NULL : malloc(total ? total : 1);
		for (size_t i = 0; bin && i < w->nblobs; i++) {
			memcpy(bin + off, w->blobs[i].data, w->blobs[i].len);
			off += w->blobs[i].len;
		}
		json_t *o = json_pack("{sIsOsOsOsosO}", "step", (json_int_t)w->chosen,
				      "restored", w->restored, "missing", w->missing,
				      "unexpected", w->unexpected, "blobs", bl, "skipped", w->skipped);
		txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
		json_decref(o);       /* the reply object was leaked on every restore */
		if (bin && txt) {
			session_reply(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, 0, txt, bin, total);
			log_info("job %s: rank %d restored iter_%09llu", w->job, w->rank,
				 (unsigned long long)w->chosen);
		} else {
			session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, -ENOMEM,
					  "out of memory");
		}
		free(txt);
		free(bin);
	} else {
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, w->r, "%s", w->msg);
	}
	for (size_t i = 0; i < w->nblobs; i++) {
		free(w->blobs[i].name);
		free(w->blobs[i].data);
	}
	free(w->blobs);
	for (size_t i = 0; i < w->nwant; i++) {
		free(w->want[i].group);
		free(w->want[i].name);
	}
	free(w->want);
	for (size_t i = 0; i < w->nregions; i++)
		region_unref(w->regions[i]);
	free(w->regions);
	json_decref(w->skipped);
	json_decref(w->restored);
	json_decref(w->missing);
	json_decref(w->unexpected);
	close(w->jobfd);
	free(w);
	session_resume(s);
	session_unref(s);
}

int restore_start(struct srv *S, struct session *s, uint64_t req_id, int64_t step,
		  int partial)
{
	struct restore_work *w = calloc(1, sizeof(*w));
	struct job *j = s->job;

	if (!w)
		return -ENOMEM;
	w->S = S;
	w->s = s;
	w->req_id = req_id;
	w->step = step;
	w->partial = partial;
	w->rank = s->rank;
	w->world = j->world_size;
	w->threads = S->cfg.verify_threads;
	w->max_reply = S->cfg.max_message_bytes > 65536 ? S->cfg.max_message_bytes - 65536 : 0;
	snprintf(w->job, sizeof(w->job), "%s", j->name);
	w->jobfd = job_dir_dup(j);     /* as it is on disk now */
	w->want = calloc(s->ntensors + 1, sizeof(*w->want));
	w->regions = calloc(s->nregions + 1, sizeof(*w->regions));
	w->skipped = json_array();
	w->restored = json_array();
	w->missing = json_array();
	w->unexpected = json_array();
	if (w->jobfd < 0 || !w->want || !w->regions || !w->skipped || !w->restored ||
	    !w->missing || !w->unexpected) {
out_nomem:
		for (size_t i = 0; i < w->nwant; i++) {
			free(w->want[i].group);
			free(w->want[i].name);
		}
		if (w->jobfd >= 0)
			close(w->jobfd);
		free(w->want);
		free(w->regions);
		json_decref(w->skipped);
		json_decref(w->restored);
		json_decref(w->missing);
		json_decref(w->unexpected);
		free(w);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->ntensors; i++) {
		struct reg_tensor *t = &s->tensors[i];
		struct want *wt = &w->want[w->nwant++];
		wt->group = strdup(t->group);
		wt->name = strdup(t->name);
		if (!wt->group || !wt->name)
			goto out_nomem;
		memcpy(wt->dtype, t->dtype, sizeof(wt->dtype));
		wt->ndim = t->ndim;
		memcpy(wt->shape, t->shape, sizeof(wt->shape));
		wt->nbytes = t->nbytes;
		if (t->rg->gm) {       /* CUDA memory: through pinned scratch */
			wt->gm = t->rg->gm;
			wt->goff = t->offset;
		} else {
			wt->dst = (uint8_t *)t->rg->r.base + t->offset;
		}
	}
	/* the trainer's memory must outlive the work, even if it disconnects */
	for (size_t i = 0; i < s->nregions; i++) {
		w->regions[w->nregions++] = s->regions[i];
		region_ref(s->regions[i]);
	}
	s->refs++;
	s->busy = 1;
	w->req.data = w;
	uv_queue_work(S->loop, &w->req, restore_thread, restore_done);
	return 0;
}
