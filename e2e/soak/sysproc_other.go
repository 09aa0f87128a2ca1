//go:build !linux

package main

import (
	"errors"
	"os"
	"syscall"
)

// childAttr sets nothing: only Linux can tie a child's life to its parent.
func childAttr() *syscall.SysProcAttr { return nil }

// pause is not supported here: the soak's stop faults need Linux.
func pause(*os.Process) error { return errors.ErrUnsupported }

// resume is not supported here.
func resume(*os.Process) error { return errors.ErrUnsupported }
