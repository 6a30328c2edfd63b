package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image holds both binaries; the chart runs each with its own command.
var imageBinaries = []string{"conveyor-operator", "conveyor-scheduler"}

// imageDir is the OCI layout of the image under the release directory.
const imageDir = "image"

// The OCI annotation keys the image's labels, its manifests and its index carry.
const (
	annotationSource   = "org.opencontainers.image.source"
	annotationRevision = "org.opencontainers.image.revision"
	annotationVersion  = "org.opencontainers.image.version"
	annotationCreated  = "org.opencontainers.image.created"
	annotationTitle    = "org.opencontainers.image.title"
	annotationRefName  = "org.opencontainers.image.ref.name"
)

// annotations are the OCI annotations of the release.
func (m metadata) annotations() map[string]string {
	return map[string]string{
		annotationSource:   source,
		annotationRevision: m.Revision,
		annotationVersion:  m.Version,
		annotationCreated:  m.Created.Format(time.RFC3339),
		annotationTitle:    "conveyor",
	}
}

// writeImage builds both binaries for every platform and writes the image index as an OCI layout
// into out/image, replacing what was there. It returns the index's digest.
func writeImage(ctx context.Context, root, out string, meta metadata, platforms []platform) (v1.Hash, error) {
	tmp, err := os.MkdirTemp("", "conveyor-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	perPlatform := map[platform]map[string]string{}
	for _, p := range platforms {
		bins := map[string]string{}
		for _, name := range imageBinaries {
			bins[name] = filepath.Join(tmp, p.OS+"-"+p.Arch, name)
			// cmd/<name> is conveyor-<name>, as `make build` names them.
			if err := goBuild(ctx, root, "./cmd/"+strings.TrimPrefix(name, "conveyor-"), bins[name], p); err != nil {
				return v1.Hash{}, err
			}
		}
		perPlatform[p] = bins
	}
	idx, err := buildIndex(meta, platforms, perPlatform)
	if err != nil {
		return v1.Hash{}, err
	}
	dir := filepath.Join(out, imageDir)
	if err := writeLayout(dir, idx, meta.Version); err != nil {
		return v1.Hash{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	slog.Info("Wrote the image", "layout", dir, "digest", digest.String(), "version", meta.Version, "platforms", len(platforms))
	return digest, nil
}

// buildIndex is the multi-platform image index of the given binaries, one image per platform in
// the order given.
func buildIndex(meta metadata, platforms []platform, binaries map[platform]map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, err := buildImage(meta, p, binaries[p])
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}},
		})
	}
	annotated, ok := mutate.Annotations(idx, meta.annotations()).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the index gave no index")
	}
	return annotated, nil
}

// buildImage is the image of one platform: the base files, then the binaries, running as the
// nonroot user with the operator as its entrypoint. Its labels are the OCI annotations.
func buildImage(meta metadata, p platform, binaries map[string]string) (v1.Image, error) {
	for _, name := range imageBinaries {
		if binaries[name] == "" {
			return nil, fmt.Errorf("no %s for %s", name, p)
		}
	}
	cfg := &v1.ConfigFile{
		Architecture: p.Arch,
		OS:           p.OS,
		Created:      v1.Time{Time: meta.Created},
		Config: v1.Config{
			User:       strconv.Itoa(nonrootUID) + ":" + strconv.Itoa(nonrootUID),
			Entrypoint: []string{"/usr/local/bin/" + imageBinaries[0]},
			Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caBundlePath},
			WorkingDir: "/home/" + nonrootName,
			Labels:     meta.annotations(),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), cfg)
	if err != nil {
		return nil, err
	}
	base, err := newLayer(baseEntries(), meta.Created)
	if err != nil {
		return nil, err
	}
	bins, err := newLayer(binaryEntries(binaries, imageBinaries), meta.Created)
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: meta.Created}, CreatedBy: "hack/release: passwd, group, CA certificates, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: bins, History: v1.History{Created: v1.Time{Time: meta.Created}, CreatedBy: "hack/release: " + fmt.Sprint(imageBinaries), Comment: "binaries"}},
	)
	if err != nil {
		return nil, err
	}
	annotated, ok := mutate.Annotations(img, meta.annotations()).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("annotating the image gave no image")
	}
	return annotated, nil
}

// writeLayout writes idx as the one entry of a new OCI layout at dir, named by the version.
func writeLayout(dir string, idx v1.ImageIndex, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("create the OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{annotationRefName: version})); err != nil {
		return fmt.Errorf("write the image into %s: %w", dir, err)
	}
	return nil
}
