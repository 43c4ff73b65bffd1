/* mfst_int.h - what mfst.c (the JSON form) and mfst_check.c (the rules)
 * share: the rules' entry point and the largest world.  Not for other
 * modules. */
#ifndef CKPT_MFST_INT_H
#define CKPT_MFST_INT_H

#include <stddef.h>

#include "mfst.h"


/* The semantic rules of mfst_parse (mfst.h), on a built struct: 0, or
 * -EINVAL / -ENOMEM with err filled. */
int mfst__validate(const struct mfst *m, char *err, size_t errlen);

#endif
