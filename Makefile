# ampkit — top-level build.  `make` builds everything under build/; `make V=1` shows commands.
# Objects and dependency files live under $(BUILD)/obj; tools and examples in $(BUILD)/bin;
# libamprt in $(BUILD)/lib.  `make asan` is the same tree built with sanitizers in build-asan/.

BUILD   ?= build
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CC      ?= gcc
# The version is amp.h's (AMP_VERSION_MAJOR/MINOR/PATCH); the SONAME carries the major.
AMP_H   := runtime/include/amp/amp.h
amp_h_num = $(shell sed -n 's/^\#define AMP_VERSION_$(1) *\([0-9][0-9]*\).*/\1/p' $(AMP_H))
VERSION_MAJOR := $(call amp_h_num,MAJOR)
VERSION := $(VERSION_MAJOR).$(call amp_h_num,MINOR).$(call amp_h_num,PATCH)

WARN    := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wformat=2 -Wvla -Wdouble-promotion -Wfloat-conversion -fno-common
ifdef CI
WARN    += -Werror
endif
# The sanitizer build (make asan) runs at -O1, where GCC's truncation analysis has too little
# value-range information and flags snprintf calls the -O2 build proves safe; the -O2 build keeps
# the check.
ifneq ($(SAN),)
WARN    += -Wno-format-truncation
endif
# -fvect-cost-model=dynamic lets -O2 vectorize loops that need a remainder (elementwise ops);
# it never reorders floating-point sums, so results stay bit-identical.
OPT     ?= -O2 -fvect-cost-model=dynamic
CFLAGS  ?= $(OPT) -g
SAN     ?=
CFLAGS  += $(SAN) $(WARN) -fno-omit-frame-pointer -fPIC -pthread -D_GNU_SOURCE -DAMP_VERSION=\"$(VERSION)\"
CPPFLAGS += -Iruntime/include -Iruntime -Ischema -MMD -MP
LDLIBS_RT := -lunwind -lz -lm -lpthread -ldl
LDLIBS_DB := -lsqlite3

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- sources -------------------------------------------------------------------------------
RT_SRC    := $(wildcard runtime/*.c runtime/kernels/*.c) schema/amp_names.c
SCHEMA_SRC:= $(wildcard schema/*.c)
PROF_SRC  := $(filter-out profiler/main.c,$(wildcard profiler/*.c))
DUMP_SRC  := $(filter-out dump/main.c,$(wildcard dump/*.c))
VIEW_SRC  := $(filter-out viewer/main.c,$(wildcard viewer/*.c))
EX_SRC    := $(wildcard examples/*.c)
# The examples link the option table of schema/ (amp_opt.c) but not the rest of the schema
# module (which needs SQLite).
EXCOM_SRC := $(wildcard examples/common/*.c) schema/amp_opt.c
BENCH_SRC := $(wildcard bench/*.c)
UNIT_SRC  := $(wildcard tests/unit/test_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

# Data parallelism (runtime/mpi/, libamprt_mpi) is built when Open MPI's development files are
# present (`make deps` installs them); libamprt itself never links MPI.  The examples then take
# --dist.  MPI's headers are system headers here, out of reach of the strict warnings.
MPI_PC    := $(shell pkg-config --exists ompi-c 2>/dev/null && echo ompi-c)
ifneq ($(MPI_PC),)
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags $(MPI_PC)))
MPI_LIBS  := $(shell pkg-config --libs $(MPI_PC))
LIBRTMPI_SO := $(BUILD)/lib/libamprt_mpi.so
EX_MPI_LIBS := -lamprt_mpi $(MPI_LIBS)
endif

LIBRT_A   := $(BUILD)/lib/libamprt.a
# libamprt.so.<version> with SONAME libamprt.so.<major>, and the two links beside it.
LIBRT_SONAME := libamprt.so.$(VERSION_MAJOR)
LIBRT_REAL   := libamprt.so.$(VERSION)
LIBRT_SO  := $(BUILD)/lib/libamprt.so
LIBRTMPI_SONAME := libamprt_mpi.so.$(VERSION_MAJOR)
LIBRTMPI_REAL   := libamprt_mpi.so.$(VERSION)
LIBRT_MAP := $(BUILD)/gen/libamprt.map
# Test programs that drive the runtime's internals (runtime/trace.h) link a copy of the
# shared library that exports everything; the installed one exports only amp.h's API.
LIBRT_TEST_SO := $(BUILD)/tests/lib/libamprt.so
LIBSCHEMA := $(BUILD)/lib/libampschema.a
LIBPROF   := $(BUILD)/lib/libampprof.a
LIBDUMP   := $(BUILD)/lib/libampdump.a
LIBVIEW   := $(BUILD)/lib/libampview.a
LIBEXCOM  := $(BUILD)/lib/libampexamples.a

TOOLS     := $(if $(wildcard profiler/main.c),$(BUILD)/bin/ampprof) \
             $(if $(wildcard dump/main.c),$(BUILD)/bin/ampdump) \
             $(if $(wildcard viewer/main.c),$(BUILD)/bin/ampview)
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/bin/%,$(EX_SRC))
BENCHES   := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
UNITS     := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))

.SECONDARY:
.PHONY: all lib tools examples benches units test unit e2e asan demo bench install uninstall \
        clean deps format FORCE
all: lib tools examples benches units $(BUILD)/amprt.pc $(if $(LIBRTMPI_SO),$(BUILD)/amprt_mpi.pc)

lib: $(LIBRT_A) $(LIBRT_SO) $(LIBRTMPI_SO)
tools: $(TOOLS)
examples: $(EXAMPLES)
benches: $(BENCHES)
units: $(UNITS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

define mklib
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^
endef

$(LIBRT_A): $(call obj,$(RT_SRC)) ; $(mklib)
$(LIBSCHEMA): $(call obj,$(SCHEMA_SRC)) ; $(mklib)
$(LIBPROF): $(call obj,$(PROF_SRC)) ; $(mklib)
$(LIBDUMP): $(call obj,$(DUMP_SRC)) ; $(mklib)
$(LIBVIEW): $(call obj,$(VIEW_SRC)) ; $(mklib)
$(LIBEXCOM): $(call obj,$(EXCOM_SRC)) ; $(mklib)

# The exported symbols are the functions amp.h declares, and amp_dist.h (the interface a
# data-parallel backend such as libamprt_mpi uses), read from the preprocessed headers
# (static inline helpers among them export nothing); everything else stays local.
AMP_DIST_H := runtime/include/amp/amp_dist.h
$(LIBRT_MAP): $(AMP_H) $(AMP_DIST_H)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q){ echo '/* generated from $(AMP_H) and $(AMP_DIST_H) by the Makefile; do not edit */'; echo '{'; \
	  echo '  global:'; \
	  cat $^ | $(CC) -E -P -Iruntime/include -x c - | tr '\n' ' ' | grep -oE '\bamp_[a-z0-9_]+ *\(' | \
	    sed 's/ *($$//' | sort -u | sed 's/.*/    &;/'; \
	  echo '  local: *;'; echo '};'; } > $@.tmp && mv $@.tmp $@

$(LIBRT_SO): $(call obj,$(RT_SRC)) $(LIBRT_MAP)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(LIBRT_SONAME) -Wl,--version-script,$(LIBRT_MAP) $(CFLAGS) \
	  $(LDFLAGS) $(filter %.o,$^) -o $(dir $@)$(LIBRT_REAL) $(LDLIBS_RT)
	$(Q)ln -sf $(LIBRT_REAL) $(dir $@)$(LIBRT_SONAME) && ln -sf $(LIBRT_SONAME) $@

$(LIBRT_TEST_SO): $(call obj,$(RT_SRC))
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(LIBRT_SONAME) $(CFLAGS) $(LDFLAGS) $^ \
	  -o $(dir $@)$(LIBRT_REAL) $(LDLIBS_RT)
	$(Q)ln -sf $(LIBRT_REAL) $(dir $@)$(LIBRT_SONAME) && ln -sf $(LIBRT_SONAME) $@

# libamprt_mpi: the MPI backend of amp/amp_dist.h, linked against the shared runtime.
$(BUILD)/obj/runtime/mpi/%.o $(BUILD)/obj/examples/common/dist.o $(BUILD)/obj/tests/progs/dist_cases.o: CPPFLAGS += $(MPI_CFLAGS) $(if $(MPI_PC),-DAMP_HAVE_MPI)
$(BUILD)/lib/libamprt_mpi.so: $(call obj,$(wildcard runtime/mpi/*.c)) $(LIBRT_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(LIBRTMPI_SONAME) $(CFLAGS) $(LDFLAGS) $(filter %.o,$^) \
	  -o $(dir $@)$(LIBRTMPI_REAL) -L$(BUILD)/lib -lamprt $(MPI_LIBS)
	$(Q)ln -sf $(LIBRTMPI_REAL) $(dir $@)$(LIBRTMPI_SONAME) && ln -sf $(LIBRTMPI_SONAME) $@

# schema/profile.sql is embedded into the schema module as a byte array (NUL-terminated).
$(BUILD)/gen/profile_sql.h: schema/profile.sql
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q){ echo '/* generated from schema/profile.sql by the Makefile; do not edit */'; \
	  echo 'static const unsigned char amp_profile_sql_bytes[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0x00};'; } > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/schema/profile_db.o: $(BUILD)/gen/profile_sql.h
$(BUILD)/obj/schema/profile_db.o: CPPFLAGS += -I$(BUILD)/gen

# LIBDIR as given to this make, for `ampprof info` to find the installed libamprt where
# LIBDIR is not BINDIR/../lib (checked on every make, rewritten when it changes).
$(BUILD)/gen/install_dirs.h: FORCE
	@mkdir -p $(dir $@)
	$(Q)printf '%s\n' '/* generated by the Makefile from LIBDIR; do not edit */' \
	  '#define AMP_INSTALL_LIBDIR "$(LIBDIR)"' > $@.tmp
	$(Q)if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/obj/profiler/info.o: $(BUILD)/gen/install_dirs.h
$(BUILD)/obj/profiler/info.o: CPPFLAGS += -I$(BUILD)/gen

# Tools: main.c plus the tool's own library, the schema module, SQLite.
$(BUILD)/bin/ampprof: $(call obj,profiler/main.c) $(LIBPROF) $(LIBSCHEMA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_DB) $(LDLIBS_RT)
$(BUILD)/bin/ampdump: $(call obj,dump/main.c) $(LIBDUMP) $(LIBPROF) $(LIBSCHEMA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_DB) $(LDLIBS_RT)
$(BUILD)/bin/ampview: $(call obj,viewer/main.c) $(LIBVIEW) $(LIBSCHEMA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -lncursesw $(LDLIBS_DB) -lm

# Examples link the shared runtime (found through an rpath relative to the binary), so that
# the profiler can tell the user's frames from the runtime's when it records call sites.
$(BUILD)/bin/%: $(BUILD)/obj/examples/%.o $(LIBEXCOM) $(LIBRT_SO) $(LIBRTMPI_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< $(LIBEXCOM) -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' $(EX_MPI_LIBS) -lamprt -o $@ -lz $(LDLIBS_RT)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBEXCOM) $(LIBPROF) $(LIBSCHEMA) $(LIBRT_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -lz $(LDLIBS_DB) $(LDLIBS_RT)

# Unit tests link every module statically; the linker keeps what each test uses.
$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIBEXCOM) $(LIBDUMP) $(LIBVIEW) $(LIBPROF) $(LIBSCHEMA) $(LIBRT_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -lcriterion -lncursesw -lz $(LDLIBS_DB) $(LDLIBS_RT)

# amprt.pc for PREFIX/LIBDIR/INCLUDEDIR as given to this make: written by `install` for its
# own PREFIX, and as $(BUILD)/amprt.pc (checked on every make, rewritten when they change).
pc_dir = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
gen_pc = printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(call pc_dir,$(LIBDIR))' \
	  'includedir=$(call pc_dir,$(INCLUDEDIR))' '' 'Name: amprt' \
	  'Description: ampkit mixed-precision training runtime' 'Version: $(VERSION)' \
	  'Requires.private: libunwind zlib' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lamprt' \
	  'Libs.private: -lm -lpthread -ldl'
$(BUILD)/amprt.pc: FORCE
	@mkdir -p $(dir $@)
	$(Q)$(gen_pc) > $@.tmp
	$(Q)if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

# amprt_mpi.pc the same way, when libamprt_mpi is built.
gen_pc_mpi = printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(call pc_dir,$(LIBDIR))' \
	  'includedir=$(call pc_dir,$(INCLUDEDIR))' '' 'Name: amprt_mpi' \
	  'Description: ampkit data-parallel training on MPI' 'Version: $(VERSION)' \
	  'Requires: amprt $(MPI_PC)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lamprt_mpi'
$(BUILD)/amprt_mpi.pc: FORCE
	@mkdir -p $(dir $@)
	$(Q)$(gen_pc_mpi) > $@.tmp
	$(Q)if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

# ---- packages ------------------------------------------------------------------------------
# Installs only what is missing.  Needs root (apt-get).
DEB_PKGS := gcc make libsqlite3-dev sqlite3 libunwind-dev libncurses-dev libcriterion-dev tmux \
            clang libclang-rt-14-dev \
            zlib1g-dev dataset-fashion-mnist bible-kjv python3-numpy binutils \
            libopenmpi-dev openmpi-bin iproute2
# The benches' yardstick (dlopen'ed by bench_kernels only; the runtime never links it).
BENCH_PKGS := libopenblas0-pthread
deps:
	@missing=$$(for p in $(DEB_PKGS) $(EXTRA_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$(echo $$missing | sed 's/^/ /')"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# ---- tests ---------------------------------------------------------------------------------
# Unit tests (Criterion) then end-to-end scripts.  AMP_TEST_QUICK=1 skips the slow sweeps.
test: deps
	$(MAKE) all
	$(MAKE) unit e2e

unit: units
	@set -e; for t in $(UNITS); do echo "== $$t"; LC_ALL=C TZ=UTC $$t --jobs 2 $(CRITERION_ARGS); done

# tests/e2e/lib.sh is the harness the scripts source, not a script of its own.
e2e:
	@set -e; for s in $(sort $(filter-out tests/e2e/lib.sh,$(wildcard tests/e2e/*.sh))); do echo "== $$s"; LC_ALL=C TZ=UTC BUILD=$(BUILD) bash $$s; done

# The sanitizer build: the tools, libamprt, the examples and the test programs built with
# AddressSanitizer and UBSan (no recovery) in build-asan/; the unit tests, then the end-to-end
# scripts of ASAN_E2E on those binaries (about 4 minutes on the Intel class).  ASAN_E2E leaves
# out examples.sh (long trainings: their kernels are the unit tests' under the sanitizers),
# dist.sh and netns.sh (Open MPI's own allocations trip LeakSanitizer at exit) and install.sh
# (it builds and installs the optimized tree).  Our own SIGSEGV/SIGBUS/SIGFPE handlers record
# crashes, so the sanitizers leave those signals to them.
ASAN_E2E ?= analyses cli diagnostics dump faults hostile info loss ops profiler trace train viewer
ASAN_ENV := LC_ALL=C TZ=UTC UBSAN_OPTIONS=print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
asan: deps
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" \
	  lib tools examples units
	@set -e; for t in $(patsubst $(BUILD)/%,build-asan/%,$(UNITS)); do echo "== $$t"; \
	  $(ASAN_ENV) AMP_TEST_QUICK=1 $$t --jobs 2; done
	@set -e; for s in $(ASAN_E2E); do echo "== tests/e2e/$$s.sh (build-asan)"; \
	  $(ASAN_ENV):handle_segv=0:handle_sigbus=0:handle_sigfpe=0 BUILD=build-asan \
	  bash tests/e2e/$$s.sh; done

demo: deps
	$(MAKE) all
	@bash tests/demo.sh

bench:
	$(MAKE) deps EXTRA_PKGS="$(BENCH_PKGS)"
	$(MAKE) all
	@for b in $(BENCHES); do echo "== $$b"; $$b; done

# install needs only the library, the tools and amprt.pc (not the tests, nor Criterion);
# uninstall removes exactly what install wrote.
INSTALLED_TOOLS := $(notdir $(TOOLS))
install: lib tools
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/amp
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIBRT_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/lib/$(LIBRT_REAL) $(DESTDIR)$(LIBDIR)/
	ln -sf $(LIBRT_REAL) $(DESTDIR)$(LIBDIR)/$(LIBRT_SONAME)
	ln -sf $(LIBRT_SONAME) $(DESTDIR)$(LIBDIR)/libamprt.so
	install -m 644 runtime/include/amp/*.h $(DESTDIR)$(INCLUDEDIR)/amp/
	$(gen_pc) > $(DESTDIR)$(PKGCONFIGDIR)/amprt.pc
	$(if $(LIBRTMPI_SO),install -m 755 $(BUILD)/lib/$(LIBRTMPI_REAL) $(DESTDIR)$(LIBDIR)/)
	$(if $(LIBRTMPI_SO),ln -sf $(LIBRTMPI_REAL) $(DESTDIR)$(LIBDIR)/$(LIBRTMPI_SONAME))
	$(if $(LIBRTMPI_SO),ln -sf $(LIBRTMPI_SONAME) $(DESTDIR)$(LIBDIR)/libamprt_mpi.so)
	$(if $(LIBRTMPI_SO),$(gen_pc_mpi) > $(DESTDIR)$(PKGCONFIGDIR)/amprt_mpi.pc)

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALLED_TOOLS))
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libamprt.a libamprt.so $(LIBRT_SONAME) $(LIBRT_REAL))
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/amp/,$(notdir $(wildcard runtime/include/amp/*.h)))
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/amprt.pc $(DESTDIR)$(PKGCONFIGDIR)/amprt_mpi.pc
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libamprt_mpi.so $(LIBRTMPI_SONAME) $(LIBRTMPI_REAL))
	-rmdir $(DESTDIR)$(INCLUDEDIR)/amp 2>/dev/null

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan

# ---- ampview's test programs (viewer/ owner) -------------------------------------------------
# gen_profile writes synthetic profiles (tests/progs/genprof.c) for the viewer's unit tests,
# end-to-end tests, goldens and bench_viewer, which also links the viewer library.
GENPROF_OBJ := $(call obj,tests/progs/genprof.c)
$(BUILD)/tests/gen_profile: $(call obj,tests/progs/gen_profile.c) $(GENPROF_OBJ) $(LIBSCHEMA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ $(LDLIBS_DB) -lm
units: $(BUILD)/tests/gen_profile
$(BUILD)/tests/test_viewer: $(GENPROF_OBJ)
$(BUILD)/obj/tests/unit/test_viewer.o $(BUILD)/obj/bench/bench_viewer.o: CPPFLAGS += -Iviewer -Itests/progs
$(BUILD)/bench/bench_viewer: $(BUILD)/obj/bench/bench_viewer.o $(GENPROF_OBJ) $(LIBVIEW) $(LIBSCHEMA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $^ -o $@ -lncursesw $(LDLIBS_DB) -lm

# ---- ampprof's test programs (profiler/ owner) -----------------------------------------------
# trace_producer drives the emitter directly for the profiler's end-to-end tests; it links the
# test copy of the shared runtime (LIBRT_TEST_SO: runtime/trace.h is not exported).  `make fuzz` builds the ring decoder's libFuzzer target
# with clang (packages clang, libclang-rt-14-dev) and runs it for FUZZ_SECONDS.
$(BUILD)/tests/trace_producer: $(call obj,tests/progs/trace_producer.c) $(LIBRT_TEST_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< -L$(BUILD)/tests/lib -Wl,-rpath,'$$ORIGIN/lib' -lamprt -o $@ \
	  $(LDLIBS_RT)
units: $(BUILD)/tests/trace_producer
# runtime_cases: small real trainings through libamprt (an invalid operation, several threads,
# a working-directory change) for the same tests.
$(BUILD)/tests/runtime_cases: $(call obj,tests/progs/runtime_cases.c) $(LIBRT_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lamprt -o $@ $(LDLIBS_RT)
units: $(BUILD)/tests/runtime_cases
# dist_cases: small data-parallel trainings (libamprt_mpi) for tests/e2e/dist.sh; built with
# MPI when it is present (without, it refuses --dist).
$(BUILD)/tests/dist_cases: $(call obj,tests/progs/dist_cases.c) $(LIBRT_SO) $(LIBRTMPI_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' $(EX_MPI_LIBS) -lamprt -o $@ $(LDLIBS_RT)
units: $(BUILD)/tests/dist_cases
# train_cases: a small training with the training features switched on from the command line
# (clipping, accumulation, checkpoints, memory_optimize, memory_limit) for tests/e2e/train.sh.
$(BUILD)/tests/train_cases: $(call obj,tests/progs/train_cases.c) $(LIBRT_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lamprt -o $@ $(LDLIBS_RT)
units: $(BUILD)/tests/train_cases
# faults: small trainings with one known mixed-precision fault each, for the diagnostics tests.
$(BUILD)/tests/faults: $(call obj,tests/progs/faults.c) $(LIBRT_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lamprt -o $@ $(LDLIBS_RT)
units: $(BUILD)/tests/faults
# ops_tour: a training through the model ops (BatchNorm2D, pooling, axis reductions, ...) for
# tests/e2e/ops.sh, which checks that the profile names each of them.
$(BUILD)/tests/ops_tour: $(call obj,tests/progs/ops_tour.c) $(LIBRT_SO)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(CFLAGS) $< -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lamprt -o $@ $(LDLIBS_RT)
units: $(BUILD)/tests/ops_tour
$(BUILD)/obj/tests/unit/test_profiler.o $(BUILD)/obj/bench/bench_ingest.o $(BUILD)/obj/bench/bench_emitter.o: CPPFLAGS += -Iprofiler
# test_profiler summarizes synthetic profiles (genprof) and reads them back through the viewer's
# model (the half shares and the headroom).
$(BUILD)/tests/test_profiler: $(GENPROF_OBJ)
$(BUILD)/obj/tests/unit/test_profiler.o: CPPFLAGS += -Iviewer -Itests/progs
FUZZ_SECONDS ?= 20
# the decoder and the record table it shares with the writer (records.c), with what that needs
FUZZ_PROF_SRC := profiler/decode.c profiler/records.c profiler/writer.c profiler/keytab.c \
                 profiler/symbolize.c profiler/util.c schema/amp_text.c
.PHONY: fuzz
fuzz:
	@mkdir -p $(BUILD)/fuzz
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -D_GNU_SOURCE \
	  -Ischema -Iprofiler tests/fuzz/fuzz_decode.c $(FUZZ_PROF_SRC) schema/amp_names.c \
	  -o $(BUILD)/fuzz/fuzz_decode -lsqlite3
	$(BUILD)/fuzz/fuzz_decode -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -print_final_stats=1

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
