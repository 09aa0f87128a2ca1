package pgcluster

import (
	"runtime"
	"syscall"
)

// lockThread keeps the calling goroutine on its thread for good: the
// parent-death signal is sent when the thread that started the child ends.
func lockThread() { runtime.LockOSThread() }

// setParentDeathSignal makes the kernel send the server SIGQUIT (immediate
// shutdown, which ends its children too) when the process that started it
// dies, so a crashed test leaves no server running.
func setParentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGQUIT }
