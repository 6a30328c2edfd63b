package crash

import (
	"testing"
	"time"

	"github.com/conveyor-dev/conveyor/test/crash"
)

// TestKill9 SIGKILLs the operator 21 times at seeded random moments: during a scale-up with
// Retain claims, a rolling update, a scale-down with drains and the placement of 200 pipelines,
// and checks every event throughout and convergence after each scenario's last restart.
func TestKill9(t *testing.T) {
	t.Parallel() // on its own namespaces; overlapping the waits keeps the suite short
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash.seed=%d)", seed, seed)
	ch, err := crash.NewChecker(t.Context(), env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Stop()
	rep := crash.RunKills(t.Context(), env.Client(), ch, crash.Scenarios(200), crash.KillOptions{
		Bin: operatorBin, Kubeconfig: env.Kubeconfig(), LogDir: logDir(t), Seed: seed, Logf: t.Logf,
	})
	t.Log(rep.Summary())
	if len(rep.Kills) < 20 {
		t.Errorf("%d kills, want at least 20", len(rep.Kills))
	}
	if rep.Events == 0 {
		t.Error("the checker saw no event")
	}
	for _, sc := range rep.Scenarios {
		if sc.Err != nil {
			t.Errorf("%s: %v", sc.Name, sc.Err)
		}
	}
	if rep.Violations > 0 {
		t.Errorf("%d invariant violations, first: %v", rep.Violations, rep.First)
	}
}
