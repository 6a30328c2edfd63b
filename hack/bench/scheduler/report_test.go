package main

import (
	"slices"
	"testing"
	"time"
)

func TestRoundOrder(t *testing.T) {
	profiles := []string{profileDefault, profileConveyor}
	if got := roundOrder(profiles, 0); !slices.Equal(got, profiles) {
		t.Errorf("round 0: %v", got)
	}
	if got, want := roundOrder(profiles, 1), []string{profileConveyor, profileDefault}; !slices.Equal(got, want) {
		t.Errorf("round 1: %v, want %v", got, want)
	}
	if !slices.Equal(profiles, []string{profileDefault, profileConveyor}) {
		t.Errorf("roundOrder changed its argument: %v", profiles)
	}
}

func TestPairRatios(t *testing.T) {
	at := func(profile string, round int, podsPerSecond float64) result {
		start := time.Unix(0, 0)
		return result{profile: profile, round: round, pods: 101, first: start, last: start.Add(time.Duration(100 / podsPerSecond * float64(time.Second)))}
	}
	results := []result{
		at(profileDefault, 0, 100), at(profileConveyor, 0, 90),
		at(profileConveyor, 1, 110), at(profileDefault, 1, 100),
		at(profileDefault, 2, 200), at(profileConveyor, 2, 190),
	}
	if got, want := pairRatios(results, profileConveyor), "0.90, 1.10, 0.95 (0.95×)"; got != want {
		t.Errorf("pairRatios = %q, want %q", got, want)
	}
	if got, want := pairRatios(results, profileEnforce), "–"; got != want {
		t.Errorf("pairRatios without rounds = %q, want %q", got, want)
	}
}
