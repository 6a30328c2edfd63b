package crash

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadAuditReadsRotatedFiles: the API server rotates its audit log every 100 MB; the writes
// of the rotated backups are read as well, in the order they were received.
func TestReadAuditReadsRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	event := func(received, name string) string {
		return `{"stage":"ResponseComplete","verb":"create","userAgent":"conveyor-operator/r1","requestReceivedTimestamp":"` + received +
			`","stageTimestamp":"` + received + `","objectRef":{"resource":"pods","namespace":"ns","name":"` + name + `"},"responseStatus":{"code":201}}` + "\n"
	}
	for file, content := range map[string]string{
		"audit-2026-11-27T07-44-13.519.log": event("2026-11-27T07:00:01.000000Z", "first") + event("2026-11-27T07:00:03.000000Z", "third"),
		"audit.log":                         event("2026-11-27T07:00:02.000000Z", "second") + event("2026-11-27T07:00:04.000000Z", "fourth"),
		"other.log":                         event("2026-11-27T07:00:05.000000Z", "not-audit"),
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writes, err := ReadWrites(filepath.Join(dir, "audit.log"), "conveyor-operator")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range writes {
		got = append(got, w.Name)
	}
	if want := []string{"first", "second", "third", "fourth"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Errorf("writes %q, want %q", got, want)
	}
}
