/* verdict.c - see verdict.h: the cache of checkpoint verdicts and the
 * sharing of one verification between the ranks that restore at once. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mfst.h"
#include "verdict.h"
#include "verify.h"

#define NVERDICTS 64

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

enum { VF_TODO = 0, VF_BUSY, VF_OK, VF_BAD };              /* per file */
enum { V_FREE = 0, V_VERIFYING, V_DONE };                  /* per verdict */

struct verdict {
	char     job[65];
	uint64_t step;
	dev_t    dev;
	ino_t    ino;
	struct timespec mtime;
	struct tree_stamp tree;
	int      state;      /* V_* */
	int      users;      /* threads on it while verifying */
	size_t   nfiles;
	uint8_t *fst;        /* VF_* per file while verifying */
	size_t   bad;        /* lowest failed file, reported (stable) */
	int      r;
	char     why[256];
};

static struct verdict verdicts[NVERDICTS];
static unsigned verdict_next;
static pthread_mutex_t verdict_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t verdict_cond = PTHREAD_COND_INITIALIZER;

void verdict_cache_clear(void)
{
	pthread_mutex_lock(&verdict_lock);
	for (unsigned i = 0; i < NVERDICTS; i++)
		if (verdicts[i].state == V_DONE) {
			verdicts[i].state = V_FREE;
			free(verdicts[i].fst);
			verdicts[i].fst = NULL;
		}
	pthread_mutex_unlock(&verdict_lock);
}

/* The cache entry of checkpoint `step` of `job` as its files are now
 * (stat of the manifest *st and the tree's stamp *ts filled), or NULL;
 * verdict_lock held. */
static struct verdict *find_locked(const char *job, uint64_t step, size_t nfiles,
				   const struct stat *st, const struct tree_stamp *ts)
{
	for (unsigned i = 0; i < NVERDICTS; i++) {
		struct verdict *c = &verdicts[i];
		if (c->state != V_FREE && c->step == step && !strcmp(c->job, job) &&
		    c->dev == st->st_dev && c->ino == st->st_ino &&
		    c->mtime.tv_sec == st->st_mtim.tv_sec &&
		    c->mtime.tv_nsec == st->st_mtim.tv_nsec &&
		    c->tree.n == ts->n && c->tree.ctime.tv_sec == ts->ctime.tv_sec &&
		    c->tree.ctime.tv_nsec == ts->ctime.tv_nsec && c->nfiles == nfiles)
			return c;
	}
	return NULL;
}

/* A slot for a new entry (never one still being verified), or NULL;
 * verdict_lock held. */
static struct verdict *claim_locked(void)
{
	for (unsigned n = 0; n < NVERDICTS; n++) {
		struct verdict *c = &verdicts[verdict_next++ % NVERDICTS];
		if (c->state != V_VERIFYING)
			return c;
	}
	return NULL;
}

