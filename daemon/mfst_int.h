/* mfst_int.h - what mfst.c (the JSON form) and mfst_check.c (the rules)
 * share: the rules' entry point, the typed field readers and the largest world.  Not for other
 * modules. */
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

#endif
