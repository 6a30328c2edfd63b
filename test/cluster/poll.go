package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// permanentError stops Poll at once.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent wraps an error that a Poll condition returns to stop polling at once.
func Permanent(err error) error { return permanentError{err} }

// Poll calls cond immediately and then every interval until it returns true, ctx ends or timeout
// passes. An error from cond means "not yet" and is kept to explain a timeout, unless it is
// wrapped with Permanent, which ends the poll with it. The error on timeout wraps the last error
// cond returned.
func Poll(ctx context.Context, timeout, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last error
	for {
		done, err := cond(ctx)
		if done && err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		// Keep the condition's own complaint rather than the deadline it ran into.
		if err != nil && (ctx.Err() == nil || last == nil) {
			last = err
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = errors.New("the condition never held")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
				return fmt.Errorf("stopped waiting (%w): %w", cause, last)
			}
			return fmt.Errorf("gave up after %s: %w", timeout, last)
		case <-ticker.C:
		}
	}
}
