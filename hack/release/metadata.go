package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// source is the repository every artifact says it was built from.
const source = "https://github.com/conveyor-dev/conveyor"

// metadata is what a release stamps into its artifacts.
type metadata struct {
	// Version is the release's version, without a leading v: the image tag, the chart's version
	// and appVersion, the plugin's version.
	Version string
	// Revision is the commit the artifacts are built from.
	Revision string
	// Created is the commit's time: the time of the image and of every file in the archives, so
	// that it changes only with the commit.
	Created time.Time
}

// readMetadata reads the version from the chart (unless version is set) and the revision and its
// time from git. SOURCE_DATE_EPOCH, when set, is the time instead of the commit's.
func readMetadata(ctx context.Context, root, version string) (metadata, error) {
	if version == "" {
		v, err := chartAppVersion(root)
		if err != nil {
			return metadata{}, err
		}
		version = v
	}
	version = strings.TrimPrefix(version, "v")
	revision, err := git(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return metadata{}, err
	}
	status, err := git(ctx, root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return metadata{}, err
	}
	if status != "" {
		slog.Warn("The tree has uncommitted changes: the artifacts are built from them but name the commit", "revision", revision)
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(ctx, root, "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return metadata{}, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return metadata{}, fmt.Errorf("the source date %q is not seconds since the epoch: %w", epoch, err)
	}
	return metadata{Version: version, Revision: revision, Created: time.Unix(secs, 0).UTC()}, nil
}

// chartAppVersion is the appVersion of charts/conveyor/Chart.yaml.
func chartAppVersion(root string) (string, error) {
	path := filepath.Join(root, "charts", "conveyor", "Chart.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the chart's version: %w", err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	if chart.AppVersion == "" {
		return "", fmt.Errorf("%s has no appVersion", path)
	}
	return chart.AppVersion, nil
}

// git runs git in dir and returns its trimmed output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(exit.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
