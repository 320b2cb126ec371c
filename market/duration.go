package market

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes JSON as Go duration text
// ("90s", "2h30m"), so specs and records stay readable. A JSON number is read
// as whole seconds. The zero value means "not given".
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string ("2h") or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: want Go duration text such as \"90s\" or \"2h30m\"", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"2h\" or a number of seconds", b)
	}
	const maxSecs = float64(1<<63-1) / float64(time.Second)
	if secs > maxSecs || secs < -maxSecs {
		return fmt.Errorf("duration %s seconds: out of range", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}
