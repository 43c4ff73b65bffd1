/* mfst_v2.h - the parts of checkpoint_manifest.json that format 2 added
 * (per-chunk checksums of files, the table of global tensors): their JSON
 * form and their checks, for mfst.c only (mfst.h documents the format). */
#ifndef CKPT_MFST_V2_H
#define CKPT_MFST_V2_H

#include <jansson.h>
#include "mfst.h"

/* Adds "chunk_size"/"crc32c" to a file's object when it has them.
 * 0 or -ENOMEM. */
int  mfst__file_csum_dump(const struct mfst_file *f, json_t *o);
/* Reads them (both or neither) from files[i]'s object.  0 or -EINVAL /
 * -ENOMEM with err filled. */
int  mfst__file_csum_parse(const json_t *o, size_t i, struct mfst_file *f,
			   char *err, size_t errlen);
/* "globals" into root (omitted when there are none).  0 or -ENOMEM. */
int  mfst__globals_dump(const struct mfst *m, json_t *root);
/* "globals" from root, if present, into m->globals / m->pieces. */
int  mfst__globals_parse(const json_t *root, struct mfst *m, char *err, size_t errlen);
/* Every global well-formed and tiled exactly by its pieces, each piece in
 * its rank's shard of the group and of the right byte size; no global
 * shares a name with another.  Every file's checksum table has the right
 * length.  0 or -EINVAL / -ENOMEM with err filled. */
int  mfst__v2_validate(const struct mfst *m, char *err, size_t errlen);
void mfst__v2_free(struct mfst *m);

#endif
