package sim

import (
	"runtime"
	"sync"
)

// SimulateSeeds runs cfg once per seed, on up to GOMAXPROCS goroutines; the
// runs come back in seed order, so the output does not depend on timing.
func SimulateSeeds(t Trace, cfg Config, seeds []uint64) ([]*Run, error) {
	runs := make([]*Run, len(seeds))
	errs := make([]error, len(seeds))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, s := range seeds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c := cfg
			c.Seed = s
			runs[i], errs[i] = Simulate(t, c)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return runs, nil
}
