package torture

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/conveyor-dev/conveyor/pkg/shard"
	"github.com/conveyor-dev/conveyor/test/crash"
)

// AuditPolicy returns the kube-apiserver audit policy of the torture: the failover suite's
// (crash.AuditPolicy: one Metadata entry per write to what the operator writes), with every Lease
// write in the operator's namespace logged with the Lease the API server answered, so the log says
// who held each bucket from when to when. Its rule comes first: the first matching rule wins.
func AuditPolicy(leaseNamespace string) string {
	leases := `  - level: RequestResponse
    namespaces: [` + leaseNamespace + `]
    resources:
      - group: coordination.k8s.io
        resources: [leases]
`
	return strings.Replace(crash.AuditPolicy, "  - level: Metadata\n", leases+"  - level: Metadata\n", 1)
}

// userAgentPrefix starts the user agent of a replica run with --sharding: conveyor-operator/<id>.
const userAgentPrefix = "conveyor-operator/"

// ReplicaOfWrite returns the shard id of the replica that sent a write, from its user agent; ""
// when another client sent it.
func ReplicaOfWrite(w crash.Write) string {
	rest, ok := strings.CutPrefix(w.UserAgent, userAgentPrefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// Holding is one replica's hold on a bucket as the API server applied it: from the answer to
// the write that made it the holder until the arrival of the write that made another (or none)
// the holder. Both ends are taken on the safe side: a write of the replica is inside its holding
// only if the API server received it after the holding began and answered it before it ended.
type Holding struct {
	Replica  string
	From, To time.Time // To is zero while the replica still holds the bucket
}

// History is every bucket's holdings, in order.
type History map[int][]Holding

// BuildHistory reads the holders of the bucket Leases from the successful Lease writes of the
// audit log that carry the Lease the API server answered with (AuditPolicy logs them).
func BuildHistory(writes []crash.Write) (History, error) {
	type change struct {
		rv      uint64
		holder  string
		arrived time.Time
		done    time.Time
	}
	changes := map[int][]change{}
	for _, w := range writes {
		b, ok := shard.BucketOfLease(w.Name)
		if !w.IsLease() || !ok || w.Code >= 300 || len(w.Response) == 0 {
			continue
		}
		var l coordinationv1.Lease
		if err := json.Unmarshal(w.Response, &l); err != nil {
			return nil, fmt.Errorf("the answer to %s: %w", w, err)
		}
		rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the answer to %s: resourceVersion %q: %w", w, l.ResourceVersion, err)
		}
		holder := ""
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			holder = shard.ReplicaOf(*l.Spec.HolderIdentity)
		}
		changes[b] = append(changes[b], change{rv: rv, holder: holder, arrived: w.Received, done: w.Done})
	}
	h := History{}
	for b, cs := range changes {
		// One object's writes apply in the order of their resourceVersions.
		sort.Slice(cs, func(i, j int) bool { return cs[i].rv < cs[j].rv })
		cur := ""
		for _, c := range cs {
			if c.holder == cur {
				continue
			}
			if n := len(h[b]); n > 0 && h[b][n-1].To.IsZero() {
				h[b][n-1].To = c.arrived
			}
			if c.holder != "" {
				h[b] = append(h[b], Holding{Replica: c.holder, From: c.done})
			}
			cur = c.holder
		}
	}
	return h, nil
}

// holds says whether replica held bucket b over the whole of [from, to].
func (h History) holds(b int, replica string, from, to time.Time) bool {
	for _, hd := range h[b] {
		if hd.Replica == replica && !from.Before(hd.From) && (hd.To.IsZero() || !to.After(hd.To)) {
			return true
		}
	}
	return false
}

// holding returns the holding of bucket b that covers t, if any.
func (h History) holding(b int, t time.Time) (Holding, bool) {
	for _, hd := range h[b] {
		if !t.Before(hd.From) && (hd.To.IsZero() || t.Before(hd.To)) {
			return hd, true
		}
	}
	return Holding{}, false
}

// OwnershipReport is what CheckOwnership found.
type OwnershipReport struct {
	Checked  int      // successful writes of the replicas outside the Lease namespace
	Refused  int      // writes of the replicas the API server refused (they changed nothing)
	NonOwner []string // successful writes by a replica that did not hold the namespace's bucket
}

// CheckOwnership checks every successful write a replica sent to a namespace other than
// leaseNamespace: the API server must have received and answered it while that replica held the
// namespace's bucket.
func CheckOwnership(h History, writes []crash.Write, leaseNamespace string) OwnershipReport {
	var rep OwnershipReport
	for _, w := range writes {
		r := ReplicaOfWrite(w)
		if r == "" || w.Namespace == "" || w.Namespace == leaseNamespace {
			continue
		}
		if w.Code >= 300 {
			rep.Refused++
			continue
		}
		rep.Checked++
		if !h.holds(shard.BucketOf(w.Namespace), r, w.Received, w.Done) {
			rep.NonOwner = append(rep.NonOwner, fmt.Sprintf("%s by %s in bucket %d, held then by %s",
				w, r, shard.BucketOf(w.Namespace), h.holderAt(shard.BucketOf(w.Namespace), w.Received)))
		}
	}
	return rep
}

