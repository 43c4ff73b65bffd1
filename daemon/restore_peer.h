/* restore_peer.h - what a restore takes from other nodes' memory: the
 * files of a committed step that a rank reads and this node's memory tier
 * lacks are copied from the memory of a node that keeps them (the node
 * that saved them, then its partners: coord.h), so that the restore is
 * served from memory (CKPT_FROM_PEER) rather than the disk. */
#ifndef CKPT_RESTORE_PEER_H
#define CKPT_RESTORE_PEER_H

struct mcat_step;
struct memt;
struct mfst;

/* Make t hold every file of m (committed as the catalogue entry cat says)
 * that rank of a world-rank job reads -- its tensors' and blobs' files,
 * and with globals every file that holds a piece -- fetching the missing
 * ones.  Returns how many were fetched (>= 0), or -errno with msg when one
 * is in no reachable memory.  Restore thread. */
int restore_fetch_missing(struct memt *t, const char *job, const struct mfst *m, int rank,
			  int world, int globals, const struct mcat_step *cat, char *msg,
			  size_t msglen);

#endif
