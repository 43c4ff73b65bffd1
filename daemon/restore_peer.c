/* restore_peer.c - a restore's files from other nodes' memory
 * (restore_peer.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "coord.h"
#include "mcat.h"
#include "memt.h"
#include "mfst.h"
#include "restore_peer.h"

/* Does the rank read file f?  Its own tensors and blobs (same world), and
 * with globals any piece's file (resharding may need any of them). */
static int reads_file(const struct mfst *m, size_t f, int rank, int world, int globals)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (m->tensors[i].file == f && m->tensors[i].rank == rank && m->world_size == world)
			return 1;
	for (size_t i = 0; i < m->nblobs; i++)
		if (m->blobs[i].file == f && m->blobs[i].rank == rank && m->world_size == world)
			return 1;
	for (size_t i = 0; globals && i < m->npieces; i++)
		if (m->pieces[i].t.file == f)
			return 1;
	return 0;
}

/* The rank that wrote file f, or -1. */
static int writer_of(const struct mfst *m, size_t f)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (m->tensors[i].file == f)
			return m->tensors[i].rank;
	for (size_t i = 0; i < m->nblobs; i++)
		if (m->blobs[i].file == f)
			return m->blobs[i].rank;
	for (size_t i = 0; i < m->npieces; i++)
		if (m->pieces[i].t.file == f)
			return m->pieces[i].t.rank;
	return -1;
}

int restore_fetch_missing(struct memt *t, const char *job, const struct mfst *m, int rank,
			  int world, int globals, const struct mcat_step *cat, char *msg,
			  size_t msglen)
{
	int fetched = 0, partners = coord_replicas();

	for (size_t f = 0; f < m->nfiles; f++) {
		const char *path = m->files[f].path;
		char why[300] = "no node keeps it";
		int w, owner, r = -ENOENT;

		if (!reads_file(m, f, rank, world, globals) ||
		    memt_holds(t, job, m->step, m->txid, &m->files[f]))
			continue;
		w = writer_of(m, f);
		owner = w >= 0 && w < cat->nowners ? cat->owners[w] : -1;
		/* the node that saved it, then the partners that keep a copy */
		for (int i = 0; owner >= 0 && i <= partners && r < 0; i++) {
			int node = (owner + i) % coord_size();
			if (node != coord_rank())
				r = coord_fetch(node, job, m->step, m->txid, path, why, sizeof(why));
		}
		if (r < 0) {
			snprintf(msg, msglen, "%s is in no other node's memory (%s)", path, why);
			return r;
		}
		fetched++;
	}
	return fetched;
}
