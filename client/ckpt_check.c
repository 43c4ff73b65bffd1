/* ckpt_check.c - libckpt's checks of names before anything is sent: the
 * path-component whitelist for job, group and blob names, and the rules
 * for tensor names (valid UTF-8, no control characters, not reserved).
 * A bad name is refused here with a message that names the rule.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "ckpt_int.h"

/* The daemon's path-component whitelist (daemon/names.c), checked locally
 * so that a bad name is refused with a precise message before anything is
 * sent. */
int ckpt__check_name(ckpt_client *c, const char *what, const char *s,
		     size_t maxlen)
{
	size_t n;

	if (!s || !*s)
		return ckpt__fail(c, -EINVAL, "%s name is empty", what);
	n = strnlen(s, maxlen + 1);
	if (n > maxlen)
		return ckpt__fail(c, -EINVAL, "%s name is longer than %zu bytes",
				  what, maxlen);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') ||
			     (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
		if (i == 0 && !alnum)
			return ckpt__fail(c, -EINVAL, "%s name '%s' must start "
					  "with a letter or digit", what, s);
		if (!alnum && ch != '_' && ch != '.' && ch != '-')
			return ckpt__fail(c, -EINVAL, "%s name '%s' may only "
					  "contain A-Z a-z 0-9 _ . -", what, s);
	}
	return 0;
}

/* Valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF)
 * without control characters. */
static bool ckpt__utf8_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;

	while (p < end) {
		unsigned ch = *p++, need, cp;

		if (ch < 0x20 || ch == 0x7f)
			return false;
		if (ch < 0x80)
			continue;
		if (ch >= 0xc2 && ch <= 0xdf)      { need = 1; cp = ch & 0x1f; }
		else if (ch >= 0xe0 && ch <= 0xef) { need = 2; cp = ch & 0x0f; }
		else if (ch >= 0xf0 && ch <= 0xf4) { need = 3; cp = ch & 0x07; }
		else
			return false;
		if ((size_t)(end - p) < need)
			return false;
		for (unsigned i = 0; i < need; i++, p++) {
			if ((*p & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (*p & 0x3f);
		}
		if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ||
		    (cp >= 0x80 && cp < 0xa0))
			return false;
	}
	return true;
}

int ckpt__check_tensor_name(ckpt_client *c, const char *s)
{
	size_t n;

	if (!s || !*s)
		return ckpt__fail(c, -EINVAL, "tensor name is empty");
	n = strnlen(s, CKPT__MAX_TENSOR + 1);
	if (n > CKPT__MAX_TENSOR)
		return ckpt__fail(c, -EINVAL, "tensor name is longer than %d "
				  "bytes", CKPT__MAX_TENSOR);
	if (!ckpt__utf8_ok(s, n))
		return ckpt__fail(c, -EINVAL, "tensor name is not valid UTF-8 "
				  "or contains control characters");
	if (strcmp(s, "__metadata__") == 0)
		return ckpt__fail(c, -EINVAL, "tensor name '__metadata__' is "
				  "reserved by safetensors");
	return 0;
}
