package torture

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/crash"
)

const leaseNS = "conveyor-system"

var t0 = time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// leaseWrite is a successful write of bucket b's Lease received at ms and answered 5 ms later,
// leaving holder (a replica id; "" for none) at resourceVersion rv.
func leaseWrite(t *testing.T, b int, holder string, ms, rv int) crash.Write {
	t.Helper()
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: shard.BucketLeaseName(b), Namespace: leaseNS, ResourceVersion: fmt.Sprint(rv)}}
	if holder != "" {
		h := holder + "_0a1b2c"
		l.Spec.HolderIdentity = &h
	}
	raw, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return crash.Write{Received: at(ms), Done: at(ms + 5), Client: "conveyor-operator", UserAgent: userAgentPrefix + holder,
		Verb: "update", Resource: "leases", Namespace: leaseNS, Name: l.Name, Code: 200, Response: raw}
}

// write is a write of replica in ns received at ms and answered 5 ms later.
func write(replica, ns string, ms, code int) crash.Write {
	return crash.Write{Received: at(ms), Done: at(ms + 5), Client: "conveyor-operator", UserAgent: userAgentPrefix + replica + " (linux/amd64)",
		Verb: "create", Resource: "pipelinebindings", Namespace: ns, Name: "x", Code: code}
}

// A namespace in bucket 22 ("team-a") and one in bucket 44 ("a").
const nsA, nsB = "team-a", "a"

func TestCheckOwnership(t *testing.T) {
	if shard.BucketOf(nsA) != 22 || shard.BucketOf(nsB) != 44 {
		t.Fatalf("the test's namespaces moved buckets: %d %d", shard.BucketOf(nsA), shard.BucketOf(nsB))
	}
	// Bucket 22: r1 takes it at 0 (answered at 5), releases at 1000, r2 takes it at 1200 (answered
	// 1205); a write by the coordinator r3 at 1100 only touches an annotation (holder none). The
	// writes come out of order on purpose: the history orders by resourceVersion.
	leases := []crash.Write{
		leaseWrite(t, 22, "r2", 1200, 40),
		leaseWrite(t, 22, "r1", 0, 10),
		leaseWrite(t, 22, "", 1000, 20),
		leaseWrite(t, 22, "", 1100, 30),
		leaseWrite(t, 44, "r2", 0, 11),
	}
	h, err := BuildHistory(leases)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		w        crash.Write
		nonOwner bool
		refused  bool
	}{
		{"owner inside its holding", write("r1", nsA, 500, 201), false, false},
		{"owner answered just before its release arrived", write("r1", nsA, 990, 201), false, false},
		{"owner's write answered after its release arrived", write("r1", nsA, 997, 201), true, false},
		{"old owner after the release", write("r1", nsA, 1100, 201), true, false},
		{"new owner before its take was answered", write("r2", nsA, 1202, 201), true, false},
		{"new owner after its take", write("r2", nsA, 1210, 201), false, false},
		{"nobody held it", write("r2", nsA, 1050, 201), true, false},
		{"another bucket's owner", write("r1", nsB, 500, 201), true, false},
		{"a refused write changes nothing", write("r1", nsA, 1100, 409), false, true},
		{"the Lease namespace is not checked", write("r3", leaseNS, 500, 200), false, false},
		{"still holding, no end", write("r2", nsB, 99999, 200), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := CheckOwnership(h, []crash.Write{tt.w}, leaseNS)
			if got := len(rep.NonOwner) > 0; got != tt.nonOwner {
				t.Errorf("non-owner = %v, want %v (%v)", got, tt.nonOwner, rep.NonOwner)
			}
			if got := rep.Refused > 0; got != tt.refused {
				t.Errorf("refused = %v, want %v", got, tt.refused)
			}
		})
	}
}

func TestReplicaOfWrite(t *testing.T) {
	for ua, want := range map[string]string{
		"conveyor-operator/r7":                    "r7",
		"conveyor-operator/r7 (linux/amd64) x":    "r7",
		"kube-controller-manager/v1.37.1 (linux)": "",
		"torture/v0": "",
	} {
		if got := ReplicaOfWrite(crash.Write{UserAgent: ua}); got != want {
			t.Errorf("ReplicaOfWrite(%q) = %q, want %q", ua, got, want)
		}
	}
}

