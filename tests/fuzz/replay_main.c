/* replay_main.c - run a libFuzzer target over a corpus without libFuzzer.
 *
 * `make test` links this with each fuzz_<t>.c so that every corpus input
 * (and every input that once found a bug) is replayed on every build, with
 * whatever compiler and sanitizers the build uses.  Arguments are files or
 * directories (searched recursively, in sorted order).  A crash in the
 * target is the failure; this program only fails itself when an input
 * cannot be read or there are no inputs at all.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a target, as in libFuzzer. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static unsigned long replayed;

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL, *nbuf;
	size_t len = 0, cap = 0, n;

	if (!f) {
		fprintf(stderr, "replay: cannot open '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	do {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			nbuf = realloc(buf, cap);
			if (!nbuf) {
				fprintf(stderr, "replay: '%s': out of memory\n", path);
				free(buf);
				fclose(f);
				return -1;
			}
			buf = nbuf;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "replay: cannot read '%s'\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	/* An exact-size copy, so that ASan sees reads past the input. */
	nbuf = malloc(len ? len : 1);
	if (!nbuf) {
		free(buf);
		return -1;
	}
	memcpy(nbuf, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(nbuf, len);
	free(nbuf);
	replayed++;
	return 0;
}

static int replay_path(const char *path)
{
	struct dirent **ents;
	struct stat st;
	int n, rc = 0;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "replay: cannot stat '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path);
	n = scandir(path, &ents, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "replay: cannot list '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		const char *name = ents[i]->d_name;
		char *sub;

		/* Skip ".", ".." and dot files (editor and VCS leftovers). */
		if (name[0] != '.' && !rc) {
			if (asprintf(&sub, "%s/%s", path, name) < 0) {
				rc = -1;
			} else {
				rc = replay_path(sub);
				free(sub);
			}
		}
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i]) < 0)
			return 1;
	printf("replayed %lu inputs\n", replayed);
	if (replayed == 0) {
		fprintf(stderr, "replay: no inputs found\n");
		return 1;
	}
	return 0;
}
