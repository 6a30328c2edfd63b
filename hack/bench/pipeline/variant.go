package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The ways the floor's Pipelines are created.
const (
	// creatorsApart: -creators goroutines create the Pipelines and hand each created one to a writer.
	creatorsApart = "apart"
	// creatorsWriters: every writer creates its next Pipeline itself, then issues its writes.
	creatorsWriters = "writers"
)

// floorVariant is one shape of the floor. Every shape issues the same essential writes; they differ
// only in how many are in flight and over which connections.
type floorVariant struct {
	// writers is the number of goroutines that each take one Pipeline at a time and issue its writes.
	writers int
	// creators is creatorsApart or creatorsWriters.
	creators string
	// fanout issues a Pipeline's writes along their dependency chains in parallel (each stage's
	// binding create → Service create → binding status, beside the routes ConfigMap; the Pipeline's
	// status after all of them) instead of one after the other.
	fanout bool
	// ownConns gives every writer (and the creators, when apart) a client with a connection of its
	// own instead of one shared HTTP/2 connection.
	ownConns bool
}

// The bounds of a variant's writers.
const (
	minFloorWriters = 1
	maxFloorWriters = 512
)

func (v floorVariant) String() string {
	parts := []string{strconv.Itoa(v.writers), v.creators}
	if v.fanout {
		parts = append(parts, "fanout")
	} else {
		parts = append(parts, "serial")
	}
	if v.ownConns {
		parts = append(parts, "own")
	} else {
		parts = append(parts, "shared")
	}
	return strings.Join(parts, ":")
}

// describe is the variant in words, for the report.
func (v floorVariant) describe() string {
	creators := "creators apart"
	if v.creators == creatorsWriters {
		creators = "writers create"
	}
	order := "writes in order"
	if v.fanout {
		order = "fan-out"
	}
	conns := "one shared connection"
	if v.ownConns {
		conns = "a connection per writer"
	}
	return fmt.Sprintf("%d writers, %s, %s, %s", v.writers, creators, order, conns)
}

// parseFloorVariant reads a variant written as a number of writers followed by ':'-separated
// keywords, each overriding base: apart or writers (who creates the Pipelines), serial or fanout
// (a Pipeline's writes in order, or along their dependency chains), shared or own (one connection
// for all writers, or one each). "64" is base with 64 writers; "32:writers:fanout" is 32 writers
// that create their own Pipelines and fan their writes out.
func parseFloorVariant(s string, base floorVariant) (floorVariant, error) {
	v := base
	fields := strings.Split(strings.TrimSpace(s), ":")
	n, err := strconv.Atoi(strings.TrimSpace(fields[0]))
	if err != nil || n < minFloorWriters || n > maxFloorWriters {
		return v, fmt.Errorf("floor variant %q: it must start with a number of writers from %d to %d", s, minFloorWriters, maxFloorWriters)
	}
	v.writers = n
	seen := map[string]string{}
	for _, f := range fields[1:] {
		f = strings.TrimSpace(f)
		var dim string
		switch f {
		case creatorsApart, creatorsWriters:
			dim, v.creators = "creators", f
		case "serial", "fanout":
			dim, v.fanout = "order", f == "fanout"
		case "shared", "own":
			dim, v.ownConns = "connections", f == "own"
		default:
			return v, fmt.Errorf("floor variant %q: unknown keyword %q (want apart, writers, serial, fanout, shared or own)", s, f)
		}
		if prev, ok := seen[dim]; ok {
			return v, fmt.Errorf("floor variant %q: %q and %q both set the %s", s, prev, f, dim)
		}
		seen[dim] = f
	}
	return v, nil
}

// parseFloorVariants reads a comma-separated list of variants (see parseFloorVariant). A variant
// may repeat, to measure the drift of the cluster between runs.
func parseFloorVariants(s string, base floorVariant) ([]floorVariant, error) {
	var out []floorVariant
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		v, err := parseFloorVariant(part, base)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no floor variant in %q", s)
	}
	return out, nil
}
