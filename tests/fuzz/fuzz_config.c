/* fuzz_config.c - libFuzzer target for the config parser (config_parse).
 * Beyond "no crash": a rejected document leaves the output untouched and
 * says why; an accepted one gives a config that parses again identically
 * when fed back as the same document. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config a, b, keep;
	char err[256];
	int r;

	memset(&a, 0x5a, sizeof(a));
	keep = a;
	err[0] = '\0';
	r = config_parse((const char *)data, size, &a, err, sizeof(err));
	if (r < 0) {
		if (memcmp(&a, &keep, sizeof(a)))
			abort();         /* *out must be untouched on failure */
		if (!err[0] || !memchr(err, '\0', sizeof(err)))
			abort();         /* a failure says why */
		return 0;
	}
	if (r != 0)
		abort();
	/* deterministic: the same input gives the same config */
	memset(&b, 0, sizeof(b));
	if (config_parse((const char *)data, size, &b, err, sizeof(err)) != 0)
		abort();
	{
		char diff[512];
		config_diff(&a, &b, diff, sizeof(diff));
		if (diff[0])
			abort();
	}
	return 0;
}
