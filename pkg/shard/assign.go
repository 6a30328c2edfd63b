package shard

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
)

// The load factor c of consistent hashing with bounded loads, as a fraction: no member takes more
// than ceil(c × the average load). AssignBalanced, for weights that have stopped moving, holds
// c = 5/4 (and balances within it); Assign, for weights still moving, c = 3/2, so that weights
// read at different ages move fewer buckets back and forth.
const (
	loadFactorNum = 5
	loadFactorDen = 4

	movingFactorNum = 3
	movingFactorDen = 2
)

// Assign maps every bucket to one of members: consistent hashing with bounded loads, sticky. It
// is for weights that are still moving: c = 3/2 (AssignBalanced holds 5/4).
//
// weights[b] is the number of pipelines in bucket b; a bucket costs 1 + its pipelines, so empty
// buckets spread evenly too. current[b] is the bucket's owner now ("" for none); the result has
// the same length as weights. It is a pure function: the same inputs give the same result, and
// feeding a result back in moves nothing.
//
// The bounds, with n members, W the total cost, w the cost of the heaviest bucket and c the load
// factor:
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
// A result of AssignBalanced is within Assign's looser bounds, so Assign keeps it as it is.
//
// A bucket that has to move goes to the first member of its own order (rendezvous hashing: the
// members ranked by a hash of member and bucket) that has room, preferring members below the
// floor; so where buckets go depends on the bucket, not on the order they are placed in.
func Assign(weights []int, members []string, current []string) []string {
	return assign(weights, members, current, moving)
}

// AssignBalanced is Assign with c = 5/4 followed by a balancing step, for weights that have
// stopped moving: when the most and the least loaded member differ by more than the trigger, 4·gain with
// gain = balanceGain (2.5% of the average load, so the trigger is 10%), the most loaded member
// gives a bucket, or swaps one for a lighter one, to the least loaded member that can take it so
// that the larger of their two loads falls by at least the gain, and again while it can. Of the
// moves that qualify it takes the one that moves the fewest buckets from their current owner, so
// a bucket that moves anyway (its owner left) goes first. A move never raises the highest load nor
// lowers the lowest, so Assign's bounds hold; undoing one takes weights changing by about two
// gains, so single pipelines coming and going move nothing. Fed its own result, it moves nothing,
// and neither does Assign (the result is within Assign's bounds).
//
// Balancing chooses by load, so it is only worth its moves once the loads it balances are the
// ones that stay: while pipelines are still arriving, the weights the coordinator reads are some
// seconds old, and each a different age, and balancing them moves buckets back and forth. The
// same goes, less, for Assign's bounds: hence its looser c.
func AssignBalanced(weights []int, members []string, current []string) []string {
	return assign(weights, members, current, balanced)
}

// balanceGain is the least a balancing move must lower the larger of its two loads by, for total
// cost W over n members: max(16, ceil(W/(40·n))), 2.5% of the average load.
func balanceGain(total, n int) int {
	return max(balanceMinGain, ceilDiv(total, balanceGainDen*max(n, 1)))
}

// assignMode is how assign bounds and balances.
type assignMode int

const (
	moving   assignMode = iota // Assign: c = 3/2, no balancing
	tight                      // c = 5/4, no balancing: the rule before balancing, for comparison
	balanced                   // AssignBalanced: c = 5/4, then the balancing step
)

