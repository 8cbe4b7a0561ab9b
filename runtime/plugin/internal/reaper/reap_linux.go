package reaper

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ssrun/ssrun/runtime/plugin/internal/workdir"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of <linux/prctl.h>.
const prSetChildSubreaper = 36

// hostDied is the reaper's parent-death signal. It differs from SIGTERM (the
// host asking it to end the tree) because it is sent when the host's
// thread that started the reaper exits, which can be before the whole host
// process is gone (its other threads are still being killed): the reaper
// then waits for that before it removes the host's directories.
const hostDied = syscall.SIGUSR2

// hostGoneWait bounds that wait.
const hostGoneWait = 10 * time.Second

// init turns a process started by Command into the reaper; it never
// returns there. Anywhere else it does nothing.
func init() {
	v, ok := os.LookupEnv(envVar)
	if !ok {
		return
	}
	// The plugin's parent-death signal is tied to the thread that starts
	// it: keep that thread for good.
	runtime.LockOSThread()
	os.Exit(reap(v, os.Args[1:]))
}

// reap is the reaper: see the package documentation. v is the value of
// envVar; args are as Command makes them: the working and socket
// directories, the plugin's path and its arguments. It returns the
// reaper's exit code: the plugin's, or 128 + the signal that ended it.
func reap(v string, args []string) int {
	var st syscall.Stat_t
	if syscall.Fstat(statusFD, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO || len(args) < 4 {
		fmt.Fprintf(os.Stderr, "ssrun plugin reaper: started without its status pipe or program (%s is set)\n", envVar)
		return 2
	}
	status := os.NewFile(statusFD, "status")
	syscall.CloseOnExec(statusFD) // the plugin must not hold it
	say := func(format string, a ...any) { _, _ = fmt.Fprintf(status, format+"\n", a...) }
	host, _ := strconv.Atoi(v)
	workDir, sockDir, args := args[0], args[1], args[2:]

	// SIGTERM, from the host or for its death, ends the tree. SIGINT and
	// SIGHUP are caught and dropped rather than ignored, since an ignored
	// signal would stay ignored in the plugin.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, hostDied, syscall.SIGCHLD, syscall.SIGINT, syscall.SIGHUP)
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		say("error plugin reaper: /proc is needed to find the plugin's processes: %v", err)
		return 1
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		say("error plugin reaper: PR_SET_CHILD_SUBREAPER: %v", e)
		return 1
	}
	if os.Getppid() != host {
		say("error plugin reaper: the host (pid %d) is gone", host)
		return 1
	}
	env := make([]string, 0, len(os.Environ()))
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, envVar+"=") {
			env = append(env, e)
		}
	}
	proc, err := os.StartProcess(args[0], args[1:], &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		say("error %v", err)
		return 1
	}
	plugin := proc.Pid
	_ = proc.Release() // waited for with wait4 below
	say("pid %d", plugin)

	ws, exited, died := watch(plugin, sigs)
	if w, ok := killAll(plugin); ok {
		ws, exited = w, true
	}
	if died {
		// Re-parented only once every thread of the host has exited.
		for start := time.Now(); os.Getppid() == host && time.Since(start) < hostGoneWait; {
			time.Sleep(time.Millisecond)
		}
	}
	if os.Getppid() != host {
		// The host died: what it made for the plugin goes too. The working
		// directory (shared with the host's other plugins) once its owner
		// lock shows the host is gone: another reaper may have been faster.
		if filepath.IsAbs(sockDir) {
			_ = os.RemoveAll(sockDir)
		}
		if filepath.IsAbs(workDir) {
			_, _ = workdir.RemoveIfStale(workDir)
		}
	}
	if !exited {
		say("exit unknown")
		return 1
	}
	say("exit %s", describe(ws))
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// watch reaps the orphans handed to the reaper until the plugin exits (it
// returns the plugin's status and true) or SIGTERM or hostDied arrives
// (false; died tells which).
func watch(plugin int, sigs <-chan os.Signal) (ws syscall.WaitStatus, exited, died bool) {
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break // none ended (more may run)
			}
			if pid == plugin {
				return ws, true, false
			}
		}
		switch <-sigs {
		case syscall.SIGTERM:
			return 0, false, false
		case hostDied:
			return 0, false, true
		}
	}
}

// killAll kills every child of the reaper and reaps it, until none is
// left. The orphans of each killed process are handed to the reaper, so
// this ends every descendant, however it left the plugin's process group
// or session. It returns the wait status of plugin if it reaped it. It
// stops early if the children left cannot be killed (another user's).
//
// Each round lists the children, kills them, waits for one and reaps every
// other that has ended too; the next round finds the orphans they left.
// Only the reaper reaps its children, and only after killing the ones it
// listed, so no pid it kills can have been reused meanwhile. Without
// children at the time of a listing it can get none later (an orphan is
// handed over only when its parent, a descendant, dies), so a child found
// by wait then means the listing missed it: killAll stops rather than wait
// for it forever.
func killAll(plugin int) (syscall.WaitStatus, bool) {
	var status syscall.WaitStatus
	var found bool
	for {
		kids := children()
		killed := 0
		for _, pid := range kids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if len(kids) > 0 && killed == 0 {
			return status, found
		}
		flags := 0 // wait for one...
		if len(kids) == 0 {
			flags = syscall.WNOHANG
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, flags, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: no child left
				return status, found
			}
			if pid == 0 { // none ended now
				if len(kids) == 0 {
					return status, found
				}
				break
			}
			if pid == plugin {
				status, found = ws, true
			}
			flags = syscall.WNOHANG // ...then take those already ended
		}
	}
}

// children returns the pids of the reaper's children, zombies included.
func children() []int {
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile (not a child: children stay until reaped)
		}
		// "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == self {
			out = append(out, pid)
		}
	}
	return out
}

// describe renders ws as os.ProcessState.String does.
func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return "unknown"
}
