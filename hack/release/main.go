// Command release builds and publishes Conveyor's release artifacts without a container engine:
// the multi-arch OCI image (conveyor-operator and conveyor-scheduler on no base image), the packaged
// Helm chart, the kubectl-conveyor archives with their krew plugin manifest, and SHA256SUMS.
//
// Usage:
//
//	release image   [--out dist] [--platforms linux/amd64,linux/arm64]
//	release all     [--out dist] [--platforms ...] [--plugin-platforms ...] [--helm bin/helm]
//	release push    --registry R [--out dist] [--helm bin/helm] [--plain-http]
//
// `make image` runs `release image`, `make release` runs `release all`. The version is the chart's
// appVersion unless --version says otherwise; the revision is the commit checked out, and the
// time stamped into the image is that commit's, so two builds of one commit give one digest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		slog.Error("Release failed", "err", err)
		os.Exit(1)
	}
}

const usage = `usage: release image|all|push [flags]; release <command> -h lists the flags`

// run parses the command line and runs one command.
func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("release "+cmd, flag.ContinueOnError)
	out := fs.String("out", "dist", "directory of the artifacts")
	root := fs.String("root", ".", "root of the Conveyor module")
	version := fs.String("version", "", "release version (default: the chart's appVersion)")
	helm := fs.String("helm", filepath.Join("bin", "helm"), "the helm binary")
	platforms := fs.String("platforms", strings.Join(defaultImagePlatforms, ","), "platforms of the image")
	pluginPlatforms := fs.String("plugin-platforms", strings.Join(defaultPluginPlatforms, ","), "platforms of the kubectl-conveyor archives")
	downloadURL := fs.String("download-url", "https://github.com/conveyor-dev/conveyor/releases/download/v{{version}}",
		"where the krew manifest says the archives are; {{version}} is replaced")
	registry := fs.String("registry", "", "push: the OCI registry (host[:port][/path]) to push the image and the chart to")
	plainHTTP := fs.Bool("plain-http", false, "push: talk plain HTTP to the registry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	switch cmd {
	case "image", "all":
		meta, err := readMetadata(ctx, *root, *version)
		if err != nil {
			return err
		}
		imgPlatforms, err := parsePlatforms(*platforms)
		if err != nil {
			return err
		}
		if cmd == "image" {
			_, err := writeImage(ctx, *root, *out, meta, imgPlatforms)
			return err
		}
		plugPlatforms, err := parsePlatforms(*pluginPlatforms)
		if err != nil {
			return err
		}
		return writeRelease(ctx, releaseOptions{
			root: *root, out: *out, helm: *helm, meta: meta,
			imagePlatforms: imgPlatforms, pluginPlatforms: plugPlatforms,
			downloadURL: strings.ReplaceAll(*downloadURL, "{{version}}", meta.Version),
		})
	case "push":
		if *registry == "" {
			return errors.New("push needs --registry")
		}
		return push(ctx, pushOptions{dist: *out, registry: *registry, helm: *helm, plainHTTP: *plainHTTP})
	default:
		fmt.Fprintln(os.Stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
