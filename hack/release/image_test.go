package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testMeta = metadata{
	Version:  "1.2.3",
	Revision: "0123456789abcdef0123456789abcdef01234567",
	Created:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
}

var testPlatforms = []platform{{"linux", "amd64"}, {"linux", "arm64"}}

// fakeBinaries writes a stand-in for each binary of every platform into a new directory, with the
// given modification time, and returns where they are.
func fakeBinaries(t *testing.T, mtime time.Time) map[platform]map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[platform]map[string]string{}
	for _, p := range testPlatforms {
		out[p] = map[string]string{}
		for _, name := range imageBinaries {
			path := filepath.Join(dir, p.Arch+"-"+name)
			if err := os.WriteFile(path, []byte("\x7fELF "+name+" for "+p.String()), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			out[p][name] = path
		}
	}
	return out
}

func indexDigest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBuildIndexReproducible: the same binaries, wherever they lie and however old their files
// are, give the same index digest, and the layouts written from it hold the same bytes; another
// revision gives another digest.
func TestBuildIndexReproducible(t *testing.T) {
	first, err := buildIndex(testMeta, testPlatforms, fakeBinaries(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	second, err := buildIndex(testMeta, testPlatforms, fakeBinaries(t, time.Unix(12345, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := indexDigest(t, first), indexDigest(t, second); a != b {
		t.Errorf("two builds of the same binaries: digests %s and %s", a, b)
	}

	dirA, dirB := filepath.Join(t.TempDir(), "image"), filepath.Join(t.TempDir(), "image")
	if err := writeLayout(dirA, first, testMeta.Version); err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(dirB, second, testMeta.Version); err != nil {
		t.Fatal(err)
	}
	if a, b := readTree(t, dirA), readTree(t, dirB); !mapsEqual(a, b) {
		t.Errorf("the two layouts differ: %d and %d files", len(a), len(b))
	}

	other := testMeta
	other.Revision = strings.Repeat("f", 40)
	third, err := buildIndex(other, testPlatforms, fakeBinaries(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if indexDigest(t, third) == indexDigest(t, first) {
		t.Errorf("another revision gave the same digest %s", indexDigest(t, first))
	}
}

// TestImageContents: one image per platform, each with the OCI annotations as labels, user 65532
// with a passwd entry, the binaries in /usr/local/bin, trusted roots, and no shell.
func TestImageContents(t *testing.T) {
	idx, err := buildIndex(testMeta, testPlatforms, fakeBinaries(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
	}
	checkAnnotations(t, "the index", im.Annotations)
	var got []string
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		p := platform{OS: desc.Platform.OS, Arch: desc.Platform.Architecture}
		got = append(got, p.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, p, img)
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Errorf("platforms %v, want %v", got, want)
	}
}

func checkImage(t *testing.T, p platform, img v1.Image) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != p.OS || cfg.Architecture != p.Arch {
		t.Errorf("%s: config says %s/%s", p, cfg.OS, cfg.Architecture)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532", p, cfg.Config.User)
	}
	if !cfg.Created.Equal(testMeta.Created) {
		t.Errorf("%s: created %s, want the commit's time %s", p, cfg.Created, testMeta.Created)
	}
	checkAnnotations(t, p.String()+" labels", cfg.Config.Labels)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	checkAnnotations(t, p.String()+" manifest annotations", m.Annotations)

	files := extract(t, img)
	for path, want := range map[string]string{
		"usr/local/bin/conveyor-operator":  "\x7fELF conveyor-operator for " + p.String(),
		"usr/local/bin/conveyor-scheduler": "\x7fELF conveyor-scheduler for " + p.String(),
	} {
		f, ok := files[path]
		switch {
		case !ok:
			t.Errorf("%s: no %s", p, path)
		case string(f.data) != want || f.hdr.Mode != 0o755 || f.hdr.Uid != 0:
			t.Errorf("%s: %s is %q mode %o uid %d, want %q mode 755 uid 0", p, path, f.data, f.hdr.Mode, f.hdr.Uid, want)
		}
	}
	if entry := cfg.Config.Entrypoint; len(entry) != 1 || files[strings.TrimPrefix(entry[0], "/")] == nil {
		t.Errorf("%s: entrypoint %q is not a file of the image", p, entry)
	}
	if passwd := files["etc/passwd"]; passwd == nil || !strings.Contains(string(passwd.data), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no entry for 65532", p)
	}
	if home := files["home/nonroot"]; home == nil || home.hdr.Uid != 65532 {
		t.Errorf("%s: /home/nonroot is missing or not owned by 65532", p)
	}
	if tmp := files["tmp"]; tmp == nil || tmp.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("%s: /tmp is missing or not world-writable and sticky", p)
	}
	checkCABundle(t, p, files)
	for path, f := range files {
		base := filepath.Base(path)
		if slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox"}, base) || f.hdr.Typeflag == tar.TypeSymlink {
			t.Errorf("%s: %s is a shell or a link; the image has neither", p, path)
		}
		if !f.hdr.ModTime.Equal(testMeta.Created) || f.hdr.Uname != "" || f.hdr.Gname != "" {
			t.Errorf("%s: %s has time %s, user %q, group %q: the build machine leaks into the layer", p, path, f.hdr.ModTime, f.hdr.Uname, f.hdr.Gname)
		}
	}
}

func checkCABundle(t *testing.T, p platform, files map[string]*file) {
	t.Helper()
	ca := files[strings.TrimPrefix(caBundlePath, "/")]
	if ca == nil {
		t.Errorf("%s: no %s", p, caBundlePath)
		return
	}
	n := 0
	for rest := ca.data; ; n++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("%s: certificate %d of %s: %v", p, n, caBundlePath, err)
		}
	}
	if n < 100 {
		t.Errorf("%s: %s holds %d certificates, want the NSS roots (over 100)", p, caBundlePath, n)
	}
}

func checkAnnotations(t *testing.T, what string, got map[string]string) {
	t.Helper()
	for k, want := range map[string]string{
		annotationSource:   "https://github.com/conveyor-dev/conveyor",
		annotationRevision: testMeta.Revision,
		annotationVersion:  testMeta.Version,
		annotationCreated:  "2026-01-02T03:04:05Z",
	} {
		if got[k] != want {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], want)
		}
	}
}

