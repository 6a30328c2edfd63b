package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// platform is a GOOS/GOARCH pair.
type platform struct {
	OS, Arch string
}

func (p platform) String() string { return p.OS + "/" + p.Arch }

var (
	defaultImagePlatforms  = []string{"linux/amd64", "linux/arm64"}
	defaultPluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}
)

// parsePlatforms parses a comma-separated list of os/arch.
func parsePlatforms(list string) ([]platform, error) {
	var out []platform
	for _, s := range strings.Split(list, ",") {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(s), "/")
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return nil, fmt.Errorf("platform %q is not os/arch", s)
		}
		out = append(out, platform{OS: goos, Arch: goarch})
	}
	return out, nil
}

// goBuild builds the main package pkg of the module at root for p, static and with the paths of
// the build machine trimmed, so that the same commit and toolchain give the same bytes anywhere.
// The Kubernetes version of go.mod is stamped in as the Makefile does, or the scheduler reports
// v0.0.0-master.
func goBuild(ctx context.Context, root, pkg, out string, p platform) error {
	k8s, err := goOutput(ctx, root, nil, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return err
	}
	parts := strings.SplitN(strings.TrimPrefix(k8s, "v"), ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("k8s.io/kubernetes version %q is not vMAJOR.MINOR.PATCH", k8s)
	}
	ldflags := strings.Join([]string{
		"-s", "-w",
		"-X k8s.io/component-base/version.gitVersion=" + k8s,
		"-X k8s.io/component-base/version.gitMajor=" + parts[0],
		"-X k8s.io/component-base/version.gitMinor=" + parts[1],
		"-X k8s.io/component-base/version.gitTreeState=clean",
	}, " ")
	slog.Info("Building", "package", pkg, "platform", p.String())
	environ := []string{"GOOS=" + p.OS, "GOARCH=" + p.Arch, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	_, err = goOutput(ctx, root, environ, "build", "-trimpath", "-ldflags", ldflags, "-o", abs, pkg)
	return err
}

// goOutput runs the go command in dir with extra environment variables and returns its trimmed
// standard output.
func goOutput(ctx context.Context, dir string, environ []string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), environ...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s go %s: %w: %s", strings.Join(environ, " "), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}
