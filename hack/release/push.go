package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Where push puts the artifacts under the registry: the image at <registry>/conveyor:<version>,
// the chart at oci://<registry>/charts/conveyor, version <version> (the chart is named conveyor
// too, so it needs a repository of its own).
const (
	imageRepository = "conveyor"
	chartRepository = "charts"
)

// pushOptions are what push reads and where it pushes.
type pushOptions struct {
	dist, registry, helm string
	plainHTTP            bool
}

// push pushes the image index of dist/image and the packaged chart of dist to the registry. The
// image is pushed with the credentials of the Docker configuration (docker login, or a credential
// helper), the chart with Helm's (helm registry login).
func push(ctx context.Context, o pushOptions) error {
	registry := strings.TrimSuffix(strings.TrimPrefix(o.registry, "oci://"), "/")
	idx, version, err := readLayout(filepath.Join(o.dist, imageDir))
	if err != nil {
		return err
	}
	var opts []name.Option
	if o.plainHTTP {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(registry+"/"+imageRepository+":"+version, opts...)
	if err != nil {
		return fmt.Errorf("image reference in %q: %w", registry, err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push the image to %s: %w", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	slog.Info("Pushed the image", "image", ref.String(), "digest", digest.String())

	args := []string{"push", filepath.Join(o.dist, chartArchiveName(version)), "oci://" + registry + "/" + chartRepository}
	if o.plainHTTP {
		args = append(args, "--plain-http")
	}
	if _, err := runHelm(ctx, o.helm, args...); err != nil {
		return err
	}
	slog.Info("Pushed the chart", "chart", "oci://"+registry+"/"+chartRepository+"/conveyor", "version", version)
	return nil
}

// readLayout reads the one image index of the OCI layout at dir and the version it is named by.
func readLayout(dir string) (v1.ImageIndex, string, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("read the OCI layout %s (make image writes it): %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 {
		return nil, "", fmt.Errorf("the OCI layout %s holds %d entries, want the one image index", dir, len(m.Manifests))
	}
	desc := m.Manifests[0]
	version := desc.Annotations[annotationRefName]
	if version == "" {
		return nil, "", fmt.Errorf("the image index of %s has no %s annotation", dir, annotationRefName)
	}
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		return nil, "", fmt.Errorf("read the image index of %s: %w", dir, err)
	}
	return idx, version, nil
}
