package groupcommit

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Items added while a commit is on its way go together, in the order they
// came, in the next commit; each waiter gets its own item's outcome, and
// an item whose group another waiter committed is not committed again.
func TestItemsAddedDuringACommitGoTogetherInOrder(t *testing.T) {
	hold := make(chan struct{})
	held := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	q := New(func(items []int) []error {
		mu.Lock()
		first := len(groups) == 0
		groups = append(groups, slices.Clone(items))
		mu.Unlock()
		if first {
			close(held)
			<-hold
		}
		errs := make([]error, len(items))
		for i, it := range items {
			if it%5 == 0 {
				errs[i] = fmt.Errorf("item %d refused", it)
			}
		}
		return errs
	})
	var wg sync.WaitGroup
	outcome := make([]error, 11)
	wg.Add(1)
	go func() { defer wg.Done(); outcome[0] = q.Do(0) }()
	<-held
	late := q.Add(1) // waited on only after its group is written
	const writers = 9
	for i := 2; i < 2+writers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); outcome[i] = q.Do(i) }()
	}
	for deadline := time.Now().Add(10 * time.Second); q.Len() < 1+writers; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d items queued behind the held commit", q.Len(), 1+writers)
		}
		time.Sleep(time.Millisecond) // polling for the writers to queue
	}
	close(hold)
	wg.Wait()
	outcome[1] = late()
	if len(groups) != 2 || !slices.Equal(groups[0], []int{0}) || len(groups[1]) != 1+writers || groups[1][0] != 1 {
		t.Fatalf("groups committed: %v, want [0] then the 10 queued behind it, 1 first", groups)
	}
	for i, err := range outcome {
		if want := i%5 == 0; (err != nil) != want || (err != nil && err.Error() != fmt.Sprintf("item %d refused", i)) {
			t.Errorf("item %d: %v", i, err)
		}
	}
	if q.Len() != 0 {
		t.Errorf("%d items left queued", q.Len())
	}
	if err := q.Do(7); err != nil || len(groups) != 3 {
		t.Errorf("a lone item afterwards: %v, %d commits", err, len(groups))
	}
}
