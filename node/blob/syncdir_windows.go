package blob

// syncDir does nothing on Windows, which cannot sync a directory: NTFS
// journals the rename itself.
func syncDir(string) error { return nil }
