# fuzz.mk - fuzz targets, included from the top Makefile (which defines
# B, CC, CFLAGS, LDFLAGS, LIBS, Q and the $(B)/%.o rule).
#
# Each target <t> has tests/fuzz/fuzz_<t>.c (LLVMFuzzerTestOneInput) and a
# corpus in tests/fuzz/corpus/<t>/, and sets:
#   FUZZ_OBJ_<t>  objects the replay binary links (built with $(CC) $(CFLAGS))
#   FUZZ_SRC_<t>  sources the libFuzzer binary compiles itself, so that they
#                 are instrumented for coverage and sanitizers
# Two binaries come out:
#   $(B)/fuzz/replay_<t>  any compiler, no libFuzzer: replays the corpus;
#                         `make test` runs these through tests/fuzz/replay.sh
#   $(B)/fuzz/fuzz_<t>    clang -fsanitize=fuzzer,address,undefined: `make fuzz`

FUZZ_TARGETS := proto

FUZZ_OBJ_proto = $(B)/proto/proto.o
FUZZ_SRC_proto = proto/proto.c

FUZZ_TIME   ?= 60
FUZZ_CC     ?= clang
FUZZ_CFLAGS ?= -g -O1
override FUZZ_CFLAGS += -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=undefined -std=gnu11 -D_GNU_SOURCE \
	-DCKPT_VERSION=\"$(VERSION)\" \
	-I. -Iproto -Ishm -Idaemon -Iclient \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)

# Recursive, so targets added later in this file (or after the include)
# are in them.
FUZZ_REPLAY_BINS = $(FUZZ_TARGETS:%=$(B)/fuzz/replay_%)
FUZZ_BINS        = $(FUZZ_TARGETS:%=$(B)/fuzz/fuzz_%)

# Per-target prerequisites in pattern rules need a second expansion.
.SECONDEXPANSION:

$(B)/fuzz/replay_%: tests/fuzz/replay_main.c tests/fuzz/fuzz_%.c $$(FUZZ_OBJ_$$*)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ tests/fuzz/replay_main.c \
		tests/fuzz/fuzz_$*.c $(FUZZ_OBJ_$*) $(LIBS)

$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $$(FUZZ_SRC_$$*)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZCC  $@")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_SRC_$*) $(LIBS)

fuzz-bins: $(FUZZ_BINS)

# Replays every corpus (what `make test` does, on its own).
fuzz-replay: $(FUZZ_REPLAY_BINS)
	@B=$(B) tests/fuzz/replay.sh

# Fuzz each target (or FUZZ_TARGET=name) for FUZZ_TIME seconds on a copy of
# its corpus, so the checked-in corpus only changes when someone chooses to
# merge new inputs (fuzz_<t> -merge=1 tests/fuzz/corpus/<t> $(B)/fuzz/corpus_<t>).
# tests/fuzz/plateau.sh prints executions, coverage and how long coverage
# has been flat; logs in $(B)/fuzz/<t>.log, crashes in $(B)/fuzz/artifacts/.
fuzz: $(FUZZ_BINS)
	@set -e; for t in $(or $(FUZZ_TARGET),$(FUZZ_TARGETS)); do \
		echo "  FUZZ    $$t for $(FUZZ_TIME)s"; \
		tests/fuzz/plateau.sh $$t $(FUZZ_TIME) $(B); \
	done

.PHONY: fuzz fuzz-bins fuzz-replay

# Checkpoint-format parsers (manifest, safetensors header).
FUZZ_TARGETS += mfst safet
FUZZ_OBJ_mfst  = $(B)/daemon/mfst.o $(B)/daemon/mfst_check.o $(B)/daemon/mfst_v2.o \
	$(B)/daemon/mfst_fast.o $(B)/daemon/jscan.o $(B)/daemon/jtext.o \
	$(B)/daemon/tiling.o $(B)/daemon/csum.o $(B)/daemon/names.o \
	$(B)/daemon/safet.o $(B)/daemon/sha.o $(B)/daemon/digest.o $(B)/daemon/io.o $(B)/daemon/fail.o \
	$(B)/daemon/errbuf.o $(B)/daemon/layout.o $(B)/proto/nidx.o
FUZZ_SRC_mfst  = daemon/mfst.c daemon/mfst_check.c daemon/mfst_v2.c daemon/tiling.c \
	daemon/mfst_fast.c daemon/jscan.c daemon/jtext.c \
	daemon/csum.c daemon/names.c daemon/safet.c \
	daemon/sha.c daemon/digest.c daemon/io.c daemon/fail.c daemon/errbuf.c daemon/layout.c \
	proto/nidx.c
FUZZ_OBJ_safet = $(B)/daemon/safet.o $(B)/daemon/jscan.o $(B)/daemon/jtext.o $(B)/daemon/errbuf.o
FUZZ_SRC_safet = daemon/safet.c daemon/jscan.c daemon/jtext.c daemon/errbuf.c

# Config parser (daemon/config.c; it logs through log.c).
FUZZ_TARGETS += config
FUZZ_OBJ_config = $(B)/daemon/config.o $(B)/daemon/log.o
FUZZ_SRC_config = daemon/config.c daemon/log.c

# The session layer: the whole daemon in-process (single-node, so coord.c
# is built without MPI), fed message sequences with fds.
FUZZ_TARGETS += session
FUZZ_OBJ_session = $(filter-out $(B)/daemon/main.o $(B)/daemon/coord.o $(B)/daemon/coord_step.o $(B)/daemon/coord_repl.o,$(DAEMON_OBJ)) \
	$(B)/daemon/coord-nompi.o $(STORE_OBJ) $(SHM_OBJ) $(PROTO_OBJ)
FUZZ_SRC_session = $(filter-out daemon/main.c daemon/remote_none.c,$(wildcard daemon/*.c)) \
	$(wildcard shm/*.c) proto/proto.c proto/nidx.c proto/hex.c

# Prerequisites of a rule expand when the rule is read, so the lists above
# hold only the targets known then: name every target's binaries again here,
# after all the FUZZ_TARGETS += lines (keep this block last).
fuzz fuzz-bins: $(FUZZ_TARGETS:%=$(B)/fuzz/fuzz_%)
fuzz-replay: $(FUZZ_TARGETS:%=$(B)/fuzz/replay_%)
