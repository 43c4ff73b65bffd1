/* memflush.h - memory-level steps reach the disk when a world ends.  A
 * step committed at memory level (persist_every) lives only in the memory
 * tiers of the nodes that saved it and of their partners.  When the
 * daemon leaves its world (a node was lost, or the cluster is stopped),
 * it first writes what it holds of such a step -- its own ranks' files and
 * its partners' copies -- into the step's staging directory on the shared
 * root, with the manifest the coordinator sent (LAYOUT_MEMORY_MANIFEST).
 * The next world's recovery (store_recover, coordinator only) publishes
 * the step once every file is there and verifies, if it is newer than
 * every checkpoint on disk; else it is removed as a leftover. */
#ifndef CKPT_MEMFLUSH_H
#define CKPT_MEMFLUSH_H

#include <stdint.h>

struct srv;

/* Loop thread, the loop done, before leaving the world: write every job's
 * memory-level step newer than its newest checkpoint on disk (logged). */
void memflush_all(struct srv *S);

#endif
