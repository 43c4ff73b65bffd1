/* fuzz_mfst.c - libFuzzer target for the manifest reader.  Beyond "no
 * crash": whatever parses must dump, the dump must parse back to the same
 * dump, and the fast tensor-table reader must agree with jansson alone
 * (the same result, error and dump). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mfst.h"

/* Parse with jansson alone: the same outcome as ret/err/m, or abort. */
static void same_as_jansson(const uint8_t *data, size_t size, int ret, const char *err,
			    const struct mfst *m)
{
	struct mfst *j = NULL;
	char jerr[256] = "", *a = NULL, *b = NULL;
	size_t la = 0, lb = 0;
	int jret;

	mfst_parse_fast = 0;
	jret = mfst_parse((const char *)data, size, &j, jerr, sizeof(jerr));
	mfst_parse_fast = 1;
	if (jret != ret || (ret < 0 && strcmp(err, jerr)))
		abort();
	if (ret == 0 && (mfst_dump(m, &a, &la) < 0 || mfst_dump(j, &b, &lb) < 0 ||
			 la != lb || memcmp(a, b, la)))
		abort();
	free(a);
	free(b);
	mfst_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mfst *m = NULL, *m2 = NULL;
	char err[256] = "", *s = NULL, *s2 = NULL;
	size_t len, len2;
	int ret = mfst_parse((const char *)data, size, &m, err, sizeof(err));

	same_as_jansson(data, size, ret, err, m);
	if (ret < 0)
		return 0;
	if (mfst_dump(m, &s, &len) < 0)
		abort();                 /* parse accepted what dump refuses */
	if (mfst_parse(s, len, &m2, err, sizeof(err)) < 0)
		abort();
	if (mfst_dump(m2, &s2, &len2) < 0 || len != len2 || memcmp(s, s2, len))
		abort();
	free(s2);
	free(s);
	mfst_free(m2);
	mfst_free(m);
	return 0;
}
