package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// sumsFile lists the SHA-256 of every other file of the release, as sha256sum writes them.
const sumsFile = "SHA256SUMS"

// releaseOptions are what `release all` builds, from where, and into where.
type releaseOptions struct {
	root, out, helm string
	meta            metadata
	imagePlatforms  []platform
	pluginPlatforms []platform
	// downloadURL is where the krew manifest says the plugin archives are.
	downloadURL string
}

// chartArchiveName is the file `helm package` writes.
func chartArchiveName(version string) string { return "conveyor-" + version + ".tgz" }

// writeRelease writes every artifact of a release into o.out: the image layout, the packaged
// chart, the plugin archives and their krew manifest, and SHA256SUMS. What an earlier run left
// there is removed first.
func writeRelease(ctx context.Context, o releaseOptions) error {
	if err := cleanRelease(o.out); err != nil {
		return err
	}
	if _, err := writeImage(ctx, o.root, o.out, o.meta, o.imagePlatforms); err != nil {
		return err
	}
	if err := packageChart(ctx, o); err != nil {
		return err
	}
	sums := map[platform]string{}
	for _, p := range o.pluginPlatforms {
		archive, err := writePluginArchive(ctx, o.root, o.out, o.meta, p)
		if err != nil {
			return err
		}
		if sums[p], err = fileSHA256(archive); err != nil {
			return err
		}
	}
	manifest, err := krewManifest(o.meta, o.downloadURL, o.pluginPlatforms, sums)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, krewManifestFile), manifest, 0o644); err != nil {
		return err
	}
	if err := writeSums(o.out); err != nil {
		return err
	}
	slog.Info("Wrote the release", "dir", o.out, "version", o.meta.Version, "revision", o.meta.Revision)
	return nil
}

// cleanRelease removes from dir what a release writes there, and creates dir if it is missing.
func cleanRelease(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old := []string{filepath.Join(dir, imageDir), filepath.Join(dir, krewManifestFile), filepath.Join(dir, sumsFile)}
	for _, pattern := range []string{chartArchiveName("*"), pluginBinary + "_*.tar.gz"} {
		matches, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		old = append(old, matches...)
	}
	for _, p := range old {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// packageChart packages charts/conveyor with the release's version as its version and appVersion,
// so that its default image tag (the appVersion) is the image's, and checks what it wrote.
func packageChart(ctx context.Context, o releaseOptions) error {
	v := o.meta.Version
	if _, err := runHelm(ctx, o.helm, "package", filepath.Join(o.root, "charts", "conveyor"),
		"--destination", o.out, "--version", v, "--app-version", v); err != nil {
		return err
	}
	archive := filepath.Join(o.out, chartArchiveName(v))
	out, err := runHelm(ctx, o.helm, "show", "chart", archive)
	if err != nil {
		return err
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(out), &chart); err != nil {
		return fmt.Errorf("parse the Chart.yaml of %s: %w", archive, err)
	}
	if chart.Version != v || chart.AppVersion != v {
		return fmt.Errorf("%s has version %q and appVersion %q, want %q", archive, chart.Version, chart.AppVersion, v)
	}
	slog.Info("Packaged the chart", "archive", archive)
	return nil
}

// runHelm runs helm and returns its standard output; the error carries its standard error.
func runHelm(ctx context.Context, helm string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// writeSums writes dir/SHA256SUMS: every other regular file under dir, by path relative to dir,
// in the format `sha256sum -c` checks.
func writeSums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == sumsFile {
			return err
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+filepath.ToSlash(rel)+"\n")
		return nil
	})
	if err != nil {
		return fmt.Errorf("checksums of %s: %w", dir, err)
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return os.WriteFile(filepath.Join(dir, sumsFile), []byte(strings.Join(lines, "")), 0o644)
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
