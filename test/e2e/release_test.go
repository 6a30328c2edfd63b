package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/conveyor-dev/conveyor/test/testenv"
)

// TestReleaseArtifacts meets Conveyor as a user does, from its release artifacts alone:
// hack/release writes them (the image and the plugin for this machine's platform only, to keep the
// build short; `make release` writes all of them with the same code) and pushes the image and the
// chart to an OCI registry running in this process on loopback. The chart is installed from
// oci:// with the image pointing at that registry, by digest; the image is pulled back and its
// conveyor-operator and conveyor-scheduler, not ./bin's, run the chart scenario; the plugin is
// installed from the krew manifest's archive and `kubectl conveyor get` runs from there.
func TestReleaseArtifacts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	h := newHelm(t)
	host := runtime.GOOS + "/" + runtime.GOARCH
	tool := buildReleaseTool(ctx, t)

	dist := filepath.Join(t.TempDir(), "dist")
	runRelease(ctx, t, tool, "all", "--out", dist, "--helm", h.bin, "--platforms", "linux/"+runtime.GOARCH, "--plugin-platforms", host)
	checkSums(t, dist)
	layoutDigest := layoutIndexDigest(t, filepath.Join(dist, "image"))

	// A second build of the same commit, into another directory, gives the same image.
	again := filepath.Join(t.TempDir(), "dist")
	runRelease(ctx, t, tool, "image", "--out", again, "--platforms", "linux/"+runtime.GOARCH)
	if d := layoutIndexDigest(t, filepath.Join(again, "image")); d != layoutDigest {
		t.Errorf("two builds of one commit: image digests %s and %s", layoutDigest, d)
	}
	t.Logf("The image index of this commit: %s (two builds)", layoutDigest)

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	registryHost := strings.TrimPrefix(reg.URL, "http://")
	runRelease(ctx, t, tool, "push", "--registry", registryHost, "--out", dist, "--helm", h.bin, "--plain-http")

	version := chartVersion(ctx, t, h, filepath.Join(dist, "conveyor-*.tgz"))
	repo := registryHost + "/conveyor"
	ref, err := name.ParseReference(repo+":"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("the image %s is not in the registry: %v", ref, err)
	}
	digest, err := pushed.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if digest != layoutDigest {
		t.Errorf("the registry serves %s as %s, the layout holds %s", ref, digest, layoutDigest)
	}
	image := repo + "@" + digest.String()
	chart := []string{"oci://" + registryHost + "/charts/conveyor", "--version", version, "--plain-http"}
	set := []string{"image.repository=" + repo, "image.digest=" + digest.String()}

	// The packaged chart's default image is the one this release pushes elsewhere: its tag is the
	// chart's appVersion, the image's version.
	ns := testenv.NewNamespace(t, env.Client(), "", testenv.DeleteAfterTest())
	for _, d := range deploymentsOf(t, renderChartFrom(ctx, t, h, chart, "conveyor", ns)) {
		expect(t, "default image of Deployment "+d.Name, d.Spec.Template.Spec.Containers[0].Image, "ghcr.io/conveyor-dev/conveyor:"+version)
	}
	// Pointed at the registry, every Deployment references the pushed digest, and the API server
	// takes every object.
	objs := renderChartFrom(ctx, t, h, chart, "conveyor", ns, set...)
	checkImages(t, deploymentsOf(t, objs), image)
	serverDryRun(ctx, t, objs)

	bin := unpackImage(ctx, t, pushed, "linux/"+runtime.GOARCH)
	plugin := installPluginFromKrew(t, dist, runtime.GOOS, runtime.GOARCH)

	runChartScenario(ctx, t, h, chartScenario{
		chart:  chart,
		set:    set,
		binDir: bin,
		installed: func(ctx context.Context, t *testing.T, system string) {
			list := &appsv1.DeploymentList{}
			if err := env.Client().List(ctx, list, client.InNamespace(system)); err != nil {
				t.Fatal(err)
			}
			var ds []*appsv1.Deployment
			for i := range list.Items {
				ds = append(ds, &list.Items[i])
			}
			checkImages(t, ds, image)
		},
		running: func(ctx context.Context, t *testing.T, work string) {
			// The installed plugin prints what the command of this process prints, once both read
			// the same state.
			testenv.EventuallyContext(ctx, t, "kubectl conveyor get from the krew archive", func(ctx context.Context) error {
				got, err := kubectlConveyor(ctx, plugin, work, "get")
				if err != nil {
					return err
				}
				want, err := runPluginErr(ctx, work, "get")
				if err != nil {
					return err
				}
				if diff := cmp.Diff(want, got); diff != "" {
					return fmt.Errorf("the installed plugin's output differs from this process's (-want +got):\n%s", diff)
				}
				if !strings.Contains(got, "Ready") {
					return fmt.Errorf("no Ready pipeline in:\n%s", got)
				}
				return nil
			})
		},
	})
}

