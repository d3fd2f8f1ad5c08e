# warren: build, run, test and benchmark.
#
#   make build  build the client CLI bin/warren and the daemon bin/warrend
#   make run    build and start the daemon on its defaults (ARGS="..." adds flags)
#   make test   go vet, then every test, unit and integration, Go and TypeScript
#   make install  install the binaries, the systemd unit and the docs (PREFIX=/usr/local, DESTDIR=)
#   make bench  filesystem benchmark: native ext4, go-fuse loopback, warren (edit checks on and off, fs metrics on and off, served over io_uring);
#               then commands: plain fork+exec, warren's warm jail, bwrap, a new thread's first command,
#               and the TypeScript provider's exec('true') and 4 KiB fs.read beside them;
#               then checkpoints: 10 of 100,000 files changed, and an untar, against git add -A && commit;
#               then the snapshot store: those checkpoints with serve --snapshots s3://... against the local folder,
#               and their replication lag (bench/snapstore.sh);
#               then a thread moving to another server with its last checkpoint, against a git clone (bench/move.sh);
#               then 10,000 threads bound in one daemon (bench/threads.sh);
#               then requests per second through a port's channel against straight to the jail's port (bench/ports.sh);
#               then the egress network: a jail's TCP stream and connects against the host's (bench/net.sh);
#               then images: a pull against skopeo copy + umoci unpack, a thread on an image against on the host's folders,
#               one image's disk for 100 threads (bench/image.sh)
#
# `make test` installs the Debian packages the tests need when they are
# missing (as root), so it works on a fresh Debian machine with Go.

GO   ?= go
BIN  := bin/warren
BIND := bin/warrend
ARGS ?=

# The concurrent parts run under the race detector: the metadata store, the
# daemon and the filesystem (its hub, ledger, descriptor cache and the
# go-fuse server's goroutines; the daemon's tests reach only part of it),
# the snapshot repository (builds, collections and their lock, about
# 15 s) and its copies to a store (snapshot/replica: parallel senders
# and readers of packs, about 20 s), and the image store (pulls joined
# by many callers, their progress and cancellation; a few seconds).
# -race makes fs's suite two to three times slower (110 to 150 s against
# 60 s on 2 busy cores), well within the timeout. The rest runs without
# it: the integration suite pushes many kernel round trips through whole
# daemons, which -race makes several times slower.
RACE_PKGS := ./meta/... ./gateway/... ./fs/... ./snapshot/... ./image/...
RACE_RE   := ^warren/(meta|gateway|fs|snapshot|image)(/|$$)

# The jail's suite runs a second time with every jail forked from a base
# namespace (jail.Base), as the daemon starts them. About 15 s more.

# The filesystem's suite (posixtest, the boundary, the no-lost-edits
# torture test...) runs a second time with every mount served over FUSE
# over io_uring (fs/uring_linux.go), and so do the integration tests that
# kill a daemon with -9 or cut it short; the tests turn the fuse module's
# enable_uring on for their run and back off after (as root). About 2.5
# minutes more.
URING_INT_RE := Kill9|CutShort|StaleMount

# And a third time with every mount served on a Pool's shared connections
# (fs/pool.go), as the daemon serves the threads' mounts by default; the
# daemon's own tests already run that way. About 1 minute more.

# Debian packages the tests need, as package:probe, where the probe is a
# command on PATH or an absolute path: gcc and the libc headers for -race
# (it needs cgo), git for the git-facing tests,
# btrfs-progs for the disk quota tests' loop-mounted btrfs, nodejs and npm
# for the TypeScript client's tests, busybox-static for the jail's test
# images (one static program makes a whole userland).
DEPS := gcc:gcc libc6-dev:/usr/include/stdio.h git:git btrfs-progs:mkfs.btrfs nodejs:node npm:npm busybox-static:/usr/bin/busybox

# The TypeScript client and sandbox provider (clients/typescript): its
# tests run against real daemons, the binaries make build makes.
TS := clients/typescript

.PHONY: all build run test deps bench fmt vet help install

all: build

help:
	@sed -n 's/^#   make/make/p' Makefile

