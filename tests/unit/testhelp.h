/* testhelp.h - a tiny unit-test table runner (in the spirit of Redis'
 * testhelp.h).  Each test binary defines `static const struct test tests[]`
 * and calls TEST_MAIN(tests).  A test returns 0 on pass, 77 to skip, other
 * values on failure.  Output: one "PASS/FAIL/SKIP name" line per test, then
 * "N passed, N failed, N skipped". */
#ifndef CKPT_TESTHELP_H
#define CKPT_TESTHELP_H

#include <stdio.h>
#include <string.h>

struct test {
	const char *name;
	int (*fn)(void);
};

#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "    %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
	return 1; } } while (0)
#define CHECK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
	if (_a != _b) { fprintf(stderr, "    %s:%d: %s == %lld, expected %s == %lld\n", \
	__FILE__, __LINE__, #a, _a, #b, _b); return 1; } } while (0)
#define SKIP(why) do { fprintf(stderr, "    skip: %s\n", why); return 77; } while (0)

static inline int test_main(const struct test *t, size_t n, int argc, char **argv)
{
	int pass = 0, fail = 0, skip = 0;
	for (size_t i = 0; i < n; i++) {
		if (argc > 1 && !strstr(t[i].name, argv[1]))
			continue;
		fflush(stdout);
		int r = t[i].fn();
		const char *word = r == 0 ? "PASS" : r == 77 ? "SKIP" : "FAIL";
		if (r == 0) pass++; else if (r == 77) skip++; else fail++;
		printf("%s %s\n", word, t[i].name);
	}
	printf("%d passed, %d failed, %d skipped\n", pass, fail, skip);
	return fail ? 1 : 0;
}
#define TEST_MAIN(tbl) int main(int argc, char **argv) \
	{ return test_main(tbl, sizeof(tbl) / sizeof(tbl[0]), argc, argv); }

#endif
