package main

import (
	"fmt"
	"os"
	"syscall"
)

// childAttr makes a worker die with the soak, so an interrupted soak leaves
// no worker consuming the shared broker.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pause stops p with SIGSTOP.
func pause(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("sigstop %d: %w", p.Pid, err)
	}
	return nil
}

// resume continues p with SIGCONT.
func resume(p *os.Process) error {
	if err := p.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("sigcont %d: %w", p.Pid, err)
	}
	return nil
}