func assign(weights []int, members []string, current []string, mode assignMode) []string {
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
	// The tight bounds (c = 5/4), and the mode's: Assign keeps and places within c = 3/2, and
	// tops up only members below its lower floor, from donors that stay above the tight floor and
	// with buckets within the tight capacity; so whatever AssignBalanced leaves, Assign keeps.
	capacity := ceilDiv(loadFactorNum*total, loadFactorDen*n)
	floor := loadFactorDen * total / (loadFactorNum * n)
	a := &assignment{owners: owners, cost: cost, load: map[string]int{}, members: members,
		capacity: capacity, fillCapacity: capacity, floor: floor, donorFloor: floor}
	if mode == moving {
		a.capacity = ceilDiv(movingFactorNum*total, movingFactorDen*n)
		a.floor = movingFactorDen * total / (movingFactorNum * n)
	}
	a.limit = max(a.capacity, (total+(n-1)*heaviest)/n)
	a.keep(current)
	a.place()
	for {
		a.fill()
		if mode != balanced || !a.balance(current, total) {
			return owners
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// assignment is Assign's work in progress.
type assignment struct {
	owners   []string
	cost     []int
	load     map[string]int
	capacity int // ceil(c × average): what a member takes on
	limit    int // what a member may keep (capacity, or what a bucket too heavy forces)
	floor    int // floor(average / c): below it a member takes buckets from the most loaded
	// fillCapacity and donorFloor bound the moves to members below floor: the receiver stays
	// within fillCapacity, the giver at or above donorFloor (c = 5/4's, whatever c is).
	fillCapacity, donorFloor int
	members                  []string // sorted
}

// fits says whether member m takes on bucket b: within capacity, or as its first bucket (a
// bucket heavier than the capacity gets a member of its own where one is free).
func (a *assignment) fits(m string, b int) bool { return a.fitsWithin(m, b, a.capacity) }

// fitsWithin is fits with another capacity.
func (a *assignment) fitsWithin(m string, b, capacity int) bool {
	return a.load[m]+a.cost[b] <= capacity || a.load[m] == 0
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
func (a *assignment) place() {
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
			if a.load[m] < a.floor && a.fits(m, b) {
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
// two closer (the receiver ends below where the donor started), keeps the receiver within
// fillCapacity and leaves the donor at or above donorFloor. Each move lowers the sum of the
// squared loads, so it ends; it ends where no member below floor can take a bucket that way, which
// is also where it starts when fed its own result.
func (a *assignment) fill() {
	for {
		receivers := slices.Clone(a.members)
		slices.SortStableFunc(receivers, func(x, y string) int { return cmp.Compare(a.load[x], a.load[y]) })
		moved := false
		for _, r := range receivers {
			if a.load[r] >= a.floor {
				break
			}
			if b, ok := a.bestMove(r); ok {
				a.give(b, r)
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
// falling below donorFloor itself, the bucket that ranks r highest among those that fit r within
// fillCapacity (or are its first).
func (a *assignment) bestMove(r string) (int, bool) {
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
			if c := a.cost[b]; a.load[r]+c >= a.load[d] || !a.fitsWithin(r, b, a.fillCapacity) || a.load[d]-c < a.donorFloor {
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

// The balancing step's thresholds. A move must lower the larger of the two loads it touches by at
// least the gain, max(balanceMinGain, ceil(W/(balanceGainDen·n))): 2.5% of the average load, and
// never less than 16 (pipelines, near enough); the step runs only when the most and the least
// loaded member differ by more than balanceTrigger gains (10% of the average, 64 at least).
const (
	balanceGainDen = 40
	balanceMinGain = 16
	balanceTrigger = 4
)

// balance evens the loads out when they spread too far, and says whether it moved a bucket.
//
// It runs only when the most and the least loaded member differ by more than the trigger. Then,
// while the most loaded member (the first by name among equals) can give a bucket, or swap one for a
// lighter bucket, with a less loaded member so that the larger of their two loads falls by at
// least the gain without the other passing its capacity, it does, with the least loaded member
// that can take it; it stops when the most loaded member can give nothing that way. A load falling
// by at least the gain means the bucket's cost δ is at least the gain and the receiver ends at
// least the gain below where the donor started: lr + δ ≤ ld − gain. So the donor ends above where
// the receiver started, no member ends above the old maximum (the limits hold) or below the old
// minimum (the floor holds), and each move lowers the sum of the squared loads by
// 2·δ·(ld − lr − δ) ≥ 2·gain², so the loop ends. A move is undone only after weights change by
// about two gains between the two members, so pipelines coming and going one at a time do not
// make buckets flap; and where it stops is where it starts when fed its own result.
func (a *assignment) balance(current []string, total int) (moved bool) {
	n := len(a.members)
	if n < 2 {
		return false
	}
	gain := balanceGain(total, n)
	byLoad := slices.Clone(a.members) // least loaded first, then by name
	sortByLoad := func() {
		slices.SortStableFunc(byLoad, func(x, y string) int { return cmp.Compare(a.load[x], a.load[y]) })
	}
	sortByLoad()
	if a.load[byLoad[n-1]]-a.load[byLoad[0]] <= balanceTrigger*gain {
		return false
	}
	for {
		d := a.mostLoaded()
		step := false
		for _, r := range byLoad {
			if a.load[r] >= a.load[d] {
				break
			}
			if x, y, ok := a.bestExchange(d, r, current, gain); ok {
				a.give(x, r)
				if y >= 0 {
					a.give(y, d)
				}
				step, moved = true, true
				break
			}
		}
		if !step {
			return moved
		}
		sortByLoad()
	}
}

// mostLoaded returns the most loaded member, the first by name among equals.
func (a *assignment) mostLoaded() string {
	d := a.members[0]
	for _, m := range a.members[1:] {
		if a.load[m] > a.load[d] {
			d = m
		}
	}
	return d
}

// give moves bucket b to member m.
func (a *assignment) give(b int, m string) {
	a.load[a.owners[b]] -= a.cost[b]
	a.owners[b] = m
	a.load[m] += a.cost[b]
}

// bestExchange returns the bucket x that donor d should give receiver r, and the bucket y (-1 for
// none) r should give d in return, such that the larger of their two loads falls by at least gain
// and r stays within its capacity. Of those, it picks the one that moves the fewest buckets away
// from their current owners, then the one that lowers the larger load most, then the one whose
// buckets rank r (and d) highest.
func (a *assignment) bestExchange(d, r string, current []string, gain int) (x, y int, ok bool) {
	ld, lr := a.load[d], a.load[r]
	var mine, theirs []int
	for b, o := range a.owners {
		switch o {
		case d:
			mine = append(mine, b)
		case r:
			theirs = append(theirs, b)
		}
	}
	// extra is how many more buckets end away from their current owner when b goes from -> to.
	extra := func(b int, from, to string) int {
		e := 0
		if b < len(current) && current[b] == from {
			e++
		}
		if b < len(current) && current[b] == to {
			e--
		}
		return e
	}
	type option struct{ x, y, extra, gain int }
	var best option
	better := func(o option) bool {
		switch {
		case !ok:
			return true
		case o.extra != best.extra:
			return o.extra < best.extra
		case o.gain != best.gain:
			return o.gain > best.gain
		case o.x != best.x:
			return score(r, o.x) > score(r, best.x)
		case o.y < 0 || best.y < 0:
			return o.y < best.y // a move before a swap
		default:
			return score(d, o.y) > score(d, best.y)
		}
	}
	consider := func(o option) {
		if better(o) {
			best, ok = o, true
		}
	}
	try := func(x, y int) {
		delta := a.cost[x]
		e := extra(x, d, r)
		if y >= 0 {
			delta -= a.cost[y]
			e += extra(y, r, d)
		}
		if delta < gain || ld-lr-delta < gain || lr+delta > a.capacity {
			return
		}
		consider(option{x: x, y: y, extra: e, gain: min(delta, ld-lr-delta)})
	}
	for _, x := range mine {
		try(x, -1)
		for _, y := range theirs {
			if a.cost[y] < a.cost[x] {
				try(x, y)
			}
		}
	}
	return best.x, best.y, ok
}
