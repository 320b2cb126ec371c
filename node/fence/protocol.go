package fence

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
)

// Limits of the line protocol between a node and its keeper.
const (
	// Version is the protocol version; the keeper announces it in its first
	// line, "ready 1", and Start refuses a keeper that announces another.
	Version = 1
	// MaxLine is the longest line either side sends, newline included. A
	// longer command is answered with an error event and otherwise ignored.
	MaxLine = 4096
	// MaxKeyLen is the longest attempt key, in bytes.
	MaxKeyLen = 256
	// MaxCgroupDirLen is the longest cgroup directory, in bytes. With
	// MaxKeyLen it keeps every valid command under MaxLine.
	MaxCgroupDirLen = 3072
	// MaxKeys is the most attempts one keeper holds armed at once. Arming
	// one more new key is refused with an error event.
	MaxKeys = 65536
	// MaxWithin is the longest deadline an arm may set.
	MaxWithin = 24 * time.Hour
)

// verb names a command.
type verb uint8

const (
	verbArm verb = iota + 1
	verbDisarm
	verbClose
	verbPrearm
)

func (v verb) String() string {
	switch v {
	case verbArm:
		return "arm"
	case verbDisarm:
		return "disarm"
	case verbClose:
		return "close"
	case verbPrearm:
		return "prearm"
	}
	return "verb(" + strconv.Itoa(int(v)) + ")"
}

// command is one line from the node to the keeper:
//
//	arm KEY PGID CGROUPDIR MILLIS
//	disarm KEY
//	close
//
// Fields are separated by exactly one space; the line ends with "\n".
type command struct {
	verb   verb
	key    string        // arm, prearm, disarm
	pgid   int           // arm: > 1
	cgroup string        // arm: "" for none ("-" on the wire)
	within time.Duration // arm, prearm: whole milliseconds, 0 to MaxWithin
}

// parseCommand decodes one line without its newline. The error names what
// was wrong, quoting at most a short prefix of what it got, and holds only
// printable ASCII: it can be sent back as an event as it is.
func parseCommand(line []byte) (command, error) {
	if len(line) == 0 {
		return command{}, errors.New("empty line")
	}
	fields := strings.Split(string(line), " ")
	for _, f := range fields {
		if f == "" {
			return command{}, errors.New("empty field: fields are separated by exactly one space")
		}
	}
	var c command
	switch fields[0] {
	case "arm":
		c.verb = verbArm
		if len(fields) != 5 {
			return command{}, fmt.Errorf("arm: want 4 arguments (KEY PGID CGROUPDIR MILLIS), got %d", len(fields)-1)
		}
		var err error
		if c.key, err = parseKey(fields[1]); err != nil {
			return command{}, fmt.Errorf("arm: %w", err)
		}
		if c.pgid, err = parsePGID(fields[2]); err != nil {
			return command{}, fmt.Errorf("arm %s: %w", c.key, err)
		}
		if c.cgroup, err = parseCgroupDir(fields[3]); err != nil {
			return command{}, fmt.Errorf("arm %s: %w", c.key, err)
		}
		if c.within, err = parseMillis(fields[4]); err != nil {
			return command{}, fmt.Errorf("arm %s: %w", c.key, err)
		}
	case "prearm":
		c.verb = verbPrearm
		if len(fields) != 3 {
			return command{}, fmt.Errorf("prearm: want 2 arguments (KEY MILLIS), got %d", len(fields)-1)
		}
		var err error
		if c.key, err = parseKey(fields[1]); err != nil {
			return command{}, fmt.Errorf("prearm: %w", err)
		}
		if c.within, err = parseMillis(fields[2]); err != nil {
			return command{}, fmt.Errorf("prearm %s: %w", c.key, err)
		}
	case "disarm":
		c.verb = verbDisarm
		if len(fields) != 2 {
			return command{}, fmt.Errorf("disarm: want 1 argument (KEY), got %d", len(fields)-1)
		}
		var err error
		if c.key, err = parseKey(fields[1]); err != nil {
			return command{}, fmt.Errorf("disarm: %w", err)
		}
	case "close":
		c.verb = verbClose
		if len(fields) != 1 {
			return command{}, fmt.Errorf("close: want no arguments, got %d", len(fields)-1)
		}
	default:
		return command{}, fmt.Errorf("unknown command %s (want arm, prearm, disarm or close)", quote(fields[0]))
	}
	return c, nil
}

