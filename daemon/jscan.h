/* jscan.h - reads compact JSON as ckpt's own writers write it (no white
 * space, strings without escapes, non-negative integers) without building
 * a tree: the fast readers of safetensors headers and manifest tensor
 * tables.  Every function returns 0, or -1 for anything else, which the
 * caller leaves to jansson (valid or not: jansson decides and words it). */
#ifndef CKPT_JSCAN_H
#define CKPT_JSCAN_H

#include <stddef.h>
#include <stdint.h>

struct jscan {
	const char *p, *end;
};

/* A string: its bytes (not copied, no NUL) at *s, n of them. */
int   jscan_str(struct jscan *sc, const char **s, size_t *n);
/* The character c. */
int   jscan_char(struct jscan *sc, char c);
/* An integer in JSON's form (no sign, no leading zero) up to INT64_MAX. */
int   jscan_uint(struct jscan *sc, int64_t *v);
/* [n,...] of at most max such integers, *count of them. */
int   jscan_uints(struct jscan *sc, int64_t *v, int max, int *count);
/* Are the n bytes at k the string want? */
int   jscan_key_is(const char *k, size_t n, const char *want);
/* A NUL-terminated copy of n bytes that are valid UTF-8 (no NUL), or NULL. */
char *jscan_dup_utf8(const char *s, size_t n);
/* Strict UTF-8: no overlong forms, surrogates or code points past
 * U+10FFFF, as JSON readers want it. */
int   jscan_utf8_ok(const char *s);

#endif
