package main

import (
	"testing"
	"time"
)

func TestPairedRatio(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, c := range []struct {
		name    string
		on, off []time.Duration
		want    float64
	}{
		// Quotients 1.0, 1.05, 0.97: their median, whatever each
		// repetition's own speed.
		{"middle pair", ms(100, 200, 300), ms(100, 190, 310), 1.0},
		{"even count", ms(110, 120), ms(100, 100), 1.15},
		{"one repetition", ms(90), ms(100), 0.9},
		{"none", nil, nil, 0},
	} {
		if got := pairedRatio(c.on, c.off); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: pairedRatio = %.4f, want %.4f", c.name, got, c.want)
		}
	}
}
