package cluster

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// DefaultLogLines is how many lines of every log DumpLogs prints.
const DefaultLogLines = 60

// LogFiles lists the cluster's logs: kwokctl's own output and one file per component
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok-controller).
func (c *Cluster) LogFiles() []string {
	files, _ := filepath.Glob(filepath.Join(c.clusterDir, "logs", "*.log"))
	sort.Strings(files)
	if _, err := os.Stat(c.kwokctlLog()); err == nil {
		files = append([]string{c.kwokctlLog()}, files...)
	}
	return files
}

// DumpLogs writes the last DefaultLogLines lines of every log of the cluster to w.
func (c *Cluster) DumpLogs(w io.Writer) {
	c.DumpLogTails(w, DefaultLogLines)
}

// DumpLogTails writes the last n lines of every log of the cluster to w.
func (c *Cluster) DumpLogTails(w io.Writer, n int) {
	files := c.LogFiles()
	if len(files) == 0 {
		_, _ = fmt.Fprintf(w, "cluster %s: no logs in %s\n", c.name, c.workdir)
		return
	}
	for _, file := range files {
		tail, err := tailFile(file, n)
		if err != nil {
			_, _ = fmt.Fprintf(w, "==== %s: %v\n", file, err)
			continue
		}
		_, _ = fmt.Fprintf(w, "==== cluster %s: %s (last %d lines) ====\n", c.name, filepath.Base(file), n)
		_, _ = w.Write(tail)
		if len(tail) > 0 && tail[len(tail)-1] != '\n' {
			_, _ = fmt.Fprintln(w)
		}
	}
	_, _ = fmt.Fprintf(w, "==== end of the logs of cluster %s ====\n", c.name)
}

// SaveLogs copies every log of the cluster, whole, into dir (created if needed), for CI artifacts.
func (c *Cluster) SaveLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, file := range c.LogFiles() {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.name+"-"+filepath.Base(file)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// tailFile returns at most the last n lines of a file, reading at most its last 1 MiB.
func tailFile(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	const maxRead = 1 << 20
	offset := info.Size() - maxRead
	if offset < 0 {
		offset = 0
	}
	data, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil {
		return nil, err
	}
	return lastLines(data, n), nil
}

// lastLines returns the last n lines of data.
func lastLines(data []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	data = bytes.TrimRight(data, "\n")
	i := len(data)
	for ; n > 0; n-- {
		j := bytes.LastIndexByte(data[:i], '\n')
		if j < 0 {
			return data
		}
		i = j
	}
	return data[i+1:]
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct{ buf []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	const keep = 64 << 10
	t.buf = append(t.buf, p...)
	if len(t.buf) > keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-keep:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte { return t.buf }
