/* ckptctl.c - the operator's tool: looks at a running ckptd (status, top,
 * list), drives it (flush, prune) and verifies checkpoint directories
 * offline.  This file is its command line: one table of commands (their
 * help, options and handler), option parsing, help and dispatch; ctl.h
 * lists the other files.
 *
 * It speaks the wire protocol through libckpt's transport (HELLO with role
 * "ctl"); `verify` needs no daemon at all.  Every command has --json.  Exit
 * status: 0 success, 1 the operation failed (daemon error, failed flush, a
 * checkpoint that does not verify), 2 usage errors and an unreachable
 * daemon.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

const char *ctl_socket;

void die(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("ckptctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static void check_verify(const struct ctl_opts *o)
{
	if (!o->dir)
		die(EXIT_USAGE, "verify: which directory? (ckptctl verify DIR)");
}

static void check_prune(const struct ctl_opts *o)
{
	if (!o->job || o->keep < 1)
		die(EXIT_USAGE, "prune: needs --job J and --keep N (N >= 1)");
}

static void check_push(const struct ctl_opts *o)
{
	if (!o->job || o->step < 0)
		die(EXIT_USAGE, "push: needs --job J and --step N");
}

static void check_pull(const struct ctl_opts *o)
{
	if (!o->job)
		die(EXIT_USAGE, "pull: needs --job J");
}

static int help_main(int argc, char **argv);
static int cmd_help(const char *name);

enum {
	CTL_DAEMON  = 1 << 0,   /* connects to ckptd before run() */
	CTL_WATCH   = 1 << 1,   /* status redrawn every interval (top) */
	CTL_OPERAND = 1 << 2,   /* takes one operand (verify DIR) */
};

/* Every command: its help, the long options it takes, and what runs it.
 * run() gets the parsed options (and a connection when CTL_DAEMON) and
 * returns the exit status; main(), where set, takes the arguments as they
 * are instead.  The help lists the commands in this order. */
struct ctl_cmd {
	const char *name, *synopsis, *text;
	const char *opts;
	unsigned    flags;
	void (*check)(const struct ctl_opts *o);   /* usage, before connecting */
	int  (*run)(struct ctl *c, const struct ctl_opts *o);
	int  (*main)(int argc, char **argv);
};

