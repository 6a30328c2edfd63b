package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := write("v2", "536870912\n")
	v2max := write("v2max", "max\n")
	v1none := write("v1none", "9223372036854771712\n")
	v1 := write("v1", "268435456\n")
	garbage := write("garbage", "lots\n")
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name  string
		files []string
		want  int64
	}{
		{"cgroup v2 limit", []string{v2, v1}, 536870912},
		{"cgroup v2 without a limit", []string{v2max, v1}, 0},
		{"only cgroup v1", []string{missing, v1}, 268435456},
		{"cgroup v1 without a limit", []string{missing, v1none}, 0},
		{"unreadable number", []string{garbage}, 0},
		{"no cgroup files", []string{missing}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cgroupMemoryLimit(tc.files); got != tc.want {
				t.Errorf("cgroupMemoryLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSetMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	p := filepath.Join(t.TempDir(), "memory.max")
	if err := os.WriteFile(p, []byte("1000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Setenv("GOMEMLIMIT", "")
	if got := setMemoryLimit(0.9, []string{p}); got != 900000000 {
		t.Errorf("setMemoryLimit(0.9) = %d, want 900000000", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900000000 {
		t.Errorf("the runtime's limit is %d, want 900000000", got)
	}
	if got := setMemoryLimit(0, []string{p}); got != 0 {
		t.Errorf("a ratio of 0 disables it, got %d", got)
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := setMemoryLimit(0.9, []string{p}); got != 0 {
		t.Errorf("GOMEMLIMIT set by the user must win, got %d", got)
	}
}
