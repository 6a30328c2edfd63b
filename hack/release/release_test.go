package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestPluginArchiveReproducible: the archive holds the executable alone at its root, dated the
// commit, and the same binary gives the same archive bytes however old its file is.
func TestPluginArchiveReproducible(t *testing.T) {
	write := func(mtime time.Time) []byte {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		if err := os.WriteFile(bin, []byte("plugin"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(bin, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(dir, "a.tar.gz")
		if err := writeTarGz(archive, []entry{{name: "/" + pluginBinary, mode: 0o755, hostPath: bin}}, testMeta.Created); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first, second := write(time.Now()), write(time.Unix(1, 0))
	if !bytes.Equal(first, second) {
		t.Error("two archives of the same binary differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Name != pluginBinary || hdr.Mode != 0o755 || string(data) != "plugin" || !hdr.ModTime.Equal(testMeta.Created) {
		t.Errorf("archive entry %s mode %o time %s content %q, want %s 755 %s %q", hdr.Name, hdr.Mode, hdr.ModTime, data, pluginBinary, testMeta.Created, "plugin")
	}
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("the archive holds more than the executable (next: %v)", err)
	}
}

// TestKrewManifest: one platform entry per archive, each with its URL, digest and the executable.
func TestKrewManifest(t *testing.T) {
	platforms := []platform{{"linux", "amd64"}, {"darwin", "arm64"}}
	sums := map[platform]string{platforms[0]: strings.Repeat("a", 64), platforms[1]: strings.Repeat("b", 64)}
	data, err := krewManifest(testMeta, "https://example.com/v1.2.3", platforms, sums)
	if err != nil {
		t.Fatal(err)
	}
	var got krewPlugin
	if err := yaml.UnmarshalStrict(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "Plugin" || got.Metadata.Name != "conveyor" || got.Spec.Version != "v1.2.3" || len(got.Spec.Platforms) != 2 {
		t.Fatalf("manifest %+v", got)
	}
	for i, p := range platforms {
		e := got.Spec.Platforms[i]
		wantURI := "https://example.com/v1.2.3/kubectl-conveyor_1.2.3_" + p.OS + "_" + p.Arch + ".tar.gz"
		if e.URI != wantURI || e.Sha256 != sums[p] || e.Bin != pluginBinary ||
			e.Selector.MatchLabels["os"] != p.OS || e.Selector.MatchLabels["arch"] != p.Arch {
			t.Errorf("platform %s: %+v, want uri %s sha256 %s", p, e, wantURI, sums[p])
		}
	}
	if _, err := krewManifest(testMeta, "u", platforms, map[platform]string{platforms[0]: "x"}); err == nil {
		t.Error("a manifest without the digest of every platform was written")
	}
}

// TestWriteSums: every file under the directory, nested ones included, by relative path, sorted,
// in sha256sum's format, and not SHA256SUMS itself.
func TestWriteSums(t *testing.T) {
	dir := t.TempDir()
	for path, data := range map[string]string{"b.txt": "b", "a/x": "", sumsFile: "old"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a/x\n" +
		"3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b.txt\n"
	if string(got) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", got, want)
	}
}

// TestParsePlatforms: os/arch pairs, and nothing else.
func TestParsePlatforms(t *testing.T) {
	got, err := parsePlatforms("linux/amd64, darwin/arm64")
	if err != nil || len(got) != 2 || got[1] != (platform{"darwin", "arm64"}) {
		t.Errorf("parsePlatforms: %v, %v", got, err)
	}
	for _, bad := range []string{"", "linux", "linux/", "linux/arm/v7"} {
		if _, err := parsePlatforms(bad); err == nil {
			t.Errorf("parsePlatforms(%q) succeeded", bad)
		}
	}
}
