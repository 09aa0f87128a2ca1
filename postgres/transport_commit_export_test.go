package postgres

// NotifyChannel returns the channel t's sends notify, for the group
// commit test that counts notifications.
func NotifyChannel(t *Transport) string { return t.names.channel }
