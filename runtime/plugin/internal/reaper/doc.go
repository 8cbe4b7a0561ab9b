// Package reaper runs a plugin under a small supervisor process that owns
// the plugin's whole process tree (Linux only; elsewhere the package is
// empty).
//
// The reaper is the host's own executable (/proc/self/exe) run again: the
// package's init function recognises the reaper's environment variable and
// turns the process into the reaper before main runs, so every program that
// links the plugin runtime can start reapers, with nothing to call from
// main. The reaper:
//
//   - is started by the host in a process group of its own, with a
//     parent-death signal (SIGUSR2), so it hears of the host's death, even
//     by SIGKILL;
//   - marks itself a child subreaper (PR_SET_CHILD_SUBREAPER): every
//     process below it that is orphaned, including those that called setsid
//     or double-forked to leave the plugin's process group and session, is
//     handed to it instead of to init;
//   - starts the plugin (which inherits its process group, stdin, stdout
//     and stderr; the plugin gets SIGKILL if the reaper dies) and reports
//     the plugin's pid to the host on a pipe;
//   - reaps the orphans handed to it while the plugin runs;
//   - ends the tree when the plugin exits, on SIGTERM (the host asks) or on
//     the host's death: it SIGKILLs every child it has and reaps it,
//     again and again, until it has none left; since the orphans of each
//     killed process are handed to it, that is every descendant;
//   - when the host died, also removes the host's working directory (see
//     package workdir: only once the owner lock shows the host is gone).
//     The parent-death signal comes when the host's thread that started
//     the reaper exits, possibly before the host's other threads: the
//     reaper first waits (10 s at most) until it has been re-parented,
//     which happens once the whole host is gone;
//   - reports the plugin's exit status on the pipe and exits.
//
// Limits: a process is out of reach if it is not a descendant (started for
// the plugin by another service), runs as another user (a setuid program:
// kill fails with EPERM), or never ends after SIGKILL (uninterruptible
// sleep; the host then kills the reaper). If the reaper itself is killed
// with SIGKILL, the plugin dies with it (its parent-death signal) but the
// plugin's other descendants do not. The reaper needs /proc.
package reaper
