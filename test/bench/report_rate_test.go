package main

import "testing"

func TestRoundsVerdict(t *testing.T) {
	atMost := func(x float64) bool { return x <= 1.25 }
	for _, c := range []struct {
		met      bool
		perRound []float64
		want     string
	}{
		{true, []float64{1.1, 1.2, 1.0}, "**met**"},
		{false, []float64{1.3, 1.4, 1.5}, "**missed**"},
		{true, []float64{1.1, 1.3, 1.2}, "**met** (met in 2 of 3 rounds)"},
		{false, []float64{1.3, 1.2, 1.4}, "**missed** (met in 1 of 3 rounds)"},
	} {
		if got := roundsVerdict(c.met, c.perRound, atMost); got != c.want {
			t.Errorf("roundsVerdict(%v, %v) = %q, want %q", c.met, c.perRound, got, c.want)
		}
	}
}
