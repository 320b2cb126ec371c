package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors matched by errors.Is on an *APIError.
var (
	// ErrNotFound: the job (or endpoint) does not exist on the node (404).
	ErrNotFound = errors.New("not found")
	// ErrUnauthorized: the API token is missing or wrong, or the request
	// needs the owner's key and came without it, or its signature does not
	// verify (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the job belongs to another owner (403).
	ErrForbidden = errors.New("forbidden")
	// ErrBadRequest: the node refused the request as bad input (400, 413,
	// 415); nothing changed.
	ErrBadRequest = errors.New("bad request")
	// ErrNoRoom: the node has no room for what was sent: its store is
	// full (507); nothing changed.
	ErrNoRoom = errors.New("no room on the node")
)

// APIError is an error status answered by the node, with the message of its
// JSON error body.
type APIError struct {
	// Method and Path name the request ("POST", "/v1/jobs").
	Method, Path string
	// Status is the HTTP status code.
	Status int
	// Message is the node's error message (or, for a body that was not the
	// API's JSON, the status text and the start of the body).
	Message string
	// Field names the offending field of a bad request, as the API's JSON
	// names it ("cards", "models[1]", "share"); empty when none.
	Field string
	// RetryAfter is what the node's Retry-After header asked the client to
	// wait before it sends the request again (a 429 or a 503); 0 when it
	// sent none.
	RetryAfter time.Duration
}

// Error says which request failed, the status, the node's message and the
// field it names.
func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s %s: %d: %s (field %s)", e.Method, e.Path, e.Status, e.Message, e.Field)
	}
	return fmt.Sprintf("%s %s: %d: %s", e.Method, e.Path, e.Status, e.Message)
}

// Is matches the sentinel error of e's status.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrBadRequest:
		return IsBadInputStatus(e.Status)
	case ErrNoRoom:
		return e.Status == http.StatusInsufficientStorage
	}
	return false
}

// IsBadInputStatus reports whether status says the request was refused for
// what it carried: 400, 413 or 415.
func IsBadInputStatus(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge ||
		status == http.StatusUnsupportedMediaType
}

// UnreachableError says that nothing answered at the API's address: the
// connection was refused, the name did not resolve, or the connect timed out.
// The request was not delivered.
type UnreachableError struct {
	// Addr is the address dialled, as given to New.
	Addr string
	Err  error
}

// Error names the address and why nothing answered there.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the gpumesh API at %s: %v", e.Addr, e.Err)
}

// Unwrap returns the dial error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// IsRetryableStatus reports whether a status asks the client to send the
// same request again later: 429 (the node is saturated) or 503 (its
// coordinator or the job's replicas did not answer in time).
func IsRetryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// parseRetryAfter reads a Retry-After header: delay seconds, or an HTTP
// date (counted from now). Anything else, or nothing, is 0.
func parseRetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 3600)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), time.Hour)
	}
	return 0
}
