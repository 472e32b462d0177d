package balloons

import "golang.org/x/sys/unix"

// monoNow is CLOCK_MONOTONIC, the clock the hook stamps its waits with.
func monoNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
