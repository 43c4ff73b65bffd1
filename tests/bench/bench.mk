# bench.mk - build rules for the benchmark helpers (tests/bench/*.c).
# Included by the top Makefile (`include tests/bench/bench.mk`); the bench
# runner builds them with `make bench-bins`.
BENCH_SRC  := $(wildcard tests/bench/*.c)
BENCH_BINS := $(patsubst tests/bench/%.c,$(B)/bench/%,$(BENCH_SRC))

# loop_load is a ckpt client: it links libckpt
$(B)/bench/loop_load: tests/bench/loop_load.c libckpt.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< libckpt.a $(LIBS)

# memcpy_floor times ckptd's own copy too (shm_pool_copy)
$(B)/bench/memcpy_floor: tests/bench/memcpy_floor.c $(B)/shm/shm_pool.o
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(B)/shm/shm_pool.o -lpthread

$(B)/bench/%: tests/bench/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -lpthread

bench-bins: $(BENCH_BINS)

.PHONY: bench-bins