func (h History) holderAt(b int, t time.Time) string {
	if hd, ok := h.holding(b, t); ok {
		return hd.Replica
	}
	return "nobody"
}

// Probe is a pipeline created in a namespace while its bucket changes hands, so that the new
// owner has something to write: the handover gap is measured up to its first write for it.
type Probe struct {
	Kind      string // what moved the bucket: scale-up, scale-down, rolling, kill, stop, rebalance
	Namespace string
	Pipeline  string    // the probe's pipeline; the operator names its bindings, Services and routes after it
	Victim    string    // the replica that held the bucket
	Signal    time.Time // when the victim was signalled (zero when nothing was signalled)
	Created   time.Time
}

// Graceful says whether the bucket moved by a release (every kind but kill and stop).
func (p Probe) Graceful() bool { return p.Kind != KindKill && p.Kind != KindStop }

// about says whether a write is to the probe's pipeline or an object the operator made for it.
func (p Probe) about(w crash.Write) bool {
	return w.Namespace == p.Namespace && (w.Name == p.Pipeline || strings.HasPrefix(w.Name, p.Pipeline+"-"))
}

// Signal is a SIGKILL or a SIGSTOP the run sent to a replica.
type Signal struct {
	Kind    string // KindKill or KindStop
	Replica string
	At      time.Time
}

// Interrupted finds a graceful handover that a later round cut short: after the probe was made,
// the bucket went to a replica that was killed or stopped before any owner wrote for the probe,
// so the first write came only once the coordinator had moved the bucket on. Such a gap is the
// signal's, measured from it as an ungraceful gap is; it returns that signal and that gap.
func Interrupted(p Probe, h History, writes []crash.Write, signals []Signal) (Signal, time.Duration, bool) {
	if !p.Graceful() {
		return Signal{}, 0, false
	}
	first, ok := firstWrite(p, writes)
	if !ok {
		return Signal{}, 0, false
	}
	writer, b := ReplicaOfWrite(first), shard.BucketOf(p.Namespace)
	if writer == p.Victim {
		return Signal{}, 0, false
	}
	for _, s := range signals {
		if s.Replica == writer || s.Replica == p.Victim || s.At.Before(p.Created) || !s.At.Before(first.Received) {
			continue
		}
		for _, hd := range h[b] {
			// It held the bucket after the probe was made and before the first write.
			if hd.Replica == s.Replica && hd.From.Before(first.Received) && (hd.To.IsZero() || hd.To.After(p.Created)) {
				return s, first.Received.Sub(s.At), true
			}
		}
	}
	return Signal{}, 0, false
}

// firstWrite is the first applied write of a replica for the probe.
func firstWrite(p Probe, writes []crash.Write) (crash.Write, bool) {
	for _, w := range writes {
		if ReplicaOfWrite(w) != "" && w.Code < 300 && p.about(w) {
			return w, true
		}
	}
	return crash.Write{}, false
}

// Gap returns the handover gap a probe saw: the time from the victim's release of the bucket (a
// graceful move) or from the signal (SIGKILL, SIGSTOP) until the first successful write of a
// replica for the probe's pipeline. False when the victim itself wrote for it first (it placed
// the probe before it let go: no handover stood in the way), when nothing wrote for it, or, for a
// graceful move, when the log shows no release of the victim's around the probe.
func Gap(p Probe, h History, writes []crash.Write) (time.Duration, bool) {
	from := p.Signal
	if p.Graceful() {
		b := shard.BucketOf(p.Namespace)
		// The victim's holding that covered the probe's creation ends with the release.
		hd, ok := h.holding(b, p.Created)
		if !ok || hd.Replica != p.Victim {
			// Released before the probe was made: the victim's holding that ended last before it.
			i := len(h[b]) - 1
			for ; i >= 0; i-- {
				if x := h[b][i]; x.Replica == p.Victim && !x.To.IsZero() && !x.To.After(p.Created) {
					break
				}
			}
			if i < 0 || p.Created.Sub(h[b][i].To) >= time.Minute {
				return 0, false
			}
			hd = h[b][i]
		}
		if hd.To.IsZero() {
			return 0, false
		}
		from = hd.To
	}
	w, ok := firstWrite(p, writes)
	if !ok || ReplicaOfWrite(w) == p.Victim {
		return 0, false
	}
	if w.Received.Before(from) {
		from = w.Received // a graceful move whose new owner wrote before the release: no gap
	}
	return w.Received.Sub(from), true
}
