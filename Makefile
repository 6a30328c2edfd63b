# Conveyor — build, test and demo. Every tool is built from pinned Go modules into ./bin, so a fresh
# machine with only Go needs nothing else. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath .)
BIN  := $(ROOT)/bin
export GOFLAGS ?= -buildvcs=false

# Pinned versions. The Kubernetes control plane is the k8s.io/kubernetes module required in go.mod;
# the other tools live in their own modules under hack/tools so that their dependencies never move ours.
K8S_VERSION     := v1.37.1
ETCD_VERSION    := v3.7.0
KWOK_VERSION    := $(shell cd hack/tools/kwok && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
HELM_VERSION    := $(shell cd hack/tools/helm && go list -m -f '{{.Version}}' helm.sh/helm/v4)
CTRLGEN_VERSION := $(shell cd hack/tools/controller-gen && go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)
LINT_VERSION    := $(shell cd hack/tools/golangci-lint && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)
PROMTOOL_VERSION := $(shell cd hack/tools/promtool && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)

CONTROLLER_GEN := $(BIN)/controller-gen
HELM           := $(BIN)/helm
GOLANGCI_LINT  := $(BIN)/golangci-lint
PROMTOOL       := $(BIN)/promtool
KWOKCTL        := $(BIN)/kwokctl
DIST           := $(ROOT)/dist
KUBECTL        := $(BIN)/kubectl

# Test knobs: go test flags, and whether `make demo` keeps its cluster running afterwards.
TEST_TIMEOUT ?= 30m
TESTFLAGS    ?=
KEEP         ?= 0

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: manifests ## Generate deepcopy code and CRDs.
	$(CONTROLLER_GEN) object paths=./apis/... paths=./pkg/schedplugin/apis/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs into charts/conveyor/crds and the operator's RBAC rules into charts/conveyor/files/rbac.
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=./apis/... output:crd:artifacts:config=charts/conveyor/crds
	go run ./hack/crdpatch charts/conveyor/crds/apps.conveyor.dev_workersets.yaml
	@# The operator's ClusterRole holds exactly the +kubebuilder:rbac markers of the packages the operator
	@# binary links (this module's dependencies of ./cmd/operator that carry such markers), so the
	@# scheduler plugin's packages never widen it; loading only the marked packages keeps controller-gen
	@# away from dependencies it cannot type-check. The chart renders the rules of role.yaml.
	$(CONTROLLER_GEN) rbac:roleName=conveyor-operator \
		paths="$$(for d in $$(go list -e -deps -f '{{if and .Module (eq .Module.Path "github.com/conveyor-dev/conveyor")}}{{.Dir}}{{end}}' ./cmd/operator); do grep -lqs '+kubebuilder:rbac' $$d/*.go && echo $$d; done | sed 's|^$(ROOT)|.|' | paste -sd ';' -)" \
		output:rbac:artifacts:config=charts/conveyor/files/rbac

.PHONY: build
build: ## Build every package and the binaries into ./bin (conveyor-operator, conveyor-scheduler, kubectl-conveyor).
	@# Static and trimmed, as hack/release builds them for the image and the plugin archives: the
	@# release build (and the end-to-end test of it) then reuses these compiled packages.
	CGO_ENABLED=0 go build -trimpath ./...
	@# cmd/<name> becomes bin/conveyor-<name>; a kubectl plugin (cmd/kubectl-<name>) keeps its name,
	@# which kubectl finds on the PATH.
	@for d in cmd/*/; do \
		[ -f "$$d/main.go" ] || continue; \
		name=$$(basename $$d); case $$name in kubectl-*) out=$$name ;; *) out=conveyor-$$name ;; esac; \
		CGO_ENABLED=0 go build -trimpath -o $(BIN)/$$out ./$$d; \
	done

.PHONY: fmt
fmt: ## Format the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: generate ## Regenerate, tidy, and fail on any diff or untracked file.
	go mod tidy
	@for d in hack/tools/*/; do (cd $$d && go mod tidy); done
	@if [ -n "$$(git status --porcelain)" ]; then \
		echo "verify: the tree differs after regeneration and go mod tidy:"; git status --porcelain; git --no-pager diff --stat; exit 1; fi
	@echo "verify: generated code, CRDs and go.mod files are up to date"

##@ Release

.PHONY: image
image: ## Build the multi-arch image (linux/amd64, linux/arm64) as an OCI layout in dist/image; no container engine needed.
	go run ./hack/release image --out $(DIST)

.PHONY: release
release: $(HELM) ## Write every release artifact into dist/: the image, the packaged chart, the kubectl-conveyor archives, their krew manifest, SHA256SUMS.
	go run ./hack/release all --out $(DIST) --helm $(HELM)

.PHONY: push
push: $(HELM) ## Push dist/'s image to REGISTRY/conveyor:<version> and its chart to oci://REGISTRY/charts/conveyor (make release first).
	@[ -n "$(REGISTRY)" ] || { echo "push: set REGISTRY, e.g. make push REGISTRY=registry.example.com/team"; exit 2; }
	go run ./hack/release push --registry $(REGISTRY) --out $(DIST) --helm $(HELM)

##@ Test

.PHONY: test
test: tools build vet ## Run every test: unit, integration (envtest) and end-to-end (local kwok cluster).
	KUBEBUILDER_ASSETS=$(BIN) CONVEYOR_BIN=$(BIN) go test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./...

.PHONY: test-unit
test-unit: ## Run the unit tests only (no control plane).
	go test -count=1 -short $(TESTFLAGS) ./...

.PHONY: test-integration
test-integration: control-plane ## Run the envtest suites only.
	KUBEBUILDER_ASSETS=$(BIN) go test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./test/integration/...

.PHONY: test-e2e
test-e2e: tools build ## Run the end-to-end suite on a local kwok cluster.
	CONVEYOR_BIN=$(BIN) go test -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./test/e2e/...

##@ Demo

.PHONY: demo
demo: tools build ## The original scenario on a local control plane with the operator, scheduler and HPA; KEEP=1 keeps the cluster.
	CONVEYOR_BIN=$(BIN) KEEP=$(KEEP) go run ./hack/demo

##@ Tools (built once into ./bin; a second run rebuilds nothing)

.PHONY: tools control-plane
tools: control-plane $(KWOKCTL) $(HELM) $(CONTROLLER_GEN) $(PROMTOOL) ## Build every pinned tool the tests and demo need.
control-plane: $(BIN)/.k8s-$(K8S_VERSION)-versioned $(BIN)/.etcd-$(ETCD_VERSION) ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.

# Stamp the version into the binaries, or they report v0.0.0-master and fail version checks (Helm's
# kubeVersion, for one).
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 2,$(subst ., ,$(subst v,v ,$(K8S_VERSION)))) \
	-X k8s.io/component-base/version.gitMinor=$(word 3,$(subst ., ,$(subst v,v ,$(K8S_VERSION)))) \
	-X k8s.io/component-base/version.gitTreeState=clean
