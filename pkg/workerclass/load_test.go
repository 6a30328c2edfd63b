package workerclass

import "testing"

func TestDesiredWorkers(t *testing.T) {
	for _, tc := range []struct {
		requested, capacity int64
		target              int32
		want                int32
	}{{30, 15, 70, 3}, {20, 15, 100, 2}, {0, 15, 70, 0}, {21, 30, 70, 1}, {22, 30, 70, 2}, {110, 200, 70, 1}} {
		if got := desiredWorkers(tc.requested, tc.capacity, tc.target); got != tc.want {
			t.Errorf("desiredWorkers(%d, %d, %d) = %d, want %d", tc.requested, tc.capacity, tc.target, got, tc.want)
		}
	}
}
