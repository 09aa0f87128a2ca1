package mysql_test

// runChildIfAsked runs this test binary's role as a child process (the
// outbox crash case, the multi-process claimers) when its environment
// asks for one; it never returns then. Otherwise it returns false.
func runChildIfAsked() bool {
	runOutboxChildIfAsked()
	runClaimerIfAsked()
	runHolderIfAsked()
	return false
}
