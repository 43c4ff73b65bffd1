/* gtab.h - the manifest's table of global tensors, built at commit from
 * every rank's pieces, refusing a layout that does not tile: ranks that
 * disagree on a tensor's dtype or global shape, a replica group whose
 * members disagree, pieces that overlap, leave a gap or lie outside. */
#ifndef CKPT_GTAB_H
#define CKPT_GTAB_H

#include "commit.h"

/* Fill m->globals / m->pieces (new arrays; strings borrowed from the
 * parts) from cs's parts; file_base[r] is the index in m->files of part
 * r's first file.  0, or -EINVAL with msg naming the tensor and what is
 * wrong, or -ENOMEM. */
int  gtab_build(const struct commit_step *cs, const size_t *file_base,
		struct mfst *m, char *msg, size_t msglen);
void gtab_release(struct mfst *m);     /* the arrays only */

#endif
