package blob

// DefaultLimit is the byte limit of a store whose operator set none (the
// node's --store-max): half of the space the store could use, that is the
// file system's free bytes plus what the store already holds (so a
// restart does not shrink it), and at most a quarter of the file
// system's size, so that a supplier's own disk never fills with other
// people's checkpoints. total and free are DiskSpace's answer for the
// store's directory; held is the store's size (Usage.Bytes).
//
// For example: a 1 TB disk with 300 GB free gives 150 GB; with 900 GB
// free, 250 GB.
func DefaultLimit(total, free, held int64) int64 {
	limit := min((free+held)/2, total/4)
	return max(limit, 1) // a full disk still gets a limit, not "none"
}
