# ckpt - node-local checkpoint daemon.  `make help` lists the targets.

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCDIR     ?= $(PREFIX)/include
PKGDIR     ?= $(LIBDIR)/pkgconfig
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
DOCDIR     ?= $(PREFIX)/share/doc/ckpt
PYTHON     ?= /usr/bin/python3
PYVER      := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
# Debian: /usr/lib/python3/dist-packages for PREFIX=/usr, versioned under /usr/local
PYDIR      ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)
DESTDIR    ?=
VERSION    := 0.1.0

CC         ?= cc
CFLAGS     ?= -O2 -g
PKGS       := libuv liburing libcrypto jansson libxxhash libcurl libxml-2.0
override CFLAGS += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fPIC \
	-D_GNU_SOURCE -DCKPT_VERSION=\"$(VERSION)\" -MMD -MP \
	-I. -Iproto -Ishm -Idaemon -Iclient \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LIBS       := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -ldl
ifneq ($(SANITIZE),)
override CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
override LDFLAGS += -fsanitize=$(SANITIZE)
endif
ifeq ($(V),1)
Q :=
else
Q := @
endif

B := build

PROTO_OBJ  := $(B)/proto/proto.o $(B)/proto/nidx.o $(B)/proto/hex.o
SHM_OBJ    := $(B)/shm/shm_region.o $(B)/shm/shm_pool.o
# Checkpoint format code shared by ckptd and `ckptctl verify`.
STORE_OBJ  := $(B)/daemon/sha.o $(B)/daemon/digest.o $(B)/daemon/names.o $(B)/daemon/safet.o \
	$(B)/daemon/jscan.o $(B)/daemon/jtext.o \
	$(B)/daemon/mfst.o $(B)/daemon/mfst_check.o $(B)/daemon/mfst_v2.o $(B)/daemon/mfst_fast.o \
	$(B)/daemon/tiling.o $(B)/daemon/reshard.o $(B)/daemon/verify.o \
	$(B)/daemon/layout.o $(B)/daemon/io.o $(B)/daemon/fail.o $(B)/daemon/errbuf.o \
	$(B)/daemon/csum.o $(B)/daemon/fcheck.o $(B)/daemon/rate.o
# The object-store tier (libcurl, libxml2).
REMOTE_OBJ := $(B)/daemon/remote.o $(B)/daemon/remote_creds.o $(B)/daemon/remote_xfer.o $(B)/daemon/remote_bucket.o \
	$(B)/daemon/remote_jrnl.o $(B)/daemon/s3.o
DAEMON_OBJ := $(B)/daemon/main.o $(B)/daemon/log.o $(B)/daemon/config.o \
	$(B)/daemon/srv.o $(B)/daemon/session.o $(B)/daemon/cmd.o \
	$(B)/daemon/ctl.o $(B)/daemon/ctl_remote.o $(B)/daemon/status.o $(B)/daemon/job.o $(B)/daemon/step.o \
	$(B)/daemon/flush.o \
	$(B)/daemon/stage.o $(B)/daemon/wr.o $(B)/daemon/store.o \
	$(B)/daemon/restore.o $(B)/daemon/restore_into.o $(B)/daemon/restore_reply.o $(B)/daemon/shard_read.o \
	$(B)/daemon/verdict.o $(B)/daemon/notify.o $(B)/daemon/gpu.o \
	$(B)/daemon/gpu_mem.o $(B)/daemon/gpu_sess.o $(B)/daemon/gpu_wire.o \
	$(B)/daemon/pipe.o $(B)/daemon/plan.o $(B)/daemon/prep.o $(B)/daemon/prior.o \
	$(B)/daemon/metrics.o $(B)/daemon/coord.o $(B)/daemon/coord_step.o \
	$(B)/daemon/coord_wire.o $(B)/daemon/coord_repl.o $(B)/daemon/root.o \
	$(B)/daemon/mcat.o $(B)/daemon/memflush.o $(B)/daemon/memt_peer.o $(B)/daemon/restore_peer.o \
	$(B)/daemon/perm.o \
	$(B)/daemon/commit.o $(B)/daemon/gtab.o $(B)/daemon/memt.o $(B)/daemon/memt_read.o $(B)/daemon/memt_spare.o $(B)/daemon/memt_splice.o $(B)/daemon/memt_lend.o $(B)/daemon/memt_fd.o \
	$(B)/daemon/treg.o $(REMOTE_OBJ)
