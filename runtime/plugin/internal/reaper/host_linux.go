package reaper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The reaper's side of the protocol.
const (
	// envVar marks a reaper's environment; its value is the host's pid.
	envVar = "SSRUN_PLUGIN_REAPER"
	// statusFD is the reaper's end of the status pipe: one line "pid <n>"
	// once the plugin started (or "error <message>" if it could not), and
	// one line "exit <status>" at the end.
	statusFD = 3
	// statusWait bounds reading the last status line once the reaper has
	// exited (the data is already in the pipe).
	statusWait = time.Second
)

// Command returns the (unstarted) command of a reaper that runs the program
// at path with args (args[0] included) and env. If the host dies, the
// reaper removes workDir, the host's working directory (once its owner lock
// shows the host is gone; see package workdir), and sockDir, the plugin's
// socket directory; either may be "". The caller sets Stdin, Stdout and
// Stderr (the plugin inherits them) and starts it with Start.
func Command(path string, args, env []string, workDir, sockDir string) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = append([]string{"ssrun-plugin-reaper", workDir, sockDir, path}, args...)
	cmd.Env = append(slices.Clip(env), envVar+"="+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: hostDied}
	return cmd
}

// Handle is a started reaper.
type Handle struct {
	cmd    *exec.Cmd
	pipe   *os.File
	status *bufio.Reader
	pid    int    // the plugin's
	exit   string // the plugin's exit status, once Wait returned
}

// Start starts cmd (made by Command) and returns once its reaper has
// started the plugin, or failed to (the error says why), or ctx's deadline
// passed. On failure the reaper has exited and been waited for.
func Start(ctx context.Context, cmd *exec.Cmd) (*Handle, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{w} // statusFD
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	h := &Handle{cmd: cmd, pipe: r, status: bufio.NewReader(r)}
	if dl, ok := ctx.Deadline(); ok {
		_ = r.SetReadDeadline(dl)
	}
	line, err := h.status.ReadString('\n')
	_ = r.SetReadDeadline(time.Time{})
	if n, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "pid "); ok && err == nil {
		if h.pid, err = strconv.Atoi(n); err == nil {
			return h, nil
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_ = r.Close()
	if msg, ok := strings.CutPrefix(strings.TrimSpace(line), "error "); ok {
		return nil, errors.New(msg)
	}
	return nil, fmt.Errorf("plugin reaper: no pid reported (%q): %w", line, err)
}

// Pid returns the plugin's pid.
func (h *Handle) Pid() int { return h.pid }

// Terminate asks the reaper to end the plugin and every process below it
// now, and exit.
func (h *Handle) Terminate() { _ = h.cmd.Process.Signal(syscall.SIGTERM) }

// Wait waits for the reaper to exit and reads the plugin's exit status. Its
// error describes how the plugin ended ("signal: killed"), or the reaper
// if it could not tell; nil if the plugin exited with status 0.
func (h *Handle) Wait() error {
	err := h.cmd.Wait()
	_ = h.pipe.SetReadDeadline(time.Now().Add(statusWait))
	line, _ := h.status.ReadString('\n')
	if s, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "exit "); ok && s != "unknown" {
		h.exit = s
	}
	_ = h.pipe.Close()
	switch h.exit {
	case "":
		return err
	case "exit status 0":
		return nil
	}
	return errors.New(h.exit)
}

// Status returns the plugin's exit status in the words of
// os.ProcessState.String ("exit status 3", "signal: killed"), once Wait
// returned; "" when the reaper could not tell (it was killed).
func (h *Handle) Status() string { return h.exit }
