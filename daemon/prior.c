/* prior.c - a rank's newest committed step on disk, file by file, for its
 * next save to link what did not change.  See prior.h. */
#include <stdlib.h>
#include <string.h>

#include "csum.h"
#include "prior.h"
#include "rsave.h"

struct prior *prior_from_rsave(const struct rsave *rs, uint64_t step)
{
	struct prior *p;

	if (rs->memory_only || rs->nfiles == 0 || !(p = calloc(1, sizeof(*p))))
		return NULL;
	p->refs = 1;
	p->step = step;
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
		pf->shared = f->shared;
		if (!(pf->crcs = malloc((n ? n : 1) * sizeof(*pf->crcs))))
			goto nomem;
		if (f->crcs)
			memcpy(pf->crcs, f->crcs, n * sizeof(*pf->crcs));
	}
	return p;
nomem:
	prior_put(p);
	return NULL;
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
	for (size_t i = 0; i < p->nfiles; i++)
		free(p->files[i].crcs);
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

uint64_t prior_linked_bytes(const struct rsave *rs)
{
	uint64_t n = 0;

	for (size_t i = 0; i < rs->nfiles; i++)
		if (rs->files[i].linked)
			n += rs->files[i].size;
	return n;
}

int prior_same_inode(const struct prior_file *pf, const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_dev == pf->dev && st->st_ino == pf->ino &&
	       (uint64_t)st->st_size == pf->size &&
	       st->st_mtim.tv_sec == pf->mtime.tv_sec &&
	       st->st_mtim.tv_nsec == pf->mtime.tv_nsec;
}