// validate checks c as parseCommand would check its line.
func (c command) validate() error {
	switch c.verb {
	case verbArm:
		if err := checkKey(c.key); err != nil {
			return fmt.Errorf("arm: %w", err)
		}
		if err := checkPGID(c.pgid); err != nil {
			return fmt.Errorf("arm %s: %w", c.key, err)
		}
		if c.cgroup != "" {
			if err := checkCgroupDir(c.cgroup); err != nil {
				return fmt.Errorf("arm %s: %w", c.key, err)
			}
		}
		if err := checkWithin(c.within); err != nil {
			return fmt.Errorf("arm %s: %w", c.key, err)
		}
	case verbPrearm:
		if err := checkKey(c.key); err != nil {
			return fmt.Errorf("prearm: %w", err)
		}
		if err := checkWithin(c.within); err != nil {
			return fmt.Errorf("prearm %s: %w", c.key, err)
		}
	case verbDisarm:
		if err := checkKey(c.key); err != nil {
			return fmt.Errorf("disarm: %w", err)
		}
	case verbClose:
	default:
		return fmt.Errorf("unknown command %v", c.verb)
	}
	return nil
}

// appendLine appends c's line, newline included, to b. c must be valid.
func (c command) appendLine(b []byte) []byte {
	b = append(b, c.verb.String()...)
	switch c.verb {
	case verbArm:
		b = append(b, ' ')
		b = append(b, c.key...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(c.pgid), 10)
		b = append(b, ' ')
		if c.cgroup == "" {
			b = append(b, '-')
		} else {
			b = append(b, c.cgroup...)
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, c.within.Milliseconds(), 10)
	case verbPrearm:
		b = append(b, ' ')
		b = append(b, c.key...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, c.within.Milliseconds(), 10)
	case verbDisarm:
		b = append(b, ' ')
		b = append(b, c.key...)
	}
	return append(b, '\n')
}

// A token is one or more bytes from '!' to '~': printable ASCII, no space.
func checkToken(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return fmt.Errorf("byte %#02x at %d: want printable ASCII without spaces", s[i], i)
		}
	}
	return nil
}

func parseKey(s string) (string, error) {
	if err := checkKey(s); err != nil {
		return "", err
	}
	return s, nil
}

func checkKey(s string) error {
	if len(s) > MaxKeyLen {
		return fmt.Errorf("key %s: longer than %d bytes", quote(s), MaxKeyLen)
	}
	if err := checkToken(s); err != nil {
		return fmt.Errorf("key %s: %w", quote(s), err)
	}
	return nil
}

// maxPGID is the largest process group ID the protocol accepts.
const maxPGID = 1<<31 - 1

func parsePGID(s string) (int, error) {
	n, ok := parseDecimal(s, 10)
	if !ok || n > maxPGID || checkPGID(int(n)) != nil {
		return 0, fmt.Errorf("pgid %s: want a decimal integer from 2 to %d", quote(s), maxPGID)
	}
	return int(n), nil
}

// checkPGID refuses 0 and 1 as well as negatives: kill(-1) would signal
// every process the keeper may signal, kill(0) the keeper's own group.
func checkPGID(pgid int) error {
	if pgid < 2 || pgid > maxPGID {
		return fmt.Errorf("pgid %d: want 2 to %d", pgid, maxPGID)
	}
	return nil
}

func parseCgroupDir(s string) (string, error) {
	if s == "-" {
		return "", nil
	}
	if err := checkCgroupDir(s); err != nil {
		return "", err
	}
	return s, nil
}

// checkCgroupDir accepts a clean absolute slash-separated path other than
// "/" ("-" on the wire stands for none and is not a directory).
func checkCgroupDir(s string) error {
	if len(s) > MaxCgroupDirLen {
		return fmt.Errorf("cgroup dir %s: longer than %d bytes", quote(s), MaxCgroupDirLen)
	}
	if err := checkToken(s); err != nil {
		return fmt.Errorf("cgroup dir %s: %w", quote(s), err)
	}
	if s == "/" || !strings.HasPrefix(s, "/") || path.Clean(s) != s {
		return fmt.Errorf("cgroup dir %s: want a clean absolute path other than / (or - for none)", quote(s))
	}
	return nil
}

// checkWithin checks a deadline as the wire carries it.
func checkWithin(d time.Duration) error {
	if d < 0 || d > MaxWithin || d%time.Millisecond != 0 {
		return fmt.Errorf("deadline %v: want whole milliseconds from 0 to %v", d, MaxWithin)
	}
	return nil
}