func TestGap(t *testing.T) {
	leases := []crash.Write{
		leaseWrite(t, 22, "r1", 0, 10),
		leaseWrite(t, 22, "", 1000, 20),   // r1 releases
		leaseWrite(t, 22, "r2", 1300, 30), // r2 takes it
	}
	h, err := BuildHistory(leases)
	if err != nil {
		t.Fatal(err)
	}
	named := func(w crash.Write, name string) crash.Write { w.Name = name; return w }
	writes := []crash.Write{
		named(write("r1", nsA, 900, 201), "p-00001-first"),  // the old owner places another pipeline
		named(write("r2", nsA, 1500, 409), "p-00007-first"), // refused
		named(write("r2", nsA, 1600, 201), "p-00070-first"), // another pipeline whose name starts alike
		named(write("r2", nsA, 1700, 201), "p-00007-first"), // the probe's first binding
		named(write("r1", nsA, 500, 201), "p-00009-first"),  // the old owner placed this probe
		named(write("r2", nsA, 1800, 201), "p-00009"),
	}
	tests := []struct {
		name string
		p    Probe
		want time.Duration
		ok   bool
	}{
		{"graceful: from the release to the first applied write for the probe", Probe{Kind: KindScaleDown, Namespace: nsA, Pipeline: "p-00007", Victim: "r1", Created: at(800)}, 700 * time.Millisecond, true},
		{"graceful, probe made after the release", Probe{Kind: KindRebalance, Namespace: nsA, Pipeline: "p-00007", Victim: "r1", Created: at(1100)}, 700 * time.Millisecond, true},
		{"SIGKILL: from the signal", Probe{Kind: KindKill, Namespace: nsA, Pipeline: "p-00007", Victim: "r1", Signal: at(950), Created: at(960)}, 750 * time.Millisecond, true},
		{"the victim placed the probe before it let go", Probe{Kind: KindScaleDown, Namespace: nsA, Pipeline: "p-00009", Victim: "r1", Created: at(400)}, 0, false},
		{"nothing wrote for the probe", Probe{Kind: KindStop, Namespace: nsA, Pipeline: "p-00123", Victim: "r1", Signal: at(950), Created: at(960)}, 0, false},
		{"graceful, the victim never held it", Probe{Kind: KindScaleUp, Namespace: nsA, Pipeline: "p-00007", Victim: "r9", Created: at(800)}, 0, false},
	}
	// r2 holds the bucket twice: a probe made after its second release measures from that one.
	twice, err := BuildHistory(append(leases,
		leaseWrite(t, 22, "", 2000, 40),   // r2 releases
		leaseWrite(t, 22, "r1", 2100, 50), // r1 takes it
		leaseWrite(t, 22, "", 3000, 60),   // r1 releases
		leaseWrite(t, 22, "r2", 3050, 70), // r2 takes it again
	))
	if err != nil {
		t.Fatal(err)
	}
	later := append(slices.Clone(writes), named(write("r2", nsA, 3100, 201), "p-00011-first"))
	if got, ok := Gap(Probe{Kind: KindRebalance, Namespace: nsA, Pipeline: "p-00011", Victim: "r1", Created: at(3040)}, twice, later); !ok || got != 100*time.Millisecond {
		t.Errorf("Gap after the victim's second release = %v, %v; want 100ms from that release", got, ok)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Gap(tt.p, h, writes)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Gap = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAuditPolicyLogsTheLeasesFirst(t *testing.T) {
	p := AuditPolicy(leaseNS)
	rr, md := strings.Index(p, "level: RequestResponse"), strings.Index(p, "level: Metadata")
	if rr < 0 || md < 0 || rr > md || !strings.Contains(p, "namespaces: ["+leaseNS+"]") {
		t.Errorf("the Lease rule must come before the Metadata rule, limited to %s:\n%s", leaseNS, p)
	}
}

// A graceful move whose new owner is killed or stopped before it writes for the probe is the
// signal's gap, not the move's: the first write comes only once the coordinator moves the bucket on.
func TestInterrupted(t *testing.T) {
	h, err := BuildHistory([]crash.Write{
		leaseWrite(t, 22, "r1", 0, 10),
		leaseWrite(t, 22, "", 1000, 20),    // r1 releases to r2
		leaseWrite(t, 22, "r2", 1100, 30),  // r2 takes it, and is stopped at 1150
		leaseWrite(t, 22, "", 9000, 40),    // the coordinator clears the stopped holder
		leaseWrite(t, 22, "r3", 9100, 50),  // r3 takes it
		leaseWrite(t, 44, "r4", 0, 60),     // another bucket, held by r4 all along
		leaseWrite(t, 44, "", 20000, 70),   // r4 releases to r5
		leaseWrite(t, 44, "r5", 20100, 80), // r5 takes it
	})
	if err != nil {
		t.Fatal(err)
	}
	named := func(w crash.Write, name string) crash.Write { w.Name = name; return w }
	writes := []crash.Write{
		named(write("r3", nsA, 9300, 201), "p-00007-first"),
		named(write("r5", nsB, 20300, 201), "p-00008-first"),
	}
	moved := Probe{Kind: KindRolling, Namespace: nsA, Pipeline: "p-00007", Victim: "r1", Created: at(1050)}
	tests := []struct {
		name    string
		p       Probe
		signals []Signal
		want    Signal
		gap     time.Duration
		ok      bool
	}{
		{"the new owner stopped before it wrote: the stop's gap, from the signal", moved,
			[]Signal{{Kind: KindStop, Replica: "r2", At: at(1150)}}, Signal{Kind: KindStop, Replica: "r2", At: at(1150)}, 8150 * time.Millisecond, true},
		{"a signal to a replica that never held the bucket", moved,
			[]Signal{{Kind: KindKill, Replica: "r4", At: at(1150)}}, Signal{}, 0, false},
		{"a signal before the probe was made", moved,
			[]Signal{{Kind: KindKill, Replica: "r2", At: at(1000)}}, Signal{}, 0, false},
		{"the writer itself signalled after it wrote", moved,
			[]Signal{{Kind: KindStop, Replica: "r3", At: at(9400)}}, Signal{}, 0, false},
		{"an ungraceful probe is left to Gap", Probe{Kind: KindKill, Namespace: nsA, Pipeline: "p-00007", Victim: "r1", Signal: at(1000), Created: at(1050)},
			[]Signal{{Kind: KindStop, Replica: "r2", At: at(1150)}}, Signal{}, 0, false},
		{"a move that went through", Probe{Kind: KindScaleDown, Namespace: nsB, Pipeline: "p-00008", Victim: "r4", Created: at(19900)},
			[]Signal{{Kind: KindStop, Replica: "r2", At: at(1150)}}, Signal{}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, gap, ok := Interrupted(tt.p, h, writes, tt.signals)
			if s != tt.want || gap != tt.gap || ok != tt.ok {
				t.Errorf("Interrupted = %+v, %v, %v; want %+v, %v, %v", s, gap, ok, tt.want, tt.gap, tt.ok)
			}
		})
	}
}
