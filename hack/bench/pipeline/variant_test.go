package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFloorVariants(t *testing.T) {
	base := floorVariant{writers: 64, creators: creatorsApart}
	tests := []struct {
		in   string
		want []floorVariant
		err  string
	}{
		{in: "16", want: []floorVariant{{writers: 16, creators: creatorsApart}}},
		{in: " 8 , 64:writers ,, 32:fanout:own", want: []floorVariant{
			{writers: 8, creators: creatorsApart},
			{writers: 64, creators: creatorsWriters},
			{writers: 32, creators: creatorsApart, fanout: true, ownConns: true},
		}},
		{in: "64,64", want: []floorVariant{base, base}},
		{in: "16:apart:serial:shared", want: []floorVariant{{writers: 16, creators: creatorsApart}}},
		{in: "", err: "no floor variant"},
		{in: "fanout", err: "must start with a number of writers"},
		{in: "0", err: "must start with a number of writers"},
		{in: "513", err: "must start with a number of writers"},
		{in: "16:wide", err: `unknown keyword "wide"`},
		{in: "16:apart:writers", err: `"apart" and "writers" both set the creators`},
		{in: "16:fanout:serial", err: "both set the order"},
	}
	for _, tt := range tests {
		got, err := parseFloorVariants(tt.in, base)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseFloorVariants(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseFloorVariants(%q): %v", tt.in, err)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("parseFloorVariants(%q) = %v, want %v", tt.in, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("parseFloorVariants(%q)[%d] = %+v, want %+v", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

// A variant's keywords override the base; what they leave out keeps the base's value.
func TestParseFloorVariantKeepsTheBase(t *testing.T) {
	base := floorVariant{writers: 64, creators: creatorsWriters, fanout: true, ownConns: true}
	got, err := parseFloorVariant("16:serial", base)
	if err != nil {
		t.Fatal(err)
	}
	want := floorVariant{writers: 16, creators: creatorsWriters, ownConns: true}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// A variant's name reads back as the same variant.
func TestFloorVariantStringRoundTrips(t *testing.T) {
	for _, v := range []floorVariant{
		{writers: 8, creators: creatorsApart},
		{writers: 64, creators: creatorsWriters, fanout: true},
		{writers: 32, creators: creatorsApart, ownConns: true},
	} {
		got, err := parseFloorVariant(v.String(), floorVariant{writers: 1, creators: creatorsWriters, fanout: true, ownConns: true})
		if err != nil || got != v {
			t.Errorf("parseFloorVariant(%q) = %+v, %v; want %+v", v.String(), got, err, v)
		}
	}
}

// The denominator of every ratio is the fastest floor of the same size and service type.
func TestFastestFloors(t *testing.T) {
	floor := func(n int, ready time.Duration, writers int) *result {
		return &result{n: n, mode: "Headless", contender: contenderFloor, ready: ready, variant: floorVariant{writers: writers, creators: creatorsApart}}
	}
	slow, fast, other := floor(1000, 40*time.Second, 16), floor(1000, 30*time.Second, 64), floor(10000, 700*time.Second, 16)
	op := &result{n: 1000, mode: "Headless", contender: contenderOperator, ready: 20 * time.Second}
	got := fastestFloors([]*result{slow, op, fast, other})
	if len(got) != 2 || got["1000/Headless"] != fast || got["10000/Headless"] != other {
		t.Errorf("fastestFloors = %v, want the 64-writer floor at 1000 and the only floor at 10000", got)
	}
}
