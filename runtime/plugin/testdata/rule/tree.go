package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The process tree for the tests of runtime/plugin that kill a plugin: the
// rule binary run again (argument "sleeper" or "daemonize") is each of the
// plugin's descendants.

// spawn starts three descendants that outlive the plugin unless the host
// kills its whole tree, and returns their pids:
//   - a plain child, in the plugin's process group, holding the plugin's
//     original stderr (as a shell's "cmd &" would);
//   - a child in a session (and process group) of its own (setsid);
//   - a daemon: a child that calls setsid, starts the sleeper and exits at
//     once (the classic double fork), so the sleeper is an orphan.
//
// None answers SIGTERM, SIGHUP or SIGINT.
func spawn() ([]int, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	plain := exec.Command(self, "sleeper")
	plain.Stderr = os.NewFile(2, "stderr") // fd 2: go-plugin replaced os.Stderr
	setsid := exec.Command(self, "sleeper")
	setsid.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var pids []int
	for _, c := range []*exec.Cmd{plain, setsid} {
		if err := c.Start(); err != nil {
			return nil, err
		}
		pids = append(pids, c.Process.Pid)
	}
	out, err := exec.Command(self, "daemonize").Output()
	if err != nil {
		return nil, fmt.Errorf("daemonize: %w (%s)", err, out)
	}
	daemon, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("daemonize said %q", out)
	}
	return append(pids, daemon), nil
}

// descendant runs the process of spawn named by mode; it never returns.
func descendant(mode string) {
	switch mode {
	case "sleeper": // say so on stderr, then sleep through polite signals
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
		fmt.Fprintf(os.Stderr, "sleeper %d started\n", os.Getpid())
		for {
			time.Sleep(time.Hour)
		}
	case "daemonize": // a new session, a child in it, its pid on stdout, exit
		if _, err := syscall.Setsid(); err != nil {
			fmt.Println("setsid:", err)
			os.Exit(1)
		}
		self, err := os.Executable()
		if err == nil {
			c := exec.Command(self, "sleeper")
			if err = c.Start(); err == nil {
				fmt.Println(c.Process.Pid)
				os.Exit(0)
			}
		}
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "rule: unknown mode %q\n", mode)
	os.Exit(2)
}
