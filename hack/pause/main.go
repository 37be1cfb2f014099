// The local cluster's sandbox ("pause") image: no registry is reachable, so the real node's
// containerd gets this static binary in a FROM-scratch image. It holds the pod's namespaces,
// reaps orphans (it is PID 1 when the pod shares its process namespace) and exits on SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
