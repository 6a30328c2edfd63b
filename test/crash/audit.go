package crash

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/conveyor-dev/conveyor/test/cluster"
)

// AuditPolicy is the kube-apiserver audit policy of the failover suite: one Metadata entry per
// write to what the operator writes (and to Leases), nothing else. The log tells, for every write
// the API server received, when it arrived and which client sent it (its user agent, which starts
// with the name of the binary, so two replicas started from differently named links of the same
// binary are told apart).
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
    resources:
      - group: ""
        resources: [pods, pods/status, services, configmaps, persistentvolumeclaims]
      - group: apps
        resources: [controllerrevisions]
      - group: autoscaling
        resources: [horizontalpodautoscalers]
      - group: coordination.k8s.io
        resources: [leases]
      - group: apps.conveyor.dev
      - group: scheduling.conveyor.dev
  - level: None
`

// AuditLogPath is where kwokctl has the cluster's kube-apiserver write its audit log (when the
// cluster was started with --kube-audit-policy).
func AuditLogPath(c *cluster.Cluster) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(c.Workdir(), "clusters", "*", "logs"))
	if len(dirs) != 1 {
		return "", fmt.Errorf("no single log directory of the cluster under %s: %v", c.Workdir(), dirs)
	}
	return filepath.Join(dirs[0], "audit.log"), nil
}

// Write is one write request the API server audited.
type Write struct {
	Received  time.Time // when the API server received it
	Done      time.Time // when it answered
	Client    string    // the user agent's first part: the binary's name
	UserAgent string
	Verb      string
	Resource  string // resource[/subresource]
	Namespace string
	Name      string
	Code      int
	// Response is the object the API server answered with, when the audit policy logs it
	// (level RequestResponse); empty otherwise.
	Response json.RawMessage
}

func (w Write) String() string {
	return fmt.Sprintf("%s %s %s %s/%s → %d (%s)", w.Received.Format("15:04:05.000000"), w.Client, w.Verb, w.Resource, w.Name, w.Code, w.UserAgent)
}

// IsLease says whether the write is to a Lease.
func (w Write) IsLease() bool { return w.Resource == "leases" }

type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	ResponseObject json.RawMessage `json:"responseObject"`
	Received       time.Time       `json:"requestReceivedTimestamp"`
	Stage          time.Time       `json:"stageTimestamp"`
	StageID        string          `json:"stage"`
}

// ReadWrites reads the writes of the audit log whose client (the user agent's binary name) has
// one of the given prefixes, sorted by the time they were received.
func ReadWrites(path string, clientPrefixes ...string) ([]Write, error) {
	return ReadAudit(path, func(w Write) bool {
		for _, p := range clientPrefixes {
			if strings.HasPrefix(w.Client, p) {
				return true
			}
		}
		return false
	})
}

// ReadAudit reads every completed write of the audit log that keep accepts, sorted by the time
// the API server received it. It reads the log's rotated backups too: the API server starts a new
// file every 100 MB (--audit-log-maxsize), and keeps the old ones beside it as
// <name>-<time><ext>.
func ReadAudit(path string, keep func(Write) bool) ([]Write, error) {
	ext := filepath.Ext(path)
	files, err := filepath.Glob(strings.TrimSuffix(path, ext) + "-*" + ext)
	if err != nil {
		return nil, err
	}
	var out []Write
	for _, f := range append(files, path) {
		if out, err = readAuditFile(f, keep, out); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Received.Before(out[j].Received) })
	return out, nil
}

// readAuditFile appends the completed writes of one audit log file that keep accepts to out.
func readAuditFile(path string, keep func(Write) bool, out []Write) ([]Write, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if ev.StageID != "ResponseComplete" || ev.ObjectRef == nil {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			continue
		}
		name, _, _ := strings.Cut(ev.UserAgent, "/")
		w := Write{Received: ev.Received, Done: ev.Stage, Client: name, UserAgent: ev.UserAgent, Verb: ev.Verb,
			Resource: ev.ObjectRef.Resource, Namespace: ev.ObjectRef.Namespace, Name: ev.ObjectRef.Name, Response: ev.ResponseObject}
		if ev.ObjectRef.Subresource != "" {
			w.Resource += "/" + ev.ObjectRef.Subresource
		}
		if ev.ResponseStatus != nil {
			w.Code = ev.ResponseStatus.Code
		}
		if keep(w) {
			out = append(out, w)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
