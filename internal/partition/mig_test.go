package partition

import "testing"

func TestMIGSevenSmallestInstances(t *testing.T) {
	l := NewMIGLayout(&A100_40GB)
	for i := 0; i < 7; i++ {
		s, err := l.Place("1g.5gb")
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		if s != int8(i) {
			t.Errorf("instance %d placed at slice %d", i, s)
		}
	}
	if _, err := l.Place("1g.5gb"); err == nil {
		t.Fatal("an eighth 1g.5gb instance fit on 7 compute slices")
	}
	if l.FreeComputeSlices() != 0 {
		t.Fatalf("free compute slices = %d", l.FreeComputeSlices())
	}
}

func TestMIGPlacementRules(t *testing.T) {
	cases := []struct {
		name    string
		place   []string
		fitsToo string
		fits    bool
	}{
		{"4g then 3g share the GPU", []string{"4g.20gb"}, "3g.20gb", true},
		{"two 3g", []string{"3g.20gb"}, "3g.20gb", true},
		{"two 4g do not fit", []string{"4g.20gb"}, "4g.20gb", false},
		{"7g needs the whole GPU", []string{"1g.5gb"}, "7g.40gb", false},
		// 3g at slice 0 holds memory 0-3; a 2g may still start at 4.
		{"3g then 2g", []string{"3g.20gb"}, "2g.10gb", true},
		// 1g.10gb instances at 0,2,4 leave slice 6-7: one more fits, then none.
		{"four 1g.10gb then no fifth", []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, "1g.10gb", false},
		// Compute runs out before memory: 2g+2g+2g = 6 slices, a 2g needs 2 more.
		{"compute limits 2g", []string{"2g.10gb", "2g.10gb", "2g.10gb"}, "2g.10gb", false},
	}
	for _, c := range cases {
		l := NewMIGLayout(&A100_40GB)
		for _, p := range c.place {
			if _, err := l.Place(p); err != nil {
				t.Fatalf("%s: placing %s: %v", c.name, p, err)
			}
		}
		p, _ := A100_40GB.Profile(c.fitsToo)
		if got := l.Fit(p) >= 0; got != c.fits {
			t.Errorf("%s: %s fits = %v, want %v", c.name, c.fitsToo, got, c.fits)
		}
	}
}

func TestMIGRemoveFreesSlices(t *testing.T) {
	l := NewMIGLayout(&A100_40GB)
	s, err := l.Place("7g.40gb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Place("1g.5gb"); err == nil {
		t.Fatal("1g.5gb fit beside 7g.40gb")
	}
	if err := l.Remove("7g.40gb", s); err != nil {
		t.Fatal(err)
	}
	if !l.Empty() || l.FreeComputeSlices() != 7 {
		t.Fatal("remove did not free the GPU")
	}
	if err := l.Remove("7g.40gb", 0); err == nil {
		t.Fatal("removing a missing instance succeeded")
	}
	if _, err := l.Place("9g.99gb"); err == nil {
		t.Fatal("an unknown profile was placed")
	}
}
