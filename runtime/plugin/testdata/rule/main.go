// Command rule is the test plugin of runtime/plugin: a rule built with the
// SDK, whose Init and commands are those of internal/plugintest, plus the
// commands here about what only a process of its own shows: its pid, its
// output, the processes it starts, and how it hangs or exits.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/runtime/plugin/internal/plugintest"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

func main() {
	if len(os.Args) == 2 { // one of the process tree's descendants (tree.go)
		descendant(os.Args[1])
	}
	sdk.Serve(sdk.Rule{Init: plugintest.Init, Handle: handle})
}

func handle(ctx context.Context, h sdk.Host, ev abi.Event) error {
	switch ev.Key {
	case "pid":
		ruletest.Report(h, "pid", nil, "pid", os.Getpid())
	case "print": // a line on stdout, a line on stderr, a partial line on stdout
		a := ruletest.Args(ev)
		fmt.Println(a[0])
		fmt.Fprintln(os.Stderr, a[1])
		fmt.Print(a[2])
		ruletest.Report(h, "print", nil)
	case "spawn": // start descendants (tree.go); report the pids
		pids, err := spawn()
		if err != nil {
			return err
		}
		list := strconv.Itoa(os.Getpid())
		for _, pid := range pids {
			list += "," + strconv.Itoa(pid)
		}
		ruletest.Report(h, "spawn", nil, "pids", list)
	case "stderr": // lines on the original stderr (fd 2), past go-plugin's redirection: plain, then hclog JSON
		a := ruletest.Args(ev)
		_, _ = syscall.Write(2, []byte(a[0]+"\n"))
		_, _ = syscall.Write(2, []byte(`{"@level":"error","@message":"`+a[1]+`","@timestamp":"2026-01-02T03:04:05.000000Z","k":"v"}`+"\n"))
		ruletest.Report(h, "stderr", nil)
	case "hold": // say so, then never answer
		if _, err := h.Set(ctx, "inflight", []byte(strconv.Itoa(os.Getpid())), abi.SetOptions{}); err != nil {
			return err
		}
		select {}
	case "hang":
		select {}
	case "exit":
		os.Exit(3)
	case "atendexit": // a write at the end, then die before the end
		if err := sdk.SetAtEnd(ctx, h, ruletest.Args(ev)[0], []byte("x"), abi.SetOptions{}); err != nil {
			return err
		}
		os.Exit(3)
	default: // plugintest's commands
		return plugintest.Handle(ctx, h, ev)
	}
	return nil
}
