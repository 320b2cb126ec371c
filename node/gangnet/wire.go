package gangnet

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
)

// request opens a connection between two shares: the first frame of a
// stream, from the sender's node. It names both ends by job, rank, share
// and epoch, so that the receiver can check them against its share's
// roster.
type request struct {
	Job       string `json:"job"`
	FromRank  int    `json:"from_rank"`
	FromShare int    `json:"from_share"`
	FromEpoch uint64 `json:"from_epoch"`
	ToRank    int    `json:"to_rank"`
	ToShare   int    `json:"to_share"`
	ToEpoch   uint64 `json:"to_epoch"`
	// Port is the port the sender connected to on the receiver's address.
	Port int `json:"port"`
}

// response answers a request: the second frame. OK means the receiver's
// port answered, and what follows is the connection's bytes.
type response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// maxFrame bounds a request or response frame.
const maxFrame = 4 << 10

var jobPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (r *request) validate() error {
	switch {
	case !jobPattern.MatchString(r.Job):
		return fmt.Errorf("job %q: want 1-128 of [A-Za-z0-9._-]", r.Job)
	case r.FromRank < 0 || r.FromRank > MaxRank || r.ToRank < 0 || r.ToRank > MaxRank:
		return fmt.Errorf("ranks %d and %d: want 0 to %d", r.FromRank, r.ToRank, MaxRank)
	case r.FromRank == r.ToRank:
		return fmt.Errorf("rank %d connects to itself", r.FromRank)
	case r.FromShare < 0 || r.ToShare < 0:
		return fmt.Errorf("shares %d and %d: must not be negative", r.FromShare, r.ToShare)
	case r.FromEpoch == 0 || r.ToEpoch == 0:
		return errors.New("epochs start at 1")
	case r.Port < 1 || r.Port > 65535:
		return fmt.Errorf("port %d: want 1 to 65535", r.Port)
	}
	return nil
}

func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(buf, uint16(len(b)))
	copy(buf[2:], b)
	_, err = w.Write(buf)
	return err
}

// readFrame reads one frame into v: a 2-byte length, then that much JSON
// with no unknown fields and nothing after it.
func readFrame(r io.Reader, v any) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size > maxFrame {
		return fmt.Errorf("gangnet: frame of %d bytes, at most %d", size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return decodeFrame(b, v)
}

func decodeFrame(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("gangnet: frame: %w", err)
	}
	if d.More() {
		return errors.New("gangnet: frame: data after the JSON value")
	}
	return nil
}
