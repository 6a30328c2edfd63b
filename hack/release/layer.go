package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user the image runs as, the one of distroless' "nonroot" images, which the chart's
// podSecurityContext names.
const (
	nonrootUID  = 65532
	nonrootName = "nonroot"
	// caBundlePath is where Go, and most other TLS stacks on Linux, look for the trusted roots.
	caBundlePath = "/etc/ssl/certs/ca-certificates.crt"
)

// entry is a file or directory of a layer, owned by uid:uid.
type entry struct {
	name string // absolute path in the image
	mode int64
	uid  int
	dir  bool
	// The content: data, or the file at hostPath.
	data     []byte
	hostPath string
}

// baseEntries are the files every image of Conveyor needs besides its binaries: the passwd and
// group entries of root and the nonroot user, its home, a world-writable /tmp, and the trusted
// root certificates. Nothing else: no shell, no package manager.
func baseEntries() []entry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%[1]s:x:%[2]d:%[2]d:%[1]s:/home/%[1]s:/sbin/nologin\n", nonrootName, nonrootUID)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", nonrootName, nonrootUID)
	return []entry{
		{name: "/etc", mode: 0o755, dir: true},
		{name: "/etc/group", mode: 0o644, data: []byte(group)},
		{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "/etc/ssl", mode: 0o755, dir: true},
		{name: "/etc/ssl/certs", mode: 0o755, dir: true},
		{name: caBundlePath, mode: 0o644, data: caBundle()},
		{name: "/home", mode: 0o755, dir: true},
		{name: "/home/" + nonrootName, mode: 0o700, uid: nonrootUID, dir: true},
		{name: "/root", mode: 0o700, dir: true},
		{name: "/tmp", mode: 0o1777, dir: true},
	}
}

// caBundle is the Mozilla NSS root store as golang.org/x/crypto/x509roots/fallback embeds it, in
// PEM: pinned in go.mod, so the same on every build machine. Roots that NSS trusts only with
// constraints a PEM file cannot express (distrust after a date) are left out rather than trusted
// without them.
func caBundle() []byte {
	var buf bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return buf.Bytes()
}

// binaryEntries puts the files named by name → host path into /usr/local/bin.
func binaryEntries(binaries map[string]string, names []string) []entry {
	out := []entry{
		{name: "/usr", mode: 0o755, dir: true},
		{name: "/usr/local", mode: 0o755, dir: true},
		{name: "/usr/local/bin", mode: 0o755, dir: true},
	}
	for _, n := range names {
		out = append(out, entry{name: "/usr/local/bin/" + n, mode: 0o755, hostPath: binaries[n]})
	}
	return out
}

// newLayer is a gzip-compressed OCI layer of entries, in their order, every one dated mtime and
// without user or group names, so that the same entries always give the same digest.
func newLayer(entries []entry, mtime time.Time) (v1.Layer, error) {
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, entries, mtime)) }()
		return pr, nil
	}
	l, err := tarball.LayerFromOpener(opener, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("build a layer: %w", err)
	}
	return l, nil
}

// writeTar writes entries as a tar stream.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name[1:], // relative, as layers carry them
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag = tar.TypeReg
		if err := writeFile(tw, hdr, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

func writeFile(tw *tar.Writer, hdr *tar.Header, e entry) error {
	if e.hostPath == "" {
		hdr.Size = int64(len(e.data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.hostPath)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("%s into %s: %w", e.hostPath, path.Base(e.name), err)
	}
	return nil
}
