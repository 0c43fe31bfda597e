# ringlog — developer targets. `make test` is the command README.md and .ci/run use.
GO ?= go
PKGS := ./...

.PHONY: test bench fuzz lint build race

build:
	$(GO) build -o bin/ ./cmd/...

# bench/peers is its own module (NATS drivers), so ./... at the root does not reach it.
test:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 -timeout 20m $(PKGS)
	cd bench/peers && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

race:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

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

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