// buildReleaseTool builds hack/release.
func buildReleaseTool(ctx context.Context, t *testing.T) string {
	t.Helper()
	tool := filepath.Join(t.TempDir(), "release")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tool, "./hack/release")
	cmd.Dir = env.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./hack/release: %v\n%s", err, out)
	}
	return tool
}

// runRelease runs hack/release at the repository's root.
func runRelease(ctx context.Context, t *testing.T, tool string, args ...string) {
	t.Helper()
	started := time.Now()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir = env.RepoRoot()
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/release %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("hack/release %s (%s):\n%s", args[0], time.Since(started).Round(time.Second), out)
}

// checkSums verifies SHA256SUMS: it lists every other file of dir, each with its digest.
func checkSums(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		sum, path, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: line %q is not <sha256>  <path>", sc.Text())
		}
		listed[path] = sum
	}
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "SHA256SUMS" {
			return err
		}
		files = append(files, rel)
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(content)
		if got := hex.EncodeToString(sum[:]); listed[rel] != got {
			t.Errorf("SHA256SUMS says %s is %q, it is %s", rel, listed[rel], got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(files) {
		t.Errorf("SHA256SUMS lists %d files, the release has %d: %v", len(listed), len(files), files)
	}
	for _, want := range []string{"image/index.json", "image/oci-layout", "conveyor.yaml"} {
		if !slices.Contains(files, want) {
			t.Errorf("the release has no %s: %v", want, files)
		}
	}
}

// layoutIndexDigest is the digest of the one image index of the OCI layout at dir.
func layoutIndexDigest(t *testing.T, dir string) v1.Hash {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read the OCI layout %s: %v", dir, err)
	}
	m, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("the OCI layout %s holds %d entries, want 1", dir, len(m.Manifests))
	}
	return m.Manifests[0].Digest
}

// chartVersion is the version of the one chart archive matching pattern.
func chartVersion(ctx context.Context, t *testing.T, h *helmCLI, pattern string) string {
	t.Helper()
	matches, err := filepath.Glob(pattern)
	if err != nil || len(matches) != 1 {
		t.Fatalf("chart archives %s: %v (%v)", pattern, matches, err)
	}
	out, err := h.run(ctx, "show", "chart", matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version, AppVersion string }
	if err := sigsyaml.Unmarshal([]byte(out), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version == "" || chart.AppVersion != chart.Version {
		t.Fatalf("%s: version %q, appVersion %q, want both the release's", matches[0], chart.Version, chart.AppVersion)
	}
	return chart.Version
}

// deploymentsOf are the Deployments among objs.
func deploymentsOf(t *testing.T, objs []*unstructured.Unstructured) []*appsv1.Deployment {
	t.Helper()
	var out []*appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			d := &appsv1.Deployment{}
			fromUnstructured(t, o, d)
			out = append(out, d)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d Deployments, want the operator's and the scheduler's", len(out))
	}
	return out
}

// checkImages: every container of every Deployment runs image.
func checkImages(t *testing.T, ds []*appsv1.Deployment, image string) {
	t.Helper()
	if len(ds) == 0 {
		t.Error("no Deployments")
	}
	for _, d := range ds {
		for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
			if c.Image != image {
				t.Errorf("Deployment %s container %s: image %s, want %s", d.Name, c.Name, c.Image, image)
			}
		}
	}
}

