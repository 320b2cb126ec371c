package market

// verifyHold says why the coordinator may not ask o's node yet under its
// verification policy, or reasonPassed.
func (c *coordinator) verifyHold(o *Offer) (Reason, string) { return reasonPassed, "" }

// verifyNodeHold says why node may not win under the verification policy,
// or reasonPassed.
func (c *coordinator) verifyNodeHold(node string) (Reason, string) { return reasonPassed, "" }