// TestReadLayout: push reads back the index writeLayout wrote, named by its version.
func TestReadLayout(t *testing.T) {
	idx, err := buildIndex(testMeta, testPlatforms, fakeBinaries(t, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := writeLayout(dir, idx, testMeta.Version); err != nil {
		t.Fatal(err)
	}
	// A second write replaces the first rather than adding to it.
	if err := writeLayout(dir, idx, testMeta.Version); err != nil {
		t.Fatal(err)
	}
	got, version, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if version != testMeta.Version || indexDigest(t, got) != indexDigest(t, idx) {
		t.Errorf("read back version %q digest %s, want %q %s", version, indexDigest(t, got), testMeta.Version, indexDigest(t, idx))
	}
	if err := validate.Index(got); err != nil {
		t.Errorf("the index read back is not valid: %v", err)
	}
	if _, err := layout.FromPath(dir); err != nil {
		t.Errorf("not an OCI layout: %v", err)
	}
	if _, _, err := readLayout(t.TempDir()); err == nil {
		t.Error("reading an empty directory as a layout succeeded")
	}
}

type file struct {
	hdr  *tar.Header
	data []byte
}

// extract reads the flattened file system of img.
func extract(t *testing.T, img v1.Image) map[string]*file {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	files := map[string]*file{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(hdr.Name, "/")] = &file{hdr: hdr, data: data}
	}
}

// readTree reads every file under dir by relative path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[rel], err = os.ReadFile(path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
