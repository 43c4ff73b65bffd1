/* fuzz_mfst.c - libFuzzer target for the manifest reader.  Beyond "no
 * crash": whatever parses must dump, and the dump must parse back to the
 * same dump. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mfst.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mfst *m = NULL, *m2 = NULL;
	char err[256], *s = NULL, *s2 = NULL;
	size_t len, len2;

	if (mfst_parse((const char *)data, size, &m, err, sizeof(err)) < 0)
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