static int stat_tree(int iterfd, struct stat *st, struct tree_stamp *ts)
{
	if (fstatat(iterfd, MFST_NAME, st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	tree_stamp(iterfd, 0, ts);
	return 0;
}

int verdict_known(const char *job, uint64_t step, int iterfd, size_t nfiles,
		  char *why, size_t whylen)
{
	struct tree_stamp ts = { 0 };
	struct verdict *v;
	struct stat st;
	int r = 1;

	if (stat_tree(iterfd, &st, &ts) < 0)
		return 1;
	pthread_mutex_lock(&verdict_lock);
	if ((v = find_locked(job, step, nfiles, &st, &ts)) && v->state == V_DONE) {
		r = v->r;
		snprintf(why, whylen, "%s", v->why);
	}
	pthread_mutex_unlock(&verdict_lock);
	return r;
}

void verdict_record_bad(const char *job, uint64_t step, int iterfd, size_t nfiles,
			int r, const char *why)
{
	struct tree_stamp ts = { 0 };
	struct verdict *v;
	struct stat st;

	if (stat_tree(iterfd, &st, &ts) < 0)
		return;
	pthread_mutex_lock(&verdict_lock);
	if (!(v = find_locked(job, step, nfiles, &st, &ts)))
		v = claim_locked();
	if (v && v->state != V_VERIFYING) {
		free(v->fst);
		*v = (struct verdict){ .step = step, .dev = st.st_dev, .ino = st.st_ino,
				       .mtime = st.st_mtim, .tree = ts, .state = V_DONE,
				       .nfiles = nfiles, .bad = SIZE_MAX, .r = r };
		snprintf(v->job, sizeof(v->job), "%s", job);
		snprintf(v->why, sizeof(v->why), "%s", why);
	}
	pthread_mutex_unlock(&verdict_lock);
}

struct verdict *verdict_join(const char *job, uint64_t step, int iterfd,
			     size_t nfiles, unsigned threads, int *r,
			     char *why, size_t whylen)
{
	struct stat st;
	struct verdict *v = NULL;
	struct tree_stamp ts = { 0 };

	if ((*r = stat_tree(iterfd, &st, &ts)) < 0) {
		snprintf(why, whylen, "%s: %s", MFST_NAME, strerror(-*r));
		return NULL;
	}
	pthread_mutex_lock(&verdict_lock);
	v = find_locked(job, step, nfiles, &st, &ts);
	if (v && v->state == V_DONE) {
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
	if ((v = claim_locked())) {
		free(v->fst);
		*v = (struct verdict){ .step = step, .dev = st.st_dev, .ino = st.st_ino,
				       .mtime = st.st_mtim, .tree = ts, .state = V_VERIFYING,
				       .users = 1, .nfiles = nfiles, .bad = SIZE_MAX };
		snprintf(v->job, sizeof(v->job), "%s", job);
		v->fst = calloc(nfiles + 1, 1);
		if (!v->fst)
			v->state = V_FREE;
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

int verdict_claim(struct verdict *v, size_t f)
{
	int mine = 0;

	pthread_mutex_lock(&verdict_lock);
	if (v->state == V_VERIFYING && v->fst[f] == VF_TODO) {
		v->fst[f] = VF_BUSY;
		mine = 1;
	}
	pthread_mutex_unlock(&verdict_lock);
	return mine;
}

void verdict_mark(struct verdict *v, size_t f, int r, const char *why)
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
	const atomic_int  *cancel;
};

/* Check every file nobody claimed, until none is left, one failed or the
 * restore was cancelled. */
static void *verdict_help(void *arg)
{
	struct vhelp *h = arg;
	struct verdict *v = h->v;
	char why[256];

	while (!atomic_load(h->cancel)) {
		size_t f = SIZE_MAX;
		int r;

		pthread_mutex_lock(&verdict_lock);
		for (size_t i = 0; v->state == V_VERIFYING && v->bad == SIZE_MAX &&
		     i < v->nfiles; i++)
			if (v->fst[i] == VF_TODO) {
				v->fst[i] = VF_BUSY;
				f = i;
				break;
			}
		pthread_mutex_unlock(&verdict_lock);
		if (f == SIZE_MAX)
			break;
		why[0] = '\0';
		r = verify_file(h->iterfd, h->m, f, VERIFY_BYTES_FAST, why, sizeof(why));
		verdict_mark(v, f, r < 0 ? r : 0, why);
	}
	return NULL;
}

/* Files in a state; call with verdict_lock held. */
static size_t count_files(const struct verdict *v, int state)
{
	size_t n = 0;

	for (size_t i = 0; i < v->nfiles; i++)
		n += v->fst[i] == state;
	return n;
}

int verdict_finish(struct verdict *v, int iterfd, const struct mfst *m,
		   unsigned threads, const atomic_int *cancel, char *why, size_t whylen)
{
	struct vhelp h = { v, iterfd, m, cancel };
	int r;

	for (;;) {
		pthread_t tid[16];
		unsigned started = 0;

		for (unsigned t = 1; t < threads && t <= 16; t++)
			if (pthread_create(&tid[started], NULL, verdict_help, &h) == 0)
				started++;
		verdict_help(&h);
		for (unsigned t = 0; t < started; t++)
			pthread_join(tid[t], NULL);

		pthread_mutex_lock(&verdict_lock);
		/* wait for files others are reading; one they hand back (a
		 * failed read, a cancelled restore) is ours to check */
		while (v->state == V_VERIFYING && v->bad == SIZE_MAX &&
		       !atomic_load(cancel) && count_files(v, VF_TODO) == 0 &&
		       count_files(v, VF_BUSY) > 0)
			pthread_cond_wait(&verdict_cond, &verdict_lock);
		if (v->state == V_VERIFYING && v->bad == SIZE_MAX && !atomic_load(cancel) &&
		    count_files(v, VF_TODO) > 0) {
			pthread_mutex_unlock(&verdict_lock);
			continue;
		}
		break;
	}
	if (v->state == V_VERIFYING && (v->bad != SIZE_MAX || !atomic_load(cancel))) {
		if (v->bad == SIZE_MAX) {
			v->r = 0;
			v->why[0] = '\0';
		}
		v->state = V_DONE;
		pthread_cond_broadcast(&verdict_cond);
	}
	if (v->state == V_DONE) {
		r = v->r;
		snprintf(why, whylen, "%s", v->why);
	} else {          /* cancelled, still undecided: the others finish it */
		r = -ECANCELED;
		snprintf(why, whylen, "the restore was cancelled");
	}
	if (--v->users == 0 && v->state == V_VERIFYING) {
		v->state = V_FREE;      /* nobody left to finish it */
		free(v->fst);
		v->fst = NULL;
	}
	pthread_mutex_unlock(&verdict_lock);
	return r;
}
