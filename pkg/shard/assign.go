package shard

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
)

// The load factor c of consistent hashing with bounded loads, as a fraction: no member takes more
// than ceil(c × the average load), c = 5/4.
const (
	loadFactorNum = 5
	loadFactorDen = 4
)

// Assign maps every bucket to one of members: consistent hashing with bounded loads, sticky.
//
// weights[b] is the number of pipelines in bucket b; a bucket costs 1 + its pipelines, so empty
// buckets spread evenly too. current[b] is the bucket's owner now ("" for none); the result has
// the same length as weights. It is a pure function: the same inputs give the same result, and
// feeding a result back in moves nothing.
//
// The bounds, with n members, W the total cost and w the cost of the heaviest bucket:
//   - a member takes on a bucket only within its capacity ceil(c·W/n), or as its first bucket (a
//     bucket too heavy for any capacity gets a member of its own: a namespace is never split);
//   - no member carries more than limit = max(ceil(c·W/n), floor((W + (n-1)·w)/n)); the second
//     term is what buckets too heavy to fit force, and it is the smaller one whenever
//     w ≤ (c-1)·W/(n-1);
//   - a bucket stays with its owner when that owner is a member and keeping it stays within the
//     limit, so a member leaving moves its own buckets, and a weight changing moves nothing until
//     a member passes the limit;
//   - a member below floor = floor(W/(c·n)) takes buckets from the most loaded members while a
//     move brings the two closer, so a member joining gets a share, and the owner of a bucket
//     that turned hot gives its other buckets away.
//
// A bucket that has to move goes to the first member of its own order (rendezvous hashing: the
// members ranked by a hash of member and bucket) that has room, preferring members below the
// floor; so where buckets go depends on the bucket, not on the order they are placed in.
func Assign(weights []int, members []string, current []string) []string {
	owners := make([]string, len(weights))
	members = slices.Compact(slices.Sorted(slices.Values(members)))
	members = slices.DeleteFunc(members, func(m string) bool { return m == "" })
	n := len(members)
	if n == 0 {
		return owners
	}
	cost := make([]int, len(weights))
	total, heaviest := 0, 0
	for b, w := range weights {
		cost[b] = 1 + max(w, 0)
		total += cost[b]
		heaviest = max(heaviest, cost[b])
	}
	capacity := ceilDiv(loadFactorNum*total, loadFactorDen*n)
	limit := max(capacity, (total+(n-1)*heaviest)/n)
	floor := loadFactorDen * total / (loadFactorNum * n)

	a := &assignment{owners: owners, cost: cost, load: map[string]int{}, capacity: capacity, limit: limit, members: members}
	a.keep(current)
	a.place(floor)
	a.fill(floor)
	return owners
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// assignment is Assign's work in progress.
type assignment struct {
	owners   []string
	cost     []int
	load     map[string]int
	capacity int      // ceil(c × average): what a member takes on
	limit    int      // what a member may keep (capacity, or what a bucket too heavy forces)
	members  []string // sorted
}

// fits says whether member m takes on bucket b: within capacity, or as its first bucket (a
// bucket heavier than the capacity gets a member of its own where one is free).
func (a *assignment) fits(m string, b int) bool {
	return a.load[m]+a.cost[b] <= a.capacity || a.load[m] == 0
}

// keep leaves each bucket with its current owner while that owner stays within the limit, the
// buckets each owner ranks highest first (so which buckets an owner over the limit sheds does not
// depend on weights that change all the time).
func (a *assignment) keep(current []string) {
	held := map[string][]int{}
	for b, owner := range current {
		if b < len(a.owners) && owner != "" {
			held[owner] = append(held[owner], b)
		}
	}
	for _, m := range a.members {
		buckets := held[m]
		slices.SortFunc(buckets, func(x, y int) int { return cmp.Compare(score(m, y), score(m, x)) })
		for _, b := range buckets {
			if a.load[m]+a.cost[b] <= a.limit {
				a.owners[b] = m
				a.load[m] += a.cost[b]
			}
		}
	}
}

// place gives every bucket left without an owner, heaviest first, to the first member in the
// bucket's order that fits it, a member below floor before any other; when none fits, to the
// least loaded member. That one carries at most (W - w)/n before taking a bucket of cost w, and
// the limit allows that plus w.
func (a *assignment) place(floor int) {
	var orphans []int
	for b, owner := range a.owners {
		if owner == "" {
			orphans = append(orphans, b)
		}
	}
	slices.SortStableFunc(orphans, func(x, y int) int { return cmp.Compare(a.cost[y], a.cost[x]) })
	for _, b := range orphans {
		order := a.order(b)
		chosen := ""
		for _, m := range order {
			if a.load[m] < floor && a.fits(m, b) {
				chosen = m
				break
			}
		}
		if chosen == "" {
			for _, m := range order {
				if a.fits(m, b) {
					chosen = m
					break
				}
			}
		}
		if chosen == "" {
			// Only buckets too heavy for any member's capacity get here: the least loaded
			// member (first in the bucket's order among equals) stays within the limit.
			chosen = slices.MinFunc(order, func(x, y string) int { return cmp.Compare(a.load[x], a.load[y]) })
		}
		a.owners[b] = chosen
		a.load[chosen] += a.cost[b]
	}
}

// fill moves buckets to members below floor, from the most loaded members, while a move brings the
// two closer (the receiver ends below where the donor started) and leaves the donor at or above
// floor. Each move lowers the sum of the
// squared loads, so it ends; it ends where no member below floor can take a bucket that way, which
// is also where it starts when fed its own result.
func (a *assignment) fill(floor int) {
	for {
		receivers := slices.Clone(a.members)
		slices.SortStableFunc(receivers, func(x, y string) int { return cmp.Compare(a.load[x], a.load[y]) })
		moved := false
		for _, r := range receivers {
			if a.load[r] >= floor {
				break
			}
			if b, ok := a.bestMove(r, floor); ok {
				a.load[a.owners[b]] -= a.cost[b]
				a.owners[b] = r
				a.load[r] += a.cost[b]
				moved = true
				break
			}
		}
		if !moved {
			return
		}
	}
}

// bestMove returns the bucket r should take: from the most loaded member that can give one without
// falling below floor itself, the bucket that ranks r highest among those that fit.
func (a *assignment) bestMove(r string, floor int) (int, bool) {
	donors := slices.Clone(a.members)
	slices.SortStableFunc(donors, func(x, y string) int { return cmp.Compare(a.load[y], a.load[x]) })
	for _, d := range donors {
		if a.load[d] <= a.load[r] {
			break
		}
		best, found := 0, false
		for b, owner := range a.owners {
			if owner != d {
				continue
			}
			if c := a.cost[b]; a.load[r]+c >= a.load[d] || !a.fits(r, b) || a.load[d]-c < floor {
				continue
			}
			if !found || score(r, b) > score(r, best) {
				best, found = b, true
			}
		}
		if found {
			return best, true
		}
	}
	return 0, false
}

// order ranks the members for bucket b, highest score first (rendezvous hashing).
func (a *assignment) order(b int) []string {
	order := slices.Clone(a.members)
	slices.SortStableFunc(order, func(x, y string) int { return cmp.Compare(score(y, b), score(x, b)) })
	return order
}

// score is the rendezvous hash of a member and a bucket: FNV-1a of both, mixed so that close
// inputs spread over the whole range.
func score(member string, bucket int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member)) // a hash.Hash never returns an error
	_, _ = h.Write([]byte{0})      // separates member from bucket
	_, _ = h.Write([]byte(strconv.Itoa(bucket)))
	x := h.Sum64()
	// The finaliser of splitmix64.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
