/* names.c - the whitelist for names that become path components, and the
 * (looser) rules for tensor names, which only ever live inside JSON. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "errbuf.h"
#include "names.h"

static int bad_name(char *msg, size_t msglen, const char *what)
{
	return errbuf_fail(msg, msglen, -EINVAL, "%s", what);
}

/* ASCII only: isalnum() would follow the locale. */
static int is_alnum(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
	       (c >= 'a' && c <= 'z');
}

int name_check(const char *s, size_t maxlen, char *msg, size_t msglen)
{
	size_t len;

	if (!s)
		return bad_name(msg, msglen, "missing");
	len = strnlen(s, maxlen + 1);
	if (len == 0)
		return bad_name(msg, msglen, "empty");
	if (len > maxlen)
		return bad_name(msg, msglen, "too long");
	/* A leading letter or digit rules out ".", "..", hidden files and
	 * names that look like options. */
	if (!is_alnum((unsigned char)s[0]))
		return bad_name(msg, msglen, "must start with a letter or digit");
	for (size_t i = 1; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!is_alnum(c) && c != '_' && c != '.' && c != '-')
			return bad_name(msg, msglen, "may contain only A-Z a-z 0-9 _ . -");
	}
	return 0;
}

int name_check_group(const char *s, char *msg, size_t msglen)
{
	static const char own[] = "checkpoint_manifest.json";   /* MFST_NAME */
	int r = name_check(s, NAME_MAX_GROUP, msg, msglen);

	if (r == 0 && strncmp(s, own, sizeof(own) - 1) == 0)
		return bad_name(msg, msglen, "\"checkpoint_manifest.json\" is ckptd's "
				"manifest in each step");
	return r;
}

/* Length of the UTF-8 sequence at p (at most n bytes available), 0 if it is
 * malformed: truncated, overlong, a surrogate or beyond U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t n, unsigned long *cp)
{
	unsigned char c = p[0];
	unsigned char lo = 0x80, hi = 0xBF;   /* range of the 2nd byte */
	size_t len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		if (c == 0xE0)
			lo = 0xA0;            /* overlong */
		else if (c == 0xED)
			hi = 0x9F;            /* surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		if (c == 0xF0)
			lo = 0x90;            /* overlong */
		else if (c == 0xF4)
			hi = 0x8F;            /* > U+10FFFF */
	} else {
		return 0;                     /* continuation, C0/C1, F5.. */
	}
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	*cp = c & (0xFF >> (len + 1));
	*cp = (*cp << 6) | (p[1] & 0x3F);
	for (size_t i = 2; i < len; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		*cp = (*cp << 6) | (p[i] & 0x3F);
	}
	return len;
}

int name_check_tensor(const char *s, char *msg, size_t msglen)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len, i = 0;

	if (!s)
		return bad_name(msg, msglen, "missing");
	len = strnlen(s, NAME_MAX_TENSOR + 1);
	if (len == 0)
		return bad_name(msg, msglen, "empty");
	if (len > NAME_MAX_TENSOR)
		return bad_name(msg, msglen, "too long");
	if (strcmp(s, "__metadata__") == 0)
		return bad_name(msg, msglen, "\"__metadata__\" is reserved by safetensors");
	while (i < len) {
		unsigned long cp;
		size_t n = utf8_seq(p + i, len - i, &cp);

		if (n == 0)
			return bad_name(msg, msglen, "not valid UTF-8");
		/* C0, DEL and C1: invisible in logs and error messages. */
		if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
			return bad_name(msg, msglen, "contains a control character");
		i += n;
	}
	return 0;
}
