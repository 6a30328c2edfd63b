package workerset

import "time"

// statusInterval is the least time between two status writes of a set while only its counters and
// condition messages change (a scale or a rollout in progress). A change of a condition's status or
// reason, of observedGeneration, of the revisions or of the collision count is written at once; so
// is the last write, when the set settles (Progressing turns False). The pacing itself, and the
// backoff of optimistic-lock conflicts, is pkg/status's Pace, shared with the other controllers.
const statusInterval = time.Second
