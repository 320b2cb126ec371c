package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// Bill is the body of GET /v1/jobs/{id}/bill: a job's bill as its record
// states it, and the signed usage receipts that prove it (node/receipts):
// each placement's latest receipt (carried in the record, so any peer has
// it) and every receipt the job's coordinator accepted (the answering node
// asks it for them). A client checks them itself (gpumesh bill --verify).
type Bill struct {
	Job         string             `json:"job"`
	Owner       string             `json:"owner"`
	State       market.JobState    `json:"state"`
	Coordinator string             `json:"coordinator"`
	CardSeconds float64            `json:"card_seconds"`
	CostCNY     float64            `json:"cost_cny"`
	Placements  []market.Placement `json:"placements"`
	// Receipts are encoded receipts (base64 in JSON), by share, epoch and
	// number.
	Receipts [][]byte `json:"receipts"`
	// From is the node that answered.
	From string `json:"from"`
}

// BillReader is implemented by a Backend that serves jobs' bills to their
// owners. Without it the route answers 404.
type BillReader interface {
	Bill(ctx context.Context, id string) (Bill, error)
}

// ReceiptEarnings is the body of GET /v1/earnings: what this node is owed,
// from the receipts its attempts issued.
type ReceiptEarnings struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since,omitzero"`
	// Total is what receipts the coordinators countersigned add up to;
	// Unconfirmed what the newest receipts issued add beyond them (an
	// attempt running, or a countersignature not back yet).
	Total       Earned `json:"total"`
	Unconfirmed Earned `json:"unconfirmed"`
	// ByOwner and ByJob break Total (and Unconfirmed) down, the largest
	// first.
	ByOwner []OwnerEarned `json:"by_owner"`
	ByJob   []JobEarned   `json:"by_job"`
	// Ledger is what the node's earnings ledger (gpumesh status's EARNED)
	// counts in all, from the attempts' own usage; it leads the receipts
	// by what was used since the last receipt.
	Ledger Earned `json:"ledger"`
}

// OwnerEarned is what one owner's jobs owe.
type OwnerEarned struct {
	Owner       string `json:"owner"`
	Jobs        int    `json:"jobs"`
	Earned      Earned `json:"earned"`
	Unconfirmed Earned `json:"unconfirmed"`
}

// JobEarned is what one job owes.
type JobEarned struct {
	Job         string    `json:"job"`
	Owner       string    `json:"owner"`
	Attempts    int       `json:"attempts"`
	Earned      Earned    `json:"earned"`
	Unconfirmed Earned    `json:"unconfirmed"`
	Last        time.Time `json:"last"`
}

// EarningsReader is implemented by a Backend that sums its receipts.
type EarningsReader interface {
	ReceiptEarnings(ctx context.Context, since time.Time) (ReceiptEarnings, error)
}

func (h *handlers) bill(w http.ResponseWriter, r *http.Request) {
	br, ok := h.b.(BillReader)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node serves no bills"))
		return
	}
	b, err := br.Bill(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (h *handlers) earnings(w http.ResponseWriter, r *http.Request) {
	er, ok := h.b.(EarningsReader)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "this node keeps no receipts"))
		return
	}
	var since time.Time
	if s := r.URL.Query().Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			writeError(w, &HTTPError{Status: http.StatusBadRequest, Field: "since", Err: fmt.Errorf("since %q: want an RFC 3339 time", s)})
			return
		}
		since = t
	}
	e, err := er.ReceiptEarnings(r.Context(), since)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}
