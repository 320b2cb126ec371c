package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Submit's retries. A node answers a submission 429 when it is saturated
// (with a Retry-After) and 503 when the job's coordinator or its replicas
// did not answer in time; both ask the client to send the same submission
// again. Submit does so, with the same job ID and the same signed spec,
// so a submission that took effect the first time is acknowledged again
// rather than started twice (the coordinator knows the job by its ID).
const (
	// DefaultSubmitRetry bounds how long Submit goes on sending a
	// submission again after 429 and 503 answers, counted from the first
	// try; WithSubmitRetry changes it.
	DefaultSubmitRetry = 30 * time.Second
	// retryFirst and retryMost bound the pause between tries where the node
	// sent no Retry-After: from retryFirst, doubling, up to retryMost. A
	// Retry-After is honoured up to retryMost too.
	retryFirst = 250 * time.Millisecond
	retryMost  = 5 * time.Second
)

// RetryNote says that Submit is about to send a submission again.
type RetryNote struct {
	Job     string        // the job ID, the same on every try
	Try     int           // the try that was refused, from 1
	Status  int           // its status: 429 or 503
	Message string        // the node's error message
	Wait    time.Duration // the pause before the next try
	Left    time.Duration // what is left of the bound after the pause
}

// String is the note as gpumesh submit prints it.
func (n RetryNote) String() string {
	what := "saturated"
	if n.Status != 429 {
		what = "unavailable"
	}
	return fmt.Sprintf("job %s: the node answered %d (%s: %s); submitting it again with the same ID in %v (try %d, %v left)",
		n.Job, n.Status, what, n.Message, n.Wait.Round(time.Millisecond), n.Try+1, n.Left.Round(time.Second))
}

// WithSubmitRetry makes Submit send a submission that got 429 or 503
// again, with the same job ID and signature, for at most within after the
// first try (0: never), pausing as the node's Retry-After asks, else from
// 250 ms doubling to 5 s, with jitter. notify, when not nil, is called
// before each pause. Default: DefaultSubmitRetry, no notify.
func WithSubmitRetry(within time.Duration, notify func(RetryNote)) Option {
	return func(c *Client) error {
		if within < 0 {
			return fmt.Errorf("negative submit retry bound %v", within)
		}
		c.retryWithin, c.onRetry = within, notify
		return nil
	}
}

// withRetry runs try until it succeeds, fails otherwise than with 429 or
// 503, or the bound passes; the error of the last try is returned,
// wrapped to say how many tries were made.
func (c *Client) withRetry(ctx context.Context, job string, try func() error) error {
	start := c.clock()
	backoff := retryFirst
	for n := 1; ; n++ {
		err := try()
		var ae *APIError
		if err == nil || !errors.As(err, &ae) || !IsRetryableStatus(ae.Status) {
			return err
		}
		wait := ae.RetryAfter
		if wait <= 0 {
			wait = backoff
			backoff = min(2*backoff, retryMost)
		}
		wait = jitter(min(wait, retryMost))
		left := c.retryWithin - c.clock().Sub(start) - wait
		if left < 0 {
			if n == 1 {
				return err
			}
			return fmt.Errorf("%w (gave up after %d tries in %v)", err, n, c.clock().Sub(start).Round(100*time.Millisecond))
		}
		if c.onRetry != nil {
			c.onRetry(RetryNote{Job: job, Try: n, Status: ae.Status, Message: ae.Message, Wait: wait, Left: left})
		}
		if err := c.sleep(ctx, wait); err != nil {
			return fmt.Errorf("%w (stopped before try %d: %v)", ae, n+1, err)
		}
	}
}

// jitter spreads d over [0.8d, 1.2d): many clients refused at once do not
// come back at once.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
