package redis

// StopAfterCommit makes p's advances stop after their commit with err, as
// a writer that died before storing the rows.
func StopAfterCommit(p *Persistence, err error) { p.afterCommit = func() error { return err } }
