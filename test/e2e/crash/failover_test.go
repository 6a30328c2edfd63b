package crash

import (
	"testing"

	"github.com/conveyor-dev/conveyor/test/crash"
)

// TestLeaderFailover runs two replicas with the chart's leader election and SIGKILLs the leader
// while it places pipelines, then SIGSTOPs the new leader past its lease while a third replica
// stands by and SIGCONTs it. From the API server's audit log: no replica wrote while another held
// the lease, and the stopped leader wrote nothing after it lost the lease; from the watch: no
// worker was ever over capacity.
func TestLeaderFailover(t *testing.T) {
	t.Parallel() // on its own namespaces; overlapping the waits keeps the suite short
	ch, err := crash.NewChecker(t.Context(), env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Stop()
	res, err := crash.RunFailover(t.Context(), env.Client(), ch, crash.FailoverOptions{
		Bin: operatorBin, Kubeconfig: env.Kubeconfig(), AuditLog: auditLog, LogDir: logDir(t),
		Namespace: "failover", KillPipelines: 60, StopPipelines: 40, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	if res.ExitLine == "" {
		t.Errorf("the old leader did not log that it lost the election before it exited")
	}
	for _, o := range res.Overlaps {
		t.Errorf("%s", o)
	}
	for _, w := range res.Refused {
		t.Logf("refused by the API server, outside its replica's window: %s", w)
	}
	if n, first := ch.Violations(); n > 0 {
		t.Errorf("%d invariant violations, first: %v", n, first)
	}
}
