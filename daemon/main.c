/* main.c - ckptd: command line, configuration, start-up. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "csum.h"
#include "fail.h"
#include "log.h"
#include "remote.h"
#include "root.h"
#include "sha.h"
#include "srv.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ckptd [-c FILE] [-n] [-d] [-h] [--help-config] [--version]\n"
		"  -c FILE        configuration (JSON); built-in defaults without it\n"
		"  -n             check the configuration and exit (like nginx -t)\n"
		"  -d             debug logging\n"
		"  --help-config  list every configuration key with its default\n"
		"Runs in the foreground; logs to stderr.  SIGTERM drains accepted saves,\n"
		"SIGHUP reloads the configuration.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"help-config", no_argument, NULL, 'C'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *path = NULL;
	int check_only = 0, debug = 0, c, r;
	struct config cfg;
	struct srv S;
	char err[512];

	while ((c = getopt_long(argc, argv, "c:ndh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': path = optarg; break;
		case 'n': check_only = 1; break;
		case 'd': debug = 1; break;
		case 'h': usage(stdout); return 0;
		case 'C': config_print_help(); return 0;
		case 'V': printf("ckptd %s\n", CKPT_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	log_init(LOG_LVL_INFO);
	if (path) {
		if (config_load(path, &cfg, err, sizeof(err)) < 0) {
			fprintf(stderr, "ckptd: %s: %s\n", path, err);
			return 1;
		}
	} else {
		config_defaults(&cfg);
	}
	if (check_only) {
		/* what start-up would refuse, found without changing anything */
		if (root_check(cfg.root, err, sizeof(err)) < 0 ||
		    srv_socket_check(cfg.socket, err, sizeof(err)) < 0 ||
		    remote_check(&cfg, err, sizeof(err)) < 0) {
			fprintf(stderr, "ckptd: %s: %s\n", path ? path : "(built-in)", err);
			return 1;
		}
		if (cfg.incremental && cfg.chunk_bytes % CSUM_CHUNK_BYTES)
			fprintf(stderr, "ckptd: note: chunk_bytes is not a whole number of MiB: "
				"incremental saves write changed files whole (no range clones)\n");
		printf("ckptd: configuration %s is valid\n", path ? path : "(built-in)");
		return 0;
	}
	log_set_level(debug ? LOG_LVL_DEBUG : log_level_parse(cfg.log_level));
	fail_setup();
	sha_setup();
	if ((r = srv_init(&S, &cfg, path)) < 0)
		fatalx("cannot start: %s", strerror(-r));
	return srv_run(&S);
}
