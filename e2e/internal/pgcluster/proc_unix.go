//go:build unix

package pgcluster

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// runAs makes cmd run as cred (nil: the current user).
func runAs(cmd *exec.Cmd, cred *credential) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cred != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(cred.uid), Gid: uint32(cred.gid)}
	}
}

// startProcess starts cmd as cred in a process group of its own, which the
// server's children join.
func startProcess(cmd *exec.Cmd, cred *credential) error {
	runAs(cmd, cred)
	cmd.SysProcAttr.Setpgid = true
	setParentDeathSignal(cmd.SysProcAttr)
	return cmd.Start()
}

// interrupt asks the postmaster for a fast shutdown.
func interrupt(p *os.Process) error { return p.Signal(syscall.SIGINT) }

// killGroup sends SIGKILL to the process group that pid leads.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
