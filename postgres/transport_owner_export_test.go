package postgres

// ReapSQL returns the statement that frees the leased rows of vanished
// owners, for its EXPLAIN test.
func ReapSQL(t *Transport) string { return t.sql.reap }