func parseMillis(s string) (time.Duration, error) {
	n, ok := parseDecimal(s, 9)
	if !ok || time.Duration(n)*time.Millisecond > MaxWithin {
		return 0, fmt.Errorf("millis %s: want a decimal integer from 0 to %d", quote(s), MaxWithin.Milliseconds())
	}
	return time.Duration(n) * time.Millisecond, nil
}

// parseDecimal parses a canonical unsigned decimal of at most maxDigits
// digits: no sign, no leading zero except "0" itself.
func parseDecimal(s string, maxDigits int) (int64, bool) {
	if s == "" || len(s) > maxDigits || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// quote returns s as a Go string literal of printable ASCII, cut after 40
// bytes, for error messages that name what they got.
func quote(s string) string {
	const max = 40
	if len(s) > max {
		return strconv.QuoteToASCII(s[:max]) + "..."
	}
	return strconv.QuoteToASCII(s)
}

// eventKind names an event.
type eventKind uint8

const (
	eventReady eventKind = iota + 1
	eventFenced
	eventError
)

// event is one line from the keeper to the node:
//
//	ready VERSION   the first line: the keeper runs and speaks VERSION
//	fenced KEY      KEY's deadline passed: its group was killed, KEY forgotten
//	error TEXT      a command was refused, or a kill failed; TEXT says why
type event struct {
	kind    eventKind
	version int    // ready
	key     string // fenced
	text    string // error: printable ASCII, spaces allowed
}

// parseEvent decodes one line without its newline.
func parseEvent(line []byte) (event, error) {
	s := string(line)
	name, rest, _ := strings.Cut(s, " ")
	switch name {
	case "ready":
		n, ok := parseDecimal(rest, 9)
		if !ok || n == 0 {
			return event{}, fmt.Errorf("ready: version %s: want a decimal integer from 1", quote(rest))
		}
		return event{kind: eventReady, version: int(n)}, nil
	case "fenced":
		if err := checkKey(rest); err != nil {
			return event{}, fmt.Errorf("fenced: %w", err)
		}
		return event{kind: eventFenced, key: rest}, nil
	case "error":
		if rest == "" {
			return event{}, errors.New("error: empty text")
		}
		for i := 0; i < len(rest); i++ {
			if rest[i] < ' ' || rest[i] > '~' {
				return event{}, fmt.Errorf("error: byte %#02x at %d: want printable ASCII", rest[i], i)
			}
		}
		return event{kind: eventError, text: rest}, nil
	}
	return event{}, fmt.Errorf("unknown event %s", quote(name))
}

// appendLine appends e's line, newline included, to b. e must be valid.
func (e event) appendLine(b []byte) []byte {
	switch e.kind {
	case eventReady:
		b = append(b, "ready "...)
		b = strconv.AppendInt(b, int64(e.version), 10)
	case eventFenced:
		b = append(b, "fenced "...)
		b = append(b, e.key...)
	case eventError:
		b = append(b, "error "...)
		b = append(b, e.text...)
	}
	return append(b, '\n')
}

// errorEvent makes an error event of err's text, made printable and cut
// to fit in MaxLine.
func errorEvent(err error) event {
	const max = MaxLine - len("error \n")
	s := err.Error()
	if len(s) > max {
		s = s[:max]
	}
	b := []byte(s)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '?'
		}
	}
	if len(b) == 0 {
		b = []byte("?")
	}
	return event{kind: eventError, text: string(b)}
}

// errLineTooLong reports a line over MaxLine; readLine has read and
// dropped it through its newline, so the next call reads the next line.
var errLineTooLong = fmt.Errorf("line longer than %d bytes, newline included", MaxLine)

// readLine reads one line from r, which must have been made with
// bufio.NewReaderSize(_, MaxLine), and returns it without its newline; the
// slice is valid until the next read. It returns errLineTooLong for a
// longer line, io.EOF at the end of the input, and io.ErrUnexpectedEOF when
// the input ends inside a line (the part is dropped: a torn write).
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case err == nil:
		return line[:len(line)-1], nil
	case errors.Is(err, bufio.ErrBufferFull):
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = r.ReadSlice('\n')
		}
		if err == nil {
			return nil, errLineTooLong
		}
	}
	if errors.Is(err, io.EOF) && len(line) > 0 {
		return nil, io.ErrUnexpectedEOF
	}
	return nil, err
}