static const struct ctl_cmd ctl_cmds[] = {
	{ "status", "status [--json] [--watch [--interval S] [--count N]]",
	  "Show the daemon at a glance: version, uptime, I/O back-end, staging\n"
	  "pool usage, clients, bytes written and the write rate, saves\n"
	  "committed and failed; then every job (owner, world size, ranks\n"
	  "connected, last committed step and its age) and the saves in flight\n"
	  "(phase, ranks saved/staged/durable, size, progress).\n"
	  "  --json         print the daemon's status object as it is\n"
	  "  -w, --watch    refresh until interrupted (same as 'ckptctl top');\n"
	  "                 with --json, one object per line\n"
	  "  -i, --interval S   seconds between refreshes (default 1)\n"
	  "  -n, --count N  stop after N refreshes\n"
	  "example:\n"
	  "  ckptctl status\n"
	  "  ckptctl status --json | jq '.jobs[].last_committed_step'\n",
	  "json watch interval count", CTL_DAEMON, NULL, cmd_status, NULL },
	{ "top", "top [--interval S] [--count N] [--json]",
	  "Live view: 'status' redrawn in place every interval on a terminal\n"
	  "(a new block per refresh when not a terminal).  Ctrl-C quits.\n"
	  "  -i, --interval S   seconds between refreshes (default 1)\n"
	  "  -n, --count N      stop after N refreshes\n"
	  "  --json             one status object per line\n",
	  "json interval count", CTL_DAEMON | CTL_WATCH, NULL, cmd_status, NULL },
	{ "flush", "flush [--job J] [--timeout S] [--json]",
	  "Wait until every save accepted so far (of job J, or of all jobs) is\n"
	  "committed or failed: run it before maintenance.  On a terminal a\n"
	  "progress bar (bytes written of the saves in flight) is drawn on\n"
	  "stderr; otherwise plain progress lines, at most one a second.\n"
	  "Exits 0 only if none failed and all finished in time.\n"
	  "  --job J       only this job\n"
	  "  --timeout S   give up after S seconds (default 600)\n"
	  "  --json        no progress; print {\"committed\":n, \"failed\":n, \"ok\":b}\n"
	  "example:\n"
	  "  ckptctl flush --timeout 300 && systemctl stop ckptd\n",
	  "job timeout json", CTL_DAEMON, NULL, cmd_flush, NULL },
	{ "list", "list [--job J] [--remote] [--json]",
	  "List the committed checkpoints on disk, newest first per job;\n"
	  "'*' marks each job's latest.  Only jobs of your user (root: all).\n"
	  "  --job J     only this job\n"
	  "  --remote    those in the object store instead (complete steps\n"
	  "              only: a step is there once its manifest is)\n"
	  "  --timeout S give up after S seconds (--remote; default 600)\n"
	  "  --json      print the daemon's reply as it is\n",
	  "job json remote timeout", CTL_DAEMON, NULL, cmd_list, NULL },
	{ "push", "push --job J --step N [--json]",
	  "Queue step N of job J for upload to the object store now (whatever\n"
	  "remote_every says); 'ckptctl status' shows the progress.\n",
	  "job step json", CTL_DAEMON, check_push, cmd_push, NULL },
	{ "pull", "pull --job J [--step N] [--timeout S] [--json]",
	  "Download step N (default: the remote's latest) of job J from the\n"
	  "object store, verify every file against its manifest and publish it\n"
	  "under the root, ahead of a restore (which would otherwise do it when\n"
	  "no local checkpoint verifies).  A missing job is made for your user.\n"
	  "  --timeout S   give up waiting after S seconds (default 600)\n"
	  "example:\n"
	  "  ckptctl pull --job llama && ckptctl list --job llama\n",
	  "job step timeout json", CTL_DAEMON, check_pull, cmd_pull, NULL },
	{ "verify", "verify DIR [--quick] [--json]",
	  "Verify a checkpoint directory (iter_NNNNNNNNN) without the daemon:\n"
	  "manifest, file sizes, digests (XXH3-128 or SHA-256, as the manifest\n"
	  "says) and safetensors headers.  Given a\n"
	  "job directory, verify each of its checkpoints, newest first, and\n"
	  "name the newest good one.  Exits 1 if any checkpoint fails.\n"
	  "  --quick   structure and sizes only, no hashing\n"
	  "  --json    machine-readable results\n"
	  "example:\n"
	  "  ckptctl verify /var/lib/ckpt/llama/iter_000001200\n",
	  "quick json", CTL_OPERAND, check_verify, cmd_verify, NULL },
	{ "export", "export ITER_DIR OUT_DIR [--group G] [--max-shard-size 5GB]",
	  "Write the global tensors (ckpt_register_global) of a checkpoint's\n"
	  "group as whole tensors in the Hugging Face layout, without the daemon:\n"
	  "OUT_DIR/model-00001-of-0000N.safetensors (metadata {\"format\": \"pt\"})\n"
	  "and model.safetensors.index.json.  Streams: memory stays bounded\n"
	  "(64 MiB slabs), every byte read is checked against its chunk's\n"
	  "CRC32C.  Existing files in OUT_DIR are never overwritten.  Rank-local\n"
	  "tensors cannot be exported and are listed as skipped.  A progress\n"
	  "bar is drawn on a terminal.\n"
	  "  --group G             the group (default: the only one with global tensors)\n"
	  "  --max-shard-size S    shards of at most S (5GB, 500MiB...; default 5GB);\n"
	  "                        a larger tensor gets a shard of its own\n"
	  "example:\n"
	  "  ckptctl export /var/lib/ckpt/llama/iter_000001200 ./llama-hf --group model\n",
	  "", 0, NULL, NULL, export_main },
	{ "prune", "prune --job J --keep N [--json]",
	  "Remove all but the newest N committed checkpoints of job J (the\n"
	  "latest is always kept; only checkpoints of the job's own run).\n"
	  "  --json    print {\"removed\":[steps]}\n",
	  "job keep json", CTL_DAEMON, check_prune, cmd_prune, NULL },
	{ "help", "help [COMMAND]", "Show help for a command.\n",
	  "", 0, NULL, NULL, help_main },
};
#define NCMDS (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))

static const struct ctl_cmd *cmd_find(const char *name)
{
	for (size_t i = 0; i < NCMDS; i++)
		if (strcmp(ctl_cmds[i].name, name) == 0)
			return &ctl_cmds[i];
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ckptctl [-s SOCKET] COMMAND [options]\n\n"
		"Operate the node-local checkpoint daemon ckptd.\n\ncommands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %s\n", ctl_cmds[i].synopsis);
	fprintf(f, "\noptions:\n"
		"  -s, --socket SOCKET   ckptd's socket (default $CKPT_SOCKET, "
		"else %s)\n"
		"  -h, --help            this help; 'ckptctl help COMMAND' for "
		"one command\n"
		"      --version         print the version\n"
		"\nexit status: 0 ok, 1 the operation failed, 2 usage error or "
		"ckptd unreachable.\n"
		"See ckptctl(1), ckptd(8) and ckptd.json(5).\n",
		CKPT_DEFAULT_SOCKET);
}

int ctl_help(const char *cmd)
{
	return cmd_help(cmd);
}

static int cmd_help(const char *name)
{
	const struct ctl_cmd *cmd;

	if (!name) {
		usage(stdout);
		return 0;
	}
	if (!(cmd = cmd_find(name)))
		die(EXIT_USAGE, "unknown command '%s' (try 'ckptctl --help')",
		    name);
	printf("usage: ckptctl %s\n\n%s", cmd->synopsis, cmd->text);
	return 0;
}

