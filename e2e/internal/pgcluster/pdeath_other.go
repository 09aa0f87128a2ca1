//go:build unix && !linux

package pgcluster

import "syscall"

// lockThread does nothing: only Linux has a parent-death signal.
func lockThread() {}

// setParentDeathSignal does nothing: only Linux has a parent-death signal.
func setParentDeathSignal(*syscall.SysProcAttr) {}