# Two programs: the CLI links only the client, so that a client call does
# not pay for the daemon's packages; `bin/warren serve` execs the warrend
# beside it. The CLI is built without cgo: with it, package net links the C
# resolver and the binary loads the dynamic linker and libc at every start
# (about 0.6 ms of a 1.6 ms start); it dials only a Unix socket.
#
# Both are stamped with the checkout's version and short hash (`warren
# version`); outside a git checkout they say "devel".
VERSION  := $(shell git describe --always --dirty 2>/dev/null)
REVISION := $(shell git rev-parse --short HEAD 2>/dev/null)
COMMITTED := $(shell git log -1 --format=%cI 2>/dev/null)
MODIFIED := $(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true)
LDFLAGS  := -X warren/internal/version.stampedVersion=$(VERSION) -X warren/internal/version.stampedRevision=$(REVISION) \
	-X warren/internal/version.stampedDate=$(COMMITTED) -X warren/internal/version.stampedModified=$(MODIFIED)
build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/warren
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIND) ./cmd/warrend

run: build
	exec $(BIN) serve $(ARGS)

# install puts the binaries in $(PREFIX)/bin, the systemd unit in
# /etc/systemd/system (its paths pointed at $(PREFIX)/bin) and the docs in
# $(PREFIX)/share/doc/warren; DESTDIR prefixes all three, for packaging.
# docs/deploy/README.md says what comes next.
PREFIX  ?= /usr/local
DESTDIR ?=
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/warren
	install -D -m 0755 $(BIND) $(DESTDIR)$(PREFIX)/bin/warrend
	install -d $(DESTDIR)/etc/systemd/system $(DESTDIR)$(PREFIX)/share/doc/warren
	sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' -e 's|/usr/local/share/|$(PREFIX)/share/|g' docs/deploy/warren.service > $(DESTDIR)/etc/systemd/system/warren.service
	install -m 0644 README.md docs/api.md docs/operations.md docs/security.md $(DESTDIR)$(PREFIX)/share/doc/warren/
	install -m 0644 docs/deploy/README.md $(DESTDIR)$(PREFIX)/share/doc/warren/deploy.md

# The tests build the servers they run from the modules under tools/, on
# demand, into bin/ (internal/testenv). The S3 server is SeaweedFS, whose
# packages take 7.5 minutes to compile from an empty build cache on 2
# cores: S3_WARM compiles them (without linking) before the tests start,
# alone on the machine, so the test that builds the server does not do it
# while other packages' tests load the cores, close to its timeout. With
# a warm cache it takes a second. Its flags are the build's (tool.build).
S3_WARM := cd tools/s3 && GOWORK=off CGO_ENABLED=0 $(GO) build github.com/seaweedfs/seaweedfs/weed/command

test: deps vet build
	$(S3_WARM)
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)
	$(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -Ev '$(RACE_RE)')
	WARREN_JAIL_BASE=1 $(GO) test -count=1 -timeout 15m ./jail
	WARREN_FS_TRANSPORT=uring CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m ./fs/...
	WARREN_FS_TRANSPORT=shared CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 15m ./fs/...
	WARREN_FS_TRANSPORT=uring $(GO) test -count=1 -timeout 15m -run '$(URING_INT_RE)' ./integration
	cd $(TS) && npm ci && npm test

# deps installs what DEPS lists and the machine lacks; it does nothing when
# everything is there.
deps:
	@missing=""; \
	for d in $(DEPS); do \
		pkg=$${d%%:*}; probe=$${d#*:}; \
		case $$probe in \
		/*) [ -e "$$probe" ] ;; \
		*) command -v "$$probe" >/dev/null ;; \
		esac || missing="$$missing $$pkg"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "deps: missing:$$missing; install them (apt-get install$$missing) or run as root" >&2; \
		exit 1; \
	fi; \
	echo "deps: installing$$missing"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing

bench:
	bench/fs.sh
	bench/exec.sh
	bench/checkpoint.sh
	bench/snapstore.sh
	bench/move.sh
	bench/threads.sh
	bench/ports.sh
	bench/net.sh
	bench/image.sh

fmt:
	$(GO) fmt ./...

vet:
	$(GO) vet ./...
