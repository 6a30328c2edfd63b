package schedplugin

import (
	"os"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

func TestMain(m *testing.M) {
	metrics.Register() // the framework records plugin metrics into these
	os.Exit(m.Run())
}
