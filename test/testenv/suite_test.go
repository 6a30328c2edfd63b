package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	ctx   context.Context
	fatal string
}

func (r *recorder) Helper()                  {}
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
}

func TestEventuallyContext(t *testing.T) {
	t.Run("returns once the condition holds", func(t *testing.T) {
		r := &recorder{TB: t, ctx: t.Context()}
		calls := 0
		Eventually(r, "third call", func() error {
			if calls++; calls < 3 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		}, Every(time.Millisecond))
		if r.fatal != "" || calls != 3 {
			t.Errorf("calls %d, fatal %q", calls, r.fatal)
		}
	})
	t.Run("reports why the context ended and the last complaint", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(errors.New("the scheduler stopped"))
		r := &recorder{TB: t, ctx: ctx}
		EventuallyContext(ctx, r, "bound", func(context.Context) error { return errors.New("not bound") })
		if !strings.Contains(r.fatal, "bound: the scheduler stopped: not bound") {
			t.Errorf("fatal %q", r.fatal)
		}
	})
}
