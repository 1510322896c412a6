package domain

// Truncate shortens s to at most n bytes, ending it with "..." when it cut.
// Messages of conditions and statuses are bounded with it.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
