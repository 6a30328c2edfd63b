package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"
)

// pluginBinary is the kubectl plugin's executable; kubectl finds it on the PATH by this name.
const pluginBinary = "kubectl-conveyor"

// krewManifestFile is the krew plugin manifest under the release directory.
const krewManifestFile = "conveyor.yaml"

// pluginArchiveName is the archive of the plugin for p.
func pluginArchiveName(version string, p platform) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", pluginBinary, version, p.OS, p.Arch)
}

// writePluginArchive builds kubectl-conveyor for p and writes it into out as a tar.gz holding the
// binary alone, dated mtime. It returns the archive's path.
func writePluginArchive(ctx context.Context, root, out string, meta metadata, p platform) (string, error) {
	tmp, err := os.MkdirTemp("", "conveyor-plugin-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, pluginBinary)
	if err := goBuild(ctx, root, "./cmd/"+pluginBinary, bin, p); err != nil {
		return "", err
	}
	archive := filepath.Join(out, pluginArchiveName(meta.Version, p))
	if err := writeTarGz(archive, []entry{{name: "/" + pluginBinary, mode: 0o755, hostPath: bin}}, meta.Created); err != nil {
		return "", fmt.Errorf("write %s: %w", archive, err)
	}
	return archive, nil
}

// writeTarGz writes entries into a gzip-compressed tar file at path.
func writeTarGz(path string, entries []entry, mtime time.Time) (retErr error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if err := f.Close(); retErr == nil {
			retErr = err
		}
	}()
	zw := gzip.NewWriter(f)
	zw.ModTime = mtime
	if err := writeTar(zw, entries, mtime); err != nil {
		return err
	}
	return zw.Close()
}

// The krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin): only the fields
// Conveyor fills in.
type krewPlugin struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   krewMetadata   `json:"metadata"`
	Spec       krewPluginSpec `json:"spec"`
}

type krewMetadata struct {
	Name string `json:"name"`
}

type krewPluginSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	Sha256   string       `json:"sha256"`
	Bin      string       `json:"bin"`
	Files    []krewFile   `json:"files"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// krewManifest is the krew manifest of the archives, given by platform with their SHA-256, found
// under downloadURL.
func krewManifest(meta metadata, downloadURL string, platforms []platform, sums map[platform]string) ([]byte, error) {
	plugin := krewPlugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   krewMetadata{Name: "conveyor"},
		Spec: krewPluginSpec{
			Version:          "v" + meta.Version,
			Homepage:         source,
			ShortDescription: "Show Conveyor pipelines, workers and their bindings",
			Description: "kubectl conveyor shows what the Conveyor operator placed: `get` lists the WorkerClasses, " +
				"Pipelines, PipelineBindings, Services and HPAs of a namespace, `describe pipeline` a pipeline's " +
				"stages, workers and repair history, `top classes` the capacity and load of every worker class.",
		},
	}
	for _, p := range platforms {
		sum, ok := sums[p]
		if !ok {
			return nil, fmt.Errorf("no archive for %s", p)
		}
		plugin.Spec.Platforms = append(plugin.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": p.OS, "arch": p.Arch}},
			URI:      downloadURL + "/" + pluginArchiveName(meta.Version, p),
			Sha256:   sum,
			Bin:      pluginBinary,
			Files:    []krewFile{{From: pluginBinary, To: "."}},
		})
	}
	return yaml.Marshal(plugin)
}
