//go:build !unix

package pgcluster

import (
	"os"
	"os/exec"
)

// runAs does nothing: only Unix systems run the server as another user.
func runAs(*exec.Cmd, *credential) {}

// startProcess starts cmd.
func startProcess(cmd *exec.Cmd, _ *credential) error { return cmd.Start() }

// interrupt kills the server: there is no SIGINT to send here.
func interrupt(p *os.Process) error { return p.Kill() }

// killGroup kills the postmaster; its children notice and exit.
func killGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// lockThread does nothing: only Linux has a parent-death signal.
func lockThread() {}
