# ringlog — developer targets. `make test` is the command README.md and .ci/run use.
GO ?= go
PKGS := ./...

.PHONY: test bench fuzz lint build race invariants release

build:
	$(GO) build -o bin/ ./cmd/...

# bench/peers is its own module (NATS drivers), so ./... at the root does not reach it.
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)
	cd bench/peers && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

race:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

# The data-path packages (engine, ring, the server, and the controller whose metadata every
# request reads) under the race detector and with the expensive invariant checks compiled
# in (-tags invariants). CI (.ci/run) runs both after `make test`.
CORE_PKGS := ./engine/... ./ring/... ./netio/... ./replication/controller/...
race-core:
	$(GO) test -race -count=1 -timeout 20m $(CORE_PKGS)

invariants:
	$(GO) test -tags invariants -count=1 -timeout 20m $(CORE_PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m $(PKGS)

# Short fuzzing pass over every Fuzz target (FUZZTIME per target, default 10s).
FUZZTIME ?= 10s
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# gofmt, vet, go.mod tidiness of both modules, and the package-boundary rules of
# ../shared/DESIGN.md (imports_test.go: forbidden imports and the client's dependency closure).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff
	cd bench/peers && $(GO) mod tidy -diff
	$(GO) test -count=1 -run '^TestImportRules' .

# Static, versioned release binaries: dist/ringlog-VERSION-linux-ARCH/{ringlogd,ringlog} and a
# .tar.gz of each, with SHA256SUMS. VERSION defaults to `git describe`, COMMIT to the short
# revision; both are printed by `ringlogd --version` and `ringlog version`. DIST moves the
# output (cmd/ringlogd's TestReleaseBuild builds into a temp dir).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
RELEASE_LDFLAGS = -s -w -X main.Version=$(VERSION) -X main.Commit=$(COMMIT)
DIST ?= dist
release:
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@for platform in $(RELEASE_PLATFORMS); do \
	  os=$${platform%/*}; arch=$${platform#*/}; name=ringlog-$(VERSION)-$$os-$$arch; \
	  echo "== $$name"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' \
	    -o $(DIST)/$$name/ ./cmd/ringlogd ./cmd/ringlog || exit 1; \
	  cp README.md docs/operations.md docs/ringlogd.example.yaml $(DIST)/$$name/ && cp -r deploy $(DIST)/$$name/ || exit 1; \
	  tar -C $(DIST) -czf $(DIST)/$$name.tar.gz $$name || exit 1; \
	done
	@cd $(DIST) && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS
