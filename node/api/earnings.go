package api

import "time"

// Earnings is what this node's cards earned running jobs, as the node
// counted it from the attempts it ran: their card-seconds at the price each
// was awarded at, the same figures the coordinators bill the jobs' owners.
// Days are the node's local days; the week starts on Monday.
type Earnings struct {
	// Today is since TodaySince (local midnight), Week since WeekSince
	// (Monday's midnight), Total since Since (the first earning; zero when
	// the node never earned).
	Today      Earned    `json:"today"`
	Week       Earned    `json:"week"`
	Total      Earned    `json:"total"`
	TodaySince time.Time `json:"today_since"`
	WeekSince  time.Time `json:"week_since"`
	Since      time.Time `json:"since,omitzero"`
	// ByModel breaks the three down by card model, sorted by model.
	ByModel []ModelEarned `json:"by_model"`
}

// Earned is an amount earned and the card-seconds it paid for.
type Earned struct {
	CNY         float64 `json:"cny"`
	CardSeconds float64 `json:"card_seconds"`
}

// Add returns e with o added.
func (e Earned) Add(o Earned) Earned {
	return Earned{CNY: e.CNY + o.CNY, CardSeconds: e.CardSeconds + o.CardSeconds}
}

// ModelEarned is what the cards of one model earned.
type ModelEarned struct {
	Model string `json:"model"`
	Today Earned `json:"today"`
	Week  Earned `json:"week"`
	Total Earned `json:"total"`
}
