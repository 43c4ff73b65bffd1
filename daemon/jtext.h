/* jtext.h - JSON text written as it goes, for the documents ckptd writes
 * with many entries (safetensors headers, the manifest's tensor table):
 * jansson's objects, dump and read-back cost microseconds an entry.  The
 * reader's half is jscan.h.  A failed allocation is remembered (nomem)
 * and every later call does nothing. */
#ifndef CKPT_JTEXT_H
#define CKPT_JTEXT_H

#include <stddef.h>
#include <stdint.h>

struct jtext {
	char  *p;               /* malloc'd, not NUL-terminated; the caller's */
	size_t len, cap;
	int    nomem;
};

void jtext_put(struct jtext *t, const char *s, size_t n);
void jtext_puts(struct jtext *t, const char *s);          /* NUL-terminated */
/* A JSON string of s, which must be valid UTF-8 (jscan_utf8_ok). */
void jtext_str(struct jtext *t, const char *s);
void jtext_int(struct jtext *t, int64_t v);
/* [v0,v1,...] of v[0..n) (a shape). */
void jtext_ints(struct jtext *t, const int64_t *v, int n);

#endif
