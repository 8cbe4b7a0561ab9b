package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/host"
)

// groupFlags are --group and --group-ttl of dev and run: the host joins a
// group of hosts that share the rules (host.GroupConfig).
type groupFlags struct {
	name string
	ttl  time.Duration
}

func (f *groupFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "group", "",
		"share the rules with the other hosts of this group on the same store: each rule runs on one live host at a time, its writes fenced with its ownership lease")
	cmd.Flags().DurationVar(&f.ttl, "group-ttl", host.DefaultGroupTTL,
		"with --group: the membership and ownership lease time; a dead host's rules move within it plus a third of it")
}

// config returns the host's group settings, nil without --group.
func (f *groupFlags) config(dryRun bool) (*host.GroupConfig, error) {
	if f.name == "" {
		return nil, nil
	}
	if dryRun {
		return nil, usageError("--group and --dry-run: a dry run writes nothing, so it cannot hold a group's leases; leave one out")
	}
	if f.ttl <= 0 {
		return nil, usageError("--group-ttl %v: want a positive duration", f.ttl)
	}
	return &host.GroupConfig{Name: f.name, TTL: f.ttl}, nil
}