$(BIN)/.k8s-$(K8S_VERSION)-versioned:
	@mkdir -p $(BIN)
	go build -ldflags "$(K8S_LDFLAGS)" -o $(BIN)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
	@touch $@

$(BIN)/.etcd-$(ETCD_VERSION):
	@mkdir -p $(BIN)
	go build -o $(BIN)/etcd ./hack/etcd
	@touch $@

$(KWOKCTL): $(BIN)/.kwok-$(KWOK_VERSION)
$(BIN)/.kwok-$(KWOK_VERSION):
	@mkdir -p $(BIN)
	cd hack/tools/kwok && go build -o $(BIN)/ sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
	@touch $@

$(HELM): $(BIN)/.helm-$(HELM_VERSION)
$(BIN)/.helm-$(HELM_VERSION):
	@mkdir -p $(BIN)
	cd hack/tools/helm && go build -o $(BIN)/helm helm.sh/helm/v4/cmd/helm
	@touch $@

$(CONTROLLER_GEN): $(BIN)/.controller-gen-$(CTRLGEN_VERSION)
$(BIN)/.controller-gen-$(CTRLGEN_VERSION):
	@mkdir -p $(BIN)
	cd hack/tools/controller-gen && go build -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	@touch $@

$(GOLANGCI_LINT): $(BIN)/.golangci-lint-$(LINT_VERSION)
$(BIN)/.golangci-lint-$(LINT_VERSION):
	@mkdir -p $(BIN)
	cd hack/tools/golangci-lint && go build -o $(BIN)/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	@touch $@

# promtool tests the chart's alert rules (`promtool test rules`, run by the e2e suite's chart tests).
# It is built from the Prometheus module with the module's own `remove_all_sd` build tag, which leaves
# out the service-discovery plugins (the AWS, Azure, GCE, … SDKs) that rule tests never use and that
# were most of its first build.
$(PROMTOOL): $(BIN)/.promtool-$(PROMTOOL_VERSION)
$(BIN)/.promtool-$(PROMTOOL_VERSION):
	@mkdir -p $(BIN)
	cd hack/tools/promtool && go build -tags remove_all_sd -o $(BIN)/promtool github.com/prometheus/prometheus/cmd/promtool
	@touch $@

.PHONY: clean
clean: ## Remove ./bin.
	rm -rf $(BIN)