// unpackImage unpacks the file system of the image of platform from idx into a new directory and
// returns its /usr/local/bin, where the image's binaries are.
func unpackImage(ctx context.Context, t *testing.T, idx v1.ImageIndex, platform string) string {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var img v1.Image
	for _, desc := range m.Manifests {
		if desc.Platform != nil && desc.Platform.OS+"/"+desc.Platform.Architecture == platform {
			if img, err = idx.Image(desc.Digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	if img == nil {
		t.Fatalf("the pushed image has no %s manifest", platform)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "the image's user", cfg.Config.User, "65532:65532")
	root := t.TempDir()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	if err := untar(ctx, rc, root); err != nil {
		t.Fatalf("unpack the image: %v", err)
	}
	bin := filepath.Join(root, "usr", "local", "bin")
	for _, name := range []string{"conveyor-operator", "conveyor-scheduler"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Fatalf("the image has no %s: %v", name, err)
		}
	}
	return bin
}

// untar writes the directories and regular files of a tar stream under root, with their modes.
func untar(ctx context.Context, r io.Reader, root string) error {
	tr := tar.NewReader(r)
	for ctx.Err() == nil {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("the archive's %q leaves its root", hdr.Name)
		}
		path := filepath.Join(root, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fs.FileMode(hdr.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if err := errors.Join(err, f.Close()); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		default:
			return fmt.Errorf("%s: unexpected tar entry type %q", hdr.Name, hdr.Typeflag)
		}
	}
	return ctx.Err()
}

// installPluginFromKrew does what `kubectl krew install --manifest` does with the release's krew
// manifest, with the archive from dist rather than downloaded: it picks the platform's entry,
// checks the archive's digest, unpacks it, and returns the directory of the entry's executable.
func installPluginFromKrew(t *testing.T, dist, goos, goarch string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dist, "conveyor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		APIVersion, Kind string
		Metadata         struct{ Name string }
		Spec             struct {
			Version, Homepage, ShortDescription, Description string
			Platforms                                        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				}
				URI, Sha256, Bin string
				Files            []struct{ From, To string }
			}
		}
	}
	if err := sigsyaml.UnmarshalStrict(data, &manifest); err != nil {
		t.Fatalf("the krew manifest: %v", err)
	}
	expect(t, "krew manifest kind", manifest.APIVersion+" "+manifest.Kind, "krew.googlecontainertools.github.com/v1alpha2 Plugin")
	expect(t, "krew plugin name", manifest.Metadata.Name, "conveyor")
	if manifest.Spec.Version == "" || manifest.Spec.ShortDescription == "" {
		t.Errorf("the krew manifest has no version or shortDescription, which krew requires: %+v", manifest.Spec)
	}
	for _, p := range manifest.Spec.Platforms {
		if p.Selector.MatchLabels["os"] != goos || p.Selector.MatchLabels["arch"] != goarch {
			continue
		}
		archive, err := os.ReadFile(filepath.Join(dist, filepath.Base(p.URI)))
		if err != nil {
			t.Fatalf("the archive of %s: %v", p.URI, err)
		}
		sum := sha256.Sum256(archive)
		expect(t, "sha256 of "+filepath.Base(p.URI), hex.EncodeToString(sum[:]), p.Sha256)
		unpacked := t.TempDir()
		zr, err := gzip.NewReader(bytes.NewReader(archive))
		if err != nil {
			t.Fatal(err)
		}
		if err := untar(t.Context(), zr, unpacked); err != nil {
			t.Fatalf("unpack %s: %v", p.URI, err)
		}
		installed := t.TempDir()
		for _, f := range p.Files {
			if err := os.Rename(filepath.Join(unpacked, f.From), filepath.Join(installed, f.To, filepath.Base(f.From))); err != nil {
				t.Fatalf("krew's files entry %s -> %s: %v", f.From, f.To, err)
			}
		}
		if p.Bin != "kubectl-conveyor" {
			t.Fatalf("the manifest's bin is %q, want kubectl-conveyor", p.Bin)
		}
		if _, err := os.Stat(filepath.Join(installed, p.Bin)); err != nil {
			t.Fatalf("the manifest's bin %s is not among its files: %v", p.Bin, err)
		}
		return installed
	}
	t.Fatalf("the krew manifest has no entry for %s/%s", goos, goarch)
	return ""
}