static int help_main(int argc, char **argv)
{
	if (argc > 2)
		die(EXIT_USAGE, "help: one command at most");
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
		return cmd_help("help");
	return cmd_help(argc > 1 ? argv[1] : NULL);
}

static long parse_long(const char *cmd, const char *opt, const char *s,
		       long min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min)
		die(EXIT_USAGE, "%s: %s wants a whole number >= %ld, not '%s'",
		    cmd, opt, min, s);
	return v;
}

static double parse_seconds(const char *cmd, const char *opt, const char *s,
			    double min)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min) || v > 86400.0 * 365)
		die(EXIT_USAGE, "%s: %s wants seconds (>= %g), not '%s'", cmd,
		    opt, min, s);
	return v;
}

/* Is word in the blank-separated list? */
static bool word_in(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return true;
	return false;
}

/* Parse the options of cmd; "allowed" lists the long options it takes,
 * operand whether it takes one operand (a directory). */
static void parse_opts(const char *cmd, const char *allowed, bool operand,
		       int argc, char **argv, struct ctl_opts *o)
{
	static const struct option lo[] = {
		{ "job", required_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "keep", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'J' },
		{ "quick", no_argument, NULL, 'q' },
		{ "watch", no_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "remote", no_argument, NULL, 'R' },
		{ "step", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(o, 0, sizeof(*o));
	o->timeout_s = CTL_FLUSH_DEFAULT_S;
	o->interval_s = 1;
	o->keep = -1;
	o->step = -1;
	optind = 0;         /* glibc: restart scanning, permuting operands */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "hwi:n:j:", lo, NULL)) != -1) {
		const char *name = NULL;

		for (int i = 0; lo[i].name; i++)
			if (lo[i].val == ch)
				name = lo[i].name;
		if (ch == 'h')
			exit(cmd_help(cmd));
		if (!name || !word_in(allowed, name))
			die(EXIT_USAGE, "%s: unknown or incomplete option '%s' "
			    "(try 'ckptctl help %s')", cmd, argv[optind - 1],
			    cmd);
		switch (ch) {
		case 'j': {   /* a name ckptd would refuse is a usage error */
			static ckpt_client why;       /* holds the message only */
			if (ckpt__check_name(&why, "job", optarg, CKPT__MAX_JOB) < 0)
				die(EXIT_USAGE, "%s: --job: %s", cmd, why.err);
			o->job = optarg;
			break;
		}
		case 't':
			o->timeout_s = parse_seconds(cmd, "--timeout", optarg, 0);
			break;
		case 'k': o->keep = parse_long(cmd, "--keep", optarg, 1); break;
		case 'J': o->json = true; break;
		case 'q': o->quick = true; break;
		case 'w': o->watch = true; break;
		case 'i':
			o->interval_s = parse_seconds(cmd, "--interval", optarg, 0.1);
			break;
		case 'n': o->count = parse_long(cmd, "--count", optarg, 1); break;
		case 'R': o->remote = true; break;
		case 'S': o->step = parse_long(cmd, "--step", optarg, 0); break;
		}
	}
	if (optind < argc && operand)
		o->dir = argv[optind++];
	if (optind < argc)
		die(EXIT_USAGE, "%s: unexpected argument '%s'", cmd,
		    argv[optind]);
}

/* Run one command with its arguments (argv[0] is its name). */
static int run_cmd(const struct ctl_cmd *cmd, int argc, char **argv)
{
	struct ctl_opts o;
	struct ctl c;
	int rc;

	if (cmd->main)
		return cmd->main(argc, argv);
	parse_opts(cmd->name, cmd->opts, cmd->flags & CTL_OPERAND, argc, argv,
		   &o);
	if (cmd->flags & CTL_WATCH)
		o.watch = true;
	if (cmd->check)
		cmd->check(&o);
	if (!(cmd->flags & CTL_DAEMON))
		return cmd->run(NULL, &o);
	ctl_connect(&c);
	rc = cmd->run(&c, &o);
	ctl_close(&c);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const struct ctl_cmd *cmd;
	int ch;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+s:h", lo, NULL)) != -1) {
		switch (ch) {
		case 's': ctl_socket = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V':
			printf("ckptctl %s (protocol %d)\n", CKPT_VERSION,
			       PROTO_VERSION);
			return 0;
		default:
			die(EXIT_USAGE, "unknown or incomplete option '%s' (try "
			    "'ckptctl --help')", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!ctl_socket || !*ctl_socket)
		ctl_socket = getenv("CKPT_SOCKET");
	if (!ctl_socket || !*ctl_socket)
		ctl_socket = CKPT_DEFAULT_SOCKET;

	if (!(cmd = cmd_find(argv[optind])))
		die(EXIT_USAGE, "unknown command '%s' (try 'ckptctl --help')",
		    argv[optind]);
	return run_cmd(cmd, argc - optind, argv + optind);
}
