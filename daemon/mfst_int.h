/* mfst_int.h - what mfst.c (the JSON form), mfst_check.c (the rules) and
 * mfst_fast.c (the tensor table read fast) share: the rules' entry point,
 * the typed field readers, the fast table reader.  Not for other modules. */
#ifndef CKPT_MFST_INT_H
#define CKPT_MFST_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "mfst.h"


/* The semantic rules of mfst_parse (mfst.h), on a built struct: 0, or
 * -EINVAL / -ENOMEM with err filled. */
int mfst__validate(const struct mfst *m, char *err, size_t errlen);

/* Typed field readers of mfst.c, for the format-2 tables too (mfst_v2.c):
 * 0, or -EINVAL with err "<where><key>: ...". */
int mfst__get_str(const json_t *o, const char *where, const char *key,
		  const char **out, char *err, size_t errlen);
int mfst__get_int(const json_t *o, const char *where, const char *key,
		  int64_t min, int64_t max, int64_t *out, char *err, size_t errlen);

/* mfst_fast.c: the top-level "tensors" table of json, as ckptd writes it
 * (compact, no escapes), read into *out (n of them, malloc'd), and *rest:
 * json with an empty table in its place, for jansson.  0, or -1 when the
 * table is anything else (then nothing is allocated). */
int mfst__fast_table(const char *json, size_t len, struct mfst_tensor **out,
		     size_t *n, char **rest, size_t *rest_len);
/* Free n tensors read by it (NULL ok). */
void mfst__fast_table_free(struct mfst_tensor *t, size_t n);

#endif