# libckpt, one job per file (client/ckpt_int.h lists them).
CLIENT_OBJ := $(B)/client/ckpt_conn.o $(B)/client/ckpt_client.o \
	$(B)/client/ckpt_check.o $(B)/client/ckpt_mem.o $(B)/client/ckpt_save.o \
	$(B)/client/ckpt_restore.o $(B)/client/gpu_client.o $(B)/client/gpu_gates.o
# The CUDA source (the driver API, dlopen'ed: no CUDA toolkit needed to
# build); unit tests
# link it with libckpt's gpu_client.o to check both ends of the wire.
GPU_OBJ    := $(B)/daemon/gpu.o $(B)/daemon/gpu_mem.o $(B)/daemon/gpu_sess.o $(B)/daemon/gpu_wire.o \
	$(B)/client/gpu_client.o $(B)/client/gpu_gates.o
CTL_OBJ    := $(B)/client/ckptctl.o $(B)/client/ctl_conn.o $(B)/client/ctl_fmt.o \
	$(B)/client/ctl_status.o $(B)/client/ctl_flush.o $(B)/client/ctl_ckpts.o \
	$(B)/client/ctl_remote.o $(B)/client/ctl_export.o

UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
INTEG_SRC  := $(wildcard tests/integ/*.c)
INTEG_BIN  := $(patsubst tests/integ/%.c,$(B)/tests/%,$(INTEG_SRC))

BINS := ckptd ckptctl libckpt.so libckpt.a ckpt.pc

all: $(BINS)

# Objects rebuild when the flags change (e.g. SANITIZE=...), no clean needed.
FLAGS_STAMP := $(B)/.flags-$(shell echo '$(CC) $(CFLAGS) $(LDFLAGS)' | md5sum | cut -c1-12)
$(FLAGS_STAMP):
	@mkdir -p $(B) && rm -f $(B)/.flags-* && touch $@

$(B)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# Multi-node (cluster "mpi"): only coord.c sees MPI; without mpicc it is
# built as a stub that refuses cluster "mpi".
MPICC      ?= $(shell command -v mpicc 2>/dev/null)
MPI_CFLAGS := $(if $(MPICC),-DCKPT_HAVE_MPI $(shell $(MPICC) --showme:compile 2>/dev/null))
MPI_LIBS   := $(if $(MPICC),$(shell $(MPICC) --showme:link 2>/dev/null))

$(B)/daemon/coord.o $(B)/daemon/coord_step.o $(B)/daemon/coord_repl.o: $(B)/daemon/%.o: daemon/%.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(MPI_CFLAGS) -c -o $@ $<
# Single-node only, for builds without Open MPI (GPU bundle, fuzz target).
$(B)/daemon/coord-nompi.o: daemon/coord.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (no MPI)")
	$(Q)$(CC) $(CFLAGS) -MF $(B)/daemon/coord-nompi.d -c -o $@ $<

ckptd: $(DAEMON_OBJ) $(STORE_OBJ) $(SHM_OBJ) $(PROTO_OBJ)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(MPI_LIBS)

ckptctl: $(CTL_OBJ) $(STORE_OBJ) $(PROTO_OBJ) libckpt.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CTL_OBJ) $(STORE_OBJ) $(PROTO_OBJ) libckpt.a $(LIBS) -lm

libckpt.so: $(CLIENT_OBJ) $(SHM_OBJ) $(PROTO_OBJ) client/libckpt.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,libckpt.so.0 \
		-Wl,--version-script=client/libckpt.map -o $@ \
		$(CLIENT_OBJ) $(SHM_OBJ) $(PROTO_OBJ) -ljansson -lpthread -ldl

libckpt.a: $(CLIENT_OBJ) $(SHM_OBJ) $(PROTO_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

ckpt.pc: client/ckpt.pc.in Makefile
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|;s|@LIBDIR@|$(LIBDIR)|;s|@INCDIR@|$(INCDIR)|;s|@VERSION@|$(VERSION)|' $< > $@

# Unit tests link the module under test directly.
UNIT_OBJ := $(STORE_OBJ) $(SHM_OBJ) $(PROTO_OBJ) $(B)/daemon/config.o \
	$(B)/daemon/log.o $(B)/daemon/store.o $(B)/daemon/perm.o $(B)/daemon/commit.o \
	$(B)/daemon/gtab.o $(REMOTE_OBJ) $(GPU_OBJ)
# A test of a module above the format layer names it here.
UNIT_EXTRA_plan := $(B)/daemon/plan.o
UNIT_EXTRA_pipe := $(B)/daemon/pipe.o $(B)/daemon/plan.o $(B)/daemon/prior.o $(B)/daemon/stage.o $(B)/daemon/wr.o $(B)/daemon/memt.o $(B)/daemon/memt_read.o $(B)/daemon/memt_spare.o $(B)/daemon/memt_splice.o $(B)/daemon/memt_lend.o $(B)/daemon/memt_fd.o $(B)/daemon/notify.o
UNIT_EXTRA_shard_read := $(B)/daemon/shard_read.o
UNIT_EXTRA_memt := $(B)/daemon/memt.o $(B)/daemon/memt_read.o $(B)/daemon/memt_spare.o $(B)/daemon/memt_splice.o $(B)/daemon/memt_lend.o $(B)/daemon/memt_fd.o $(B)/daemon/memt_peer.o $(B)/daemon/notify.o \
	$(B)/tests/unit/memt_help.o
UNIT_EXTRA_memt_keep := $(UNIT_EXTRA_memt)
UNIT_EXTRA_treg := $(B)/daemon/treg.o
$(B)/tests/test_plan: $(UNIT_EXTRA_plan)
$(B)/tests/test_pipe: $(UNIT_EXTRA_pipe)
$(B)/tests/test_shard_read: $(UNIT_EXTRA_shard_read)
$(B)/tests/test_memt: $(UNIT_EXTRA_memt)
$(B)/tests/test_memt_keep: $(UNIT_EXTRA_memt_keep)
$(B)/tests/test_treg: $(UNIT_EXTRA_treg)
$(B)/tests/test_%: tests/unit/test_%.c tests/unit/testhelp.h $(FLAGS_STAMP) $(UNIT_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(UNIT_EXTRA_$*) $(UNIT_OBJ) $(LIBS)

# libckpt's own unit test links the library's objects (gpu_client.o among
# them) instead of the daemon's.
$(B)/tests/test_client: tests/unit/test_client.c tests/unit/testhelp.h $(FLAGS_STAMP) $(CLIENT_OBJ) $(SHM_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CLIENT_OBJ) $(SHM_OBJ) $(PROTO_OBJ) $(LIBS)

# Integration programs are clients of the real daemon.
$(B)/tests/%: tests/integ/%.c libckpt.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< libckpt.a $(LIBS)

include tests/fuzz/fuzz.mk
include tests/bench/bench.mk

# --- a bundle for a GPU machine (tests/gpu/run.sh) ---------------------------
# That machine has no libuv/liburing/jansson -dev files: ckptd links the
# Debian .a files it can find statically; bundle_libs.sh copies the shared
# libraries left (libuv.so.1, libckpt.so's libjansson.so.4) next to them
# (rpath $ORIGIN).  The test trainer uses the CUDA driver API only
# (dlopen("libcuda.so.1")), so it is built here with cc: no CUDA toolkit,
# no libcudart, on either machine.
GPU_BUNDLE := $(B)/gpu-bundle
bundle_a    = $(if $(filter /%,$(shell $(CC) -print-file-name=lib$(1).a)),$(shell $(CC) -print-file-name=lib$(1).a),-l$(1))
# (no Open MPI there either: coord.c is built single-node for the bundle)
# (nor libcurl/libxml2: remote_none.o refuses "remote")
BUNDLE_OBJ := $(filter-out $(B)/daemon/coord.o $(B)/daemon/coord_step.o $(B)/daemon/coord_repl.o $(REMOTE_OBJ),$(DAEMON_OBJ)) \
	$(B)/daemon/coord-nompi.o $(B)/daemon/remote_none.o
gpu-bundle: $(BUNDLE_OBJ) $(STORE_OBJ) $(SHM_OBJ) $(PROTO_OBJ) libckpt.a $(CLIENT_OBJ)
	@rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)
	@$(if $(Q),echo "  LD      $(GPU_BUNDLE)/ckptd")
	$(Q)$(CC) $(LDFLAGS) -o $(GPU_BUNDLE)/ckptd $(BUNDLE_OBJ) $(STORE_OBJ) $(SHM_OBJ) \
		$(PROTO_OBJ) -Wl,-rpath,'$$ORIGIN' $(call bundle_a,uring) $(call bundle_a,crypto) \
		$(call bundle_a,jansson) $(call bundle_a,xxhash) -luv -lpthread -ldl -lrt
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,libckpt.so.0 -Wl,--version-script=client/libckpt.map \
		-Wl,-rpath,'$$ORIGIN' -o $(GPU_BUNDLE)/libckpt.so $(CLIENT_OBJ) $(SHM_OBJ) $(PROTO_OBJ) \
		-ljansson -lpthread -ldl
	$(Q)cp libckpt.a client/ckpt.h $(GPU_BUNDLE)/
	$(Q)cp $(call bundle_a,jansson) $(GPU_BUNDLE)/libjansson.a
	$(Q)$(CC) -O2 -g -std=gnu11 -D_GNU_SOURCE -Idaemon -Iclient -o $(GPU_BUNDLE)/gpu_trainer \
		tests/gpu/gpu_trainer.c libckpt.a $(call bundle_a,jansson) -ldl -lpthread
	$(Q)tests/gpu/bundle_libs.sh $(GPU_BUNDLE)    # libuv.so.1, libjansson.so.4, ...
	@echo "  BUNDLE  $(GPU_BUNDLE): $$(ls $(GPU_BUNDLE) | tr '\n' ' ')"

# --- the CUDA driver simulator (a test double of libcuda.so.1) ----------------
# Tests run the real CUDA code of ckptd and libckpt against it
# (LD_LIBRARY_PATH=build/cudasim); see tests/cudasim/sim.h.
CUDASIM     := $(B)/cudasim/libcuda.so.1
CUDASIM_SRC := tests/cudasim/sim_dev.c tests/cudasim/sim_mem.c tests/cudasim/sim_stream.c \
	tests/cudasim/sim_watchdog.c
$(CUDASIM): $(CUDASIM_SRC) tests/cudasim/sim.h daemon/cuda_api.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@ (CUDA driver simulator)")
	$(Q)$(CC) $(CFLAGS) -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 \
		-MF $(B)/cudasim/libcuda.d -o $@ $(CUDASIM_SRC) -lpthread
$(B)/tests/test_cudasim: tests/cudasim/test_cudasim.c daemon/cuda_api.h tests/unit/testhelp.h $(CUDASIM)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -ldl -lpthread
# The test trainer: driver API only, the same program on the simulator and
# on a GPU (tests/gpu/run.sh).
$(B)/tests/gpu_trainer: tests/gpu/gpu_trainer.c daemon/cuda_api.h libckpt.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< libckpt.a $(LIBS)
cudasim: $(CUDASIM) $(B)/tests/test_cudasim $(B)/tests/gpu_trainer

test-bins: $(BINS) $(UNIT_BIN) $(INTEG_BIN) $(FUZZ_REPLAY_BINS) cudasim

# --- entry points ---------------------------------------------------------
deps:
	@tests/deps.sh

test: deps
	@$(MAKE) --no-print-directory test-bins
	@tests/run

demo: deps
	@$(MAKE) --no-print-directory $(BINS) $(INTEG_BIN)
	@tests/demo.sh

# The GPU and pipeline tests under ThreadSanitizer, built apart in build/tsan.
tsan:
	@tests/tsan.sh

bench: deps
	@$(MAKE) --no-print-directory $(BINS) $(INTEG_BIN)
	@tests/bench/run

# How costs grow with ranks, bytes and tensors (~4 min on the 2-core VM, ~35 GB of disk)
bench-scale: deps
	@$(MAKE) --no-print-directory $(BINS) $(INTEG_BIN)
	@tests/bench/scale

# Units name the installed paths; the config is never overwritten (a newer
# default lands next to it as ckptd.json.dist).
INSTALL_SED := -e 's|/usr/bin/ckptd|$(BINDIR)/ckptd|g' -e 's|/etc/ckpt|$(SYSCONFDIR)/ckpt|g'
MANPAGES    := daemon/man/ckptd.8 daemon/man/ckptd.json.5 client/man/ckptctl.1 \
	client/man/ckpt_register_global.3
EXAMPLES    := $(wildcard configs/*.json)

install: $(BINS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(PKGDIR) \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) \
		$(DESTDIR)$(SYSCONFDIR)/ckpt $(DESTDIR)$(DOCDIR)/examples \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man8
	install -m 0755 ckptd ckptctl $(DESTDIR)$(BINDIR)/
	install -m 0755 libckpt.so $(DESTDIR)$(LIBDIR)/libckpt.so.$(VERSION)
	ln -sf libckpt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libckpt.so.0
	ln -sf libckpt.so.0 $(DESTDIR)$(LIBDIR)/libckpt.so
	install -m 0644 libckpt.a $(DESTDIR)$(LIBDIR)/
	install -m 0644 client/ckpt.h $(DESTDIR)$(INCDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|;s|@LIBDIR@|$(LIBDIR)|;s|@INCDIR@|$(INCDIR)|;s|@VERSION@|$(VERSION)|' \
		client/ckpt.pc.in > $(DESTDIR)$(PKGDIR)/ckpt.pc
	chmod 0644 $(DESTDIR)$(PKGDIR)/ckpt.pc
	for u in ckptd.service ckptd@.service; do \
		sed $(INSTALL_SED) systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	install -m 0644 systemd/ckpt.sysusers $(DESTDIR)$(SYSUSERSDIR)/ckpt.conf
	install -m 0644 systemd/ckpt.tmpfiles $(DESTDIR)$(TMPFILESDIR)/ckpt.conf
	install -m 0644 $(EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/
	if [ -e $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json ]; then \
		install -m 0644 configs/ckptd.json $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json.dist; \
	else \
		install -m 0644 configs/ckptd.json $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json; fi
	install -m 0644 client/man/ckptctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 client/man/ckpt_register_global.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 0644 daemon/man/ckptd.json.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 daemon/man/ckptd.8 $(DESTDIR)$(MANDIR)/man8/
	install -d $(DESTDIR)$(PYDIR)/ckpt
	install -m 0644 client/python/ckpt/__init__.py client/python/ckpt/_lib.py \
		client/python/ckpt/torch.py client/python/ckpt/dcp.py \
		client/python/ckpt/ondisk.py client/python/ckpt/torch_dist.py \
		client/python/ckpt/torch_restore.py $(DESTDIR)$(PYDIR)/ckpt/
	-[ -z "$(DESTDIR)" ] && ldconfig
	@echo "installed; as root: systemd-sysusers && systemd-tmpfiles --create ckpt.conf" \
		"&& systemctl daemon-reload && systemctl enable --now ckptd"

# The configuration stays when it was edited.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/ckptd $(DESTDIR)$(BINDIR)/ckptctl
	rm -f $(DESTDIR)$(LIBDIR)/libckpt.so $(DESTDIR)$(LIBDIR)/libckpt.so.0 \
	      $(DESTDIR)$(LIBDIR)/libckpt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libckpt.a
	rm -f $(DESTDIR)$(INCDIR)/ckpt.h $(DESTDIR)$(PKGDIR)/ckpt.pc
	rm -f $(DESTDIR)$(UNITDIR)/ckptd.service $(DESTDIR)$(UNITDIR)/ckptd@.service
	rm -f $(DESTDIR)$(SYSUSERSDIR)/ckpt.conf $(DESTDIR)$(TMPFILESDIR)/ckpt.conf
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(notdir $(EXAMPLES)))
	-rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null
	rm -f $(DESTDIR)$(MANDIR)/man1/ckptctl.1 $(DESTDIR)$(MANDIR)/man5/ckptd.json.5 \
	      $(DESTDIR)$(MANDIR)/man3/ckpt_register_global.3 \
	      $(DESTDIR)$(MANDIR)/man8/ckptd.8
	rm -f $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json.dist $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json.example
	if cmp -s configs/ckptd.json $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json; then \
		rm -f $(DESTDIR)$(SYSCONFDIR)/ckpt/ckptd.json; fi
	-rmdir $(DESTDIR)$(SYSCONFDIR)/ckpt 2>/dev/null
	rm -rf $(DESTDIR)$(PYDIR)/ckpt

clean:   # keeps build/venv: PyTorch's wheels are several GB
	rm -rf $(filter-out $(B)/venv,$(wildcard $(B)/*)) $(BINS)

help:
	@echo "make [all]      build ckptd, ckptctl, libckpt.so/.a, ckpt.pc"
	@echo "make deps       install missing Debian packages and build/venv (PyTorch 2)"
	@echo "make demo       run the end-to-end demo"
	@echo "make test       run the test suite (SANITIZE=address,undefined ok)"
	@echo "make tsan       the GPU and pipeline tests under ThreadSanitizer (build/tsan)"
	@echo "make bench      benchmarks against fio, memcpy and torch.save"
	@echo "make bench-scale how costs grow: 1-16 ranks, 1-16 GiB, 100-100,000 tensors"
	@echo "make cudasim    build/cudasim/libcuda.so.1, the CUDA driver simulator (tests)"
	@echo "make gpu-bundle ckptd + libckpt for tests/gpu/run.sh on a GPU machine"
	@echo "make install    PREFIX=$(PREFIX) DESTDIR=... (binaries, library, ckpt.pc, units, config, man)"
	@echo "make uninstall  the same PREFIX and DESTDIR"

.PHONY: cudasim all deps test test-bins demo bench bench-scale install uninstall clean help fuzz fuzz-bins fuzz-replay gpu-bundle tsan

-include $(shell find $(B) -name '*.d' 2>/dev/null)
