// Package testenv configures envtest for the integration suites: the kube-apiserver and etcd that
// the Makefile builds into ./bin, and the CRDs generated into the chart. Suites call New from their
// TestMain; no binary is ever downloaded. It also holds the helpers every suite (unit, integration,
// end-to-end) shares: Eventually, EventuallyContext and NewNamespace.
package testenv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	appsv1alpha1 "github.com/conveyor-dev/conveyor/apis/apps/v1alpha1"
	schedulingv1alpha1 "github.com/conveyor-dev/conveyor/apis/scheduling/v1alpha1"
)

// ErrShort says the suite was skipped because the tests run with -short (unit tests only).
var ErrShort = errors.New("integration suite skipped in -short mode")

// ErrNoBinaries says the control-plane binaries have not been built (run `make control-plane`).
var ErrNoBinaries = errors.New("control-plane binaries not found")

// RepoRoot returns the directory of the project's go.mod, found by walking up from the working
// directory of the test.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "apis")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod with an apis/ folder above the working directory")
		}
		dir = parent
	}
}

// BinDir returns the directory of the pinned binaries: $CONVEYOR_BIN, $KUBEBUILDER_ASSETS, or
// <repo>/bin, whichever is set first.
func BinDir() (string, error) {
	for _, env := range []string{"CONVEYOR_BIN", "KUBEBUILDER_ASSETS"} {
		if v := os.Getenv(env); v != "" {
			return v, nil
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// Scheme returns a scheme with client-go's types and both Conveyor API groups.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, appsv1alpha1.AddToScheme, schedulingv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// New returns an envtest environment on the ./bin kube-apiserver and etcd with the chart's CRDs
// installed. It returns ErrNoBinaries when they have not been built.
func New() (*envtest.Environment, error) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		return nil, ErrShort
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%w: %s in %s (run `make control-plane`)", ErrNoBinaries, name, bin)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "charts", "conveyor", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
		CRDInstallOptions:     envtest.CRDInstallOptions{Scheme: Scheme()},
	}, nil
}

// SkipOrFail is what a TestMain returns when New failed: 0 (the suite is skipped, with a note on
// stderr) in a -short run, or for missing binaries outside CI; 1 otherwise.
func SkipOrFail(err error) int {
	if errors.Is(err, ErrShort) {
		fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
		return 0
	}
	if errors.Is(err, ErrNoBinaries) && (testing.Short() || os.Getenv("CI") != "true") {
		fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
		return 0
	}
	fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
	return 1
}
